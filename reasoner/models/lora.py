r"""LoRA adapters for the decoder's projections (NNX), chosen by a regex over module paths.

    paths = apply_lora(model, pattern=r"attn\.(q|v)_proj", rank=8, alpha=16, dropout=0.05, rngs=nnx.Rngs(0))
    # train only the adapters: the base weights stay frozen
    graphdef, lora_params, rest = nnx.split(model, nnx.LoRAParam, ...)
    def loss(lora_params, rest):
        rest = jax.tree.map(lambda x: x, rest)  # fresh Variables at this trace level, so the
        m = nnx.merge(graphdef, lora_params, rest)  # dropout RNG counter may advance under grad
        return objective(m), nnx.state(m, nnx.RngState)  # carry the advanced RNG state out
    grads, rng_state = jax.jit(jax.grad(loss, has_aux=True))(lora_params, rest)
    merge_lora(model)    # kernel += alpha/rank * A @ B; the adapter path is then skipped
    unmerge_lora(model)  # restores the kernel and re-enables the adapter

Adapter weights are `nnx.LoRAParam` (a distinct Variable type; it subclasses `nnx.Param`, so use
`BASE_PARAMS` to select only the base weights). Module paths look like
`layers.3.attn.q_proj`, `layers.0.mlp.down_proj`. B starts at zero, so a fresh adapter leaves the
model's outputs unchanged. Dropout acts on the adapter input only, as in PEFT.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
from flax import nnx

from reasoner.models.layers import Proj

BASE_PARAMS = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))


class LoRA(nnx.Module):
    """delta(x) = dropout(x) . A . B * alpha / rank, with A [in..., r] and B [r, out...]."""

    def __init__(self, proj: Proj, *, rank: int, alpha: float, dropout: float, rngs: nnx.Rngs):
        axes = proj.kernel.get_metadata().get("logical_axes")
        n_in = len(proj.in_shape)
        in_axes, out_axes = axes[:n_in], axes[n_in:]
        fan_in = 1
        for d in proj.in_shape:
            fan_in *= d
        dtype = proj.kernel[...].dtype
        a = jax.random.normal(rngs.params(), proj.in_shape + (rank,), jnp.float32) / fan_in ** 0.5
        self.a = nnx.LoRAParam(a.astype(dtype), logical_axes=tuple(in_axes) + ("lora_rank",))
        self.b = nnx.LoRAParam(jnp.zeros((rank,) + proj.out_shape, dtype), logical_axes=("lora_rank",) + tuple(out_axes))
        self.scale = float(alpha) / rank
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout > 0 else None
        self.merged = False

    def delta_kernel(self) -> jax.Array:
        """alpha/rank * A @ B in the kernel's shape (in_shape + out_shape)."""
        return jnp.tensordot(self.a[...], self.b[...], axes=1) * self.scale

    def __call__(self, x: jax.Array, *, n_in: int) -> jax.Array:
        if self.merged:
            return jnp.zeros((), x.dtype)
        if self.dropout is not None:
            x = self.dropout(x)
        h = jnp.tensordot(x, self.a[...].astype(x.dtype), axes=n_in)
        return jnp.tensordot(h, self.b[...].astype(x.dtype), axes=1) * self.scale


def _projections(model):
    for path, module in nnx.iter_modules(model):
        if isinstance(module, Proj):
            yield ".".join(str(p) for p in path), module


def apply_lora(model, *, pattern: str, rank: int, alpha: float, dropout: float = 0.0,
               rngs: nnx.Rngs | None = None) -> list[str]:
    """Adds an adapter to every projection whose path matches `pattern` (re.search); returns the paths."""
    if rank < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {rank}")
    rngs = rngs or nnx.Rngs(0)
    regex = re.compile(pattern)
    matched = []
    for path, proj in list(_projections(model)):  # listed first: we add modules while walking
        if regex.search(path):
            if not isinstance(proj.kernel, nnx.Variable):
                raise ValueError(f"apply_lora: {path} is already quantized; add adapters before quantizing")
            proj.lora = LoRA(proj, rank=rank, alpha=alpha, dropout=dropout, rngs=rngs)
            matched.append(path)
    if not matched:
        names = [p for p, _ in _projections(model)][:8]
        raise ValueError(f"LoRA pattern {pattern!r} matches no projection; paths look like {names}")
    return matched


def merge_lora(model) -> None:
    """Folds every adapter into its kernel (idempotent); outputs are unchanged. A quantized kernel
    (`reasoner.models.quant`) is first dequantized into a float `nnx.Param`: the merged model is a float model."""
    for _, proj in _projections(model):
        if proj.lora is not None and not proj.lora.merged:
            if not isinstance(proj.kernel, nnx.Variable):
                proj.kernel = proj.kernel.dequantize_param()
            k = proj.kernel[...]
            proj.kernel.set_value((k.astype(jnp.float32) + proj.lora.delta_kernel()).astype(k.dtype))
            proj.lora.merged = True


def unmerge_lora(model) -> None:
    """Undoes `merge_lora` (up to float rounding); a kernel that was quantized stays a float (dequantized) one."""
    for _, proj in _projections(model):
        if proj.lora is not None and proj.lora.merged:
            k = proj.kernel[...]
            proj.kernel.set_value((k.astype(jnp.float32) - proj.lora.delta_kernel()).astype(k.dtype))
            proj.lora.merged = False
