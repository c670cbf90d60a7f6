"""`reasoner astar solve`: decide every question of a file with host A* (statement and its negation).

    reasoner astar solve --input dev.json --format logic-llm [--heuristic zero|dependency|true] --json

Formats: `logic-llm` (JSON list of {id, context, question, options, answer}), `raw` (ProofWriter `meta-*.jsonl`),
`deeprd` (JSON lines with id, context, question as written by `reasoner data build deeprd --jsonl`; a `program`
field, when present, is used instead of parsing the context), `deeprd-generator` (the DeepRD authors' generator
JSON list, logic mode; `id` is the record's 0-based index in the file). With --json, one line per question on stdout:
{"id", "statement", "proved", "proved_depth", "negation_proved", "negation_depth", "pushes", "pops"}; pushes and
pops are those of the run that proved something (the statement first), else of the statement's run. Items that
cannot be read are reported on stderr as {"id", "skipped"} lines and the run goes on.

The negation is the polarity-tagged atom (`not_red` for `red`), i.e. open-world semantics: for CWA theories a
"not" statement that holds only by failure comes out as neither proved nor refuted, and questions whose recorded
proof uses negation as failure are skipped (reported).
"""

from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("astar", help="host A* over logic programs (ProofWriter, DeepRD)")
    sub = parser.add_subparsers(dest="astar_command", metavar="ACTION")
    sub.required = True
    solve = sub.add_parser("solve", help="prove each question's statement and its negation")
    solve.add_argument("--input", required=True, help="data file")
    solve.add_argument("--format", required=True, choices=("logic-llm", "raw", "deeprd", "deeprd-generator"),
                       help="logic-llm: JSON list {id, context, question, options, answer}; raw: ProofWriter "
                            "meta-*.jsonl; deeprd: JSON lines {id, context, question[, program]}; "
                            "deeprd-generator: the DeepRD authors' graph_generator.py JSON list (logic mode)")
    solve.add_argument("--heuristic", default="zero", choices=("zero", "dependency", "true"),
                       help="A* heuristic: zero (Dijkstra), dependency (§3.2), true (outside weights)")
    solve.add_argument("--cost", default="max", choices=("max", "sum"),
                       help="proof cost: max (depth, Eq. 2) or sum (number of vertices, App. A.2)")
    solve.add_argument("--json", action="store_true", help="one JSON object per line")
    solve.set_defaults(func=_solve)


def _questions(path: str, fmt: str, skipped: list):
    """Yield (id, statement text, program, statement atom); append (id, reason) to `skipped`."""
    if fmt == "logic-llm":
        from reasoner.data.proofwriter_english import load_logic_llm

        questions, bad = load_logic_llm(path)
        skipped.extend(bad)
        for q in questions:
            yield q.id, q.statement_text, q.program, q.statement
    elif fmt == "raw":
        from reasoner.data.proofwriter_raw import LoadReport, load_raw

        report = LoadReport()
        theories = load_raw(path, report=report)
        skipped.extend(report.skipped)
        for t in theories:
            for q in t.questions:
                yield q.id, q.text, t.program, q.statement
    elif fmt == "deeprd-generator":
        from reasoner.data.deeprd_generator import GeneratorFormatError, load_generator_file

        try:
            problems, bad = load_generator_file(path)
        except GeneratorFormatError as err:
            skipped.append((path, str(err)))
            return
        skipped.extend(bad)
        for p in problems:
            yield str(p.index), p.question, p.program, p.goal_atom
    else:
        yield from _deeprd_questions(path, skipped)


def _deeprd_questions(path: str, skipped: list):
    from reasoner.data.program_json import program_from_json
    from reasoner.data.proofwriter_english import SentenceError, parse_statement, parse_theory_text

    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        skipped.append((path, f"unreadable file: {err}"))
        return
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        qid = f"{path}:{lineno}"
        try:
            rec = json.loads(line)
            qid = str(rec.get("id", qid))
            if rec.get("program"):
                program = program_from_json(rec["program"])
            else:
                program, failures = parse_theory_text(rec["context"], theory_id=qid)
                if failures:
                    skipped.extend(failures)
                    continue
            statement = parse_statement(rec["question"])
        except (ValueError, KeyError, TypeError, AttributeError, SentenceError) as err:
            skipped.append((qid, f"bad record: {err}"))
            continue
        yield qid, rec["question"], program, statement


def _solve(args) -> int:
    from reasoner.data.solving import decide
    from search.hypergraph import compile_program
    from search.logic import LogicError

    skipped: list[tuple[str, str]] = []
    done = 0
    cache: dict[int, object] = {}
    for qid, text, program, statement in _questions(args.input, args.format, skipped):
        try:
            key = id(program)
            if key not in cache:
                cache[key] = (program, compile_program(program))  # keep `program` alive so ids stay unique
            decision = decide(cache[key][1], statement, heuristic=args.heuristic, cost=args.cost)
        except LogicError as err:
            skipped.append((qid, f"program rejected: {err}"))
            continue
        done += 1
        row = decision.as_json(qid=qid, statement=text)
        if args.json:
            print(json.dumps(row), flush=False)
        else:
            verdict = "proved" if row["proved"] else "negation proved" if row["negation_proved"] else "neither"
            print(f"{qid}\t{verdict}\tdepth={row['proved_depth'] if row['proved'] else row['negation_depth']}"
                  f"\tpushes={row['pushes']}\tpops={row['pops']}\t{text}")
    for qid, reason in skipped:
        print(json.dumps({"id": qid, "skipped": reason}), file=sys.stderr)
    print(f"solved {done} questions, skipped {len(skipped)} items", file=sys.stderr)
    return 0 if done or not skipped else 2
