"""Score padded candidate traces on device (issue 5, item 4): the jitted twin of `search.verify` + `search.rewards`.

Two jitted calls, batch in, batch out:
* `score_tables(batch, cost=)` once per problem batch: inside weights, f = w + h for the dependency and the true
  heuristic, the canonical shortest proof's steps and |V_pops|, and alpha of each reward (the A* traces under the
  dependency and true heuristics run on device with `search.kernel.astar_batch`).
* `score_traces(batch, tables, ids_BxGxT, lengths_BxG)` for G candidates per problem: a `lax.scan` over steps keeps
  the set of known atoms (axioms, conclusions of earlier VALID steps); a step is valid iff its id is a hyperedge of
  the problem and all its premises are known. Outputs per candidate: valid_BxGxT, correct, pushes (= length),
  |V_pops| (distinct premises of in-range steps, Eq. 6), x_delta per reward, the four rewards (Eq. 7 as
  `0.5 ** ((x - alpha) / alpha)`, denominator 1 when alpha == 0, 0 when incorrect or x infinite), efficiency
  (pushes, pops) against the shortest proof (NaN for incorrect traces, where the host returns None) and flags.

Bad input is never a silent number: ids outside [0, n_edges) (including -1, the host's "not an instantiation") make
the step invalid and set FLAG_BAD_ID; an empty trace sets FLAG_EMPTY (it is correct only for an axiom goal, as on the
host); a length outside [0, T] is clamped and sets FLAG_BAD_LENGTH (`pack_traces` raises for it on the host); an
infinite x_delta (an off-path premise under the true cost-to-go, or a premise that cannot reach the goal under the
dependency heuristic) scores 0 and sets FLAG_INF_X_DEPENDENCY / FLAG_INF_X_TRUE.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import numpy as np

import jax
import jax.numpy as jnp

from search.kernel import _over_batch, astar_batch
from search.kernel_heuristics import edge_costs, inside_weights
from search.kernel_tensors import ProblemBatch

__all__ = ["ScoreTables", "TraceScores", "score_tables", "score_traces", "pack_traces", "REWARDS",
           "FLAG_BAD_ID", "FLAG_EMPTY", "FLAG_BAD_LENGTH", "FLAG_INF_X_DEPENDENCY", "FLAG_INF_X_TRUE"]

REWARDS = ("correctness", "step_count", "astar_dependency", "astar_true")
FLAG_BAD_ID, FLAG_EMPTY, FLAG_BAD_LENGTH, FLAG_INF_X_DEPENDENCY, FLAG_INF_X_TRUE = 1, 2, 4, 8, 16
_INF = jnp.inf


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ScoreTables:
    """Per-problem constants for scoring: f_dep_BxN, f_true_BxN (w + h), alpha_B4 (per reward but correctness:
    step_count, astar_dependency, astar_true; column 0 unused), ref_pushes_B, ref_pops_B (canonical shortest proof)."""

    w_BxN: jax.Array
    f_dep_BxN: jax.Array
    f_true_BxN: jax.Array
    alpha_Bx4: jax.Array
    ref_pushes_B: jax.Array
    ref_pops_B: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TraceScores:
    valid_BxGxT: jax.Array
    correct_BxG: jax.Array
    pushes_BxG: jax.Array
    v_pops_BxG: jax.Array
    x_delta_BxGx4: jax.Array     # columns as REWARDS (correctness column: 0)
    rewards_BxGx4: jax.Array     # columns as REWARDS
    efficiency_pushes_BxG: jax.Array
    efficiency_pops_BxG: jax.Array
    flags_BxG: jax.Array


def _shortest(goal, axiom_mask_N, w_N, premises_MxK, head_M, *, cost: str):
    """Steps and |V_pops| of the host's canonical shortest proof (lowest-id tight hyperedge into each needed atom)."""
    n = w_N.shape[0]
    m = head_M.shape[0]
    hs = jnp.maximum(head_M, 0)
    tight = (head_M >= 0) & (edge_costs(w_N, premises_MxK, cost=cost) == w_N[hs])
    best = jnp.full((n,), m, jnp.int32).at[jnp.where(tight, hs, n)].min(jnp.arange(m, dtype=jnp.int32), mode="drop")
    gi = jnp.maximum(goal, 0)
    seed = (jnp.arange(n) == goal) & (goal >= 0) & jnp.isfinite(w_N[gi])
    expandable = ~axiom_mask_N & (best < m)
    bprem = premises_MxK[jnp.minimum(best, m - 1)]  # [N, K]

    def step(need):
        src = need & expandable
        tgt = jnp.where(src[:, None] & (bprem >= 0), bprem, n)
        return need.at[tgt].set(True, mode="drop")

    def cond(c):
        return c[1]

    def body(c):
        y = step(c[0])
        return y, jnp.any(y != c[0])

    need = jax.lax.while_loop(cond, body, (seed, jnp.array(True)))[0]
    used = need & expandable
    prem_mask = jnp.zeros((n,), bool).at[jnp.where(used[:, None] & (bprem >= 0), bprem, n)].set(True, mode="drop")
    return jnp.sum(used, dtype=jnp.int32), jnp.sum(prem_mask, dtype=jnp.int32)


@functools.partial(jax.jit, static_argnames=("cost", "mesh", "axis"))
def _tables_jit(batch: ProblemBatch, h_dep_BxN, h_true_BxN, vp_dep_BxN, vp_true_BxN, *, cost: str, mesh, axis: str):
    n = batch.sizes[0]

    def one(axo, prem, head, goal, h_dep, h_true, vp_dep, vp_true):
        axiom_mask = jnp.zeros((n,), bool).at[jnp.where(axo >= 0, axo, n)].set(True, mode="drop")
        w = inside_weights(axiom_mask, prem, head, cost=cost)
        f_dep, f_true = w + h_dep, w + h_true
        # alpha = x_delta of A*'s own trace, with f = inside weight + h as the host reward uses
        a_dep = jnp.sum(jnp.where(vp_dep, f_dep, 0.0))
        a_true = jnp.sum(jnp.where(vp_true, f_true, 0.0))
        ref_pushes, ref_pops = _shortest(goal, axiom_mask, w, prem, head, cost=cost)
        alpha = jnp.stack([jnp.float32(0), ref_pushes.astype(jnp.float32), a_dep, a_true])
        return ScoreTables(w, f_dep, f_true, alpha, ref_pushes, ref_pops)

    return _over_batch(one, mesh, axis, 8)(batch.axiom_order_BxN, batch.premises_BxMxK, batch.head_BxM, batch.goal_B,
                                           h_dep_BxN, h_true_BxN, vp_dep_BxN, vp_true_BxN)


def score_tables(batch: ProblemBatch, *, cost: str = "max", queue: str = "auto", mesh=None,
                 axis: str = "data") -> ScoreTables:
    """Per-problem scoring constants: runs device A* with the dependency and the true heuristic (the compiled
    search is shared with `astar_batch`), then one small jit for weights, f, alpha and the shortest proof."""
    dep = astar_batch(batch, heuristic="dependency", cost=cost, queue=queue, mesh=mesh, axis=axis)
    true = astar_batch(batch, heuristic="true", cost=cost, queue=queue, mesh=mesh, axis=axis)
    return _tables_jit(batch, dep.h_BxN, true.h_BxN, dep.v_pops_BxN, true.v_pops_BxN, cost=cost, mesh=mesh,
                       axis=axis)


def _decay(x, alpha, correct):
    denom = jnp.where(alpha > 0, alpha, 1.0)
    ok = correct & jnp.isfinite(x) & jnp.isfinite(alpha)
    return jnp.where(ok, jnp.power(jnp.float32(0.5), (jnp.where(ok, x, 0.0) - jnp.where(ok, alpha, 0.0)) / denom), 0.0)


def _score_one(ids_T, length, *, axo, prem, head, goal, n_edges, tab: ScoreTables):
    n = axo.shape[0]
    t_max = ids_T.shape[0]
    bad_len = (length < 0) | (length > t_max)
    length = jnp.clip(length, 0, t_max)
    known0 = jnp.zeros((n,), bool).at[jnp.where(axo >= 0, axo, n)].set(True, mode="drop")

    def step(carry, xt):
        known, vp = carry
        e, t = xt
        active = t < length
        inrange = active & (e >= 0) & (e < n_edges)
        p = prem[jnp.clip(e, 0, prem.shape[0] - 1)]
        pm = (p >= 0) & inrange
        ok = inrange & jnp.all(known[jnp.maximum(p, 0)] | ~pm)
        known = known.at[jnp.where(ok, head[jnp.clip(e, 0, prem.shape[0] - 1)], n)].set(True, mode="drop")
        vp = vp.at[jnp.where(pm, p, n)].set(True, mode="drop")
        return (known, vp), (ok | ~active, active & ~inrange)

    (known, vp), (valid, bad_id) = jax.lax.scan(step, (known0, jnp.zeros((n,), bool)),
                                                (ids_T, jnp.arange(t_max, dtype=jnp.int32)))
    correct = jnp.all(valid) & (goal >= 0) & known[jnp.maximum(goal, 0)]
    n_vp = jnp.sum(vp, dtype=jnp.int32)
    x_dep = jnp.sum(jnp.where(vp, tab.f_dep_BxN, 0.0))
    x_true = jnp.sum(jnp.where(vp, tab.f_true_BxN, 0.0))
    x = jnp.stack([jnp.float32(0), length.astype(jnp.float32), x_dep, x_true])
    rewards = jnp.concatenate([correct.astype(jnp.float32)[None], _decay(x[1:], tab.alpha_Bx4[1:], correct)])
    nan = jnp.float32(jnp.nan)
    eff_push = jnp.where(length == 0, 1.0, jnp.minimum(1.0, tab.ref_pushes_B / jnp.maximum(length, 1)))
    eff_pops = jnp.where(n_vp == 0, 1.0, jnp.minimum(1.0, tab.ref_pops_B / jnp.maximum(n_vp, 1)))
    flags = (jnp.where(jnp.any(bad_id), FLAG_BAD_ID, 0) | jnp.where(length == 0, FLAG_EMPTY, 0)
             | jnp.where(bad_len, FLAG_BAD_LENGTH, 0) | jnp.where(jnp.isinf(x_dep), FLAG_INF_X_DEPENDENCY, 0)
             | jnp.where(jnp.isinf(x_true), FLAG_INF_X_TRUE, 0))
    return TraceScores(valid, correct, length, n_vp, x, rewards, jnp.where(correct, eff_push, nan),
                       jnp.where(correct, eff_pops, nan), flags.astype(jnp.int32))


@functools.partial(jax.jit, static_argnames=("mesh", "axis"))
def _score_jit(batch: ProblemBatch, tables: ScoreTables, ids_BxGxT, lengths_BxG, *, mesh, axis: str):
    def per_problem(axo, prem, head, goal, n_edges, tab, ids_GxT, len_G):
        fn = functools.partial(_score_one, axo=axo, prem=prem, head=head, goal=goal, n_edges=n_edges, tab=tab)
        return jax.vmap(fn)(ids_GxT, len_G)

    return _over_batch(per_problem, mesh, axis, 8)(batch.axiom_order_BxN, batch.premises_BxMxK, batch.head_BxM,
                                                   batch.goal_B, batch.n_edges_B, tables, ids_BxGxT, lengths_BxG)


def score_traces(batch: ProblemBatch, tables: ScoreTables, ids_BxGxT, lengths_BxG, *, mesh=None,
                 axis: str = "data") -> TraceScores:
    """Score G candidate traces per problem (hyperedge ids padded to T, `lengths_BxG` real step counts); jitted,
    pure, so it also runs inside a jitted GRPO step. With `mesh`, the batch axis is split over `axis`."""
    ids = jnp.asarray(ids_BxGxT, jnp.int32)
    lengths = jnp.asarray(lengths_BxG, jnp.int32)
    if ids.ndim != 3 or lengths.shape != ids.shape[:2] or ids.shape[0] != batch.batch:
        raise ValueError(f"ids_BxGxT {ids.shape} and lengths_BxG {lengths.shape}: expected [B, G, T] and [B, G] "
                         f"with B = {batch.batch} problems")
    return _score_jit(batch, tables, ids, lengths, mesh=mesh, axis=axis)


def pack_traces(traces: Sequence[Sequence[Sequence[int]]], *, max_len: int | None = None,
                bucket: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Host helper: traces[b][g] = list of hyperedge ids -> (ids_BxGxT int32, padded with -1; lengths_BxG).

    Every problem must have the same number G of candidates. T is the longest trace rounded up to a power of two
    (`bucket`), or `max_len`; a longer trace raises ValueError naming it.
    """
    if not traces:
        raise ValueError("pack_traces: no problems (expected traces[b][g] = list of hyperedge ids)")
    g = len(traces[0])
    for b, cands in enumerate(traces):
        if len(cands) != g:
            raise ValueError(f"pack_traces: problem {b} has {len(cands)} candidates, expected {g} like problem 0")
    longest = max((len(t) for cands in traces for t in cands), default=0)
    t_max = max_len if max_len is not None else (1 << max(0, longest - 1).bit_length() if bucket else longest)
    t_max = max(int(t_max), 1)
    ids = np.full((len(traces), g, t_max), -1, np.int32)
    lengths = np.zeros((len(traces), g), np.int32)
    for b, cands in enumerate(traces):
        for j, t in enumerate(cands):
            if len(t) > t_max:
                raise ValueError(f"pack_traces: trace of problem {b}, candidate {j} has {len(t)} steps, more than "
                                 f"max_len={t_max}")
            ids[b, j, :len(t)] = np.asarray(list(t), np.int64).clip(-2**31, 2**31 - 1)
            lengths[b, j] = len(t)
    return ids, lengths
