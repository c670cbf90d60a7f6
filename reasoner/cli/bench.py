"""`reasoner bench NAME --json`: benchmarks that print one JSON object per setting.

Each benchmark lives in `reasoner/benchmarks/NAME.py` and exposes
`register(subparsers)`. Benchmarks measure ours and the PyTorch baseline in the
same process run and report medians and ratios, never single timings.
"""

from __future__ import annotations

import importlib

BENCHMARKS = ("load", "forward", "generate", "rollout", "astar", "verifier", "parsers", "sft", "dpo", "grpo", "qlora")


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="measure ours against the baseline; prints JSON")
    inner = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    inner.required = True
    for name in BENCHMARKS:
        try:
            module = importlib.import_module(f"reasoner.benchmarks.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"reasoner.benchmarks.{name}":
                continue
            raise
        module.register(inner)
