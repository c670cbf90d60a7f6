"""The in-process sampler as a teacher: `reasoner smt rollout --model CKPT` (no --endpoint) and `reasoner demo smt`
with `teacher.model = "embedded"`, both through `SamplerPolicy` (the policy `smt eval` uses)."""

import json

import pytest

from reasoner.cli import main
from tests.agents.scripted_sampling import finish, use_script, z3_solve
from tests.agents.test_rollout_cli import REFUTATION


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tokenizer):
    from reasoner.models.export import export_hf
    from tests.models_shared import TINY, random_decoder

    return export_hf(random_decoder(TINY, seed=2, scale=4.0), str(tmp_path_factory.mktemp("tiny")),
                     tokenizer=tokenizer)


def _rollout(shared_data, model, out, *extra):
    return main(["smt", "rollout", "--dataset", "prontoqa", "--data-root", str(shared_data), "--model", model,
                 "--timeout", "10", "--out", str(out), *extra])


def test_tiny_model_rollouts_are_written_curated_and_resumed(tiny_dir, shared_data, tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    argv = ["--limit", "2", "--samples", "2", "--max-new-tokens", "6", "--t-max", "2", "--max-len", "2048",
            "--problems-per-batch", "1", "--temperature", "1"]
    assert _rollout(shared_data, tiny_dir, out, *argv) == 0
    metrics = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["problem_id"] for r in rows] == ["ProntoQA_1"] * 2 + ["ProntoQA_2"] * 2
    for row in rows:  # random text: no tool call, so each episode ends on its first reply and is Rejected
        assert row["label"] == "rejected" and "no_smt_call" in row["reasons"]
        assert row["messages"][-1]["role"] == "assistant" and row["metadata"]["tokens"]["completion"] > 0
    assert metrics["labels"] == {"gold": 0, "silver": 0, "rejected": 4} and metrics["attempts"] == 4
    assert metrics["run"] == 2 and metrics["infrastructure_failures"] == 0
    assert _rollout(shared_data, tiny_dir, out, *argv) == 0  # resumed: every problem is finished
    again = json.loads(capsys.readouterr().out)
    assert again["resumed_skipped"] == 2 and again["run"] == 0 and len(out.read_text().splitlines()) == 4


def test_scripted_local_teacher_gives_gold_silver_and_pairs(tiny_dir, shared_data, tmp_path, capsys, monkeypatch):
    """Multi-turn through the policy's cache continuation: a real refutation then finish is Gold, a finish without
    a solver call Rejected, and the pair is written (ProntoQA_1's answer is B)."""
    def replies(problem, sample, turn):
        if sample == 0:
            return z3_solve(REFUTATION) if turn == 0 else finish("B")
        return finish("A")

    sessions = use_script(monkeypatch, replies)
    out, dpo, sft = tmp_path / "rows.jsonl", tmp_path / "pairs.jsonl", tmp_path / "sft.jsonl"
    assert _rollout(shared_data, tiny_dir, out, "--limit", "1", "--samples", "2", "--dpo-out", str(dpo),
                    "--sft-out", str(sft)) == 0
    metrics = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["label"], r["reasons"]) for r in rows] == [("gold", []), ("rejected", ["wrong_answer", "no_smt_call"])]
    assert rows[0]["metadata"]["verdicts"] == ["unsat"] and metrics["vcr_unsat"] == 0.5
    assert len(sessions) == 1 and sessions[0].n == 2  # both samples of the prompt in one session, one prefill
    pairs = [json.loads(line) for line in dpo.read_text().splitlines()]
    assert len(pairs) == 1 and pairs[0]["rejected_label"] == "rejected"
    assert len(sft.read_text().splitlines()) == 1


def test_bad_local_model_is_one_line_error(shared_data, tmp_path, capsys):
    assert _rollout(shared_data, "no-such-model", tmp_path / "rows.jsonl") == 2
    err = capsys.readouterr().err
    assert "--model no-such-model: expected 'embedded'" in err and "--endpoint URL" in err
    assert len(err.strip().splitlines()) == 1


def test_demo_teacher_choice(shared_data, tmp_path):
    from configs.smt_demo import get_config
    from reasoner.pipelines.smt import teacher_kind, teacher_policy

    config = get_config("tiny")
    assert teacher_kind(config.teacher) == "symbolic"  # the default
    config.teacher.model = "embedded"
    assert teacher_kind(config.teacher) == "local"
    asked = []
    policy, problems = teacher_policy(config, ["p1", "p2"], local_policy=lambda spec: asked.append(spec) or "pol")
    assert (policy, problems, asked) == ("pol", ["p1", "p2"], ["embedded"])
    config.teacher.model = str(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="teacher.model=.*missing.*expected 'embedded'"):
        teacher_policy(config, [], local_policy=lambda spec: None)
    config.teacher.endpoint = "http://127.0.0.1:9/v1"
    assert teacher_kind(config.teacher) == "endpoint"


def test_demo_teacher_stage_with_the_embedded_model(shared_data, tmp_path, monkeypatch):
    """`reasoner demo smt` with teacher.model=embedded (the tiny variant's random model) runs the teacher stage
    through the local sampler: its rollouts are curated, written and counted; SFT and DPO are off here. A process
    other than 0 of a multi-process job computes the same summary and writes no file."""
    from configs.smt_demo import get_config
    from reasoner.pipelines import smt
    from reasoner.pipelines.smt import load_splits, run

    config = get_config("tiny")
    config.data.data_root = str(shared_data)
    config.teacher.model = "embedded"
    config.sft.enabled = config.dpo.enabled = False
    config.rollout.max_new_tokens = 4
    summary = run(config, workdir=tmp_path, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "data" / "teacher.jsonl").read_text().splitlines()]
    train, _ = load_splits(config)
    assert len(rows) == 4 and [r["problem_id"] for r in rows] == [p.id for p in train]  # every train problem
    counts = summary["curation_teacher"]
    assert counts["gold"] + counts["silver"] + counts["rejected"] == 4 and counts["rejected"] == 4
    assert [r["label"] for r in summary["reports"]] == ["base"]
    monkeypatch.setattr(smt, "is_primary", lambda: False)
    again = run(config, workdir=tmp_path / "process1", progress=False)
    assert again["curation_teacher"] == counts and again["reports"] == summary["reports"]
    assert not [p for p in (tmp_path / "process1").rglob("*") if p.is_file()]
