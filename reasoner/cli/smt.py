"""`reasoner smt check FILE... [--json]`: run SMT-LIB 2 scripts through the verifier pool's Z3 runner.

With `--json` prints one line per file: {"file", "sat_result", "error", "elapsed_s"}. With
`--expected TSV` (columns `file`, `expected`, as in z3test_sample/expected.tsv) it also prints a
summary line {"agree", "total", "disagreements": [...]} to stderr.
"""

from __future__ import annotations

import json
import os
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("smt", help="SMT-LIB tools (Z3 through the verifier pool)")
    inner = parser.add_subparsers(dest="smt_command", metavar="SUBCOMMAND")
    inner.required = True
    check = inner.add_parser("check", help="run SMT-LIB 2 scripts and print their verdicts")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--json", action="store_true", help="one JSON object per line")
    check.add_argument("--timeout", type=float, default=30.0, help="seconds per script (default 30)")
    check.add_argument("--memory-mb", type=int, default=256, help="memory cap per script (default 256)")
    check.add_argument("--workers", type=int, default=2)
    check.add_argument("--expected", metavar="TSV", help="compare against a file<TAB>expected table")
    check.set_defaults(func=run_check)


def read_script(path: str) -> str:
    """The script's text; bytes that are not UTF-8 are read as Latin-1 (Z3's tests contain some)."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def run_check(args) -> int:
    missing = [f for f in args.files if not os.path.isfile(f)]
    if missing:
        print(f"reasoner smt check: no such file: {', '.join(missing)} (expected SMT-LIB 2 script paths)",
              file=sys.stderr)
        return 2
    from reasoner.verifiers.z3_runner import Z3Runner

    rows = []
    with Z3Runner(timeout_s=args.timeout, memory_mb=args.memory_mb, workers=args.workers) as runner:
        futures = [runner.submit(read_script(path)) for path in args.files]
        for path, future in zip(args.files, futures):
            result = future.result()
            row = {"file": path, "sat_result": result.sat_result, "error": result.error,
                   "elapsed_s": round(result.elapsed_s, 4)}
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"{result.sat_result or '-':8s} {row['elapsed_s']:8.3f}s  {path}"
                      + (f"  error: {result.error}" if result.error else ""), flush=True)
    if args.expected:
        print(json.dumps(compare_expected(rows, args.expected)), file=sys.stderr)
    return 0


def compare_expected(rows: list[dict], tsv_path: str) -> dict:
    """Agreement of `rows` with a `file<TAB>expected` table (matched by base name)."""
    import csv

    with open(tsv_path, newline="") as f:
        expected = {r["file"]: r["expected"] for r in csv.DictReader(f, delimiter="\t")}
    disagreements = []
    for row in rows:
        want = expected.get(os.path.basename(row["file"]))
        if want is not None and want != row["sat_result"]:
            disagreements.append({"file": os.path.basename(row["file"]), "expected": want,
                                  "got": row["sat_result"], "error": row["error"]})
    total = sum(os.path.basename(r["file"]) in expected for r in rows)
    return {"agree": total - len(disagreements), "total": total, "disagreements": disagreements}
