"""The `reasoner` command line.

Each sub-command lives in its own module of this package and exposes
`register(subparsers)`; modules import only the standard library at the top and
load JAX, transformers or Z3 inside their handlers, so `reasoner --help` is fast.
A handler is stored as `func` on the parsed arguments and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Order is the order shown by `reasoner --help`.
COMMAND_MODULES = (
    "info",
    "parity",
    "chat",
    "generate",
    "astar",
    "data",
    "smt",
    "train",
    "eval",
    "demo",
    "bench",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reasoner",
        description="Post-train reasoning language models with search and verifiers (JAX/Flax).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"reasoner.cli.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"reasoner.cli.{name}":
                continue  # command not built in this checkout
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point. Run as the `reasoner` command (argv None), it first re-executes itself once with the malloc
    settings of `reasoner.allocator` (XLA:CPU steps fault their temporaries in afresh otherwise); called with an
    argv list (tests, notebooks) it runs in this process as it is."""
    if argv is None and sys.argv[1:2] not in (["-h"], ["--help"]):
        from reasoner.allocator import reexec_tuned

        reexec_tuned(sys.argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
