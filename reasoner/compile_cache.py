"""XLA's persistent compilation cache for every `reasoner` command.

A training step of a real model takes seconds to minutes to compile; a run that restarts (a resume after
preemption, the second stage of a pipeline, `reasoner eval` after `reasoner train`, each process of a job) compiles
the same programs again unless they are cached on disk. JAX keys each entry on the program, its shardings, the
devices, the compile options and the jax / jaxlib versions, so a hit is the executable this process would have
built (cf. MaxText's `jax_cache_dir`, on by default there too).

Where: `$JAX_COMPILATION_CACHE_DIR` when it is set (JAX reads it itself; a `gs://` path works on a pod), else
`$REASONER_COMPILE_CACHE`, else `<reasoner cache>/xla` (`~/.cache/reasoner/xla`). `REASONER_COMPILE_CACHE=off`
turns it off. Only programs that took at least `JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS` (JAX's default 1 s)
to compile are written.

In a job of several processes the default location is not used: every process would write the same entries into
its own home, and a two-process run that shared one cache once missed JAX's shutdown barrier (2026-12-01, under
load; not shown to be the cause, but not worth the risk by default). Naming a directory in either variable opts in.
"""

from __future__ import annotations

import os
import sys

OFF = ("0", "off", "none", "false")


def cache_path(*, multi_process: bool = False) -> str | None:
    """The directory this process compiles into, or None when the cache is off."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    setting = os.environ.get("REASONER_COMPILE_CACHE", "").strip()
    if setting.lower() in OFF:
        return None
    if setting:
        return setting
    if multi_process:
        return None
    from reasoner.tokenization import cache_dir

    return str(cache_dir() / "xla")


def enable(*, multi_process: bool = False) -> str | None:
    """Points JAX at `cache_path()` (before its first compile); returns the directory or None."""
    path = cache_path(multi_process=multi_process)
    if path is None:
        return None
    os.environ["JAX_COMPILATION_CACHE_DIR"] = path
    if "jax" in sys.modules:  # imported already: its config read the environment at import
        import jax

        jax.config.update("jax_compilation_cache_dir", path)
    return path
