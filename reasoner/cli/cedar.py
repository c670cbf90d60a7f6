"""`reasoner cedar check --source NAME --input FILE --completions FILE --json`: CEDAR-GRPO correctness (Table 8)
of completions against records in the source's published format, one `{"id", "reward"}` JSON line per completion."""

from __future__ import annotations


def register(subparsers) -> None:
    from reasoner.tasks.cedar_verify import SOURCES

    p = subparsers.add_parser("cedar", help="CEDAR-GRPO tools (per-source correctness check)")
    sub = p.add_subparsers(dest="cedar_command", required=True)
    check = sub.add_parser("check", help="score completions against a source's records")
    check.add_argument("--source", required=True, choices=SOURCES)
    check.add_argument("--input", required=True, help="the source's records, in its published format")
    check.add_argument("--completions", required=True,
                       help='JSON lines {"id", "completion"}; id = the record id (UniADILR: 0-based line number)')
    check.add_argument("--json", action="store_true", help="print one JSON line per completion (the only output)")
    check.set_defaults(func=run_check)


def run_check(args) -> int:
    import json
    import pathlib
    import sys

    from reasoner.data.jsonl import iter_jsonl
    from reasoner.tasks.cedar_verify import load_records, score

    try:
        records = {str(r.id): r for r in load_records(args.source, args.input)}
        path = pathlib.Path(args.completions)
        rows = []
        for n, row in iter_jsonl(path, what='{"id": ..., "completion": "..."}'):
            if "id" not in row or not isinstance(row.get("completion"), str):
                raise ValueError(f'{path}:{n}: expected {{"id": ..., "completion": "..."}}')
            if str(row["id"]) not in records:
                raise ValueError(f"{path}:{n}: id {row['id']!r} is not a record of {args.input}")
            rows.append(row)
    except (ValueError, OSError) as err:
        print(f"reasoner cedar check: {err}", file=sys.stderr)
        return 2
    for row in rows:
        reward = score(records[str(row["id"])], row["completion"])
        print(json.dumps({"id": row["id"], "reward": reward}) if args.json else f"{row['id']}\t{reward}", flush=True)
    return 0
