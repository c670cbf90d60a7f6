"""The `reasoner` command line.

Each sub-command lives in its own module of this package and exposes
`register(subparsers)`; modules import only the standard library at the top and
load JAX, transformers or Z3 inside their handlers, so `reasoner --help` is fast.
A handler is stored as `func` on the parsed arguments and returns an exit code.

`main` turns on XLA's persistent compilation cache (`reasoner.compile_cache`) and joins the multi-process job (`reasoner.distributed.maybe_initialize`) before any handler
runs, so every command run under `launch/` is one job across its processes. An error escaping a
handler is printed as one line naming the command (`reasoner train: error: ...`) and exits 1;
`--traceback` (anywhere on the line) or `REASONER_TRACEBACK=1` shows the full traceback instead.
In a multi-process job the processes leave together: a finished one waits for the others at one last barrier
(`REASONER_EXIT_TIMEOUT_S`, default an hour: process 0 alone writes exports and reports), and a failing one exits
at once with its error, so its launcher stops the job instead of every process waiting out JAX's shutdown barrier.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

TRACEBACK_FLAG = "--traceback"

# Order is the order shown by `reasoner --help`.
COMMAND_MODULES = (
    "info",
    "parity",
    "chat",
    "generate",
    "serve",
    "astar",
    "data",
    "smt",
    "cedar",
    "train",
    "eval",
    "demo",
    "report",
    "bench",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reasoner",
        description="Post-train reasoning language models with search and verifiers (JAX/Flax).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    register_modules(subparsers, "reasoner.cli", COMMAND_MODULES)
    return parser


def register_modules(subparsers, package: str, names) -> None:
    """Calls `register(subparsers)` of each module `package.name`, in order (the order `--help` shows). A module
    that is not in this checkout is left out (a command not built here); any other import error propagates."""
    for name in names:
        try:
            module = importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"{package}.{name}":
                continue
            raise
        module.register(subparsers)


def _split_traceback_flag(argv: list[str]) -> tuple[list[str], bool]:
    """(argv without `--traceback`, whether it was given); arguments after a bare `--` are left alone."""
    cut = argv.index("--") if "--" in argv else len(argv)
    head = [a for a in argv[:cut] if a != TRACEBACK_FLAG]
    return head + argv[cut:], len(head) != cut


def one_line_error(err: BaseException) -> str:
    """`err` as one line: its message (first line), prefixed by its type unless the message is self-describing."""
    text = " ".join(str(err).split()) or repr(err)
    from_us = type(err).__module__.startswith(("reasoner", "trainers", "search", "configs"))
    return text if from_us or isinstance(err, (ValueError, FileNotFoundError)) else f"{type(err).__name__}: {text}"


def main(argv: list[str] | None = None) -> int:
    """Entry point. Run as the `reasoner` command (argv None), it first re-executes itself once with the malloc
    settings of `reasoner.allocator` (XLA:CPU steps fault their temporaries in afresh otherwise); called with an
    argv list (tests, notebooks) it runs in this process as it is. Then it joins the job's cluster (a no-op for a
    single process) and runs the command."""
    if argv is None and sys.argv[1:2] not in (["-h"], ["--help"]):
        from reasoner.allocator import reexec_tuned

        reexec_tuned(sys.argv[1:])
    argv, show_traceback = _split_traceback_flag(list(sys.argv[1:] if argv is None else argv))
    show_traceback = show_traceback or os.environ.get("REASONER_TRACEBACK", "") not in ("", "0")
    parser = build_parser()
    parser.add_argument(TRACEBACK_FLAG, action="store_true", help="show the full traceback of an error")
    args = parser.parse_args(argv)
    spec = None
    try:
        from reasoner.compile_cache import enable
        from reasoner.distributed import maybe_initialize

        spec = maybe_initialize()  # before the handler: JAX must not have touched a device yet
        enable(multi_process=spec.is_multi_process)  # compiled programs persist: a restart does not recompile
        code = args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return _leave(spec, 130)
    except Exception as err:  # noqa: BLE001 - the command line reports, the traceback is opt-in
        if show_traceback and not (spec is not None and spec.is_multi_process):
            raise
        if show_traceback:
            import traceback

            traceback.print_exc()
        print(f"reasoner {args.command}: error: {one_line_error(err)} (rerun with {TRACEBACK_FLAG} for the "
              f"traceback)", file=sys.stderr)
        return _leave(spec, 1)
    return _finish(spec, int(code or 0))


def _finish(spec, code: int) -> int:
    """A multi-process job's processes leave together: each waits at one last barrier (generous: process 0 may
    still be writing an export, a report or plots the others skip) before JAX's own shutdown barrier, whose
    timeout is short (300 s) and fixed. A failing process does not wait (`_leave`)."""
    if code != 0 or spec is None or not spec.is_multi_process:
        return _leave(spec, code)
    from reasoner.distributed import barrier, exit_barrier_timeout_s

    barrier("command-end", timeout_s=exit_barrier_timeout_s())
    return code


def _leave(spec, code: int) -> int:
    """Returns `code`; a process of a multi-process job that fails exits at once instead: waiting in JAX's
    shutdown barrier for peers that are themselves blocked in a collective with it would hold the whole job for
    that barrier's timeout and bury the error under the coordination service's messages. Its launcher (or the
    coordination service's heartbeat) then stops the others."""
    if code == 0 or spec is None or not spec.is_multi_process:
        return code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

if __name__ == "__main__":
    sys.exit(main())
