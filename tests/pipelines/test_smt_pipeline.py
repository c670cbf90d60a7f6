"""`reasoner demo smt` on the tiny variant: every stage runs and the report holds what the README table shows."""

import json
import os
import subprocess
import sys

import pytest

from reasoner.pipelines.smt import missing_data_message


def test_missing_data_names_the_files_and_their_source(tmp_path):
    message = missing_data_message(tmp_path, ("prontoqa", "proofwriter"))
    assert "prontoqa/logic_llm_dev.json" in message and "proofwriter/logic_llm_owa_d5_dev.json" in message
    assert "teacherpeterpan/Logic-LLM" in message and str(tmp_path) in message


def test_splits_keep_short_theories_and_hold_out_first(shared_data):
    from configs.smt_demo import get_config
    from reasoner.pipelines.smt import load_splits
    from reasoner.tasks.logic_llm import load_problems

    config = get_config("cpu")
    config.data.data_root = str(shared_data)
    train, test = load_splits(config)
    short = [p for p in load_problems(shared_data, "proofwriter") if len(p.context) <= 340]
    assert (len(train), len(test)) == (12, 4) and len(short) >= 16
    assert [p.id for p in test + train] == [p.id for p in short[:16]]  # held-out first, then train, file order
    config.data.max_context_chars = 0
    train, test = load_splits(config)
    assert [p.id for p in test + train] == [p.id for p in load_problems(shared_data, "proofwriter")[:16]]


@pytest.mark.slow
def test_tiny_pipeline_end_to_end(shared_data, tmp_path):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    done = subprocess.run([sys.executable, "-m", "reasoner.cli", "demo", "smt", "--workdir", str(tmp_path),
                           "--config", "configs/smt_demo.py:tiny", "--data-dir", str(shared_data), "--no-progress"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report" / "smt.json").read_text())
    assert [r["label"] for r in report["reports"]] == ["base", "SFT", "SFT+DPO"]
    # the symbolic teacher answers these four train problems correctly with one evidence call each
    assert report["curation_teacher"]["gold"] == 4 and report["curation_teacher"]["rejected"] == 0
    assert report["dpo_pairs"]["pairs"] >= 1
    # DPO trains the SFT model against itself as reference (it rebuilt the base from config.model before)
    hparams = json.loads((tmp_path / "dpo" / "hparams.json").read_text())
    assert hparams["model.name"] == str(tmp_path / "sft" / "export")
    for r in report["reports"]:
        s = r["summary"]
        assert s["k"] == 2 and s["problems"] == 2 and {"pass@2", "pass^2", "avg@2", "vcr", "soundness"} <= set(s)
    assert (tmp_path / "report" / "smt.png").stat().st_size > 10_000
    rows = [json.loads(line) for line in (tmp_path / "report" / "samples_base.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {"id", "sample", "correct", "verified", "answer", "gold", "turns", "z3_calls"} <= set(rows[0])
    assert "| model" in done.stdout and "curation (teacher)" in done.stdout


def test_a_bad_later_stage_setting_fails_before_the_first_stage(tmp_path):
    # a bad dpo.loss_type / grpo loss surfaced only after the teacher, SFT and student stages (hours at paper scale)
    import pytest

    from reasoner.config import load_config
    from reasoner.pipelines import astar, smt

    for module, spec, override, message in (
            (smt, "configs/smt_demo.py:tiny", "--config.dpo.dpo.loss_type=xyz", "dpo.loss_type='xyz'"),
            (smt, "configs/smt_demo.py:tiny", "--config.sft.optim.name=lion", "optim.name='lion'"),
            (astar, "configs/astar_demo.py:tiny", "--config.grpo.grpo.loss_type=xyz", "loss_type")):
        config = load_config(spec, [override])
        with pytest.raises(ValueError, match=message):
            module.run(config, workdir=tmp_path / module.__name__.rsplit(".", 1)[-1], progress=False)
        assert not (tmp_path / module.__name__.rsplit(".", 1)[-1]).exists()
