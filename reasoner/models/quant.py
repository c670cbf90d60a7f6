"""Blockwise NF4 and int8 weight quantization (QLoRA: Dettmers et al. 2023) and the matmul that dequantizes.

    q = quantize(w, kind="nf4")                   # w [in..., out...] float -> QuantizedArray (packed codes, scales)
    w_hat = dequantize(q, jnp.float32)            # [in..., out...]
    y = quantized_matmul(x, q, n_in=1)            # x [..., in...] -> [..., out...] == x . dequantize(q, x.dtype)
    quantize_projections(model, kind="nf4")       # every `Proj` of a Decoder stores its kernel quantized

Layout (both kinds). The weight is flattened in row-major order and cut into `n_blocks = ceil(n / block_size)` blocks
of `block_size` (64) consecutive values, exactly as bitsandbytes does; each block keeps its absmax (float32 [n_blocks])
and every value becomes a code relative to it. The last block is padded with code "zero".
  * nf4: code i in 0..15 picks NF4_CODE[i]; value = NF4_CODE[i] * absmax. Two codes per byte, the even element in the
    high nibble (bitsandbytes' order): codes uint8 [n_blocks, block_size / 2]. 4.5 bits per weight with the scales.
  * int8: symmetric, code q = round(127 * w / absmax) in [-127, 127]; value = q * absmax / 127.
    codes int8 [n_blocks, block_size]. 8.5 bits per weight.
Double quantization of the scales (QLoRA section 3, 0.5 -> 0.127 bits per weight) is not implemented: at 64 values
per block the float32 scales are 1/9 of the NF4 storage.

NF4 quantization follows bitsandbytes 0.50.2 (`quantize_4bit`, default backend) bit for bit: scaled = clip(w *
(1 / absmax), -1, 1) (a division for the ragged last block), then the code whose interval between the float32
midpoints of adjacent code values holds it (a value on a midpoint takes the lower code). One deviation: an all-zero
ragged last block stores absmax 0 where bitsandbytes stores its 1e-38 clamp (same codes, same dequantized zeros).

Why `quantized_matmul` has its own VJP: only x needs a gradient (the base is frozen; LoRA trains beside it), and the
backward recomputes the dequantized weight from the codes rather than saving the forward's float copy as a residual.
Each dequantization is made to depend on its matmul's input (x forward, the cotangent backward; `_zero_after`), so
XLA computes it near its matmul rather than every layer's float weight at the program start (measured on XLA:CPU,
a 4-layer model's LoRA gradient: temporaries 19.9 MB without, 10.2 MB with, against 5.3 MB for the float base; the
base's arguments shrink from 16.2 MB to 2.7 MB).
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from reasoner.models.layers import Proj, flat_dot

BLOCK_SIZE = 64
KINDS = ("nf4", "int8")

# The 16 NF4 values: bitsandbytes `functional.get_4bit_type("nf4")` / QLoRA appendix E. They are the quantiles
# Phi^-1 of 8 evenly spaced probabilities in [1/2, delta] (positive side) and 7 in [1/2, delta] (negative side), with
# delta = (1 - 1/(2*15) + 1 - 1/(2*16)) / 2 = 0.9677083, normalised by the largest so the range is [-1, 1] with an
# exact zero (tests/models/test_quant.py recomputes them from that definition).
NF4_CODE = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
], dtype=np.float32)
NF4_ZERO = 7  # the code of 0.0 (padding)
# Float32 midpoints between adjacent code values, computed in float32 as bitsandbytes does.
NF4_BOUNDS = ((NF4_CODE[:-1] + NF4_CODE[1:]) / np.float32(2)).astype(np.float32)


@struct.dataclass
class QuantizedArray:
    """A quantized weight: codes [n_blocks, block_size / 2] uint8 (nf4) or [n_blocks, block_size] int8 (int8),
    absmax [n_blocks] float32; `shape` is the original weight's shape."""

    codes: jax.Array
    absmax: jax.Array
    kind: str = struct.field(pytree_node=False)
    shape: tuple = struct.field(pytree_node=False)
    block_size: int = struct.field(pytree_node=False, default=BLOCK_SIZE)

    @property
    def nbytes(self) -> int:
        return int(self.codes.size * self.codes.dtype.itemsize + self.absmax.size * self.absmax.dtype.itemsize)


def _check(kind: str, block_size: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"quantization kind {kind!r}: expected one of {KINDS}")
    if block_size < 2 or block_size % 2:
        raise ValueError(f"block_size {block_size}: expected an even number >= 2")


def _quantize_flat(w_flat: np.ndarray, *, kind: str, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, absmax) of a float32 [n] array, in numpy (IEEE float32 like torch; no compile per weight shape)."""
    n = w_flat.shape[0]
    n_blocks = -(-n // block_size)
    rem = n % block_size
    pad = n_blocks * block_size - n
    blocks = np.pad(w_flat, (0, pad)).reshape(n_blocks, block_size)
    absmax = np.max(np.abs(blocks), axis=1)
    safe = np.where(absmax > 0, absmax, np.float32(1.0))  # an all-zero block scales by 1 (codes "zero")
    if kind == "nf4":
        scaled = blocks * (np.float32(1.0) / safe)[:, None]
        if rem:  # bitsandbytes divides (not multiplies by the reciprocal) in the ragged last block
            scaled[-1] = blocks[-1] / safe[-1]
        scaled = np.clip(scaled, np.float32(-1.0), np.float32(1.0))
        idx = np.searchsorted(NF4_BOUNDS, scaled, side="left").astype(np.uint8)
        idx.reshape(-1)[n:] = NF4_ZERO
        codes = (idx[:, 0::2] << 4) | idx[:, 1::2]
    else:
        codes = np.clip(np.round(blocks / safe[:, None] * np.float32(127.0)), -127, 127).astype(np.int8)
    return codes, absmax.astype(np.float32)


def quantize(w: jax.Array, *, kind: str, block_size: int = BLOCK_SIZE) -> QuantizedArray:
    """`w` (any shape, float) -> QuantizedArray of `kind` ("nf4" | "int8"), blocks of `block_size` in row-major
    order (see the module docstring for the layout). Runs once per weight on the host (numpy): `w` must be fully
    addressable by this process."""
    _check(kind, block_size)
    if isinstance(w, jax.Array) and not w.is_fully_addressable:
        raise ValueError("quantize: the weight is not fully addressable by this process; quantize before sharding")
    w = np.asarray(jax.device_get(w))
    if not np.issubdtype(w.dtype, np.floating) or w.size == 0:
        raise ValueError(f"quantize: expected a non-empty float array, got {w.dtype} {w.shape}")
    codes, absmax = _quantize_flat(w.reshape(-1).astype(np.float32), kind=kind, block_size=block_size)
    return QuantizedArray(codes=jnp.asarray(codes), absmax=jnp.asarray(absmax), kind=kind,
                          shape=tuple(int(s) for s in w.shape), block_size=block_size)


def _dequantize(codes, absmax, *, kind: str, shape: Sequence[int], block_size: int, dtype, zero=None) -> jax.Array:
    """`zero`: None or a float32 0 to add to the table and scales (`_zero_after`); the values are unchanged."""
    table = jnp.asarray(NF4_CODE)
    if zero is not None:
        table, absmax = table + zero, absmax + zero
    if kind == "nf4":
        idx = jnp.stack([codes >> 4, codes & 15], axis=-1).reshape(codes.shape[0], block_size)
        values = table[idx.astype(jnp.int32)] * absmax[:, None]
    else:
        values = codes.astype(jnp.float32) * absmax[:, None] / jnp.float32(127.0)
    n = math.prod(shape)
    return values.reshape(-1)[:n].reshape(tuple(shape)).astype(dtype)


@functools.partial(jax.jit, static_argnames=("dtype",))
def dequantize(q: QuantizedArray, dtype=jnp.float32) -> jax.Array:
    """The weight [q.shape] in `dtype` (computed in float32, then cast)."""
    return _dequantize(q.codes, q.absmax, kind=q.kind, shape=q.shape, block_size=q.block_size, dtype=dtype)


def _zero_after(x: jax.Array) -> jax.Array:
    """A float32 zero that depends on x's data (0 * one element of x). Added to the NF4 table and the scales it makes
    the dequantization wait for x: XLA:CPU drops optimization barriers, and without a data dependency it computed
    every layer's dequantized weight at the program start (and shared the forward's with the backward), keeping them
    all alive. XLA does not fold float 0 * x (NaN for inf/NaN x, when the matmul's output is not finite anyway)."""
    return jnp.float32(0.0) * jax.lax.stop_gradient(x.reshape(-1)[0]).astype(jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _qmatmul(kind, shape, block_size, n_in, x, codes, absmax):
    w = _dequantize(codes, absmax, kind=kind, shape=shape, block_size=block_size, dtype=x.dtype, zero=_zero_after(x))
    return flat_dot(x, w, n_in=n_in)


def _qmatmul_fwd(kind, shape, block_size, n_in, x, codes, absmax):
    return _qmatmul(kind, shape, block_size, n_in, x, codes, absmax), (codes, absmax)


def _qmatmul_bwd(kind, shape, block_size, n_in, residuals, g):
    codes, absmax = residuals
    dtype = g.dtype  # the output's dtype is x's
    # recomputed (not the forward's copy), once g has arrived
    w = _dequantize(codes, absmax, kind=kind, shape=shape, block_size=block_size, dtype=dtype, zero=_zero_after(g))
    k, n_out = math.prod(shape[:n_in]), math.prod(shape[n_in:])
    lead = g.shape[:g.ndim - (len(shape) - n_in)]
    dx = jnp.dot(g.reshape(-1, n_out), w.reshape(k, n_out).T)
    return dx.reshape(lead + tuple(shape[:n_in])), None, None


_qmatmul.defvjp(_qmatmul_fwd, _qmatmul_bwd)


def quantized_matmul(x: jax.Array, q: QuantizedArray, *, n_in: int = 1) -> jax.Array:
    """x [..., in...] . dequantize(q, x.dtype) [in..., out...] -> [..., out...], contracting the last `n_in` dims of
    x (one 2-D GEMM, as `layers.flat_dot`). Differentiable in x only; the backward recomputes the dequantized
    weight (module docstring)."""
    if tuple(x.shape[x.ndim - n_in:]) != tuple(q.shape[:n_in]):
        raise ValueError(f"quantized_matmul: x {x.shape} and weight {q.shape} disagree on the {n_in} contracted dims")
    return _qmatmul(q.kind, q.shape, q.block_size, n_in, x, q.codes, q.absmax)


quantized_matmul_jit = jax.jit(quantized_matmul, static_argnames=("n_in",))


# ------------------------------------------------------------------------------------------------ NNX integration
class QuantWeight(nnx.Variable):
    """Frozen quantized storage (codes, scales). Not an `nnx.Param`: no optimizer, LoRA split or `BASE_PARAMS`
    selects it, so it always lands in the frozen base."""


class QuantizedKernel(nnx.Module):
    """A `Proj` kernel stored quantized; `Proj.__call__` calls it in place of its float matmul.

    codes/absmax as in `QuantizedArray`. When the kernel's leading dim spans whole blocks (prod(shape[1:]) a
    multiple of the block size), block rows follow it, so they carry its first logical axis (the same split of the
    weight under sharding); otherwise they are replicated. `logical_axes` and `dtype` are the float kernel's, kept
    for `dequantize_param` (LoRA merge, export)."""

    def __init__(self, q: QuantizedArray, *, logical_axes: Sequence[str | None], dtype):
        self.kind, self.shape, self.block_size = q.kind, q.shape, q.block_size
        self.logical_axes = tuple(logical_axes)
        self.dtype = jnp.dtype(dtype).name
        aligned = math.prod(q.shape[1:]) % q.block_size == 0
        lead = self.logical_axes[0] if aligned else None
        self.codes = QuantWeight(q.codes, logical_axes=(lead, None))
        self.absmax = QuantWeight(q.absmax, logical_axes=(lead,))

    def array(self) -> QuantizedArray:
        return QuantizedArray(codes=self.codes[...], absmax=self.absmax[...], kind=self.kind, shape=self.shape,
                              block_size=self.block_size)

    def dequantize_param(self) -> nnx.Param:
        """The dequantized kernel as a float `nnx.Param` of the original dtype and logical axes."""
        return nnx.Param(dequantize(self.array(), self.dtype), logical_axes=self.logical_axes)

    def __call__(self, x: jax.Array, *, n_in: int) -> jax.Array:
        return quantized_matmul(x, self.array(), n_in=n_in)


def quantize_projections(model, *, kind: str, block_size: int = BLOCK_SIZE) -> list[str]:
    """Replaces the kernel of every `Proj` in `model` (attention and MLP projections; embeddings, norms, the LM head
    and biases stay float) with a `QuantizedKernel` of `kind`, in place; returns the module paths."""
    _check(kind, block_size)
    done = []
    for path, module in list(nnx.iter_modules(model)):
        if isinstance(module, Proj) and isinstance(module.kernel, nnx.Variable):
            value = module.kernel[...]
            axes = module.kernel.get_metadata().get("logical_axes") or (None,) * value.ndim
            module.kernel = QuantizedKernel(quantize(value, kind=kind, block_size=block_size), logical_axes=axes,
                                            dtype=value.dtype)
            done.append(".".join(str(p) for p in path))
    if not done:
        raise ValueError("quantize_projections: the model has no float projection kernels to quantize")
    return done
