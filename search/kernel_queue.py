"""Agenda (priority queue) for the A* kernel: one interface, two implementations (issue 5, item 2).

Both work on ONE problem (the kernel vmaps over the batch) and hold the same entries: slot p holds the p-th push
(atom, f, h), so the slot index is the push stamp. The pop order is lexicographic: lowest f, then lowest h, then the
highest stamp (last in, first out), exactly the host tie-breaking (paper §4.1). Entries are never updated in place:
a cheaper re-push of an atom adds an entry and the older one is popped later as stale, as in Alg. 1.

- `DenseQueue`: a masked lexicographic arg-min over all P slots per pop: O(P), best for small problems.
- `BlockedQueue`: slots grouped in blocks of S with a cached per-block minimum; a pop scans the P/S block minima and
  one block, a push refreshes the (at most two) blocks it wrote to: O(P/S + S) per operation, for thousands of atoms.

Interface (static shapes, jit/vmap friendly): `init() -> state`, `push_initial` (any number of entries), `push_many(state, atoms_D, f_D, h_D,
mask_D) -> state` (appends the masked entries in order), `pop(state) -> (state, atom, f, h, ok)`, `nonempty(state)`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["DenseQueue", "BlockedQueue", "QueueState", "lex_argmin", "choose_queue"]

_INF = jnp.inf


class QueueState(NamedTuple):
    atom_P: jax.Array   # int32 atom id per slot
    f_P: jax.Array      # float32 priority
    h_P: jax.Array      # float32 heuristic (first tie-breaker)
    live_P: jax.Array   # bool: pushed and not popped yet
    count: jax.Array    # int32 slots used so far (= next push stamp)
    block_f: jax.Array  # BlockedQueue: per-block minimum key (f, h, stamp); stamp -1 for an empty block
    block_h: jax.Array
    block_s: jax.Array


def lex_argmin(f, h, stamp, live):
    """Index of the live entry with the smallest f, then smallest h, then largest stamp; -1 if none is live.

    Reductions are staged (min f, then min h among those, then max stamp) so no key packing can lose precision;
    +inf priorities are ordinary values here, liveness is the separate mask.
    """
    fm = jnp.min(jnp.where(live, f, _INF))
    c1 = live & (f == fm)
    hm = jnp.min(jnp.where(c1, h, _INF))
    c2 = c1 & (h == hm)
    sm = jnp.max(jnp.where(c2, stamp, -1))
    idx = jnp.argmax(c2 & (stamp == sm))
    return jnp.where(jnp.any(live), idx, -1)


def _empty(capacity: int, n_blocks: int) -> QueueState:
    return QueueState(
        atom_P=jnp.full((capacity,), -1, jnp.int32), f_P=jnp.full((capacity,), _INF, jnp.float32),
        h_P=jnp.full((capacity,), _INF, jnp.float32), live_P=jnp.zeros((capacity,), bool),
        count=jnp.zeros((), jnp.int32), block_f=jnp.full((n_blocks,), _INF, jnp.float32),
        block_h=jnp.full((n_blocks,), _INF, jnp.float32), block_s=jnp.full((n_blocks,), -1, jnp.int32))


def _append(q: QueueState, atoms, f, h, mask):
    """Write masked entries to consecutive slots from q.count, keeping their order. Returns (state, first slot)."""
    capacity = q.atom_P.shape[0]
    pos = q.count + jnp.cumsum(mask.astype(jnp.int32)) - 1
    pos = jnp.where(mask, pos, capacity)  # out of bounds: dropped
    q2 = q._replace(
        atom_P=q.atom_P.at[pos].set(atoms.astype(jnp.int32), mode="drop"),
        f_P=q.f_P.at[pos].set(f.astype(jnp.float32), mode="drop"),
        h_P=q.h_P.at[pos].set(h.astype(jnp.float32), mode="drop"),
        live_P=q.live_P.at[pos].set(True, mode="drop"),
        count=q.count + jnp.sum(mask, dtype=jnp.int32))
    return q2, q.count


class DenseQueue:
    """Masked lexicographic arg-min over every slot."""

    name = "dense"

    def __init__(self, capacity: int):
        self.capacity = int(capacity)

    def init(self) -> QueueState:
        return _empty(self.capacity, 1)

    def push_many(self, q: QueueState, atoms, f, h, mask) -> QueueState:
        return _append(q, atoms, f, h, mask)[0]

    push_initial = push_many

    def nonempty(self, q: QueueState):
        return jnp.any(q.live_P)

    def pop(self, q: QueueState):
        stamp = jnp.arange(self.capacity, dtype=jnp.int32)
        idx = lex_argmin(q.f_P, q.h_P, stamp, q.live_P)
        ok = idx >= 0
        i = jnp.maximum(idx, 0)
        q2 = q._replace(live_P=q.live_P.at[i].set(jnp.where(ok, False, q.live_P[i])))
        return q2, q.atom_P[i], q.f_P[i], q.h_P[i], ok


class BlockedQueue:
    """Slots in blocks of `block` with cached per-block minima; pop and push touch O(P/S + S) values."""

    name = "blocked"

    def __init__(self, capacity: int, *, block: int | None = None, max_push: int = 1):
        if block is None:  # about sqrt(P) balances the block scan and the in-block scan
            block = max(16, 1 << math.ceil(math.log2(max(1.0, math.sqrt(capacity)))))
        # a push of up to max_push entries must touch at most two blocks
        block = max(block, 1 << math.ceil(math.log2(max(1, max_push))))
        self.block = int(block)
        self.n_blocks = -(-int(capacity) // self.block)
        self.capacity = self.n_blocks * self.block

    def init(self) -> QueueState:
        return _empty(self.capacity, self.n_blocks)

    def nonempty(self, q: QueueState):
        return jnp.any(q.block_s >= 0)

    def _refresh(self, q: QueueState, b) -> QueueState:
        """Recompute the cached minimum of block b."""
        start = b * self.block
        f = jax.lax.dynamic_slice(q.f_P, (start,), (self.block,))
        h = jax.lax.dynamic_slice(q.h_P, (start,), (self.block,))
        live = jax.lax.dynamic_slice(q.live_P, (start,), (self.block,))
        stamp = start + jnp.arange(self.block, dtype=jnp.int32)
        j = lex_argmin(f, h, stamp, live)
        ok = j >= 0
        jj = jnp.maximum(j, 0)
        return q._replace(block_f=q.block_f.at[b].set(jnp.where(ok, f[jj], _INF)),
                          block_h=q.block_h.at[b].set(jnp.where(ok, h[jj], _INF)),
                          block_s=q.block_s.at[b].set(jnp.where(ok, stamp[jj], -1)))

    def push_many(self, q: QueueState, atoms, f, h, mask) -> QueueState:
        q, first = _append(q, atoms, f, h, mask)
        b0 = jnp.minimum(first // self.block, self.n_blocks - 1)
        b1 = jnp.minimum((q.count - 1) // self.block, self.n_blocks - 1)
        b1 = jnp.maximum(b1, b0)
        q = self._refresh(q, b0)
        return jax.lax.cond(b1 != b0, lambda s: self._refresh(s, b1), lambda s: s, q)

    def push_initial(self, q: QueueState, atoms, f, h, mask) -> QueueState:
        """Append any number of entries (the axioms) and refresh every block minimum."""
        q = _append(q, atoms, f, h, mask)[0]
        shape = (self.n_blocks, self.block)
        stamp = jnp.arange(self.capacity, dtype=jnp.int32).reshape(shape)
        j = jax.vmap(lex_argmin)(q.f_P.reshape(shape), q.h_P.reshape(shape), stamp, q.live_P.reshape(shape))
        ok = j >= 0
        sel = stamp[:, 0] + jnp.maximum(j, 0)
        return q._replace(block_f=jnp.where(ok, q.f_P[sel], _INF), block_h=jnp.where(ok, q.h_P[sel], _INF),
                          block_s=jnp.where(ok, sel, -1))

    def pop(self, q: QueueState):
        live_b = q.block_s >= 0
        b = lex_argmin(q.block_f, q.block_h, q.block_s, live_b)
        ok = b >= 0
        i = jnp.where(ok, q.block_s[jnp.maximum(b, 0)], 0)
        q2 = q._replace(live_P=q.live_P.at[i].set(jnp.where(ok, False, q.live_P[i])))
        q2 = self._refresh(q2, jnp.maximum(b, 0))
        return q2, q.atom_P[i], q.f_P[i], q.h_P[i], ok


DENSE_MAX_CAPACITY = 2048


def choose_queue(capacity: int, *, max_push: int, kind: str = "auto"):
    """The queue for a problem bucket: dense up to DENSE_MAX_CAPACITY slots, blocked beyond (or as `kind` says)."""
    if kind == "auto":
        kind = "dense" if capacity <= DENSE_MAX_CAPACITY else "blocked"
    if kind == "dense":
        return DenseQueue(capacity)
    if kind == "blocked":
        return BlockedQueue(capacity, max_push=max_push)
    raise ValueError(f"unknown queue kind {kind!r} (expected 'auto', 'dense' or 'blocked')")
