"""`reasoner bench NAME --json`: benchmarks that print one JSON object per setting.

Each benchmark lives in `reasoner/benchmarks/NAME.py` and exposes
`register(subparsers)`. Benchmarks measure ours and the PyTorch baseline in the
same process run and report medians and ratios, never single timings.
"""

from __future__ import annotations

from reasoner.cli import register_modules

BENCHMARKS = ("load", "forward", "generate", "rollout", "astar", "verifier", "parsers", "sft", "dpo", "grpo", "qlora")


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="measure ours against the baseline; prints JSON")
    inner = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    inner.required = True
    register_modules(inner, "reasoner.benchmarks", BENCHMARKS)
