"""Small pool tasks for health checks, tests and the verifier benchmark (standard library only).

Each one exercises one pool outcome: a normal return, a raised error, a deadline overrun, an
allocation past the memory cap, a hard crash, a worker that ignores SIGTERM, a forked child.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def echo(value):
    return value


def loaded_modules() -> list[str]:
    """Top-level module names this worker has imported (tests check that `jax` is absent)."""
    return sorted({name.split(".")[0] for name in sys.modules})


def fail(message: str):
    raise ValueError(message)


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def allocate(megabytes: int, *, hold_s: float = 30.0) -> int:
    chunks = [bytearray(1024 * 1024) for _ in range(megabytes)]
    time.sleep(hold_s)
    return len(chunks)


def exit_with(status: int) -> None:
    """Ends the worker process at once with `status` (as Z3 does with 101 when it runs out of memory)."""
    import os

    os._exit(int(status))


def segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def ignore_sigterm_and_sleep(seconds: float) -> float:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(seconds)
    return seconds


def fork_sleeper(seconds: float) -> int:
    """Leaves a child process behind in the worker's process group (the pool must reap it)."""
    pid = os.fork()
    if pid == 0:
        time.sleep(seconds)
        os._exit(0)
    time.sleep(seconds)
    return pid


def sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def pid() -> int:
    return os.getpid()
