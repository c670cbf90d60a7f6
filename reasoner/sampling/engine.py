"""The device side of the sampler: jitted prefill, decode chunks and continuation prefill.

All three are pure functions of (graphdef, params, DecodeState, ...) compiled once per shape:
  - `prefill`: P unique prompts right-padded to a bucket T -> their KV cache and the logits of each
    prompt's last token; the cache is repeated to B = P * n rows (n samples share one prefill)
    and padded to the full cache length; each row then draws its first token.
  - `decode_chunk`: up to `num_steps` decode steps in one `lax.while_loop` that exits early when
    every row is done. Each step feeds every row's pending token (sampled, not yet in the cache)
    at its own cache slot `index_B[b]`, draws the next token and records it. Done rows keep
    feeding their pending token at the same slot (never advancing), which is harmless: that slot
    is beyond their history and is what a continuation writes there anyway.
  - `extend`: a chunk of appended tokens (tool responses) per row, written at each row's offset
    from the existing cache (nothing is prefilled again); rows whose last chunk it is then draw
    their first new token.

The state is donated into every call, so the cache is updated in place, never copied.

Finish codes on the device: RUNNING, EOS, LENGTH (max_new_tokens reached or the cache full);
stop strings are detected on the host between chunks (`reasoner.sampling.session`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx, struct

from reasoner.models.decoder import KVCache
from reasoner.sampling.fast_decode import decode_logits, swap_cache_layout, to_heads_major
from reasoner.sampling.processors import DecodeSpec, choose_tokens

RUNNING, EOS, LENGTH = 0, 1, 2


@struct.dataclass
class DecodeState:
    """Everything a decode chunk reads and writes (B rows, N = max new tokens of the turn).

    cache: KV cache of `alloc_len` slots, heads-major [B, KV, S, Dh] (see `fast_decode`);
      `index_B` is each row's length (= next write slot = RoPE position of the pending token).
    pending_B: the last drawn token of each row, not yet written to the cache.
    count_B / limit_B: tokens drawn this turn / allowed this turn.
    tokens_BxN, sample_logp_BxN, model_logp_BxN: this turn's draws.
    keys_B: per-row PRNG keys. done_B / finish_B: row finished and why (RUNNING, EOS, LENGTH).
    max_len: cache slots a row may fill (slots beyond it are scratch for padded continuation).
    """

    cache: KVCache
    pending_B: jax.Array
    count_B: jax.Array
    limit_B: jax.Array
    tokens_BxN: jax.Array
    sample_logp_BxN: jax.Array
    model_logp_BxN: jax.Array
    keys_B: jax.Array
    done_B: jax.Array
    finish_B: jax.Array
    eos_ids_E: jax.Array
    temperature: jax.Array
    top_p: jax.Array
    max_len: int = struct.field(pytree_node=False)


def _record(state: DecodeState, tokens_B, sample_logp_B, model_logp_B, active_B) -> DecodeState:
    """Stores this step's draws for active rows and updates their done flags."""
    N = state.tokens_BxN.shape[1]
    at_count = (jnp.arange(N, dtype=jnp.int32)[None, :] == state.count_B[:, None]) & active_B[:, None]
    count = state.count_B + active_B.astype(jnp.int32)
    hit_eos = jnp.any(tokens_B[:, None] == state.eos_ids_E[None, :], axis=-1)
    # The pending token needs a free slot to be fed: a row whose cache is full stops here.
    out_of_room = (count >= state.limit_B) | (state.cache.index_B >= state.max_len)
    finish = jnp.where(active_B & hit_eos, EOS, jnp.where(active_B & out_of_room, LENGTH, state.finish_B))
    return state.replace(
        pending_B=jnp.where(active_B, tokens_B, state.pending_B),
        count_B=count,
        tokens_BxN=jnp.where(at_count, tokens_B[:, None], state.tokens_BxN),
        sample_logp_BxN=jnp.where(at_count, sample_logp_B[:, None], state.sample_logp_BxN),
        model_logp_BxN=jnp.where(at_count, model_logp_B[:, None], state.model_logp_BxN),
        done_B=state.done_B | (active_B & (hit_eos | out_of_room)),
        finish_B=finish.astype(jnp.int32),
    )


def _empty_cache(*, num_layers, batch, alloc_len, kv_heads, head_dim, dtype, kv_sharding=None) -> KVCache:
    shape = (batch, alloc_len, kv_heads, head_dim)

    def zeros():
        z = jnp.zeros(shape, dtype)
        return z if kv_sharding is None else jax.lax.with_sharding_constraint(z, kv_sharding)

    return KVCache(k=tuple(zeros() for _ in range(num_layers)), v=tuple(zeros() for _ in range(num_layers)),
                   segment_ids_BxS=jnp.zeros(shape[:2], jnp.int32), index_B=jnp.zeros((batch,), jnp.int32))


@functools.partial(jax.jit, static_argnames=("graphdef", "spec", "n", "max_len", "alloc_len", "max_new",
                                             "kv_sharding"))
def prefill(graphdef, params, tokens_PxT, segment_ids_PxT, lengths_P, keys_B, eos_ids_E, temperature, top_p,
            limit, *, spec: DecodeSpec, n: int, max_len: int, alloc_len: int, max_new: int, kv_sharding=None):
    """Prefills P prompts once and returns the DecodeState of their B = P*n rows (first token drawn)."""
    model = nnx.merge(graphdef, params)
    cfg = model.cfg
    P, T = tokens_PxT.shape
    small = _empty_cache(num_layers=cfg.num_layers, batch=P, alloc_len=T, kv_heads=cfg.num_kv_heads,
                         head_dim=cfg.head_dim, dtype=cfg.dtype)
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (P, T))
    hidden_PxTxD, small = model.hidden_states(tokens_PxT, positions_BxT=positions, segment_ids_BxT=segment_ids_PxT,
                                              cache=small)
    # Only the last real token's logits are needed: project one position per prompt, not T.
    last_PxD = jnp.take_along_axis(hidden_PxTxD, (lengths_P - 1)[:, None, None], axis=1)
    logits_BxV = jnp.repeat(model.logits(last_PxD)[:, 0], n, axis=0)

    def widen(x_PxTxKxD):  # share the prompt cache among the n samples, pad to the full length
        x = jnp.pad(jnp.repeat(to_heads_major(x_PxTxKxD), n, axis=0), ((0, 0), (0, 0), (0, alloc_len - T), (0, 0)))
        return x if kv_sharding is None else jax.lax.with_sharding_constraint(x, kv_sharding)

    lengths_B = jnp.repeat(lengths_P, n)
    cache = KVCache(
        k=tuple(widen(k) for k in small.k), v=tuple(widen(v) for v in small.v),
        segment_ids_BxS=jnp.pad(jnp.repeat(segment_ids_PxT, n, axis=0), ((0, 0), (0, alloc_len - T))),
        index_B=lengths_B,
    )
    B = P * n
    state = DecodeState(
        cache=cache, pending_B=jnp.zeros((B,), jnp.int32), count_B=jnp.zeros((B,), jnp.int32),
        limit_B=jnp.full((B,), limit, jnp.int32),
        tokens_BxN=jnp.zeros((B, max_new), jnp.int32), sample_logp_BxN=jnp.zeros((B, max_new), jnp.float32),
        model_logp_BxN=jnp.zeros((B, max_new), jnp.float32), keys_B=keys_B,
        done_B=jnp.zeros((B,), bool), finish_B=jnp.zeros((B,), jnp.int32), eos_ids_E=eos_ids_E,
        temperature=jnp.asarray(temperature, jnp.float32), top_p=jnp.asarray(top_p, jnp.float32), max_len=max_len,
    )
    drawn = choose_tokens(logits_BxV, keys_B, lengths_B, spec=spec, temperature=state.temperature, top_p=state.top_p)
    return _record(state, *drawn, jnp.ones((B,), bool))


def _step(model, spec: DecodeSpec, state: DecodeState) -> DecodeState:
    """One decode step for every row (done rows compute too, but change nothing of theirs)."""
    active = ~state.done_B
    index = state.cache.index_B
    logits_BxV, cache = decode_logits(model, state.pending_B, state.cache)
    new_index = jnp.where(active, index + 1, index)
    state = state.replace(cache=cache.replace(index_B=new_index))
    drawn = choose_tokens(logits_BxV, state.keys_B, new_index, spec=spec, temperature=state.temperature,
                          top_p=state.top_p)
    return _record(state, *drawn, active)


@functools.partial(jax.jit, static_argnames=("graphdef", "spec"), donate_argnums=(2,))
def decode_chunk(graphdef, params, state: DecodeState, num_steps, *, spec: DecodeSpec) -> DecodeState:
    """Runs up to `num_steps` decode steps (a traced int: any chunk size, one compile)."""
    model = nnx.merge(graphdef, params)

    def cond(carry):
        step, s = carry
        return (step < num_steps) & ~jnp.all(s.done_B)

    def body(carry):
        step, s = carry
        return step + 1, _step(model, spec, s)

    _, state = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), state))
    return state


@functools.partial(jax.jit, static_argnames=("graphdef", "spec", "max_new"), donate_argnums=(2,))
def extend(graphdef, params, state: DecodeState, tokens_BxC, lengths_B, draw_B, limit_B, *, spec: DecodeSpec,
           max_new: int) -> DecodeState:
    """Writes `lengths_B[b]` appended tokens of row b at its offset (rows with 0 write only padding,
    into slots they do not own yet). Rows with `draw_B` start a new turn of up to `limit_B` tokens:
    their first token is drawn from the logits of their last appended token."""
    model = nnx.merge(graphdef, params)
    B, C = tokens_BxC.shape
    cache = state.cache
    index = cache.index_B
    slots = jnp.arange(C, dtype=jnp.int32)[None, :]
    segments = (slots < lengths_B[:, None]).astype(jnp.int32)
    # Continuations are rare (once per turn): the general forward on the decoder's layout.
    hidden, cache = model.hidden_states(tokens_BxC, positions_BxT=index[:, None] + slots, segment_ids_BxT=segments,
                                        cache=swap_cache_layout(cache))
    cache = swap_cache_layout(cache)
    last = jnp.take_along_axis(hidden, jnp.maximum(lengths_B - 1, 0)[:, None, None], axis=1)
    logits_BxV = model.logits(last)[:, 0]
    new_index = index + lengths_B
    # A new turn starts with fresh output buffers (N may differ from the previous turn).
    state = state.replace(
        cache=cache.replace(index_B=new_index),
        count_B=jnp.where(draw_B, 0, state.count_B), limit_B=jnp.where(draw_B, limit_B, state.limit_B),
        tokens_BxN=jnp.zeros((B, max_new), jnp.int32), sample_logp_BxN=jnp.zeros((B, max_new), jnp.float32),
        model_logp_BxN=jnp.zeros((B, max_new), jnp.float32),
        done_B=state.done_B & ~draw_B, finish_B=jnp.where(draw_B, RUNNING, state.finish_B),
    )
    drawn = choose_tokens(logits_BxV, state.keys_B, new_index, spec=spec, temperature=state.temperature,
                          top_p=state.top_p)
    return _record(state, *drawn, draw_B)
