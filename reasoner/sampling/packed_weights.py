"""The rollout engine's decode weights: every projection and the vocabulary head also stored as column panels for
the native small-row matmul (`native.packed_matmul`).

    graphdef, state = for_decode(graphdef, state)   # the engine's jitted functions take these

A decode step multiplies one row per slot by every weight once; at those few rows XLA's GEMM runs far below the
machine's memory bandwidth (SmolLM2, 2 cores: the step's matmuls take 56.2 ms at 16 rows through XLA, 40.4 ms
packed; 27.8 and 26.1 ms at one row; `reasoner bench generate` reports its own). `for_decode` returns a copy of the
model whose `Proj` kernels are `PackedKernel`s and which carries `packed_head`, the tied or untied vocabulary head
packed the same way; `paged_device` calls `head_logits` for the logits. A `PackedKernel` keeps the float kernel
beside its panels (the same array as the caller's, no copy) and uses it for more than `MAX_ROWS` rows (prefills,
wide speculative passes), where XLA's blocked GEMM is the faster one (64 rows: 94.3 vs 97.9 ms; 48 rows: 90.5 vs
79.2 ms packed, 32 rows: 73.9 vs 58.6 ms).

Where the native kernels are unavailable (another backend, no compiler, `REASONER_NATIVE=0`) or the weights are not
float32, `for_decode` returns its arguments unchanged: the engine computes the same thing through XLA. The packed
copy costs one more copy of the projection and head weights (+540 MB for SmolLM2-135M in f32: 425 MB of projections,
113 MB of head), made once per weight update (`RolloutEngine.params = ...`; ~0.3 s on 2 cores), not per step.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

from reasoner.models.layers import Proj, flat_dot
from reasoner.sampling import native

MAX_ROWS = 48  # at most this many rows go through the packed kernel (measured: faster up to 48 rows, slower at 64)


class Panels(nnx.Variable):
    """Packed weights [ceil(N / 32), K, 32] (`native.pack`); inference only, never trained."""


class PackedKernel(nnx.Module):
    """y = x . W for W [in..., out...] (`Proj`'s kernel layout; `transposed`: W is stored [out, in] as the tied
    head's embedding is), contracting the last `n_in` dims of x: the packed kernel for at most `MAX_ROWS` rows,
    XLA's dot on `dense` for more. Same results within float32 rounding (summation order differs)."""

    def __init__(self, dense: nnx.Variable, *, n_in: int = 1, transposed: bool = False, panels=None):
        w = dense[...]
        self.transposed = transposed
        self.out_dims = (int(w.shape[0]),) if transposed else tuple(int(d) for d in w.shape[n_in:])
        self.n = math.prod(self.out_dims)
        self.k = _in_size(w, n_in, transposed)
        self.dense = dense
        self.panels = Panels(_pack_all((w,), (transposed,), (self.k,))[0] if panels is None else panels)

    def __call__(self, x: jax.Array, *, n_in: int) -> jax.Array:
        lead = x.shape[:x.ndim - n_in]
        rows = math.prod(lead)
        if rows <= MAX_ROWS:
            y = native.packed_matmul(x.reshape(rows, self.k).astype(jnp.float32), self.panels[...], self.n)
            return y.reshape(lead + self.out_dims)
        if self.transposed:
            y = jnp.einsum("nd,vd->nv", x.reshape(rows, self.k), self.dense[...], preferred_element_type=jnp.float32)
            return y.reshape(lead + (self.n,))
        return flat_dot(x, self.dense[...], n_in=n_in)


def _in_size(w, n_in: int, transposed: bool) -> int:
    """K, the contracted size of weight `w`: its first `n_in` dims, or its last where stored [out, in]."""
    return int(w.shape[1]) if transposed else math.prod(w.shape[:n_in])


def _packable(w: jax.Array) -> bool:
    return w.dtype == jnp.float32 and w.ndim >= 2


@functools.partial(jax.jit, static_argnums=(1, 2))
def _pack_all(weights, transposed, k):
    """Every weight packed in one program (one pass over memory; eagerly, three ops a weight took ~1 s for SmolLM2):
    weight i is [k_i, ...] flattened to [k_i, n_i], or stored [n_i, k_i] where `transposed[i]`."""
    return [native.pack(w.T if t else w.reshape(ki, -1)) for w, t, ki in zip(weights, transposed, k)]


def for_decode(graphdef, state):
    """(graphdef, state) of a copy of the model with packed projections and head (see the module docstring), or the
    arguments themselves where the native kernels do not run or nothing is float32."""
    if not native.available():
        return graphdef, state
    model = nnx.merge(graphdef, state)  # new module objects over the same arrays: the caller's model is untouched
    projs = [m for _, m in nnx.iter_modules(model) if isinstance(m, Proj) and isinstance(m.kernel, nnx.Variable)
             and _packable(m.kernel[...]) and jnp.dtype(m.dtype) == jnp.float32]
    if not projs:
        return graphdef, state
    head = model.embed if model.lm_head is None else model.lm_head
    with_head = _packable(head[...]) and jnp.dtype(model.cfg.dtype) == jnp.float32
    dense = [p.kernel for p in projs] + ([head] if with_head else [])
    transposed = (False,) * len(projs) + ((model.lm_head is None,) if with_head else ())
    n_in = tuple(len(p.in_shape) for p in projs) + ((1,) if with_head else ())
    k = tuple(_in_size(d[...], n, t) for d, n, t in zip(dense, n_in, transposed))
    panels = _pack_all(tuple(d[...] for d in dense), transposed, k)
    for p, n, packed in zip(projs, n_in, panels):
        p.kernel = PackedKernel(p.kernel, n_in=n, panels=packed)
    if with_head:
        model.packed_head = PackedKernel(head, transposed=transposed[-1], panels=panels[-1])
    return nnx.split(model)


def head_logits(model, hidden_xD: jax.Array) -> jax.Array:
    """float32 logits [..., V] of hidden states [..., D]: the packed head where `for_decode` made one, else
    `model.logits`."""
    head = getattr(model, "packed_head", None)
    if head is None:
        return model.logits(hidden_xD)
    return head(hidden_xD.astype(jnp.float32), n_in=1)
