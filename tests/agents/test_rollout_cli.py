"""`reasoner smt rollout` against a local OpenAI-compatible stub teacher, end to end."""

import json

import pytest

from reasoner.cli import main
from tests.chat_stub import ChatStub, serve
from tests.agents.test_rollouts import MAX_CONTEXT

REFUTATION = MAX_CONTEXT + "\n(assert (sour max))\n(check-sat)"


class Teacher(ChatStub):
    """Turn 1: a z3_solve call (a real refutation for "Max is sour", a trivial script otherwise).
    Turn 2: finish with B."""

    def reply(self, body):
        messages = body["messages"]
        if messages[-1]["role"] == "user":
            code = REFUTATION if "Max is sour" in messages[-1]["content"] else "(assert true)(check-sat)"
            call = {"id": "1", "type": "function", "function": {"name": "z3_solve",
                                                                 "arguments": json.dumps({"smt_code": code})}}
            message = {"role": "assistant", "content": "Let me check.", "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": '<tool_call>{"name": "finish", "arguments": {"answer": "B"}}</tool_call>'}
        return 200, {"choices": [{"message": message}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}


@pytest.fixture
def endpoint():
    with serve(Teacher) as url:
        yield url


def test_rollout_writes_curated_rows_pairs_and_metrics(shared_data, endpoint, tmp_path, capsys):
    out, dpo = tmp_path / "rows.jsonl", tmp_path / "pairs.jsonl"
    code = main(["smt", "rollout", "--dataset", "prontoqa", "--data-root", str(shared_data), "--limit", "2",
                 "--samples", "2", "--endpoint", endpoint, "--model", "teacher", "--timeout", "10",
                 "--out", str(out), "--dpo-out", str(dpo)])
    assert code == 0
    metrics = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["problem_id"], r["label"], r["correct"]) for r in rows] == [
        ("ProntoQA_1", "gold", True), ("ProntoQA_1", "gold", True),
        ("ProntoQA_2", "rejected", False), ("ProntoQA_2", "rejected", False)]  # ProntoQA_2's answer is A
    assert rows[0]["metadata"]["verdicts"] == ["unsat"] and rows[0]["metadata"]["tokens"] == {"prompt": 10, "completion": 4}
    assert rows[2]["reasons"] == ["wrong_answer"] and rows[2]["gold_answer"] == "A"
    assert metrics["labels"] == {"gold": 2, "silver": 0, "rejected": 2}
    assert metrics["problems"] == 2 and metrics["accuracy"] == 0.5 and metrics["vcr_unsat"] == 0.5
    assert metrics["any_nontrivial"] == 0.5
    assert dpo.read_text() == ""  # no problem has both a gold and a contrastive trace


class FlakyTeacher(Teacher):
    """Answers 503 to the first two requests of every conversation about "Max is sour" (then behaves), and 500
    forever to every other conversation: the first recovers through the retries, the second is given up on."""

    seen: dict = {}

    def reply(self, body):
        first_user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        key = (first_user, len(body["messages"]))
        FlakyTeacher.seen[key] = FlakyTeacher.seen.get(key, 0) + 1
        if "Max is sour" not in first_user or FlakyTeacher.seen[key] <= 2:
            return (503 if "Max is sour" in first_user else 500), b"no"
        return super().reply(body)


def test_infrastructure_failures_are_retried_excluded_and_resumed(shared_data, tmp_path, capsys, monkeypatch):
    import time

    monkeypatch.setattr(time, "sleep", lambda s: None)  # the backoff, without waiting
    out = tmp_path / "rows.jsonl"
    with serve(FlakyTeacher) as url:
        argv = ["smt", "rollout", "--dataset", "prontoqa", "--data-root", str(shared_data), "--limit", "2",
                "--endpoint", url, "--model", "teacher", "--timeout", "10", "--retries", "3", "--out", str(out)]
        assert main(argv) == 0
        captured = capsys.readouterr()
        metrics = json.loads(captured.out)
        # ProntoQA_1 ("Max is sour") recovered after two 503s; ProntoQA_2 failed 4 times (1 + 3 retries): excluded
        assert metrics["infrastructure_failures"] == 1 and metrics["labels"] == {"gold": 1, "silver": 0, "rejected": 0}
        assert json.loads(captured.err.strip().splitlines()[-1])["infrastructure_failure"]["id"] == "ProntoQA_2"
        assert [json.loads(line)["problem_id"] for line in out.read_text().splitlines()] == ["ProntoQA_1"]
        # a second run resumes: ProntoQA_1 is finished and skipped, ProntoQA_2 is tried again (and fails again)
        assert main(argv) == 0
        again = json.loads(capsys.readouterr().out)
        assert again["resumed_skipped"] == 1 and again["run"] == 1 and again["infrastructure_failures"] == 1
        assert len(out.read_text().splitlines()) == 1


def test_symbolic_teacher_rollout_is_gold(shared_data, tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    assert main(["smt", "rollout", "--dataset", "proofwriter", "--data-root", str(shared_data), "--limit", "4",
                 "--model", "symbolic", "--timeout", "10", "--out", str(out)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["labels"]["gold"] == 4 and metrics["infrastructure_failures"] == 0
    assert {json.loads(line)["termination"] for line in out.read_text().splitlines()} == {"finish"}


def test_resume_refuses_other_settings_and_drops_a_torn_last_row(shared_data, tmp_path, capsys):
    # another --samples appended extra rows per problem to the same file; a row cut by a kill blocked every resume
    out = tmp_path / "rows.jsonl"
    argv = ["smt", "rollout", "--dataset", "proofwriter", "--data-root", str(shared_data), "--model", "symbolic",
            "--timeout", "10", "--out", str(out)]
    assert main(argv + ["--limit", "2"]) == 0
    capsys.readouterr()
    assert main(argv + ["--limit", "2", "--samples", "2"]) == 2
    assert "samples: 1 then, 2 now" in capsys.readouterr().err
    rows = out.read_text().splitlines()
    out.write_text(rows[0] + "\n" + rows[1][:40])  # the second problem's row torn mid-write
    assert main(argv + ["--limit", "3"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["resumed_skipped"] == 1 and metrics["run"] == 2
    ids = [json.loads(line)["problem_id"] for line in out.read_text().splitlines()]
    assert len(ids) == 3 == len(set(ids))
