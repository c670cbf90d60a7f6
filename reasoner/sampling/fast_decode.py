"""The one-token decode step, specialised for the sampler's loop.

The decoder's general forward keeps its cache as [B, S, KV, Dh]; its attention contracts over
(b, kv head), so XLA transposes every layer's whole cache into [B, KV, S, Dh] on every decode step (seen in
the optimised HLO; here cache handling and attention took roughly 30% of a batch-16 step). The sampler keeps
its cache heads-major, [B, KV, S, Dh], so both attention contractions read it in place. The vocabulary
projection is `Decoder.logits`, which multiplies by a tied embedding as it is stored, [V, D]: with only B rows
XLA:CPU streams that orientation faster than a transposed [D, V] copy (batch-16 SmolLM2 head 6.4 vs 10.5 ms
isolated; 8.0 vs 11.9 ms a step inside the decode loop), and no copy is kept.

Everything else (projections with their LoRA adapters, q/k norms, RoPE, MLP, norms) is the
decoder's own modules, called in the same order as `Decoder.hidden_states`; the tests compare the
result with the plain forward and with transformers.

Conversions between the two layouts (`to_heads_major`, `to_decoder_layout`) happen only at
prefill and continuation, never per token.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from reasoner.models.attention import window_visible
from reasoner.models.decoder import KVCache
from reasoner.models.rope import apply_rope, rope_tables
from reasoner.sampling import packed_weights


def to_heads_major(x_BxSxKVxDh: jax.Array) -> jax.Array:
    return jnp.swapaxes(x_BxSxKVxDh, 1, 2)


to_decoder_layout = to_heads_major  # the same swap in the other direction


def swap_cache_layout(cache: KVCache) -> KVCache:
    """Decoder layout <-> heads-major layout, every layer."""
    return cache.replace(k=tuple(to_heads_major(k) for k in cache.k), v=tuple(to_heads_major(v) for v in cache.v))


def _write(cache_BxKVxSxDh: jax.Array, new_BxKVxDh: jax.Array, index_B: jax.Array) -> jax.Array:
    return jax.vmap(lambda c, u, i: jax.lax.dynamic_update_slice(c, u[:, None, :], (0, i, 0)))(
        cache_BxKVxSxDh, new_BxKVxDh.astype(cache_BxKVxSxDh.dtype), index_B)


def layer_qkv(block, x_BxTxD: jax.Array, cos, sin):
    """q [B, T, H, Dh], k and v [B, T, KV, Dh] of one decoder layer for new tokens: its attention norm, the q/k/v
    projections (with their LoRA adapters), the per-head q/k norms (Qwen3) and RoPE, in `Attention.__call__`'s order
    (shared by this decode step and the paged one)."""
    attn = block.attn
    h = block.attn_norm(x_BxTxD)
    q, k, v = packed_weights.qkv(attn, h)  # the three projections, or one call where `for_decode` fused them
    if attn.q_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def decode_logits(model, tokens_B: jax.Array, cache: KVCache):
    """Feeds one token per row at slot/position `cache.index_B`; returns (logits_BxV f32, cache).

    `cache` is heads-major. The returned cache has the new keys written but `index_B` unchanged
    (the caller advances the rows it chooses).
    """
    cfg = model.cfg
    index_B = cache.index_B
    B = tokens_B.shape[0]
    S = cache.segment_ids_BxS.shape[1]
    x = jnp.take(model.embed[...], tokens_B, axis=0).astype(cfg.dtype)[:, None, :]  # [B, 1, D]
    cos, sin = rope_tables(index_B[:, None], model.inv_freq)
    seg = jax.vmap(lambda s, i: jax.lax.dynamic_update_slice(s, jnp.ones((1,), s.dtype), (i,)))(
        cache.segment_ids_BxS, index_B)
    slots_1xS = jnp.arange(S, dtype=jnp.int32)[None, :]
    valid_BxS = (seg != 0) & (slots_1xS <= index_B[:, None])
    new_k, new_v = [], []
    for i, block in enumerate(model.layers):
        attn = block.attn
        q, k, v = layer_qkv(block, x, cos, sin)  # [B, 1, H|KV, Dh]
        k_cache, v_cache = _write(cache.k[i], k[:, 0], index_B), _write(cache.v[i], v[:, 0], index_B)
        new_k.append(k_cache)
        new_v.append(v_cache)
        qg = q[:, 0].reshape(B, attn.num_kv_heads, attn.group, q.shape[-1])  # [B, KV, G, Dh]
        scores = jnp.einsum("bngk,bnsk->bngs", qg, k_cache.astype(qg.dtype),
                            preferred_element_type=jnp.float32) * attn.scale
        visible_BxS = valid_BxS & window_visible(index_B[:, None], slots_1xS, attn.window)  # sliding-window layers
        scores = jnp.where(visible_BxS[:, None, None, :], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(qg.dtype)
        out = jnp.einsum("bngs,bnsk->bngk", probs, v_cache.astype(qg.dtype))
        x = x + attn.o_proj(out.reshape(B, 1, -1, q.shape[-1]))
        x = x + block.mlp(block.mlp_norm(x))
    logits = model.logits(model.final_norm(x)[:, 0])
    return logits, cache.replace(k=tuple(new_k), v=tuple(new_v), segment_ids_BxS=seg)
