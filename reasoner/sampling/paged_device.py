"""The device side of the rollout engine: jitted prefill into slots and paged decode chunks.

State (`SlotState`) is slot-major: S decode slots, each holding one row (one sample of one request)
or idle. Three jitted functions, all donating the state so pools are updated in place:

  - `prefill_into_slots`: P prompts right-padded to a bucket T go through the decoder's general
    forward once (as `engine.prefill` does); their keys/values are scattered into the pool by a
    host-built plan (`paged_cache.prompt_writes`: full prompt blocks once, the partial last block
    once per sample); then each of the R new rows draws its first token and is written into its
    slot (padding rows target slot S and are dropped).
  - `decode_chunk`: up to `num_steps` steps of the running slots (a bucket of A slots) inside one
    `lax.while_loop` that exits early when all of them are done. A step writes each slot's pending
    token at its position through the block table and attends over the slot's first J blocks only,
    J a static bucket the host picks from the longest live row (the table is passed sliced): the
    step's work follows the number of live rows and their lengths, not the slots and capacity.
  - `extend_slots`: KV continuation (multi-turn sessions): A slots' appended tokens (a bucket C per row,
    the row's last drawn token first) go through one multi-token paged forward at positions [L, L+k)
    that writes them through the block tables and attends causally over each slot's first J blocks;
    each row then draws its first token of the new turn and its count/limit/done/token buffers restart.
  - `retire`: marks slots done (stop strings found on the host, or freed slots).

With `speculate=k`, a decode step may verify up to k prompt-lookup draft tokens per slot in one multi-token
forward (`paged_forward`, the continuation's) and keep 1 to k+1 tokens; what it keeps is what plain steps would
have drawn (`speculative`).

Finish codes are the static sampler's (`engine.RUNNING/EOS/LENGTH`); tokens, both log-probs and the
PRNG scheme (`fold_in(row key, position)`) are the same too, so a row's output does not depend on
which slot it ran in or what ran beside it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx, struct

from reasoner.models.attention import window_visible
from reasoner.models.decoder import KVCache
from reasoner.models.rope import rope_tables
from reasoner.sampling.engine import EOS, LENGTH, RUNNING
from reasoner.sampling import native, packed_weights
from reasoner.sampling.fast_decode import layer_qkv
from reasoner.sampling.paged_cache import NULL_BLOCK, PagedPools, head_blocks, write_tokens
from reasoner.sampling.processors import DecodeSpec, choose_tokens
from reasoner.sampling.speculative import propose


@struct.dataclass
class SlotState:
    """S slots, N = the longest token budget any row may have.

    pools: the paged KV cache. length_S: the position of each slot's pending token (= tokens in
    its cache). pending_S: last drawn token, not yet in the cache. count_S / limit_S: tokens
    drawn / allowed. capacity_S: positions the row may fill (a row whose pending token would sit at
    `capacity` stops with LENGTH). keys_Sx2: raw PRNG key data per slot. done_S / finish_S.
    context_SxW: the token at each position of the slot (prompt, appended and drawn tokens, the pending one
    included) for the first W positions, what speculative decoding drafts from (`speculative`); W is 1 when the
    engine does not speculate (writes past W are dropped). passes: decode forward passes run; accepted: draft tokens
    kept (over all rows; a speculating pass keeps 1 + its row's accepted draft tokens).
    """

    pools: PagedPools
    length_S: jax.Array
    pending_S: jax.Array
    count_S: jax.Array
    limit_S: jax.Array
    capacity_S: jax.Array
    keys_Sx2: jax.Array
    done_S: jax.Array
    finish_S: jax.Array
    tokens_SxN: jax.Array
    sample_logp_SxN: jax.Array
    model_logp_SxN: jax.Array
    context_SxW: jax.Array
    eos_ids_E: jax.Array
    temperature: jax.Array
    top_p: jax.Array
    passes: jax.Array
    accepted: jax.Array


def empty_state(pools: PagedPools, *, slots: int, max_new: int, eos_ids_E, temperature: float, top_p: float,
                key_width: int, context: int = 1) -> SlotState:
    S, N = slots, max_new
    zi = lambda *shape: jnp.zeros(shape, jnp.int32)  # noqa: E731
    return SlotState(
        pools=pools, length_S=zi(S), pending_S=zi(S), count_S=zi(S), limit_S=zi(S), capacity_S=zi(S),
        keys_Sx2=jnp.zeros((S, key_width), jnp.uint32), done_S=jnp.ones((S,), bool), finish_S=zi(S),
        tokens_SxN=zi(S, N), sample_logp_SxN=jnp.zeros((S, N), jnp.float32),
        model_logp_SxN=jnp.zeros((S, N), jnp.float32), context_SxW=zi(S, context),
        eos_ids_E=jnp.asarray(eos_ids_E, jnp.int32), temperature=jnp.asarray(temperature, jnp.float32),
        top_p=jnp.asarray(top_p, jnp.float32), passes=jnp.zeros((), jnp.int32), accepted=jnp.zeros((), jnp.int32))


def _keys(state: SlotState):
    return jax.random.wrap_key_data(state.keys_Sx2)


def _record(state: SlotState, tokens_S, sample_logp_S, model_logp_S, active_S) -> SlotState:
    """Stores this step's draws of the active slots and updates their done flags (as `engine._record`)."""
    N = state.tokens_SxN.shape[1]
    at_count = (jnp.arange(N, dtype=jnp.int32)[None, :] == state.count_S[:, None]) & active_S[:, None]
    count = state.count_S + active_S.astype(jnp.int32)
    hit_eos = jnp.any(tokens_S[:, None] == state.eos_ids_E[None, :], axis=-1)
    out_of_room = (count >= state.limit_S) | (state.length_S >= state.capacity_S)
    finish = jnp.where(active_S & hit_eos, EOS, jnp.where(active_S & out_of_room, LENGTH, state.finish_S))
    S, W = state.context_SxW.shape
    at = jnp.where(active_S, state.length_S, W)  # the drawn token's position; inactive rows write nothing
    return state.replace(
        context_SxW=state.context_SxW.at[jnp.arange(S), at].set(tokens_S, mode="drop"),
        pending_S=jnp.where(active_S, tokens_S, state.pending_S), count_S=count,
        tokens_SxN=jnp.where(at_count, tokens_S[:, None], state.tokens_SxN),
        sample_logp_SxN=jnp.where(at_count, sample_logp_S[:, None], state.sample_logp_SxN),
        model_logp_SxN=jnp.where(at_count, model_logp_S[:, None], state.model_logp_SxN),
        done_S=state.done_S | (active_S & (hit_eos | out_of_room)), finish_S=finish.astype(jnp.int32))


def _rope_in_blocks(model, positions_AxC, room: int):
    """RoPE's (cos, sin) [A, C, Dh/2] at `positions_AxC`, looked up in a table of the `room` positions a slot's
    blocks hold: the table does not depend on the step, so inside a decode chunk XLA computes it once, outside the
    loop; computed from the positions themselves, XLA fused the cos and sin into each layer's q and k rotation, 2L
    evaluations a step (engine step at 16 rows, AMD EPYC 2 cores: 40.7 vs 45.2 ms, medians of three paired runs).
    Same values: the same function of the same positions. A position past the table (only a done row writing past
    its capacity, or padding, whose outputs are discarded) reads the last entry."""
    cos_P, sin_P = rope_tables(jnp.arange(room, dtype=jnp.int32)[None], model.inv_freq)
    at = jnp.minimum(positions_AxC, room - 1)
    return jnp.take(cos_P[0], at, axis=0), jnp.take(sin_P[0], at, axis=0)


def paged_decode_logits(model, tokens_S, positions_S, table_SxJ, pools: PagedPools):
    """Feeds one token per slot at `positions_S` through the block table; returns (logits_SxV f32, pools).

    Attention reads the J blocks of `table_SxJ` per slot and masks positions after the slot's own (and, in
    sliding-window layers, those `attn.window` or more before it).
    A position whose block column is outside the J columns (only done rows, writing past their
    capacity) is redirected to the null block.
    """
    cfg = model.cfg
    S, J = table_SxJ.shape
    bs = pools.block_size
    x = jnp.take(model.embed[...], tokens_S, axis=0).astype(cfg.dtype)[:, None, :]  # [S, 1, D]
    cos, sin = _rope_in_blocks(model, positions_S[:, None], J * bs)
    col = positions_S // bs
    block_S = jnp.where(col < J, jnp.take_along_axis(table_SxJ, jnp.minimum(col, J - 1)[:, None], axis=1)[:, 0],
                        NULL_BLOCK)
    offset_S = positions_S % bs
    new_k, new_v = [], []
    for i, block in enumerate(model.layers):
        attn = block.attn
        q, k, v = layer_qkv(block, x, cos, sin)  # [S, 1, H|KV, Dh]
        kp = write_tokens(pools.k[i], jnp.swapaxes(k[:, 0], 0, 1), block_S, offset_S)
        vp = write_tokens(pools.v[i], jnp.swapaxes(v[:, 0], 0, 1), block_S, offset_S)
        new_k.append(kp)
        new_v.append(vp)
        x = x + attn.o_proj(_paged_attention(attn, q, kp, vp, table_SxJ, positions_S[:, None]))  # one query a slot
        x = x + packed_weights.swiglu(block.mlp, block.mlp_norm(x))
    logits = packed_weights.head_logits(model, model.final_norm(x)[:, 0])
    return logits, PagedPools(k=tuple(new_k), v=tuple(new_v))


def _native(q, pool) -> bool:
    """Whether this attention runs as the fused native CPU kernel (`reasoner.sampling.native`): float32 on a CPU
    where it builds, unless `REASONER_NATIVE=0`. Decided at trace time; both paths compute the same attention."""
    return q.dtype == jnp.float32 and pool.dtype == jnp.float32 and native.available()


def _step(model, spec: DecodeSpec, table_SxJ, state: SlotState) -> SlotState:
    active = ~state.done_S
    logits, pools = paged_decode_logits(model, state.pending_S, state.length_S, table_SxJ, state.pools)
    length = jnp.where(active, state.length_S + 1, state.length_S)
    state = state.replace(pools=pools, length_S=length)
    drawn = choose_tokens(logits, _keys(state), length, spec=spec, temperature=state.temperature, top_p=state.top_p)
    return _record(state, *drawn, active)


_PER_SLOT = ("length_S", "pending_S", "count_S", "limit_S", "capacity_S", "keys_Sx2", "done_S", "finish_S",
             "tokens_SxN", "sample_logp_SxN", "model_logp_SxN", "context_SxW")


def _verify_step(model, spec: DecodeSpec, table_SxJ, state: SlotState, draft_SxK, count_S) -> SlotState:
    """One speculative step (`speculative`): each slot feeds its pending token and its `count_S` draft tokens at
    positions L .. L+count in one paged forward, draws a token at every position as `_step` would, and keeps the
    draws up to the first one that differs from the draft (1 to count+1 tokens; EOS, budget and capacity stop a row
    exactly where a plain step would)."""
    S, K = draft_SxK.shape
    C = K + 1
    active = ~state.done_S
    steps_1xC = jnp.arange(C, dtype=jnp.int32)[None, :]
    tokens = jnp.concatenate([state.pending_S[:, None], draft_SxK], axis=1)
    positions = state.length_S[:, None] + steps_1xC
    real = (steps_1xC <= count_S[:, None]) & (positions < state.capacity_S[:, None])
    x, pools = paged_forward(model, state.pools, table_SxJ, tokens, positions, real)
    logits = packed_weights.head_logits(model, model.final_norm(x).reshape(S * C, x.shape[-1]))
    keys = jax.random.wrap_key_data(jnp.repeat(state.keys_Sx2, C, axis=0))
    drawn = choose_tokens(logits, keys, (positions + 1).reshape(-1), spec=spec, temperature=state.temperature,
                          top_p=state.top_p)
    tok, slp, mlp = (d.reshape(S, C) for d in drawn)
    state = state.replace(pools=pools)
    alive = active
    for c in range(C):
        if c:
            state = state.replace(accepted=state.accepted + jnp.sum(alive.astype(jnp.int32)))
        state = state.replace(length_S=jnp.where(alive, state.length_S + 1, state.length_S))
        state = _record(state, tok[:, c], slp[:, c], mlp[:, c], alive)
        if c < K:
            alive = alive & ~state.done_S & (c < count_S) & (draft_SxK[:, c] == tok[:, c])
    return state


@functools.partial(jax.jit, static_argnames=("graphdef", "spec", "speculate", "ngram"), donate_argnums=(2,))
def decode_chunk(graphdef, params, state: SlotState, slot_ids_A, table_AxJ, num_steps, *,
                 spec: DecodeSpec, speculate: int = 0, ngram: tuple[int, int] = (2, 3)) -> SlotState:
    """Up to `num_steps` decode steps of the A slots `slot_ids_A` (distinct; every running slot among them,
    the rest done) with their block tables `table_AxJ`. The step's batch is A, not S: as rows finish and
    the queue empties, the host passes smaller A buckets, so the long tail of a rollout decodes a few rows,
    not all slots (the keys and values stay where they are: the tables address them). One compile per
    (A, J) bucket; the step count is traced. speculate=k > 0: a step whose rows have a prompt-lookup draft
    (`speculative.propose`, n-gram sizes `ngram`) verifies up to k draft tokens per row (`_verify_step`), a step
    where none has one is a plain step; the table must then cover k more positions per step."""
    model = nnx.merge(graphdef, params)
    sub = state.replace(**{f: getattr(state, f)[slot_ids_A] for f in _PER_SLOT})

    def cond(carry):
        step, s = carry
        return (step < num_steps) & ~jnp.all(s.done_S)

    def body(carry):
        step, s = carry
        s = s.replace(passes=s.passes + 1)
        if not speculate:
            return step + 1, _step(model, spec, table_AxJ, s)
        draft, count = propose(s.context_SxW, s.length_S, k=speculate, ngram_min=ngram[0], ngram_max=ngram[1])
        count = jnp.where(s.done_S, 0, count)
        s = jax.lax.cond(jnp.any(count > 0), lambda s: _verify_step(model, spec, table_AxJ, s, draft, count),
                         lambda s: _step(model, spec, table_AxJ, s), s)
        return step + 1, s

    _, sub = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), sub))
    return sub.replace(**{f: getattr(state, f).at[slot_ids_A].set(getattr(sub, f)) for f in _PER_SLOT})


@functools.partial(jax.jit, static_argnames=("graphdef", "spec"), donate_argnums=(2,))
def prefill_into_slots(graphdef, params, state: SlotState, tokens_PxT, segments_PxT, lengths_P, src_M, block_M,
                       offset_M, row_prompt_R, row_slot_R, row_keys_Rx2, row_limit_R, row_capacity_R, *,
                       spec: DecodeSpec) -> SlotState:
    """Prefills P prompts into the pool and starts R rows in their slots (first token drawn)."""
    model = nnx.merge(graphdef, params)
    cfg = model.cfg
    P, T = tokens_PxT.shape
    shape = (P, T, cfg.num_kv_heads, cfg.head_dim)
    small = KVCache(k=tuple(jnp.zeros(shape, cfg.dtype) for _ in range(cfg.num_layers)),
                    v=tuple(jnp.zeros(shape, cfg.dtype) for _ in range(cfg.num_layers)),
                    segment_ids_BxS=jnp.zeros((P, T), jnp.int32), index_B=jnp.zeros((P,), jnp.int32))
    positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32)[None], (P, T))
    hidden, small = model.hidden_states(tokens_PxT, positions_BxT=positions, segment_ids_BxT=segments_PxT, cache=small)
    last_PxD = jnp.take_along_axis(hidden, (lengths_P - 1)[:, None, None], axis=1)
    logits_R = jnp.take(packed_weights.head_logits(model, last_PxD)[:, 0], row_prompt_R, axis=0)

    def scatter(pool, x_PxTxKVxDh):
        flat = x_PxTxKVxDh.reshape(P * T, cfg.num_kv_heads, cfg.head_dim)
        return write_tokens(pool, jnp.swapaxes(jnp.take(flat, src_M, axis=0), 0, 1), block_M, offset_M)

    pools = PagedPools(k=tuple(scatter(p, x) for p, x in zip(state.pools.k, small.k)),
                       v=tuple(scatter(p, x) for p, x in zip(state.pools.v, small.v)))
    lengths_R = jnp.take(lengths_P, row_prompt_R)
    tokens, slp, mlp = choose_tokens(logits_R, jax.random.wrap_key_data(row_keys_Rx2), lengths_R, spec=spec,
                                     temperature=state.temperature, top_p=state.top_p)
    hit_eos = jnp.any(tokens[:, None] == state.eos_ids_E[None, :], axis=-1)
    out_of_room = (row_limit_R <= 1) | (lengths_R >= row_capacity_R)
    W = state.context_SxW.shape[1]
    context_RxW = jnp.take(tokens_PxT, row_prompt_R, axis=0)[:, :W]
    context_RxW = jnp.pad(context_RxW, ((0, 0), (0, W - context_RxW.shape[1])))
    context_RxW = context_RxW.at[jnp.arange(row_slot_R.shape[0]), lengths_R].set(tokens, mode="drop")
    put = lambda arr, val: arr.at[row_slot_R].set(val, mode="drop")  # noqa: E731
    zeros_N = lambda arr, val: arr.at[row_slot_R].set(  # noqa: E731
        jnp.zeros((row_slot_R.shape[0], arr.shape[1]), arr.dtype).at[:, 0].set(val), mode="drop")
    return state.replace(
        pools=pools, length_S=put(state.length_S, lengths_R), pending_S=put(state.pending_S, tokens),
        count_S=put(state.count_S, jnp.ones_like(lengths_R)), limit_S=put(state.limit_S, row_limit_R),
        capacity_S=put(state.capacity_S, row_capacity_R), keys_Sx2=put(state.keys_Sx2, row_keys_Rx2),
        done_S=put(state.done_S, hit_eos | out_of_room),
        finish_S=put(state.finish_S, jnp.where(hit_eos, EOS, jnp.where(out_of_room, LENGTH, RUNNING))),
        tokens_SxN=zeros_N(state.tokens_SxN, tokens), sample_logp_SxN=zeros_N(state.sample_logp_SxN, slp),
        model_logp_SxN=zeros_N(state.model_logp_SxN, mlp), context_SxW=put(state.context_SxW, context_RxW))


def _paged_attention(attn, q_AxCxHxDh, kp, vp, table_AxJ, positions_AxC):
    """Causal (and sliding-window) attention of C queries per slot over the slot's first J blocks: [A, C, H, Dh].

    Decode steps (C = 1), KV continuation and speculative verification all attend here. In float32 on a CPU the
    fused native kernel runs (`_native`); otherwise one kv head at a time: each head's blocks are a leading-axis
    gather of whole [bs, Dh] blocks, and each contraction has the slot as its only batch dim (`head_blocks`). A key
    slot is visible to a query when its position is at most the query's (and within `attn.window` of it): positions
    past the row's length hold stale or garbage keys and are never read."""
    A, C, _, Dh = q_AxCxHxDh.shape
    J = table_AxJ.shape[1]
    qg = q_AxCxHxDh.reshape(A, C, attn.num_kv_heads, attn.group, Dh)
    if _native(qg, kp):
        return native.paged_attention(qg, kp, vp, table_AxJ, positions_AxC, scale=attn.scale,
                                      window=attn.window).reshape(A, C, -1, Dh)
    keys = [head_blocks(kp, n, table_AxJ) for n in range(attn.num_kv_heads)]  # [A, J*bs, Dh] each
    values = [head_blocks(vp, n, table_AxJ) for n in range(attn.num_kv_heads)]
    scores = jnp.stack([jnp.einsum("acgk,alk->acgl", qg[:, :, n], keys[n].astype(qg.dtype),
                                   preferred_element_type=jnp.float32)
                        for n in range(attn.num_kv_heads)], axis=2) * attn.scale  # [A, C, KV, G, J*bs]
    slots_1x1xL = jnp.arange(J * kp.shape[2], dtype=jnp.int32)[None, None, :]
    visible_AxCxL = window_visible(positions_AxC[:, :, None], slots_1x1xL, attn.window)
    scores = jnp.where(visible_AxCxL[:, :, None, None, :], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(qg.dtype)
    out = jnp.stack([jnp.einsum("acgl,alk->acgk", probs[:, :, n], values[n].astype(qg.dtype))
                     for n in range(attn.num_kv_heads)], axis=2)  # [A, C, KV, G, Dh]
    return out.reshape(A, C, -1, Dh)


def paged_forward(model, pools: PagedPools, table_AxJ, tokens_AxC, positions_AxC, real_AxC):
    """C tokens per slot through the decoder at `positions_AxC`: their keys and values are written through the
    block tables (positions where `real_AxC` is False, or whose block column is outside the J columns, write into
    the null block) and each query attends causally over its slot's first J blocks (`_paged_attention`). Returns
    (hidden [A, C, D] before the final norm, pools). Shared by KV continuation and speculative verification."""
    A, C = tokens_AxC.shape
    J = table_AxJ.shape[1]
    bs = pools.block_size
    col = positions_AxC // bs
    real = real_AxC & (col < J)
    block_M = jnp.where(real, jnp.take_along_axis(table_AxJ, jnp.minimum(col, J - 1), axis=1), NULL_BLOCK).reshape(-1)
    offset_M = (positions_AxC % bs).reshape(-1)
    x = jnp.take(model.embed[...], tokens_AxC, axis=0).astype(model.cfg.dtype)  # [A, C, D]
    cos, sin = _rope_in_blocks(model, positions_AxC, J * bs)
    new_k, new_v = [], []
    for i, block in enumerate(model.layers):
        q, k, v = layer_qkv(block, x, cos, sin)  # [A, C, H|KV, Dh]
        flat = lambda t: jnp.swapaxes(t.reshape(A * C, *t.shape[2:]), 0, 1)  # noqa: E731  [KV, A*C, Dh]
        kp = write_tokens(pools.k[i], flat(k), block_M, offset_M)
        vp = write_tokens(pools.v[i], flat(v), block_M, offset_M)
        new_k.append(kp)
        new_v.append(vp)
        x = x + block.attn.o_proj(_paged_attention(block.attn, q, kp, vp, table_AxJ, positions_AxC))
        x = x + packed_weights.swiglu(block.mlp, block.mlp_norm(x))
    return x, PagedPools(k=tuple(new_k), v=tuple(new_v))


@functools.partial(jax.jit, static_argnames=("graphdef", "spec"), donate_argnums=(2,))
def extend_slots(graphdef, params, state: SlotState, slot_ids_A, table_AxJ, tokens_AxC, start_A, lengths_A, limit_A,
                 *, spec: DecodeSpec) -> SlotState:
    """Continues A slots (a session's rows between turns): row a's `lengths_A[a]` tokens `tokens_AxC[a]` (its last
    drawn token, never written to the cache, then the appended ids) are written at positions
    `start_A[a] .. start_A[a] + lengths_A[a] - 1` through `table_AxJ` (padding positions, and padding rows with
    slot id S and an all-null table, write into the null block), attending causally over the slot's cache; the
    row then starts a new turn of up to `limit_A[a]` tokens, its first token drawn from its last appended token's
    logits with `fold_in(row key, position)` at the new length (the static `engine.extend`'s scheme), its
    count/done/finish/token buffers reset. One compile per (A, C, J) bucket."""
    model = nnx.merge(graphdef, params)
    A, C = tokens_AxC.shape
    steps_1xC = jnp.arange(C, dtype=jnp.int32)[None, :]
    positions = start_A[:, None] + steps_1xC  # [A, C]
    real = steps_1xC < lengths_A[:, None]
    x, pools = paged_forward(model, state.pools, table_AxJ, tokens_AxC, positions, real)
    last = jnp.take_along_axis(x, jnp.maximum(lengths_A - 1, 0)[:, None, None], axis=1)  # [A, 1, D]
    logits = packed_weights.head_logits(model, model.final_norm(last)[:, 0])
    length = start_A + lengths_A
    N = state.tokens_SxN.shape[1]
    sub = state.replace(pools=pools,
                        **{f: jnp.take(getattr(state, f), slot_ids_A, axis=0, mode="clip") for f in _PER_SLOT})
    W = sub.context_SxW.shape[1]
    context = sub.context_SxW.at[jnp.arange(A)[:, None], jnp.where(real, positions, W)].set(tokens_AxC, mode="drop")
    sub = sub.replace(length_S=length, count_S=jnp.zeros((A,), jnp.int32), limit_S=limit_A,
                      done_S=jnp.zeros((A,), bool), finish_S=jnp.full((A,), RUNNING, jnp.int32),
                      tokens_SxN=jnp.zeros((A, N), jnp.int32), sample_logp_SxN=jnp.zeros((A, N), jnp.float32),
                      model_logp_SxN=jnp.zeros((A, N), jnp.float32), context_SxW=context)
    drawn = choose_tokens(logits, _keys(sub), length, spec=spec, temperature=state.temperature, top_p=state.top_p)
    sub = _record(sub, *drawn, jnp.ones((A,), bool))
    return sub.replace(**{f: getattr(state, f).at[slot_ids_A].set(getattr(sub, f), mode="drop") for f in _PER_SLOT})


def with_token_buffers(state: SlotState, max_new: int) -> SlotState:
    """The state with fresh (zero) token and log-prob buffers of `max_new` columns: only while no slot is
    decoding (a session's next turn may be longer than its first)."""
    S = state.tokens_SxN.shape[0]
    return state.replace(tokens_SxN=jnp.zeros((S, max_new), jnp.int32),
                         sample_logp_SxN=jnp.zeros((S, max_new), jnp.float32),
                         model_logp_SxN=jnp.zeros((S, max_new), jnp.float32))


@functools.partial(jax.jit, donate_argnums=(0,))
def retire(state: SlotState, slots_mask_S) -> SlotState:
    """Marks the masked slots done (their rows were finished on the host)."""
    return state.replace(done_S=state.done_S | slots_mask_S)
