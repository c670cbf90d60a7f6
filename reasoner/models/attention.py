"""Grouped-query self-attention with packing masks and a per-row KV cache.

Layouts: q [B, T, KV, G, Dh] (G = query heads per kv head, HF order: head h uses kv head h // G),
k/v [B, S, KV, Dh]. Scores `bngts` are computed per kv group, so k/v are never repeated.

Masking rule (same with or without cache): query at slot i of segment s attends to key slot j iff
`segment_j == s`, `s != 0` and `j <= i`, and, in a layer with a sliding window W > 0 (Mistral; Qwen2's upper
layers), `j > i - W` (transformers' `sliding_window_overlay`: W keys, the query's own included). Slots are
positions in the chunk (no cache) or in the cache (`cache.index_B[b] + t`). Segment 0 marks padding; its queries
attend to nothing useful (their output is finite garbage that callers ignore).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from reasoner.models.blocked_attention import blocked_attention, window_visible
from reasoner.models.config import ModelConfig
from reasoner.models.layers import Proj, RMSNorm
from reasoner.models.rope import apply_rope

__all__ = ["Attention", "attention_mask", "use_blocked", "window_visible", "write_rows"]


def attention_mask(q_seg_BxT, q_slot_BxT, kv_seg_BxS, kv_slot_S, *, window: int = 0) -> jax.Array:
    """[B, T, S] bool: same non-zero segment and causal in slot order (within `window` when > 0)."""
    same = (q_seg_BxT[:, :, None] == kv_seg_BxS[:, None, :]) & (q_seg_BxT[:, :, None] != 0)
    return same & window_visible(q_slot_BxT[:, :, None], kv_slot_S[None, None, :], window)


def use_blocked(cfg: ModelConfig, T: int, has_cache: bool) -> bool:
    """Whether a forward of T tokens takes `blocked_attention` (see `ModelConfig.attention`)."""
    if has_cache or cfg.attention == "dense":
        return False
    return cfg.attention == "blocked" or (T >= 128 and jax.default_backend() == "cpu")


def write_rows(cache_BxS_: jax.Array, chunk_BxT_: jax.Array, index_B: jax.Array) -> jax.Array:
    """Writes row b's chunk at slots `index_B[b] .. + T` of its cache row (any trailing dims: k/v [.., KV, Dh] or
    segment ids). A row whose chunk would run past the end writes nothing: `dynamic_update_slice` clamps its start,
    so the chunk would land on the last T slots over the row's earlier keys (`Decoder.hidden_states` returns NaN
    for that row instead). It writes back the slots it would clobber: the same in-place update as before, plus one
    select (on XLA:CPU as fast as a scatter with mode="drop", about twice a bare write of a few microseconds)."""
    T, S = chunk_BxT_.shape[1], cache_BxS_.shape[1]

    def one(cache_S_, chunk_T_, index):
        kept_T_ = jax.lax.dynamic_slice_in_dim(cache_S_, index, T, axis=0)  # the clamped window the write hits
        return jax.lax.dynamic_update_slice_in_dim(cache_S_, jnp.where(index + T <= S, chunk_T_, kept_T_), index,
                                                   axis=0)

    return jax.vmap(one)(cache_BxS_, chunk_BxT_.astype(cache_BxS_.dtype), index_B)


class Attention(nnx.Module):
    """Self-attention of one layer; optional q/k/v bias (Qwen2) and per-head q/k RMSNorm (Qwen3); `window`
    > 0: sliding-window attention (the caller's mask must be built with the same window: `self.window`)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, window: int = 0):
        pd, dt = cfg.param_dtype, cfg.dtype
        D, H, KV, Dh = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        kw = dict(rngs=rngs, param_dtype=pd, dtype=dt)
        self.q_proj = Proj((D,), (H, Dh), in_axes=("embed",), out_axes=("heads", "head_dim"), bias=cfg.qkv_bias, **kw)
        self.k_proj = Proj((D,), (KV, Dh), in_axes=("embed",), out_axes=("kv_heads", "head_dim"), bias=cfg.qkv_bias, **kw)
        self.v_proj = Proj((D,), (KV, Dh), in_axes=("embed",), out_axes=("kv_heads", "head_dim"), bias=cfg.qkv_bias, **kw)
        self.o_proj = Proj((H, Dh), (D,), in_axes=("heads", "head_dim"), out_axes=("embed",), bias=cfg.o_bias, **kw)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(Dh, eps=cfg.rms_norm_eps, axis_name="head_dim", rngs=rngs, param_dtype=pd)
            self.k_norm = RMSNorm(Dh, eps=cfg.rms_norm_eps, axis_name="head_dim", rngs=rngs, param_dtype=pd)
        else:
            self.q_norm = self.k_norm = None
        self.num_kv_heads, self.group = KV, cfg.group_size
        self.scale = Dh ** -0.5
        self.window = int(window)

    def __call__(self, x_BxTxD, *, cos, sin, mask_BxTxS, layer_cache=None, index_B=None, segment_ids_BxT=None):
        """Returns (out_BxTxD, (k_cache, v_cache) or None).

        mask_BxTxS: from `attention_mask` with this layer's `window`, computed once per forward for all layers
        of that window; None means the blocked path, which masks by `segment_ids_BxT` itself (no cache).
        layer_cache: None (keys = this chunk) or (k_BxSxKVxDh, v_BxSxKVxDh); the chunk is written
        at `index_B` per row.
        """
        B, T, _ = x_BxTxD.shape
        q = self.q_proj(x_BxTxD)  # [B, T, H, Dh]
        k = self.k_proj(x_BxTxD)  # [B, T, KV, Dh]
        v = self.v_proj(x_BxTxD)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if layer_cache is None:
            keys, values, new_cache = k, v, None
        else:
            keys, values = write_rows(layer_cache[0], k, index_B), write_rows(layer_cache[1], v, index_B)
            new_cache = (keys, values)
        qg = q.reshape(B, T, self.num_kv_heads, self.group, q.shape[-1])
        if mask_BxTxS is None:
            out = blocked_attention(qg, keys.astype(qg.dtype), values.astype(qg.dtype), segment_ids_BxT,
                                    scale=self.scale, window=self.window)
            return self.o_proj(out.reshape(B, T, -1, q.shape[-1])), new_cache
        scores = jnp.einsum("btngk,bsnk->bngts", qg, keys.astype(qg.dtype),
                            preferred_element_type=jnp.float32) * self.scale
        scores = jnp.where(mask_BxTxS[:, None, None], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(qg.dtype)
        out = jnp.einsum("bngts,bsnk->btngk", probs, values.astype(qg.dtype))
        out = out.reshape(B, T, -1, q.shape[-1])
        return self.o_proj(out), new_cache
