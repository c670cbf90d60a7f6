"""`reasoner smt rollout`'s resume file: reading what an existing --out holds changes nothing; mending it (a row torn
by a kill cut off, a missing last newline added) is a separate step that only the primary process takes."""

import json

import pytest

from reasoner.cli import main
from reasoner.cli.smt import mend_rollout_file, read_rollout_file


def _row(pid: str) -> str:
    return json.dumps({"problem_id": pid, "label": "gold"})


def test_reading_counts_complete_rows_and_leaves_a_torn_last_row_in_place(tmp_path):
    out = tmp_path / "rows.jsonl"
    text = _row("a") + "\n" + _row("a") + "\n" + _row("b") + "\n" + _row("c")[:25]
    out.write_text(text)
    found = read_rollout_file(str(out))
    assert out.read_text() == text  # a query: the file is as it was
    assert found.counts == {"a": 2, "b": 1} and found.torn_line == 4
    assert found.finished_ids(2) == {"a"} and found.finished_ids(1) == {"a", "b"}
    assert read_rollout_file(str(tmp_path / "none.jsonl")).finished_ids(1) == set()


def test_mending_cuts_the_torn_row_with_a_warning_naming_its_line(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    intact = _row("a") + "\n" + _row("b") + "\n"
    out.write_text(intact + _row("c")[:25])
    mend_rollout_file(str(out), read_rollout_file(str(out)))
    assert out.read_text() == intact
    assert f"{out}:3: an incomplete last row" in capsys.readouterr().err
    mend_rollout_file(str(out), read_rollout_file(str(out)))  # a whole file is left alone
    assert out.read_text() == intact


def test_a_last_row_without_its_newline_counts_and_gets_one(tmp_path):
    # a kill between a row and its newline: the row is whole, but the next append used to join its line
    out = tmp_path / "rows.jsonl"
    out.write_text(_row("a") + "\n" + _row("b"))
    found = read_rollout_file(str(out))
    assert found.counts == {"a": 1, "b": 1} and found.torn_line is None and found.newline_missing
    mend_rollout_file(str(out), found)
    with open(out, "a") as f:
        f.write(_row("c") + "\n")
    assert [json.loads(line)["problem_id"] for line in out.read_text().splitlines()] == ["a", "b", "c"]


def test_a_bad_row_before_the_last_is_an_error_naming_it(tmp_path):
    out = tmp_path / "rows.jsonl"
    text = _row("a") + "\nnot json\n" + _row("b") + "\n"
    out.write_text(text)
    with pytest.raises(ValueError, match=r"rows\.jsonl:2: not a rollout row"):
        read_rollout_file(str(out))
    assert out.read_text() == text


def test_a_process_other_than_the_primary_does_not_mend_the_file(shared_data, tmp_path, monkeypatch, capsys):
    import reasoner.distributed

    out = tmp_path / "rows.jsonl"
    argv = ["smt", "rollout", "--dataset", "proofwriter", "--data-root", str(shared_data), "--model", "symbolic",
            "--timeout", "10", "--limit", "1", "--out", str(out)]
    assert main(argv) == 0
    torn = out.read_text() + _row("ProofWriter_x")[:20]
    out.write_text(torn)
    monkeypatch.setattr(reasoner.distributed, "is_primary", lambda: False)
    assert main(argv + ["--limit", "2"]) == 0
    assert out.read_text() == torn  # neither cut nor appended to: the primary writes
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["resumed_skipped"] == 1
