"""Agenda (priority queue) of the A* kernel: one batched interface, two implementations (issue 5, item 2).

The agenda holds at most one live entry per atom: the host's heap keeps stale entries (an atom re-pushed with a
smaller weight), but a re-push always carries a key that pops first (f strictly smaller for finite h; equal f and h
with a later stamp for h = inf), and popping a stale entry is skipped and not counted, so the host's pop sequence is
exactly the pop sequence of this decrease-key agenda. Keys are lexicographic (paper §4.1): lowest f, then lowest h,
then the highest push stamp (last in, first out).

State `Agenda` (batch-leading): f_BxN, h_BxN (the heuristic), stamp_BxN (push stamp of the live entry), live_BxN,
and for the blocked queue the cached minimum of every block of S atoms (blk_f/h/s/a_BxNB: key and atom).

- `DenseQueue`: each pop is a masked lexicographic arg-min over all N atoms: O(N) per pop, lowest overhead for
  small problems.
- `PackedQueue`: the dense arg-min with (f, h, stamp) packed into one int32 key (one pass per pop) when f and h
  are small integers (cost "max" with the built-in heuristics): the default for small problems.
- `BlockedQueue`: atoms in blocks of S (about sqrt(N)); a pop scans the N/S block minima and then one block; a push
  only lowers keys, so it updates block minima by comparison: O(N/S + S) per pop and O(D^2) per expansion, for
  thousands of atoms.

Interface: `init(f, h, stamp, live) -> Agenda`; `pop(q) -> (q, atom_B, f_B, ok_B)` (removes the atom);
`decrease(q, atoms_BxD, f_BxD, stamp_BxD, mask_BxD) -> q` (insert or lower keys; masked atoms distinct per row);
`nonempty(q) -> bool_B`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Agenda", "DenseQueue", "BlockedQueue", "PackedQueue", "lex_argmin", "choose_queue", "DENSE_MAX_ATOMS"]

_INF = jnp.inf
DENSE_MAX_ATOMS = 512


class Agenda(NamedTuple):
    f_BxN: jax.Array
    h_BxN: jax.Array
    stamp_BxN: jax.Array
    live_BxN: jax.Array
    blk_f: jax.Array = None
    blk_h: jax.Array = None
    blk_s: jax.Array = None
    blk_a: jax.Array = None
    key_BxN: jax.Array = None  # PackedQueue: the whole key in one int32


def lex_argmin(f, h, stamp, live):
    """Along the last axis: index of the live entry with the lowest f, then lowest h, then highest stamp; and
    whether any is live. Staged reductions, so no key packing can lose precision; +inf is an ordinary key."""
    fm = jnp.min(jnp.where(live, f, _INF), axis=-1, keepdims=True)
    c1 = live & (f == fm)
    hm = jnp.min(jnp.where(c1, h, _INF), axis=-1, keepdims=True)
    c2 = c1 & (h == hm)
    return jnp.argmax(jnp.where(c2, stamp, -1), axis=-1), jnp.any(live, axis=-1)


def _rows(x):
    return jnp.arange(x.shape[0])[:, None]


def _remove(q: Agenda, atom, ok) -> Agenda:
    n = q.live_BxN.shape[1]
    return q._replace(live_BxN=q.live_BxN.at[_rows(q.live_BxN)[:, 0], jnp.where(ok, atom, n)].set(False, mode="drop"))


def _write(q: Agenda, atoms, f, stamp, mask) -> Agenda:
    n = q.live_BxN.shape[1]
    rows = _rows(atoms)
    cols = jnp.where(mask, atoms, n)
    return q._replace(f_BxN=q.f_BxN.at[rows, cols].set(f, mode="drop"),
                      stamp_BxN=q.stamp_BxN.at[rows, cols].set(stamp, mode="drop"),
                      live_BxN=q.live_BxN.at[rows, cols].set(True, mode="drop"))


class DenseQueue:
    """Masked lexicographic arg-min over every atom per pop."""

    name = "dense"

    def init(self, f, h, stamp, live) -> Agenda:
        return Agenda(f, h, stamp, live)

    def nonempty(self, q: Agenda):
        return jnp.any(q.live_BxN, axis=1)

    def pop(self, q: Agenda):
        atom, ok = lex_argmin(q.f_BxN, q.h_BxN, q.stamp_BxN, q.live_BxN)
        f = jnp.take_along_axis(q.f_BxN, atom[:, None], axis=1)[:, 0]
        return _remove(q, atom, ok), atom, f, ok

    def decrease(self, q: Agenda, atoms, f, stamp, mask) -> Agenda:
        return _write(q, atoms, f, stamp, mask)


def _lex_less(fa, ha, sa, fb, hb, sb):
    """Key a pops before key b (lower f, then lower h, then higher stamp); an empty key has stamp -1."""
    return (sa >= 0) & ((sb < 0) | (fa < fb) | ((fa == fb) & ((ha < hb) | ((ha == hb) & (sa > sb)))))


class BlockedQueue:
    """Atoms in blocks of S with cached block minima. A pop reads the N/S minima and one block (a contiguous slice);
    a push only lowers keys, so a block minimum is updated by comparison without rescanning the block."""

    name = "blocked"

    def __init__(self, n_atoms: int, *, block: int | None = None):
        if block is None:  # about sqrt(N) balances the block-minimum scan against the in-block scan
            block = 1 << math.ceil(math.log2(max(2.0, math.sqrt(n_atoms))))
        if n_atoms % block:
            raise ValueError(f"BlockedQueue: {n_atoms} atoms is not a multiple of the block size {block}")
        self.block = int(block)
        self.n_blocks = n_atoms // self.block

    def _block_min(self, q: Agenda, blk_B):
        """Minimum key (f, h, stamp, atom) of block blk_B of every row, from a [B, S] slice."""
        b = blk_B.shape[0]
        shape = (b, self.n_blocks, self.block)

        def take(x):
            return jnp.take_along_axis(x.reshape(shape), blk_B[:, None, None], axis=1)[:, 0, :]

        f, h, st, live = take(q.f_BxN), take(q.h_BxN), take(q.stamp_BxN), take(q.live_BxN)
        j, ok = lex_argmin(f, h, st, live)

        def pick(x):
            return jnp.take_along_axis(x, j[:, None], axis=1)[:, 0]

        return (jnp.where(ok, pick(f), _INF), jnp.where(ok, pick(h), _INF), jnp.where(ok, pick(st), -1),
                blk_B * self.block + j)

    def init(self, f, h, stamp, live) -> Agenda:
        b = f.shape[0]
        shape = (b, self.n_blocks, self.block)
        f3, h3, s3, l3 = f.reshape(shape), h.reshape(shape), stamp.reshape(shape), live.reshape(shape)
        j, ok = lex_argmin(f3, h3, s3, l3)

        def pick(x):
            return jnp.take_along_axis(x, j[..., None], axis=-1)[..., 0]

        return Agenda(f, h, stamp, live, blk_f=jnp.where(ok, pick(f3), _INF), blk_h=jnp.where(ok, pick(h3), _INF),
                      blk_s=jnp.where(ok, pick(s3), -1), blk_a=jnp.arange(self.n_blocks) * self.block + j)

    def nonempty(self, q: Agenda):
        return jnp.any(q.blk_s >= 0, axis=1)

    def pop(self, q: Agenda):
        blk, ok = lex_argmin(q.blk_f, q.blk_h, q.blk_s, q.blk_s >= 0)
        atom = jnp.take_along_axis(q.blk_a, blk[:, None], axis=1)[:, 0]
        f = jnp.take_along_axis(q.blk_f, blk[:, None], axis=1)[:, 0]
        q = _remove(q, atom, ok)
        bf, bh, bs, ba = self._block_min(q, blk)
        rows = jnp.arange(blk.shape[0])
        col = jnp.where(ok, blk, self.n_blocks)
        q = q._replace(blk_f=q.blk_f.at[rows, col].set(bf, mode="drop"),
                       blk_h=q.blk_h.at[rows, col].set(bh, mode="drop"),
                       blk_s=q.blk_s.at[rows, col].set(bs, mode="drop"),
                       blk_a=q.blk_a.at[rows, col].set(ba, mode="drop"))
        return q, atom, f, ok

    def decrease(self, q: Agenda, atoms, f, stamp, mask) -> Agenda:
        q = _write(q, atoms, f, stamp, mask)
        h = jnp.take_along_axis(q.h_BxN, jnp.clip(atoms, 0, q.h_BxN.shape[1] - 1), axis=1)
        st = jnp.where(mask, stamp, -1)
        blk = atoms // self.block
        # the best new key per block among this push batch: a push that no other push of its block beats
        sameb = (blk[:, :, None] == blk[:, None, :]) & mask[:, None, :]
        beaten = jnp.any(sameb & _lex_less(f[:, None, :], h[:, None, :], st[:, None, :], f[:, :, None],
                                           h[:, :, None], st[:, :, None]), axis=2)
        win = mask & ~beaten
        old = [jnp.take_along_axis(x, jnp.clip(blk, 0, self.n_blocks - 1), axis=1)
               for x in (q.blk_f, q.blk_h, q.blk_s)]
        win = win & _lex_less(f, h, st, *old)
        rows = jnp.arange(atoms.shape[0])[:, None]
        col = jnp.where(win, blk, self.n_blocks)
        return q._replace(blk_f=q.blk_f.at[rows, col].set(f, mode="drop"),
                          blk_h=q.blk_h.at[rows, col].set(h, mode="drop"),
                          blk_s=q.blk_s.at[rows, col].set(st, mode="drop"),
                          blk_a=q.blk_a.at[rows, col].set(atoms, mode="drop"))


class PackedQueue:
    """Dense agenda whose lexicographic key (f, h, LIFO stamp) is packed into ONE int32, so a pop is a single arg-min
    pass and a push a single scatter. Exact when f and h are integers (or inf) below their field limits and stamps
    fit: `PackedQueue.fits` decides, and the kernel only picks it then (cost "max", integer heuristics).

    key = f_code << (HB + SB) | h_code << SB | (2^SB - 1 - stamp); a code of all ones encodes inf, an empty slot is
    INT32_MAX (above every live key, since f_code < 2^FB - 1 keeps bit 30 clear or the fields leave room).
    """

    name = "packed"
    EMPTY = 2**31 - 1

    def __init__(self, *, f_bits: int, h_bits: int, stamp_bits: int):
        if f_bits + h_bits + stamp_bits > 31:
            raise ValueError(f"PackedQueue: {f_bits}+{h_bits}+{stamp_bits} bits do not fit an int32 key")
        self.fb, self.hb, self.sb = f_bits, h_bits, stamp_bits

    @staticmethod
    def bits_for(*, n_atoms: int, n_edges: int, max_h: int):
        """Field widths for weights <= n_atoms (cost "max": depth), h <= max_h, stamps < n_atoms + n_edges;
        None when they do not fit 31 bits."""
        fb = int(n_atoms + max_h + 1).bit_length()
        hb = int(max_h + 1).bit_length()
        sb = int(n_atoms + n_edges).bit_length()
        if fb + hb + sb >= 31:  # keep one spare bit so that EMPTY stays above every live key
            return None
        return fb, hb, sb

    def _key(self, f, h, stamp):
        f_inf, h_inf = (1 << self.fb) - 1, (1 << self.hb) - 1
        fc = jnp.where(jnp.isinf(f), f_inf, f).astype(jnp.int32)
        hc = jnp.where(jnp.isinf(h), h_inf, h).astype(jnp.int32)
        return (fc << (self.hb + self.sb)) | (hc << self.sb) | ((1 << self.sb) - 1 - stamp)

    def init(self, f, h, stamp, live) -> Agenda:
        key = jnp.where(live, self._key(f, h, stamp), self.EMPTY)
        return Agenda(None, h, None, None, key_BxN=key)

    def nonempty(self, q: Agenda):
        return jnp.any(q.key_BxN != self.EMPTY, axis=1)

    def pop(self, q: Agenda):
        atom = jnp.argmin(q.key_BxN, axis=1)
        key = jnp.take_along_axis(q.key_BxN, atom[:, None], axis=1)[:, 0]
        ok = key != self.EMPTY
        fc = key >> (self.hb + self.sb)
        f = jnp.where(fc == (1 << self.fb) - 1, _INF, fc.astype(jnp.float32))
        n = q.key_BxN.shape[1]
        rows = jnp.arange(atom.shape[0])
        q = q._replace(key_BxN=q.key_BxN.at[rows, jnp.where(ok, atom, n)].set(self.EMPTY, mode="drop"))
        return q, atom, f, ok

    def decrease(self, q: Agenda, atoms, f, stamp, mask) -> Agenda:
        n = q.key_BxN.shape[1]
        h = jnp.take_along_axis(q.h_BxN, jnp.clip(atoms, 0, n - 1), axis=1)
        rows = jnp.arange(atoms.shape[0])[:, None]
        return q._replace(key_BxN=q.key_BxN.at[rows, jnp.where(mask, atoms, n)].set(self._key(f, h, stamp),
                                                                                    mode="drop"))


def choose_queue(n_atoms: int, *, kind: str = "auto", packed_bits=None):
    """The agenda for a padded atom count: packed (when `packed_bits` says the keys fit) or dense up to
    DENSE_MAX_ATOMS atoms, blocked beyond; or exactly `kind` ("dense" | "blocked" | "packed")."""
    if kind == "auto":
        if n_atoms <= DENSE_MAX_ATOMS:
            kind = "packed" if packed_bits is not None else "dense"
        else:
            kind = "blocked"
    if kind == "packed":
        if packed_bits is None:
            raise ValueError("queue 'packed' needs integer keys that fit an int32 (cost 'max', integer h)")
        fb, hb, sb = packed_bits
        return PackedQueue(f_bits=fb, h_bits=hb, stamp_bits=sb)
    if kind == "dense":
        return DenseQueue()
    if kind == "blocked":
        return BlockedQueue(n_atoms)
    raise ValueError(f"unknown queue kind {kind!r} (expected 'auto', 'dense', 'blocked' or 'packed')")
