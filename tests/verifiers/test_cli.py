"""`reasoner smt check` and `reasoner bench verifier` output formats (timings are never asserted)."""

import json

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
