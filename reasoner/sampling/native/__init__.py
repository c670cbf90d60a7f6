"""Native CPU kernels, built on first use with the machine's C++ compiler and registered as XLA FFI targets.

`paged_attention(q, k_pool, v_pool, table, positions, scale=, window=)` is the rollout engine's paged attention as
one fused call (`paged_attention.cc` says what it computes and why): on XLA:CPU the pure-JAX path gathers every
slot's blocks into a copy and runs tiny batched dots, most of a batch-16 decode step outside the projections.

`packed_matmul(x, w_packed, n)` is x [M, K] . W [K, n] with W stored by `pack` as panels of 32 columns
([ceil(n / 32), K, 32]; `packed_matmul.cc`): for the few rows of a decode step it runs about 1.4x faster than
XLA's GEMM on the same weights (`reasoner bench generate` reports both). `reasoner.sampling.packed_weights` gives
the rollout engine a packed copy of a model's projections.

Build: `c++ -O3 -march=native -std=c++17 -shared -fPIC` against the FFI headers jaxlib ships
(`jax.ffi.include_dir()`), once per source text, jaxlib version, compiler and CPU (its model and flags, since
`-march=native` code may not run on another CPU), cached under `<reasoner cache>/native` (`$REASONER_CACHE`,
default `~/.cache/reasoner`) and written atomically, so concurrent processes at worst build it twice. The build
takes about 2 s the first time.

`available()` says whether the kernel can be used here: the default backend is the CPU, `REASONER_NATIVE` is not
`0`, and the build and load succeeded. Where it is not (no compiler, a failed build, a GPU/TPU backend), callers
keep the pure-JAX path; `unavailable_reason()` says why (a failed build is logged as a warning, any other reason
once at INFO).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import pathlib
import platform
import shutil
import subprocess
import tempfile

log = logging.getLogger(__name__)

SOURCES = tuple(pathlib.Path(__file__).with_name(name) for name in ("paged_attention.cc", "packed_matmul.cc"))
HEADERS = (pathlib.Path(__file__).with_name("pool_work.h"),)  # included by both sources: part of the build's key
ATTENTION, MATMUL = "reasoner_paged_attention", "reasoner_packed_matmul"  # the FFI targets
TARGETS = {ATTENTION: "ReasonerPagedAttention", MATMUL: "ReasonerPackedMatmul"}  # target -> the library's symbol
PANEL = 32  # columns per packed panel (packed_matmul.cc's kPanel)
FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-fopenmp-simd", "-fno-math-errno", "-w")

_reason = ""


def _cpu_identity() -> str:
    """The CPU's model name and feature flags: `-march=native` code is only valid where these match."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    lines = [line for line in text.splitlines() if line.startswith(("model name", "flags", "Features"))]
    return "\n".join(dict.fromkeys(lines))


def _library_path(compiler: str) -> pathlib.Path:
    import jaxlib

    from reasoner.tokenization import cache_dir

    texts = [source.read_text() for source in (*SOURCES, *HEADERS)]
    key = hashlib.sha256("\0".join([*texts, jaxlib.__version__, compiler, " ".join(FLAGS),
                                    _cpu_identity()]).encode()).hexdigest()[:16]
    return cache_dir() / "native" / f"kernels-{key}.so"


def _build(path: pathlib.Path, compiler: str) -> None:
    import jax

    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        out = pathlib.Path(tmp) / path.name
        cmd = [compiler, *FLAGS, f"-I{jax.ffi.include_dir()}", *map(str, SOURCES), "-o", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"`{' '.join(cmd)}` failed ({done.returncode}):\n{done.stderr[-2000:]}")
        os.replace(out, path)


def _unavailable(reason: str, level: int = logging.INFO) -> bool:
    global _reason
    _reason = reason
    log.log(level, "the native CPU kernels are not used: %s", reason)
    return False


@functools.cache
def _load() -> bool:
    import jax

    if jax.default_backend() != "cpu":
        return _unavailable(f"the default backend is {jax.default_backend()}, the kernel is for the CPU")
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not compiler:
        return _unavailable("no C++ compiler (c++, g++ or clang++, or $CXX) on PATH")
    try:
        path = _library_path(compiler)
        if not path.exists():
            log.info("building the native CPU kernels: %s", path)
            _build(path, compiler)
        library = ctypes.cdll.LoadLibrary(str(path))
        for target, symbol in TARGETS.items():
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(library, symbol)), platform="cpu")
    except Exception as e:  # a missing header, a compiler error, a library that does not load: keep the JAX path
        return _unavailable(f"{type(e).__name__}: {e}", logging.WARNING)
    return True


def available() -> bool:
    """Whether the kernels run here: `REASONER_NATIVE` is not `0` (read at each call, so a process can trace
    both paths) and the kernel builds and registers (on the first call; the outcome is kept)."""
    return os.environ.get("REASONER_NATIVE", "1") != "0" and _load()


def unavailable_reason() -> str:
    """Why the kernels did not build or load ("" when it did, or was not tried yet)."""
    return _reason


def paged_attention(q_AxCxKVxGxDh, k_pool, v_pool, table_AxJ, positions_AxC, *, scale: float, window: int):
    """[A, C, KV, G, Dh] f32: each query's attention over its slot's visible positions, read through the block
    table from the `[KV, NB, bs, Dh]` pools (causal, and within `window` positions when `window` > 0). Call only
    where `available()`; shapes and semantics are `paged_device._paged_attention`'s."""
    import jax
    import numpy as np

    return jax.ffi.ffi_call(ATTENTION, jax.ShapeDtypeStruct(q_AxCxKVxGxDh.shape, q_AxCxKVxGxDh.dtype))(
        q_AxCxKVxGxDh, k_pool, v_pool, table_AxJ.astype(np.int32), positions_AxC.astype(np.int32),
        scale=np.float32(scale), window=np.int64(window))


def pack(w_KxN):
    """[K, N] -> [ceil(N / 32), K, 32]: column panels, each panel's K rows contiguous, zero columns past N (a jnp
    function: traceable, and on a concrete array it runs once where the weights live)."""
    import jax.numpy as jnp

    K, N = w_KxN.shape
    panels = -(-N // PANEL)
    w = jnp.pad(w_KxN, ((0, 0), (0, panels * PANEL - N)))
    return jnp.transpose(w.reshape(K, panels, PANEL), (1, 0, 2))


def unpack(w_packed, n: int):
    """The inverse of `pack`: [NP, K, 32] -> [K, n]."""
    import jax.numpy as jnp

    NP, K, P = w_packed.shape
    return jnp.transpose(w_packed, (1, 0, 2)).reshape(K, NP * P)[:, :n]


def packed_matmul(x_MxK, w_packed, n: int):
    """[M, n] f32 = x [M, K] . W [K, n] for W = `unpack(w_packed, n)`; call only where `available()`."""
    import jax

    M = x_MxK.shape[0]
    return jax.ffi.ffi_call(MATMUL, jax.ShapeDtypeStruct((M, n), x_MxK.dtype))(x_MxK, w_packed)
