"""The A* post-training pipeline and its CLI: configs, data stage, table, argument errors, and one end-to-end run
of the tiny variant (random 2-layer model) through data -> base eval -> SFT -> eval -> GRPO -> eval."""

from __future__ import annotations

import json
import pathlib

import pytest

from reasoner.config import load_config
from reasoner.pipelines.astar import build_data, format_table, grpo_config, sft_config
from reasoner.tasks.astar import problem_from_record, score_completion

CONFIG = str(pathlib.Path(__file__).resolve().parents[2] / "configs" / "astar_demo.py")


@pytest.mark.parametrize("variant", ["cpu", "tiny"])
def test_configs_build_and_feed_the_trainers(variant, tmp_path):
    c = load_config(f"{CONFIG}:{variant}")
    s = sft_config(c, export_dir=tmp_path / "e")
    assert s.export_dir == str(tmp_path / "e") and s.model.name == c.model.name
    assert s.train.batch_size == c.sft.train.batch_size and s.optim.lr == c.sft.optim.lr
    g = grpo_config(c)
    assert g.data.task == "astar" and g.data.dataset == "deeprd"
    assert [r["as"] for r in g.rewards] == ["astar_dependency"]
    assert g.grpo.num_generations == c.grpo.grpo.num_generations
    from trainers import grpo

    grpo.check_config(g)
    if variant == "cpu":
        assert c.model.name == "smollm2-135m-instruct" and c.data.test == 64 and c.eval.temperature == 0.0
    with pytest.raises(ValueError, match="unknown variant 'huge'"):
        load_config(f"{CONFIG}:huge")


def test_build_data_writes_records_and_a_star_traces(tmp_path):
    c = load_config(f"{CONFIG}:tiny")
    splits = build_data(c, out_dir=tmp_path)
    for split in ("train", "validation", "test"):
        records = [json.loads(x) for x in (tmp_path / "records" / f"{split}.jsonl").read_text().splitlines()]
        sft = [json.loads(x) for x in (tmp_path / "sft" / f"{split}.jsonl").read_text().splitlines()]
        assert len(records) == len(sft) == c.data[split]
        for r, ex in zip(records, sft):
            p = problem_from_record(r)
            assert c.data.min_lookahead <= r["depth"] <= c.data.max_lookahead
            assert score_completion(p, ex["completion"]).rewards["astar_dependency"] == 1.0
        assert [r["id"] for r in records] == [p.id for p in splits[split]["problems"]]
    c.data.dataset = "proofwriter"
    with pytest.raises(ValueError, match="data.dataset='proofwriter' without data.records"):
        build_data(c, out_dir=tmp_path / "x")
    c.data.dataset, c.data.records = "deeprd", str(tmp_path / "records")  # read back what was written
    again = build_data(c, out_dir=tmp_path / "y")
    assert [p.id for p in again["test"]["problems"]] == [p.id for p in splits["test"]["problems"]]
    c.data.records = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere.train.jsonl does not exist"):
        build_data(c, out_dir=tmp_path / "z")


def test_build_data_writes_from_process_zero_only(tmp_path, monkeypatch):
    """A process other than 0 builds the same splits but writes nothing: the files in the shared workdir are
    process 0's alone (every process writing one path at once could leave a torn file for the SFT stage)."""
    import reasoner.distributed as distributed

    c = load_config(f"{CONFIG}:tiny")
    ours = build_data(c, out_dir=tmp_path / "zero")
    monkeypatch.setattr(distributed, "is_primary", lambda: False)
    theirs = build_data(c, out_dir=tmp_path / "one")
    assert not (tmp_path / "one").exists()
    assert (tmp_path / "zero" / "sft" / "train.jsonl").exists()
    for split in ("train", "validation", "test"):
        assert theirs[split]["sft"] == ours[split]["sft"] and theirs[split]["records"] == ours[split]["records"]


def test_format_table_rows_and_missing_efficiency():
    iv = lambda e: {"estimate": e, "low": e - 0.1, "high": e + 0.1}  # noqa: E731
    table = format_table([
        {"label": "base", "accuracy": iv(0.0), "efficiency_pushes": None, "efficiency_pops": None},
        {"label": "SFT", "accuracy": iv(0.5), "efficiency_pushes": iv(0.8), "efficiency_pops": iv(0.9)},
    ])
    lines = table.splitlines()
    assert lines[0].split("|")[1].strip() == "model" and len(lines) == 4
    assert "0.500 [0.400, 0.600]" in lines[3] and "0.900 [0.800, 1.000]" in lines[3]
    assert "n/a (no correct proof)" in lines[2]


def test_cli_errors_exit_2_before_any_work(tmp_path, capsys):
    from reasoner.cli import main

    assert main(["demo", "--workdir", str(tmp_path / "w"), "--config", f"{CONFIG}:tiny",
                 "--config.data.tset=3"]) == 2
    assert "data.tset" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()
    assert main(["eval", "--config", f"{CONFIG}:tiny", "--checkpoint", "x",
                 "--records", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err


def test_more_shots_than_training_problems_fail_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """The paper's 10-shot baseline on a training split of 8 failed after the base evaluation (hours at paper
    scale); now right after the data stage, naming both settings."""
    from reasoner.cli import main
    from trainers import run as trainer_run

    def no_model(*args, **kwargs):
        raise AssertionError("the few-shot check must come before the model loads")

    monkeypatch.setattr(trainer_run, "build_model", no_model)
    assert main(["demo", "--workdir", str(tmp_path / "w"), "--config", f"{CONFIG}:tiny", "--no-progress",
                 "--config.data.train=3", "--config.eval.few_shot=4"]) != 0
    err = capsys.readouterr().err
    assert "eval.few_shot=4" in err and "holds 3 problems (data.train=3)" in err


@pytest.mark.slow
def test_tiny_demo_end_to_end_through_the_cli(tmp_path):
    """`reasoner demo` in a subprocess, as `make demo` runs it (one CPU device: the config's single_device drops the
    8 simulated devices, which multiply the step's memory), on the tiny variant: every stage runs and reports."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "reasoner.cli", "demo", "--workdir", str(tmp_path), "--no-progress",
           "--config", f"{CONFIG}:tiny", "--config.data.test=2", "--config.eval.max_new_tokens=8",
           "--config.eval.batch_size=2", "--config.grpo.grpo.max_new_tokens=8", "--config.grpo.train.num_steps=3",
           "--config.grpo.data.limit=2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[astar] devices: 1 x cpu" in proc.stdout
    doc = json.loads((tmp_path / "report" / "astar.json").read_text())
    labels = [m["label"] for m in doc["models"]]
    assert labels == ["base", "SFT (dependency)", "SFT+GRPO (astar_dependency)"] and doc["complete"] is True
    assert all(m["examples"] == 2 for m in doc["models"])
    assert set(doc["timings_s"]) >= {"data", "eval_base", "sft", "eval_sft", "grpo", "eval_grpo", "total"}
    assert doc["table"] in proc.stdout and (tmp_path / "report" / "astar.png").stat().st_size > 0
    assert (tmp_path / "sft" / "export").is_dir() and (tmp_path / "grpo" / "metrics.jsonl").exists()
    # the GRPO stage's reward per step: in the report (one step here) and plotted
    grpo_records = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert doc["trainers"]["grpo"]["reward_per_step"] == [r["reward"] for r in grpo_records if r["kind"] == "train"]
    assert (tmp_path / "report" / "grpo_reward.png").stat().st_size > 0
    # its slope per step with the 95% t interval (numbers checked against scipy in tests/metrics/test_intervals.py)
    from reasoner.metrics.intervals import slope_interval

    per_step = doc["trainers"]["grpo"]["reward_per_step"]
    assert len(per_step) == 3 and doc["trainers"]["grpo"]["reward_slope"] == slope_interval(per_step).as_dict()

def test_paper_configs_every_variant():
    from configs import astar_paper
    from trainers import grpo

    names = astar_paper.variants()
    assert len(names) == 2 * 2 * (3 + 4)
    for name in names:
        c = load_config(str(pathlib.Path(CONFIG).with_name("astar_paper.py")) + f":{name}")
        model, dataset, stage, which = name.split("_", 3)
        assert c.sft.enabled == (stage == "sft") and c.grpo.enabled == (stage == "grpo")
        assert c.eval.max_new_tokens == {"proofwriter": 1024, "deeprd": 2048}[dataset] and c.eval.temperature == 0
        if stage == "sft":
            assert c.data.heuristic == which and c.sft.optim.lr == 2e-5 and c.sft.train.num_epochs == 3
            assert c.sft.train.batch_size == (4 if model == "llama1b" else 2)
        else:
            g = grpo_config(c)
            grpo.check_config(g)
            assert g.rewards[0]["options"]["reward"] == which and g.grpo.num_generations == 16
            assert g.grpo.beta == 0.04 and g.optim.lr == 1e-6
    with pytest.raises(ValueError, match="unknown variant 'llama1b_deeprd_sft_greedy'"):
        astar_paper.get_config("llama1b_deeprd_sft_greedy")
