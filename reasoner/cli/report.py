"""`reasoner report astar RUN [RUN ...] --out DIR [--json] [--require-complete]`: the A* paper's figures (Figs. 2-6)
and one table from the reports of several A* runs (`reasoner.pipelines.astar_report`). A run whose pipeline did not
finish (preempted or failed part-way) is included and marked partial everywhere, with a warning on stderr;
`--require-complete` refuses it instead (exit 2)."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="combine finished runs' reports into the papers' figures")
    sub = p.add_subparsers(dest="report_command", required=True)
    astar = sub.add_parser("astar", help="Figs. 2-6 of the A* paper from A* run directories")
    astar.add_argument("runs", nargs="+", help="A* run directories (with report/astar.json) or astar.json files")
    astar.add_argument("--out", default="runs/report", help="where the figures, table and JSON go")
    astar.add_argument("--json", action="store_true", help="print the written paths as one JSON object")
    astar.add_argument("--require-complete", action="store_true",
                       help="refuse runs whose pipeline did not finish (by default they are shown, marked partial)")
    astar.set_defaults(func=run_astar)


def run_astar(args) -> int:
    import json
    import pathlib
    import sys

    from reasoner.pipelines.astar_report import load_run, write_combined

    try:
        runs = [load_run(path) for path in args.runs]
    except ValueError as err:
        print(f"reasoner report astar: {err}", file=sys.stderr)
        return 2
    partial = [(path, run) for path, run in zip(args.runs, runs) if not run.complete]
    for path, run in partial:
        print(f"reasoner report astar: {'error' if args.require_complete else 'warning'}: {path} is a partial run: "
              f"{run.partial}" + ("" if args.require_complete else "; its models are marked '(partial run)'"),
              file=sys.stderr)
    if partial and args.require_complete:
        return 2
    try:
        paths = write_combined(runs, args.out)
    except ValueError as err:  # runs named alike given twice, a malformed training records file, ...
        print(f"reasoner report astar: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(paths))
    else:
        print(pathlib.Path(paths["table"]).read_text(encoding="utf-8").rstrip())
        print("\n" + "\n".join(f"{k}: {v}" for k, v in paths.items()))
    return 0
