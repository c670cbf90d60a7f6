"""The Flax NNX decoder shared by Llama, Qwen2, Qwen3 and Mistral checkpoints.

Public API
----------
`Decoder(cfg, rngs=nnx.Rngs(0))` builds a randomly initialised model (use
`reasoner.models.load_model` for real weights).

`model(tokens_BxT, *, positions_BxT, segment_ids_BxT=None, cache=None) -> (logits_BxTxV, cache)`
  - `positions_BxT` int32: RoPE positions (restart at 0 for each packed document).
  - `segment_ids_BxT` int32: 0 = padding; tokens attend only to earlier tokens of the same
    segment (packing, left/right padding), and in sliding-window layers (`cfg.layer_window`) only to
    the last `window` slots. None = all ones.
  - `cache`: a `KVCache` from `init_cache` or None. With a cache, row b writes its T new keys at
    slots `cache.index_B[b] .. + T` and attends to every earlier valid slot of its segment; the
    returned cache has `index_B + T`. Rows may sit at different offsets (multi-turn continuation);
    set `cache.replace(index_B=...)` to write elsewhere. Logits are float32. Writing past the cache's
    `max_len` raises ValueError where the offsets are concrete (eager calls; the chunk length always); under
    jit a row whose chunk runs past the end writes nothing and its logits are NaN (`check_room`).
`model.hidden_states(...)` is the same call without the vocabulary projection, returning
(hidden_BxTxD, cache); `model.logits(hidden)` projects. Trainers use them to compute
log-probs chunk by chunk.

Pure-function use (DESIGN: split at the jit boundary):
    graphdef, state = nnx.split(model)
    @jax.jit
    def f(state, tokens, positions):
        return nnx.merge(graphdef, state)(tokens, positions_BxT=positions)[0]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from reasoner.models.attention import Attention, attention_mask, use_blocked, write_rows
from reasoner.models.config import ModelConfig
from reasoner.models.layers import RMSNorm, SwiGLU, make_param
from reasoner.models.rope import inverse_frequencies, rope_tables


@struct.dataclass
class KVCache:
    """Per-layer keys/values [B, S, KV, Dh] (post-RoPE), slot segment ids [B, S] (0 = empty or
    padding) and the next write offset of each row [B]."""

    k: tuple
    v: tuple
    segment_ids_BxS: jax.Array
    index_B: jax.Array

    @property
    def max_len(self) -> int:
        return self.segment_ids_BxS.shape[1]


def init_cache(cfg: ModelConfig, *, batch: int, max_len: int, dtype=None) -> KVCache:
    """An empty cache; `dtype` defaults to the compute dtype."""
    dtype = dtype or cfg.dtype
    shape = (batch, max_len, cfg.num_kv_heads, cfg.head_dim)
    zeros = lambda: jnp.zeros(shape, dtype)  # noqa: E731
    return KVCache(
        k=tuple(zeros() for _ in range(cfg.num_layers)),
        v=tuple(zeros() for _ in range(cfg.num_layers)),
        segment_ids_BxS=jnp.zeros((batch, max_len), jnp.int32),
        index_B=jnp.zeros((batch,), jnp.int32),
    )


def check_room(cache: KVCache, new_tokens: int) -> None:
    """Raises ValueError when writing `new_tokens` per row would run past the cache's `max_len` slots.

    The chunk length is static and always checked; the row offsets `cache.index_B` only when they are concrete
    and readable by this process (eager calls). Under jit they are traced: `Decoder.hidden_states` then drops the
    overflowing rows' writes and returns NaN for their whole chunk."""
    S = cache.max_len
    if new_tokens > S:
        raise ValueError(f"a chunk of {new_tokens} new tokens does not fit a KV cache of {S} slots; "
                         f"allocate init_cache(max_len >= prompt + new tokens)")
    index = cache.index_B
    if isinstance(index, jax.core.Tracer) or (isinstance(index, jax.Array) and not index.is_fully_addressable):
        return  # traced, or spread over other processes (not readable here without a collective)
    held = np.asarray(index)
    over = np.flatnonzero(held + new_tokens > S)
    if over.size:
        b = int(over[0])
        raise ValueError(f"row {b}: its {int(held[b])} cached (prompt) tokens + {new_tokens} new tokens = "
                         f"{int(held[b]) + new_tokens} exceed the KV cache length {S}; allocate "
                         f"init_cache(max_len >= {int(held.max()) + new_tokens}) or write fewer tokens")


# Logical axes of cache arrays, for `reasoner.sharding.logical_sharding`.
CACHE_KV_AXES = ("batch", "cache_seq", "kv_heads", "head_dim")
CACHE_SEG_AXES = ("batch", "cache_seq")


class Block(nnx.Module):
    """Pre-norm transformer layer: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, window: int = 0):
        kw = dict(eps=cfg.rms_norm_eps, axis_name="embed", rngs=rngs, param_dtype=cfg.param_dtype)
        self.attn_norm = RMSNorm(cfg.hidden_size, **kw)
        self.attn = Attention(cfg, rngs=rngs, window=window)
        self.mlp_norm = RMSNorm(cfg.hidden_size, **kw)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size, rngs=rngs,
                          param_dtype=cfg.param_dtype, dtype=cfg.dtype)

    def __call__(self, x, cos, sin, mask_BxTxS, layer_cache, index_B, segment_ids_BxT=None):
        a, new_cache = self.attn(self.attn_norm(x), cos=cos, sin=sin, mask_BxTxS=mask_BxTxS,
                                 layer_cache=layer_cache, index_B=index_B, segment_ids_BxT=segment_ids_BxT)
        x = x + a
        return x + self.mlp(self.mlp_norm(x)), new_cache


class Decoder(nnx.Module):
    """Token embedding, `num_layers` Blocks, final RMSNorm, tied or separate LM head."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed = make_param(rngs, (cfg.vocab_size, cfg.hidden_size), ("vocab", "embed"), dtype=cfg.param_dtype)
        self.layers = nnx.List([Block(cfg, rngs=rngs, window=cfg.layer_window(i)) for i in range(cfg.num_layers)])
        self.final_norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, axis_name="embed", rngs=rngs,
                                  param_dtype=cfg.param_dtype)
        self.lm_head = None if cfg.tie_embeddings else make_param(
            rngs, (cfg.hidden_size, cfg.vocab_size), ("embed", "vocab"), dtype=cfg.param_dtype)
        # a tuple keeps it static (hashable) in the graphdef rather than a traced leaf
        self.inv_freq = tuple(float(f) for f in inverse_frequencies(cfg))

    def hidden_states(self, tokens_BxT, *, positions_BxT, segment_ids_BxT=None, cache: KVCache | None = None):
        """(hidden_BxTxD after the final norm, updated cache or None)."""
        cfg = self.cfg
        tokens_BxT = jnp.asarray(tokens_BxT, jnp.int32)
        if segment_ids_BxT is None:
            segment_ids_BxT = jnp.ones(tokens_BxT.shape, jnp.int32)
        segment_ids_BxT = jnp.asarray(segment_ids_BxT, jnp.int32)
        x = jnp.take(self.embed[...], tokens_BxT, axis=0).astype(cfg.dtype)
        cos, sin = rope_tables(jnp.asarray(positions_BxT), self.inv_freq)
        B, T = tokens_BxT.shape
        q_slot_BxT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (B, T))
        if cache is None:
            index_B, kv_seg = None, segment_ids_BxT
        else:
            check_room(cache, T)
            index_B = cache.index_B
            kv_seg = write_rows(cache.segment_ids_BxS, segment_ids_BxT, index_B)
            q_slot_BxT = q_slot_BxT + index_B[:, None]
        # one mask per distinct window for all layers (None: the blocked path masks by segment ids itself)
        blocked = use_blocked(cfg, T, cache is not None)
        kv_slot = jnp.arange(kv_seg.shape[1], dtype=jnp.int32)
        masks = {w: None if blocked else attention_mask(segment_ids_BxT, q_slot_BxT, kv_seg, kv_slot, window=w)
                 for w in {block.attn.window for block in self.layers}}
        new_k, new_v = [], []
        for i, block in enumerate(self.layers):
            layer_cache = None if cache is None else (cache.k[i], cache.v[i])
            mask_BxTxS = masks[block.attn.window]
            if cfg.remat:
                x, lc = nnx.remat(lambda b, *a: b(*a))(block, x, cos, sin, mask_BxTxS, layer_cache, index_B,
                                                       segment_ids_BxT)
            else:
                x, lc = block(x, cos, sin, mask_BxTxS, layer_cache, index_B, segment_ids_BxT)
            if lc is not None:
                new_k.append(lc[0])
                new_v.append(lc[1])
        x = self.final_norm(x)
        if cache is None:
            return x, None
        # Traced offsets cannot be checked on the host: a row whose chunk runs past the cache wrote nothing
        # (`write_rows`) and its hidden states are NaN, so the overflow shows instead of passing as wrong numbers.
        x = jnp.where((index_B + T <= cache.max_len)[:, None, None], x, jnp.nan)
        return x, KVCache(k=tuple(new_k), v=tuple(new_v), segment_ids_BxS=kv_seg, index_B=index_B + T)

    def logits(self, hidden_BxTxD) -> jax.Array:
        """float32 logits [B, T, V]."""
        dt = self.cfg.dtype
        # One [rows, D] x [D, V] GEMM (see `layers.flat_dot`: a [B, T] lhs makes the backward slow on CPU).
        lead, d = hidden_BxTxD.shape[:-1], hidden_BxTxD.shape[-1]
        h = hidden_BxTxD.reshape(-1, d).astype(dt)
        if self.lm_head is None:
            out = jnp.einsum("nd,vd->nv", h, self.embed[...].astype(dt), preferred_element_type=jnp.float32)
        else:
            out = jnp.dot(h, self.lm_head[...].astype(dt), preferred_element_type=jnp.float32)
        return out.reshape(lead + (out.shape[-1],))

    def __call__(self, tokens_BxT, *, positions_BxT, segment_ids_BxT=None, cache: KVCache | None = None):
        h, cache = self.hidden_states(tokens_BxT, positions_BxT=positions_BxT, segment_ids_BxT=segment_ids_BxT,
                                      cache=cache)
        return self.logits(h), cache
