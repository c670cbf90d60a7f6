"""glibc malloc settings for training processes: the `reasoner` command re-executes itself once with them.

Why: XLA:CPU allocates an executable's temporaries afresh on every call, and glibc serves blocks of more than
32 MB with a new `mmap` that `free` unmaps again, so every step faults its whole working set back in, zero-filled,
4 KB at a time. Measured on a 2-core machine, one SmolLM2-135M SFT step at 4 x 256 took 550,000 minor page faults
(2.2 GB) and 4.43 s; with the settings below, 2,200 faults and 3.87 s. The GRPO update of `reasoner bench grpo`
went from 16.0 to 11.7 s. PyTorch's CPU allocator sits on the same malloc and gains as much or more (TRL's SFT
step 4.47 -> 3.59 s, fresh processes in one benchmark run), which is why the training benchmarks run the baseline
in its own process and report it both ways (see `reasoner.benchmarks.baseline_child`).

The settings (glibc tunables, read once at process start, hence the re-exec):
  glibc.malloc.arena_max=1        one arena: XLA's worker threads otherwise get per-thread arenas whose heaps cap
                                  at 64 MB, so large blocks fall back to mmap whatever mmap_max says;
  glibc.malloc.mmap_max=0         large blocks come from the heap and are reused after `free`;
  glibc.malloc.trim_threshold=2^40  freed heap memory is kept, not returned to the kernel between steps;
  glibc.malloc.hugetlb=1          the heap is madvised for transparent huge pages (2 MB faults, fewer TLB misses).
The cost: a process keeps its peak heap until it exits (resident memory does not shrink after a large step), and
one arena serialises malloc between host threads (negligible next to device work). `REASONER_MALLOC=default` turns
it off; a `GLIBC_TUNABLES` the user already set is kept and ours are added only for keys it does not name.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from collections.abc import Mapping

TUNABLES = {
    "glibc.malloc.arena_max": "1",
    "glibc.malloc.mmap_max": "0",
    "glibc.malloc.trim_threshold": str(2**40),
    "glibc.malloc.hugetlb": "1",
}
MODE_VAR = "REASONER_MALLOC"  # "tuned" (set by the re-exec, or by a user), "default" (opt out)


def _parse(tunables: str) -> dict[str, str]:
    out = {}
    for item in filter(None, tunables.split(":")):
        key, _, value = item.partition("=")
        out[key] = value
    return out


def tuned_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with our tunables merged into GLIBC_TUNABLES (the user's own values win) and MODE_VAR=tuned."""
    env = dict(environ)
    current = _parse(env.get("GLIBC_TUNABLES", ""))
    merged = {**TUNABLES, **current}
    env["GLIBC_TUNABLES"] = ":".join(f"{k}={v}" for k, v in merged.items())
    env[MODE_VAR] = "tuned"
    return env


def default_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without the tunables `tuned_environ` adds (values equal to ours are dropped) and MODE_VAR=default."""
    env = dict(environ)
    kept = {k: v for k, v in _parse(env.get("GLIBC_TUNABLES", "")).items() if TUNABLES.get(k) != v}
    if kept:
        env["GLIBC_TUNABLES"] = ":".join(f"{k}={v}" for k, v in kept.items())
    else:
        env.pop("GLIBC_TUNABLES", None)
    env[MODE_VAR] = "default"
    return env


def supported() -> bool:
    """Linux with glibc (the tunables mean nothing to musl, macOS or Windows)."""
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def active(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process started with all of our tunables in effect."""
    env = os.environ if environ is None else environ
    current = _parse(env.get("GLIBC_TUNABLES", ""))
    return supported() and all(current.get(k) == v for k, v in TUNABLES.items())


def describe() -> str:
    """One line for benchmark reports: which malloc settings this process runs with."""
    if not supported():
        return f"system default ({sys.platform})"
    if active():
        return "glibc tuned (" + ",".join(f"{k.rsplit('.', 1)[1]}={v}" for k, v in TUNABLES.items()) + ")"
    user = os.environ.get("GLIBC_TUNABLES")
    return f"glibc GLIBC_TUNABLES={user}" if user else "glibc defaults"


@functools.cache
def _libc():
    """glibc through ctypes (loaded once), or None off glibc."""
    import ctypes
    import ctypes.util

    if not supported():
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def heap_free_bytes() -> int:
    """Bytes this process has freed but glibc malloc keeps in its heap (`mallinfo2().fordblks`), 0 where unknown.

    Under the tuned settings (no mmap, no trim) freed memory never goes back to the kernel, so after a large batch
    the host's MemAvailable stays low although the process can reuse that memory: a memory budget must add it
    (`reasoner.sampling.memory.free_memory_bytes`)."""
    import ctypes

    class _Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                          "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = _libc()
    mallinfo2 = getattr(libc, "mallinfo2", None) if libc is not None else None  # glibc >= 2.33
    if mallinfo2 is None:
        return 0
    mallinfo2.restype = _Mallinfo2
    return int(mallinfo2().fordblks)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_free_memory() -> int:
    """Hands the memory this process has freed back to the kernel; returns how much its resident size fell (bytes).

    Under the tuned settings freed memory stays in the heap for the next step to reuse, which is what a training
    loop wants; a pipeline that runs stage after stage (evaluations, SFT, DPO, each with its own buffers) would
    otherwise keep the peak of every stage resident, on a 2-core, 24 GB machine close to the limit. Between stages
    `malloc_trim(0)` returns every free page of the heap (glibc madvises free chunks inside it too), after a
    `gc.collect()` so that cyclic garbage holding device buffers is freed first. A no-op off glibc."""
    import gc

    gc.collect()
    libc = _libc()
    if libc is None:
        return 0
    before = _rss_bytes()
    libc.malloc_trim(0)
    return max(0, before - _rss_bytes())


def reexec_tuned(argv: list[str]) -> None:
    """Replaces this process by `python -m reasoner.cli ARGV` under `tuned_environ`, unless it already runs tuned,
    the user opted out (REASONER_MALLOC=default), or the platform is not glibc Linux. Returns only in those cases."""
    mode = os.environ.get(MODE_VAR, "")
    if mode == "default" or mode == "tuned" or not supported():
        return
    if mode:
        raise SystemExit(f"{MODE_VAR}={mode!r}: expected 'tuned' or 'default'")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "reasoner.cli", *argv], tuned_environ(os.environ))
