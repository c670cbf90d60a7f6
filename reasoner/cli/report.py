"""`reasoner report astar RUN [RUN ...] --out DIR [--json]`: the A* paper's figures (Figs. 2-6) and one table from
the reports of several A* runs (`reasoner.pipelines.astar_report`)."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="combine finished runs' reports into the papers' figures")
    sub = p.add_subparsers(dest="report_command", required=True)
    astar = sub.add_parser("astar", help="Figs. 2-6 of the A* paper from A* run directories")
    astar.add_argument("runs", nargs="+", help="A* run directories (with report/astar.json) or astar.json files")
    astar.add_argument("--out", default="runs/report", help="where the figures, table and JSON go")
    astar.add_argument("--json", action="store_true", help="print the written paths as one JSON object")
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
    paths = write_combined(runs, args.out)
    if args.json:
        print(json.dumps(paths))
    else:
        print(pathlib.Path(paths["table"]).read_text(encoding="utf-8").rstrip())
        print("\n" + "\n".join(f"{k}: {v}" for k, v in paths.items()))
    return 0
