"""Compile (program, goal) hypergraphs to padded, bucketed integer tensors for the jitted A* kernel (issue 5, item 1).

A problem is first reduced to `HypergraphArrays` (host NumPy, exact sizes), then a list of them is padded into one
`ProblemBatch` whose sizes are rounded up to power-of-two buckets so a run compiles only a few shapes:

  N  atoms (vertices of the minimal model)           axiom_order_BxN  atom ids in the host's axiom push order, -1 pad
  M  hyperedges in the host's canonical order         premises_BxMxK   premise atom ids, -1 pad;  head_BxM (-1 pad)
  K  premise slots                                   goal_B           goal atom id, -1 when the goal is not a theorem
  D  hyperedges per atom as a premise                out_edges_BxNxD  ascending hyperedge ids where the atom is a premise
  n_atoms_B, n_edges_B                               real sizes (everything at or past them is padding)
  E  unary edges of the dependency heuristic's        relaxed_src_BxE, relaxed_dst_BxE  premise -> conclusion vertex
     relaxed graph (search.heuristics.relaxed_graph)  ids over N' = N + extra vertices (ids < N are the atoms of M,
                                                     ids >= N Herbrand-base atoms outside M), -1 pad. Every extra
                                                     vertex is the source of an edge, so N' <= N + E statically.

Sizes are rounded up to buckets 2^k or 1.5 * 2^k (`bucket_size`). Hyperedge id m is the m-th hyperedge of the host compile, so a push trace of ids is comparable with the host trace.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import numpy as np

import jax
import jax.numpy as jnp

__all__ = ["HypergraphArrays", "ProblemBatch", "Buckets", "BucketError", "pack_batch", "bucket_size"]


class BucketError(ValueError):
    """A problem is larger than the biggest allowed size bucket."""


@dataclasses.dataclass(frozen=True)
class HypergraphArrays:
    """One (program, goal) hypergraph as exact-size host arrays.

    premises: tuple of premise-id tuples, one per hyperedge in canonical order (repeated premises allowed).
    heads: head atom id per hyperedge.  axiom_order: axiom atom ids in the order the host pushes them.
    goal: goal atom id or -1 (goal not in the minimal model).  name: used in error messages.
    relaxed_src/relaxed_dst: unary edges of the dependency heuristic's relaxed graph over n_atoms + relaxed_extra
    vertices; None (default, for hand-built arrays without a program) relaxes the hyperedges themselves
    (one edge per distinct premise -> head), which is the relaxed graph when the Herbrand base adds nothing.
    """

    n_atoms: int
    axiom_order: tuple[int, ...]
    premises: tuple[tuple[int, ...], ...]
    heads: tuple[int, ...]
    goal: int
    name: str = ""
    relaxed_extra: int = 0
    relaxed_src: tuple[int, ...] | None = None
    relaxed_dst: tuple[int, ...] | None = None

    def __post_init__(self):
        where = f"problem {self.name!r}" if self.name else "problem"
        if len(self.premises) != len(self.heads):
            raise ValueError(f"{where}: {len(self.premises)} premise tuples but {len(self.heads)} heads "
                             "(expected one head per hyperedge)")
        ids = [a for p in self.premises for a in p] + list(self.heads) + list(self.axiom_order)
        bad = [a for a in ids if not 0 <= a < self.n_atoms]
        if bad:
            raise ValueError(f"{where}: atom ids {sorted(set(bad))[:5]} outside [0, {self.n_atoms}) "
                             "(expected ids of the compiled atoms)")
        if not -1 <= self.goal < self.n_atoms:
            raise ValueError(f"{where}: goal id {self.goal} outside [-1, {self.n_atoms})")
        if len(set(self.axiom_order)) != len(self.axiom_order):
            raise ValueError(f"{where}: repeated atom ids in axiom_order (expected each axiom once)")
        if (self.relaxed_src is None) != (self.relaxed_dst is None) or (
                self.relaxed_src is not None and len(self.relaxed_src) != len(self.relaxed_dst)):
            raise ValueError(f"{where}: relaxed_src and relaxed_dst must both be given with equal lengths")
        nv = self.n_atoms + self.relaxed_extra
        bad = [a for a in (self.relaxed_src or ()) + (self.relaxed_dst or ()) if not 0 <= a < nv]
        if bad or self.relaxed_extra < 0:
            raise ValueError(f"{where}: relaxed vertex ids {sorted(set(bad))[:5]} outside [0, {nv}) "
                             "(expected ids of the atoms and the relaxed graph's extra vertices)")
        if any(len(p) == 0 for p in self.premises):
            raise ValueError(f"{where}: a hyperedge without premises (expected axioms in axiom_order instead)")

    @property
    def n_edges(self) -> int:
        return len(self.heads)

    @property
    def max_premises(self) -> int:
        return max((len(p) for p in self.premises), default=1)

    def relaxed_edges(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(src, dst) of the dependency heuristic's unary relaxed graph (see class docstring)."""
        if self.relaxed_src is not None:
            return self.relaxed_src, self.relaxed_dst
        pairs = [(a, h) for prem, h in zip(self.premises, self.heads) for a in dict.fromkeys(prem)]
        return tuple(a for a, _ in pairs), tuple(h for _, h in pairs)

    def out_degree(self) -> np.ndarray:
        """Number of distinct hyperedges each atom is a premise of, shape [n_atoms]."""
        deg = np.zeros(self.n_atoms, np.int64)
        for prem in self.premises:
            for a in set(prem):
                deg[a] += 1
        return deg


def bucket_size(n: int, *, minimum: int = 8) -> int:
    """Smallest bucket >= max(n, minimum); buckets are 2^k and 1.5 * 2^k (8, 12, 16, 24, 32, 48, ...), so padding
    wastes at most a third while a run still compiles only a few shapes."""
    n = max(int(n), minimum)
    p = 1 << (n - 1).bit_length()
    return p * 3 // 4 if p >= 8 and p * 3 // 4 >= n else p


@dataclasses.dataclass(frozen=True)
class Buckets:
    """Largest sizes a batch may be padded to; a bigger problem raises BucketError naming itself and its sizes."""

    max_atoms: int = 1 << 15
    max_edges: int = 1 << 16
    max_premises: int = 16
    max_out_degree: int = 1 << 12
    max_relaxed_edges: int = 1 << 17


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ProblemBatch:
    """Padded batch of hypergraphs (see module docstring for the shapes)."""

    axiom_order_BxN: jax.Array
    premises_BxMxK: jax.Array
    head_BxM: jax.Array
    out_edges_BxNxD: jax.Array
    goal_B: jax.Array
    n_atoms_B: jax.Array
    n_edges_B: jax.Array
    relaxed_src_BxE: jax.Array
    relaxed_dst_BxE: jax.Array

    @property
    def batch(self) -> int:
        return self.head_BxM.shape[0]

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        """(N, M, K, D) padded sizes."""
        _, m, k = self.premises_BxMxK.shape
        _, n, d = self.out_edges_BxNxD.shape
        return n, m, k, d


def _check_bucket(p: HypergraphArrays, index: int, buckets: Buckets) -> None:
    sizes = {"atoms": (p.n_atoms, buckets.max_atoms), "hyperedges": (p.n_edges, buckets.max_edges),
             "premises per hyperedge": (p.max_premises, buckets.max_premises),
             "hyperedges per atom": (int(p.out_degree().max(initial=0)), buckets.max_out_degree),
             "relaxed edges": (len(p.relaxed_edges()[0]), buckets.max_relaxed_edges)}
    over = {k: v for k, v in sizes.items() if v[0] > v[1]}
    if over:
        what = ", ".join(f"{k}={v[0]} > {v[1]}" for k, v in over.items())
        raise BucketError(f"problem {index} ({p.name or 'unnamed'}) exceeds the size buckets: {what} "
                          f"(sizes: atoms={p.n_atoms}, hyperedges={p.n_edges}, premises={p.max_premises}); "
                          "split it out or raise Buckets limits")


def pack_batch(problems: Sequence[HypergraphArrays], *, buckets: Buckets = Buckets(),
               min_sizes: tuple[int, ...] = (8, 8, 1, 1, 8), pad_batch_to: int = 1) -> ProblemBatch:
    """Pad `problems` to one bucketed shape. `pad_batch_to` rounds the batch up (e.g. to the device count) with
    empty problems (no atoms, goal -1) that finish at once. Returns NumPy-backed arrays in a ProblemBatch."""
    if len(problems) == 0:
        raise ValueError("pack_batch: empty list of problems (expected at least one)")
    for i, p in enumerate(problems):
        _check_bucket(p, i, buckets)
    tables = [_edge_tables(p) for p in problems]
    n = bucket_size(max(p.n_atoms for p in problems), minimum=min_sizes[0])
    m = bucket_size(max(p.n_edges for p in problems), minimum=min_sizes[1])
    k = bucket_size(max(p.max_premises for p in problems), minimum=min_sizes[2])
    d = bucket_size(max(t.out_degree for t in tables), minimum=min_sizes[3])
    relaxed = [p.relaxed_edges() for p in problems]
    e = bucket_size(max(len(r[0]) for r in relaxed), minimum=min_sizes[4] if len(min_sizes) > 4 else 8)
    b = -(-len(problems) // pad_batch_to) * pad_batch_to
    relaxed_src = np.full((b, e), -1, np.int32)
    relaxed_dst = np.full((b, e), -1, np.int32)
    axiom_order = np.full((b, n), -1, np.int32)
    premises = np.full((b, m, k), -1, np.int32)
    head = np.full((b, m), -1, np.int32)
    out_edges = np.full((b, n, d), -1, np.int32)
    goal = np.full((b,), -1, np.int32)
    n_atoms = np.zeros((b,), np.int32)
    n_edges = np.zeros((b,), np.int32)
    for i, (p, t) in enumerate(zip(problems, tables)):
        axiom_order[i, :len(p.axiom_order)] = p.axiom_order
        premises[i, :p.n_edges, :t.premises.shape[1]] = t.premises
        head[i, :p.n_edges] = p.heads
        out_edges[i, t.out_atom, t.out_slot] = t.out_edge
        goal[i] = p.goal
        n_atoms[i] = p.n_atoms
        n_edges[i] = p.n_edges
        src = np.asarray(relaxed[i][0], np.int64)
        dst = np.asarray(relaxed[i][1], np.int64)
        # extra vertices n_atoms.. are re-based after the padded N so they never collide with padded atom ids
        relaxed_src[i, :len(src)] = np.where(src < p.n_atoms, src, src - p.n_atoms + n)
        relaxed_dst[i, :len(dst)] = np.where(dst < p.n_atoms, dst, dst - p.n_atoms + n)
    return ProblemBatch(axiom_order, premises, head, out_edges, goal, n_atoms, n_edges, relaxed_src, relaxed_dst)


class _EdgeTables(NamedTuple):
    """One problem's NumPy tables: premises [M, K'] (-1 pad) and the entries (atom, slot) -> hyperedge id of its
    out-edge lists (the hyperedges an atom is a distinct premise of, in ascending id)."""

    premises: np.ndarray
    out_atom: np.ndarray
    out_slot: np.ndarray
    out_edge: np.ndarray
    out_degree: int


def _slots(keys_sorted: np.ndarray) -> tuple[np.ndarray, int]:
    """Slot of each entry within its run of equal keys (keys sorted), and the longest run (0 when empty)."""
    if keys_sorted.size == 0:
        return keys_sorted, 0
    start = np.r_[0, np.flatnonzero(keys_sorted[1:] != keys_sorted[:-1]) + 1]
    runs = np.diff(np.r_[start, keys_sorted.size])
    return np.arange(keys_sorted.size) - np.repeat(start, runs), int(runs.max())


def _edge_tables(p: HypergraphArrays) -> _EdgeTables:
    kk = p.max_premises
    prem = np.full((p.n_edges, kk), -1, np.int64)
    for j, ps in enumerate(p.premises):
        prem[j, :len(ps)] = ps
    # a premise repeated within one hyperedge lists that hyperedge once for the atom
    dup = np.zeros(prem.shape, bool)
    for s in range(1, kk):
        dup[:, s] = np.any(prem[:, :s] == prem[:, s:s + 1], axis=1)
    keep = (prem >= 0) & ~dup
    atom = prem[keep]
    edge = np.broadcast_to(np.arange(p.n_edges)[:, None], prem.shape)[keep]
    order = np.lexsort((edge, atom))
    out_slot, d = _slots(atom[order])
    return _EdgeTables(prem, atom[order], out_slot, edge[order], d)


def to_device(batch: ProblemBatch, sharding=None) -> ProblemBatch:
    """Move a NumPy-backed batch to device (optionally with a batch-axis sharding)."""
    return jax.tree.map(lambda x: jax.device_put(jnp.asarray(x), sharding), batch)
