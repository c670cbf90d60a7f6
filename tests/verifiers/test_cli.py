"""`reasoner smt check` and `reasoner bench verifier` output formats (timings are never asserted)."""

import json

import pytest

from reasoner.cli import main


def test_smt_check_json_lines(shared_data, tmp_path, capsys):
    folder = shared_data / "smtlib" / "z3test_sample"
    broken = tmp_path / "broken.smt2"
    broken.write_text("(declare-const x Int)(assert (> x y))(check-sat)")
    files = [str(folder / "2447.smt2"), str(folder / "0xff.smt2"), str(broken)]
    assert main(["smt", "check", *files, "--json", "--timeout", "5",
                 "--expected", str(folder / "expected.tsv")]) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [set(r) for r in rows] == [{"file", "sat_result", "error", "elapsed_s"}] * 3
    assert [(r["file"], r["sat_result"]) for r in rows] == [(files[0], "unsat"), (files[1], "sat"), (files[2], "sat")]
    assert rows[0]["error"] is None and "unknown constant y" in rows[2]["error"]
    assert json.loads(err.strip().splitlines()[-1]) == {"agree": 2, "total": 2, "disagreements": []}


def test_smt_check_missing_file(capsys, tmp_path):
    assert main(["smt", "check", str(tmp_path / "nope.smt2")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_bench_verifier_reports_the_fields(capsys):
    assert main(["bench", "verifier", "--json", "--repeats", "1", "--copies", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"scripts", "serial_per_s", "pool_per_s", "speedup", "p95_overhead_ms", "ipc_roundtrip_p95_ms"} <= set(report)
    assert report["scripts"] == 8 and report["pool_stats"]["ok"] == report["pool_stats"]["calls"]


@pytest.mark.parametrize("flag,value,message", [("--timeout", "-5", "expected a number > 0, got '-5'"),
                                                ("--memory-mb", "0", "expected an integer > 0, got '0'"),
                                                ("--workers", "0", "expected an integer > 0, got '0'"),
                                                ("--timeout", "soon", "expected a number > 0, got 'soon'")])
def test_smt_check_rejects_bad_limits_in_one_line(flag, value, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["smt", "check", str(tmp_path / "x.smt2"), flag, value])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"argument {flag}: {message}" in err and "Traceback" not in err


def test_bench_parsers_reports_every_size(capsys):
    assert main(["bench", "parsers", "--json", "--repeats", "1", "--only", "extract_span,integers"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sizes"] == [10_000, 100_000, 1_000_000]
    assert {(r["parser"], r["input"]) for r in report["rows"]} == {
        ("extract_span", "normal"), ("extract_span", "unclosed_answer"), ("integers", "normal"),
        ("integers", "huge_integer")}
    assert all(r["s_per_mb_10kb"] >= 0 and r["s_per_mb_1000kb"] >= 0 for r in report["rows"])
