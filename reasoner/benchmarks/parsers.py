"""`reasoner bench parsers --json`: seconds per MB of every parser of model output at 10 KB, 100 KB and 1 MB.

The parsers read what a small model writes early in training, so their cost must be linear in the
input whatever it holds. Each parser gets a normal input (realistic text repeated to the size) and
the degenerate inputs that made the earlier regular expressions quadratic or cubic (issue 16):
runs of separators ("and and", ", , ", " : :"), brackets nested 100k deep, a long `finish(`
argument, runs of spaces inside a call, repeated unclosed tags, 4,301+ digit integers. Reported per
(parser, input): seconds per MB at each size (best of `--repeats` runs) and `growth`, the ratio of the
1 MB rate to the 10 KB rate: about 1 for a linear parser, about 100 for a quadratic one. Output is
one JSON object; `max_growth` is the largest growth over all rows. Wall clock on a shared host is
noisy at 10 KB; compare growth, not single figures.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

from reasoner.cli.arg_types import positive_number

SIZES = (10_000, 100_000, 1_000_000)


def register(subparsers) -> None:
    parser = subparsers.add_parser("parsers", help="seconds per MB of the model-output parsers at 10 KB-1 MB")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeats", type=positive_number(int), default=3)
    parser.add_argument("--only", default="", help="comma-separated parser names (default: all)")
    parser.set_defaults(func=run)


def _fig1_verbalizer():
    from search.logic import Atom, Program, Rule
    from search.verbalize import Verbalizer

    par = [("terah", "abraham"), ("abraham", "ishmael"), ("abraham", "isaac"), ("isaac", "jacob")]
    program = Program(axioms=tuple(Atom("parent", p) for p in par), rules=(
        Rule((Atom("parent", ("?x", "?y")),), Atom("ancestor", ("?x", "?y"))),
        Rule((Atom("parent", ("?x", "?y")), Atom("ancestor", ("?y", "?z"))), Atom("ancestor", ("?x", "?z")))))
    return Verbalizer(program, dataset="logic")


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _wrap(prefix: str, filler: str, suffix: str) -> Callable[[int], str]:
    return lambda size: prefix + _repeat(filler, max(1, size - len(prefix) - len(suffix))) + suffix


def parser_cases() -> dict[str, tuple[Callable[[str], object], dict[str, Callable[[int], str]]]]:
    """{parser: (function of the text, {input name: size -> text})}."""
    from reasoner.agents.tool_calls import parse_tool_calls
    from reasoner.rewards.code_exec import extract_code
    from reasoner.rewards.match import extract_span, integer_tokens
    from reasoner.tasks.logic_llm import strip_think
    from reasoner.verifiers import smtlib
    from reasoner.verifiers.sandbox import extract_answer_code
    from search.parse import parse_trace

    verbalizer = _fig1_verbalizer()
    step = "Since parent(isaac, jacob), by the rule \"if parent(x, y) then ancestor(x, y)\", ancestor(isaac, jacob).\n\n"
    smt = "(declare-const x Int)\n(assert (and (> x 1) (< x (+ 3 x))))\n(check-sat)\n"

    def counts(text: str):
        try:
            return smtlib.production_counts(text)
        except smtlib.SmtParseError:
            return None

    def trace(text: str):
        verbalizer.block_cache.clear()  # measure parsing, not the cache
        return parse_trace(text, verbalizer)

    return {
        "trace": (trace, {
            "normal": lambda n: _repeat(step, n),
            "and_and": _wrap("Since ", "and ", " by rule 1, ancestor(isaac, jacob)."),
            "comma_runs": _wrap("Since ", ", ", " by rule 1, ancestor(isaac, jacob)."),
            "colon_runs": _wrap("Since ", " : :", " by rule 1, ancestor(isaac, jacob)."),
        }),
        "tool_calls": (parse_tool_calls, {
            "normal": lambda n: _repeat('I check.\n<tool_call>{"name": "z3_solve", "arguments": {"smt_code": '
                                        '"(assert (> x 1))(check-sat)"}}</tool_call>\n', n),
            "nested_brackets": _wrap("finish(", "(", ""),
            "long_finish_argument": _wrap("finish(", "B", ")"),
            "spaces_in_call": _wrap("<tool_call>", " ", "{\"name\": \"finish\"}"),
            "unclosed_tool_call": lambda n: _repeat("<tool_call>{\"name\": ", n),
            "unclosed_parameter": lambda n: "<function=z3_solve>" + _repeat("<parameter=smt_code> (", n),
            "repeated_finish": lambda n: _repeat("finish(", n),
        }),
        "smtlib_counts": (counts, {"normal": lambda n: _repeat(smt, n),
                                   "nested_100k": lambda n: "(assert " + "(" * (n // 2) + "x" + ")" * (n // 2) + ")"}),
        "smtlib_trivial": (smtlib.is_trivial, {"normal": lambda n: _repeat(smt, n),
                                               "nested_100k": lambda n: "(assert " + "(" * (n // 2) + ")" * (n // 2)}),
        "smt_file_access": (smtlib.file_access, {"normal": lambda n: _repeat(smt, n),
                                                 "unterminated_string": _wrap('(echo "', "a", "")}),
        "extract_span": (extract_span, {"normal": lambda n: _repeat("<think>x</think><answer>42</answer>", n),
                                        "unclosed_answer": lambda n: _repeat("<answer>", n)}),
        "integers": (integer_tokens, {"normal": lambda n: _repeat("The answer is 3, not 17. ", n),
                                      "huge_integer": _wrap("", "9", "")}),
        "code_fence": (extract_code, {"normal": lambda n: "```python\n" + _repeat("x = 1\n", n) + "```",
                                      "unclosed_fences": lambda n: _repeat("```py\n", n),
                                      "bad_info_fences": lambda n: _repeat("```a b ", n)}),
        "answer_code": (extract_answer_code, {"normal": lambda n: "<answer>\n```python\n" + _repeat("y = 2\n", n) + "```\n</answer>",
                                              "unclosed_answer": lambda n: _repeat("<answer>", n),
                                              "fence_spaces": _wrap("```python\n", " ", "\n ```")}),
        "strip_think": (strip_think, {"normal": lambda n: _repeat("<think>hmm</think>B ", n),
                                      "unclosed_think": lambda n: _repeat("<think>", n)}),
    }


def _seconds(function: Callable[[str], object], text: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function(text)
        best = min(best, time.perf_counter() - start)
    return best


def run(args) -> int:
    cases = parser_cases()
    wanted = [name for name in args.only.split(",") if name] or list(cases)
    unknown = sorted(set(wanted) - set(cases))
    if unknown:
        raise SystemExit(f"bench parsers: unknown parser(s) {unknown}; expected some of {sorted(cases)}")
    rows = []
    for name in wanted:
        function, inputs = cases[name]
        for input_name, make in inputs.items():
            rates = {}
            for size in SIZES:
                text = make(size)
                seconds = _seconds(function, text, args.repeats if size < SIZES[-1] else 1)
                rates[f"s_per_mb_{size // 1000}kb"] = round(seconds / (len(text) / 1e6), 5)
            first, last = rates[f"s_per_mb_{SIZES[0] // 1000}kb"], rates[f"s_per_mb_{SIZES[-1] // 1000}kb"]
            rows.append({"parser": name, "input": input_name, **rates,
                         "growth": round(last / first, 2) if first > 0 else None})
    report = {"sizes": list(SIZES), "rows": rows, "repeats": args.repeats, "cpus": os.cpu_count(),
              "max_growth": max((r["growth"] or 0.0) for r in rows), "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0
