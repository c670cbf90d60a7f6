"""Building blocks of the decoder: `Proj` (a multi-dimensional linear map), `RMSNorm`, `SwiGLU`.

Every parameter is an `nnx.Param` carrying `logical_axes` metadata (names such as
`embed, heads, kv_heads, head_dim, mlp, vocab`); `reasoner.sharding` maps those names to mesh
axes through the single table in `configs/sharding_rules.py`.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


_ABSTRACT = contextvars.ContextVar("abstract_params", default=False)


@contextlib.contextmanager
def abstract_params():
    """Inside, `make_param` creates shape-only parameters (`jax.ShapeDtypeStruct`): building the
    model skeleton for loading costs no random numbers and no tracing."""
    token = _ABSTRACT.set(True)
    try:
        yield
    finally:
        _ABSTRACT.reset(token)


def make_param(
    rngs: nnx.Rngs | None,
    shape: Sequence[int],
    axes: Sequence[str | None],
    *,
    dtype,
    init: str = "normal",
) -> nnx.Param:
    """A parameter of `shape` with its logical axis names; `init` in {normal (std 0.02), ones, zeros}."""
    shape = tuple(int(s) for s in shape)
    if len(shape) != len(axes):
        raise ValueError(f"shape {shape} and logical axes {tuple(axes)} differ in rank")
    if _ABSTRACT.get():
        return nnx.Param(jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)), logical_axes=tuple(axes))
    if init == "normal":
        key = rngs.params()
        if isinstance(key, jax.core.Tracer):
            value = 0.02 * jax.random.normal(key, shape, jnp.float32)
        else:
            # Eagerly, numpy avoids compiling one XLA kernel per parameter shape (seconds per model).
            seed = np.asarray(jax.random.key_data(key)).astype(np.uint64).tolist()
            value = (0.02 * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)
            value = jnp.asarray(value)
    elif init == "ones":
        value = jnp.ones(shape, jnp.float32)
    elif init == "zeros":
        value = jnp.zeros(shape, jnp.float32)
    else:
        raise ValueError(f"unknown init {init!r}")
    return nnx.Param(value.astype(dtype), logical_axes=tuple(axes))


def flat_dot(x: jax.Array, w: jax.Array, *, n_in: int) -> jax.Array:
    """x . w contracting the last `n_in` dims of x with the first `n_in` of w, as ONE 2-D matmul
    [rows, in] @ [in, out] reshaped back.

    Why: a tensordot over [B, T, ...] gives a dot with two batch-like free dims; its transposes in the
    backward (dW contracts over both B and T) are not canonical for XLA:CPU, which then runs them far
    slower than a plain GEMM (an MLP's gradient measured 1.7x slower than with this reshape). Merging
    the leading dims (and the kernel's input/output dims) first keeps every forward and backward dot a
    row-major GEMM. The reshapes only merge adjacent dims, so shardings of the major dims carry over.
    """
    lead, in_dims = x.shape[:x.ndim - n_in], x.shape[x.ndim - n_in:]
    if w.shape[:n_in] != in_dims:
        raise ValueError(f"flat_dot: x {x.shape} and w {w.shape} disagree on the {n_in} contracted dims")
    out_dims = w.shape[n_in:]
    rows = math.prod(lead)
    k = math.prod(in_dims)
    y = jnp.dot(x.reshape(rows, k), w.reshape(k, math.prod(out_dims)))
    return y.reshape(lead + out_dims)


class Proj(nnx.Module):
    """y = x . kernel (+ bias), contracting the last `len(in_shape)` dims of x.

    kernel: in_shape + out_shape, e.g. q_proj [embed, heads, head_dim], o_proj [heads, head_dim, embed].
    `self.lora` is None or a `reasoner.models.lora.LoRA` adding a low-rank update (set by `apply_lora`).
    `self.kernel` is an `nnx.Param`, or a `reasoner.models.quant.QuantizedKernel` after `quantize_projections`.
    """

    def __init__(self, in_shape, out_shape, *, in_axes, out_axes, bias: bool, rngs, param_dtype, dtype):
        self.in_shape, self.out_shape = tuple(in_shape), tuple(out_shape)
        self.dtype = dtype
        self.kernel = make_param(rngs, self.in_shape + self.out_shape, tuple(in_axes) + tuple(out_axes),
                                 dtype=param_dtype)
        self.bias = make_param(rngs, self.out_shape, out_axes, dtype=param_dtype, init="zeros") if bias else None
        self.lora = nnx.data(None)  # declared as data so an adapter can be attached later

    def __call__(self, x: jax.Array) -> jax.Array:
        n_in = len(self.in_shape)
        if isinstance(self.kernel, nnx.Variable):
            y = flat_dot(x.astype(self.dtype), self.kernel[...].astype(self.dtype), n_in=n_in)
        else:  # a `reasoner.models.quant.QuantizedKernel`: dequantizes inside its matmul
            y = self.kernel(x.astype(self.dtype), n_in=n_in)
        return self.finish(x, y)

    def finish(self, x: jax.Array, y: jax.Array) -> jax.Array:
        """y = x . kernel (computed by the caller: `__call__`, or one matmul shared by several projections of the
        same x, `reasoner.sampling.packed_weights.FusedPacked`) plus the bias and the LoRA update."""
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        if self.lora is not None:
            y = y + self.lora(x, n_in=len(self.in_shape)).astype(y.dtype)
        return y


class RMSNorm(nnx.Module):
    """x / rms(x) * scale over the last axis, computed in float32 (as transformers does)."""

    def __init__(self, dim: int, *, eps: float, axis_name: str, rngs, param_dtype):
        self.eps = eps
        self.scale = make_param(rngs, (dim,), (axis_name,), dtype=param_dtype, init="ones")

    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = x.dtype
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        # transformers casts back to the input dtype before scaling
        return self.scale[...].astype(dtype) * x32.astype(dtype)


class SwiGLU(nnx.Module):
    """down(silu(gate(x)) * up(x)); x_BxTxD -> BxTxD."""

    def __init__(self, hidden: int, inner: int, *, rngs, param_dtype, dtype):
        kw = dict(bias=False, rngs=rngs, param_dtype=param_dtype, dtype=dtype)
        self.gate_proj = Proj((hidden,), (inner,), in_axes=("embed",), out_axes=("mlp",), **kw)
        self.up_proj = Proj((hidden,), (inner,), in_axes=("embed",), out_axes=("mlp",), **kw)
        self.down_proj = Proj((inner,), (hidden,), in_axes=("mlp",), out_axes=("embed",), **kw)

    def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
        return self.combine(self.gate_proj(x_BxTxD), self.up_proj(x_BxTxD))

    def combine(self, gate_BxTxI: jax.Array, up_BxTxI: jax.Array) -> jax.Array:
        """down(silu(gate) * up) of projections computed by the caller (here, or one fused matmul)."""
        return self.down_proj(jax.nn.silu(gate_BxTxI) * up_BxTxI)
