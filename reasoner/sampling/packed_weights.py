"""The rollout engine's decode weights: every projection and the vocabulary head also stored as column panels for
the native small-row matmul (`native.packed_matmul`).

    graphdef, state = for_decode(graphdef, state)   # the engine's jitted functions take these

A decode step multiplies one row per slot by every weight once; at those few rows XLA's GEMM runs far below the
machine's memory bandwidth (SmolLM2, 2 cores: the step's matmuls take 56.2 ms at 16 rows through XLA, 40.4 ms
packed; 27.8 and 26.1 ms at one row; `reasoner bench generate` reports its own). `for_decode` returns a copy of the
model in which each layer's q | k | v and gate | up projections are packed side by side as one `FusedPacked`
(`qkv` and `swiglu` apply them), the other projections' kernels are `PackedKernel`s, and which carries
`packed_head`, the tied or untied vocabulary head packed the same way; `paged_device` calls `head_logits` for the
logits. A `PackedKernel` (and each projection of a `FusedPacked`) keeps the float kernel beside its panels (the
same array as the caller's, no copy) and uses it for more than `MAX_ROWS` rows (prefills, wide speculative passes),
where XLA's blocked GEMM is the faster one (64 rows: 94.3 vs 97.9 ms; 48 rows: 90.5 vs 79.2 ms packed, 32 rows:
73.9 vs 58.6 ms).

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

from reasoner.models.attention import Attention
from reasoner.models.layers import Proj, SwiGLU, flat_dot
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
        self.panels = Panels(_pack_all(((w,),), (transposed,), (self.k,))[0] if panels is None else panels)

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


def _packable(proj) -> bool:
    """A projection `for_decode` packs: a float32 `Param` kernel (not quantized) applied in float32."""
    return (isinstance(proj, Proj) and isinstance(proj.kernel, nnx.Variable) and proj.kernel[...].dtype == jnp.float32
            and proj.kernel[...].ndim >= 2 and jnp.dtype(proj.dtype) == jnp.float32)


class FusedPacked(nnx.Module):
    """Projections of the same input packed side by side, as one matmul: a layer's q | k | v, its MLP's gate | up.

    Fewer, longer native calls and fewer XLA ops around them: SmolLM2 makes 121 calls a decode step instead of
    211, and the engine's 16-row step took 42.0 against 44.0 ms (medians of three runs, each pair side by side;
    equal at one row; AMD EPYC, 2 cores). The matmul chain alone runs the same either way, so the gain is in what
    surrounds the calls, not in the calls. The panels hold the kernels flattened to [in, out] and concatenated
    along out; the projections keep their float kernels (XLA's dot for more than `MAX_ROWS` rows) and add their
    own bias and LoRA update (`Proj.finish`)."""

    def __init__(self, projs, panels):
        self.k = math.prod(projs[0].in_shape)
        self.sizes = tuple(math.prod(p.out_shape) for p in projs)
        self.panels = Panels(panels)

    def __call__(self, x: jax.Array, projs) -> tuple[jax.Array, ...]:
        """Each of `projs` (the modules packed here, in order) applied to x [..., in], as its `__call__` would."""
        n_in = len(projs[0].in_shape)
        lead = x.shape[:x.ndim - n_in]
        rows = math.prod(lead)
        y = native.packed_matmul(x.reshape(rows, self.k).astype(jnp.float32), self.panels[...], sum(self.sizes))
        starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        return tuple(p.finish(x, y[:, a:a + n].reshape(lead + p.out_shape))
                     for p, a, n in zip(projs, starts, self.sizes))


def _fits(x: jax.Array, n_in: int) -> bool:
    return math.prod(x.shape[:x.ndim - n_in]) <= MAX_ROWS


def qkv(attn: Attention, h: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """attn's q, k and v projections of h [..., D]: one packed call where `for_decode` fused them and the rows fit,
    else the three projections."""
    projs = (attn.q_proj, attn.k_proj, attn.v_proj)
    fused = getattr(attn, "packed_qkv", None)
    if fused is None or not _fits(h, len(attn.q_proj.in_shape)):
        return tuple(p(h) for p in projs)
    return fused(h, projs)


def swiglu(mlp: SwiGLU, h: jax.Array) -> jax.Array:
    """mlp(h) for h [..., D], its gate and up projections as one packed call where `for_decode` fused them."""
    fused = getattr(mlp, "packed_gate_up", None)
    if fused is None or not _fits(h, len(mlp.gate_proj.in_shape)):
        return mlp(h)
    return mlp.combine(*fused(h, (mlp.gate_proj, mlp.up_proj)))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _pack_all(groups, transposed, k):
    """Every weight packed in one program (one pass over memory; eagerly, three ops a weight took ~1 s for SmolLM2):
    group i is weights [k_i, ...] each flattened to [k_i, n] and concatenated along n, or one weight stored
    [n_i, k_i] where `transposed[i]`."""
    return [native.pack(g[0].T if t else jnp.concatenate([w.reshape(ki, -1) for w in g], axis=1))
            for g, t, ki in zip(groups, transposed, k)]


def for_decode(graphdef, state):
    """(graphdef, state) of a copy of the model with packed projections and head (see the module docstring), or the
    arguments themselves where the native kernels do not run or nothing is float32."""
    if not native.available():
        return graphdef, state
    model = nnx.merge(graphdef, state)  # new module objects over the same arrays: the caller's model is untouched
    modules = [m for _, m in nnx.iter_modules(model)]
    fused = [(m, "packed_qkv", (m.q_proj, m.k_proj, m.v_proj)) if isinstance(m, Attention) else
             (m, "packed_gate_up", (m.gate_proj, m.up_proj)) for m in modules if isinstance(m, (Attention, SwiGLU))]
    fused = [f for f in fused if all(_packable(p) for p in f[2])]
    members = {id(p) for _, _, projs in fused for p in projs}
    single = [m for m in modules if _packable(m) and id(m) not in members]
    head = model.embed if model.lm_head is None else model.lm_head
    with_head = head[...].dtype == jnp.float32 and head[...].ndim == 2 and jnp.dtype(model.cfg.dtype) == jnp.float32
    if not (fused or single or with_head):
        return graphdef, state
    groups = [projs for _, _, projs in fused] + [(p,) for p in single]
    tied = model.lm_head is None
    weights = tuple(tuple(p.kernel[...] for p in g) for g in groups) + (((head[...],),) if with_head else ())
    transposed = (False,) * len(groups) + ((tied,) if with_head else ())
    k = tuple(math.prod(g[0].in_shape) for g in groups)
    k += (_in_size(head[...], 1, tied),) if with_head else ()
    panels = iter(_pack_all(weights, transposed, k))
    for (owner, name, projs), packed in zip(fused, panels):
        setattr(owner, name, FusedPacked(projs, packed))
    for p, packed in zip(single, panels):
        p.kernel = PackedKernel(p.kernel, n_in=len(p.in_shape), panels=packed)
    if with_head:
        model.packed_head = PackedKernel(head, transposed=tied, panels=next(panels))
    return nnx.split(model)


def head_logits(model, hidden_xD: jax.Array) -> jax.Array:
    """float32 logits [..., V] of hidden states [..., D]: the packed head where `for_decode` made one, else
    `model.logits`."""
    head = getattr(model, "packed_head", None)
    if head is None:
        return model.logits(hidden_xD)
    return head(hidden_xD.astype(jnp.float32), n_in=1)
