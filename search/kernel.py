"""Jitted batched A* over padded hypergraph tensors (issue 5, item 2): the device twin of `search.astar.search`.

One `lax.while_loop` per problem, vmapped over the batch: XLA runs the batched loop until every problem has popped
its goal or emptied its agenda, and finished problems are masked (their state is carried unchanged). Every step
reproduces the host exactly: axioms pushed in atom-id order (stamps 0..), pop by (f, h, LIFO stamp), stale pops skipped
and not counted, hyperedges completed by the popped atom visited in ascending id, push iff the head is off the chart
and the new weight is strictly below its current weight (several pushes of one head within a pop are resolved in id
order, as the sequential host loop does).

Outputs (`KernelResult`, batch-leading): weight_B (w*_G, inf if unprovable), trace_BxM (pushed hyperedge ids in
order, -1 pad), pushes_B, popped_BxN (atom ids in pop order, -1 pad), popped_f_BxN, pops_B, v_pops_BxN (Eq. 6 set as a
mask), v_pops_B (its size), x_delta_B (sum of f at pop time over V_pops), h_BxN (the heuristic used).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from search.kernel_heuristics import axiom_weight, edge_costs, heuristic_h, inside_weights
from search.kernel_queue import choose_queue
from search.kernel_tensors import HypergraphArrays, ProblemBatch

__all__ = ["KernelResult", "astar_batch", "astar_one", "device_heuristic", "from_hypergraph", "problem_arrays"]

_INF = jnp.inf


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KernelResult:
    weight_B: jax.Array
    trace_BxM: jax.Array
    pushes_B: jax.Array
    popped_BxN: jax.Array
    popped_f_BxN: jax.Array
    pops_B: jax.Array
    v_pops_BxN: jax.Array
    v_pops_B: jax.Array
    x_delta_B: jax.Array
    h_BxN: jax.Array


def from_hypergraph(hg, goal_id: int, *, name: str = "") -> HypergraphArrays:
    """Host `search.hypergraph.Hypergraph` + goal id -> exact-size integer arrays (axioms are ids 0..num_axioms-1,
    pushed in id order by the host)."""
    return HypergraphArrays(n_atoms=hg.num_atoms, axiom_order=tuple(range(hg.num_axioms)),
                            premises=tuple(hg.edge_premises), heads=tuple(hg.edge_head), goal=int(goal_id),
                            name=name)


def problem_arrays(program, goal, *, name: str = "") -> HypergraphArrays:
    """(search.logic.Program or compiled Hypergraph, goal Atom) -> HypergraphArrays via the host compile."""
    from search.hypergraph import Hypergraph, compile_program

    hg = program if isinstance(program, Hypergraph) else compile_program(program)
    return from_hypergraph(hg, hg.goal_id(goal), name=name)


def astar_one(axiom_order_N, premises_MxK, head_M, out_edges_NxD, goal, h_N, *, cost: str, queue):
    """A* on one padded problem. Returns (weight, trace_M, pushes, popped_N, popped_f_N, pops)."""
    n, d = out_edges_NxD.shape
    m = head_M.shape[0]
    a0 = axiom_weight(cost)
    ax_ok = axiom_order_N >= 0
    ax = jnp.maximum(axiom_order_N, 0)
    w = jnp.full((n,), _INF, jnp.float32).at[jnp.where(ax_ok, ax, n)].set(a0, mode="drop")
    q = queue.push_initial(queue.init(), ax, a0 + h_N[ax], h_N[ax], ax_ok)
    state = dict(q=q, w=w, chart=jnp.zeros((n,), bool), trace=jnp.full((m,), -1, jnp.int32),
                 n_trace=jnp.zeros((), jnp.int32), popped=jnp.full((n,), -1, jnp.int32),
                 popped_f=jnp.full((n,), _INF, jnp.float32), n_pops=jnp.zeros((), jnp.int32),
                 done=jnp.array(False))
    earlier_DxD = jnp.tril(jnp.ones((d, d), bool), k=-1)  # [j, i]: i comes before j

    def cond(s):
        return ~s["done"] & queue.nonempty(s["q"])

    def body(s):
        q, a, f, _, ok = queue.pop(s["q"])
        new = ok & ~s["chart"][a]  # a stale entry (atom already in the chart) is skipped, not counted
        chart = s["chart"].at[a].set(s["chart"][a] | new)
        slot = jnp.where(new, s["n_pops"], n)
        popped = s["popped"].at[slot].set(a, mode="drop")
        popped_f = s["popped_f"].at[slot].set(f, mode="drop")
        is_goal = new & (a == goal)
        expand = new & ~is_goal
        es = out_edges_NxD[a]
        ev = (es >= 0) & expand
        ei = jnp.maximum(es, 0)
        prem = premises_MxK[ei]
        pm = prem >= 0
        all_in = jnp.all(chart[jnp.maximum(prem, 0)] | ~pm, axis=1)
        c = head_M[ei]
        ci = jnp.maximum(c, 0)
        cand = ev & all_in & ~chart[ci]
        g = edge_costs(s["w"], prem, cost=cost)
        same = earlier_DxD & (c[None, :] == c[:, None]) & cand[None, :]
        prior = jnp.min(jnp.where(same, g[None, :], _INF), axis=1)
        push = cand & (g < jnp.minimum(s["w"][ci], prior))
        w = s["w"].at[jnp.where(push, ci, n)].min(g, mode="drop")
        q = queue.push_many(q, ci, g + h_N[ci], h_N[ci], push)
        tpos = jnp.where(push, s["n_trace"] + jnp.cumsum(push.astype(jnp.int32)) - 1, m)
        trace = s["trace"].at[tpos].set(es, mode="drop")
        return dict(q=q, w=w, chart=chart, trace=trace, n_trace=s["n_trace"] + jnp.sum(push, dtype=jnp.int32),
                    popped=popped, popped_f=popped_f, n_pops=s["n_pops"] + new.astype(jnp.int32),
                    done=s["done"] | is_goal)

    s = jax.lax.while_loop(cond, body, state)
    weight = jnp.where(s["done"], s["w"][jnp.maximum(goal, 0)], _INF)
    return weight, s["trace"], s["n_trace"], s["popped"], s["popped_f"], s["n_pops"]


def _v_pops(trace_M, n_trace, premises_MxK, popped_N, popped_f_N, n: int):
    """V_pops mask [N] (distinct premises of the trace), its size, and x_delta = sum of f at pop time over it."""
    m = trace_M.shape[0]
    ok = (jnp.arange(m) < n_trace) & (trace_M >= 0)
    prem = premises_MxK[jnp.maximum(trace_M, 0)]
    tgt = jnp.where(ok[:, None] & (prem >= 0), prem, n)
    mask = jnp.zeros((n,), bool).at[tgt].set(True, mode="drop")
    f_at_pop = jnp.zeros((n,), jnp.float32).at[jnp.where(popped_N >= 0, popped_N, n)].set(popped_f_N, mode="drop")
    return mask, jnp.sum(mask, dtype=jnp.int32), jnp.sum(jnp.where(mask, f_at_pop, 0.0))


def _axiom_mask(axo, n: int):
    return jnp.zeros((n,), bool).at[jnp.where(axo >= 0, axo, n)].set(True, mode="drop")


def _over_batch(fn, mesh, axis: str, n_args: int):
    """vmap `fn` over the batch; with a mesh, run it per shard of `axis` (shard_map), so every device loops only
    until its own problems finish and no collective runs inside the search loop."""
    batched = jax.vmap(fn)
    if mesh is None:
        return batched
    spec = jax.sharding.PartitionSpec(axis)
    # check_vma=False: loop carries start as constants and become per-shard values; every value here is per-shard
    return jax.shard_map(batched, mesh=mesh, in_specs=(spec,) * n_args, out_specs=spec, check_vma=False)


def _check_mesh(batch: ProblemBatch, mesh, axis: str) -> None:
    if mesh is not None:
        shards = mesh.shape[axis]
        if batch.batch % shards:
            raise ValueError(f"batch of {batch.batch} problems does not split over mesh axis {axis!r} of size "
                             f"{shards}: pack with pack_batch(..., pad_batch_to={shards})")


@functools.partial(jax.jit, static_argnames=("heuristic", "cost", "mesh", "axis"))
def _heuristic_jit(batch: ProblemBatch, *, heuristic: str, cost: str, mesh, axis: str):
    n = batch.sizes[0]

    def one(axo, prem, head, goal):
        axiom_mask = _axiom_mask(axo, n)
        w_in = inside_weights(axiom_mask, prem, head, cost=cost) if heuristic == "true" else None
        return heuristic_h(heuristic, goal=goal, axiom_mask_N=axiom_mask, premises_MxK=prem, head_M=head,
                           cost=cost, w_N=w_in)

    return _over_batch(one, mesh, axis, 4)(batch.axiom_order_BxN, batch.premises_BxMxK, batch.head_BxM,
                                           batch.goal_B)


def device_heuristic(batch: ProblemBatch, *, heuristic: str, cost: str = "max", mesh=None,
                     axis: str = "data") -> jax.Array:
    """h_BxN float32 for heuristic "zero" | "dependency" | "true", computed on device (jitted per heuristic)."""
    if heuristic not in ("zero", "dependency", "true"):
        raise ValueError(f"heuristic {heuristic!r} is not one of ('zero', 'dependency', 'true')")
    axiom_weight(cost)
    _check_mesh(batch, mesh, axis)
    return _heuristic_jit(batch, heuristic=heuristic, cost=cost, mesh=mesh, axis=axis)


@functools.partial(jax.jit, static_argnames=("cost", "queue_kind", "mesh", "axis"))
def _astar_jit(batch: ProblemBatch, h_BxN, *, cost: str, queue_kind: str, mesh, axis: str) -> KernelResult:
    n, m, k, d = batch.sizes
    queue = choose_queue(n + m, max_push=d, kind=queue_kind)

    def one(axo, prem, head, oute, goal, h):
        wg, trace, npush, popped, popped_f, npop = astar_one(axo, prem, head, oute, goal, h, cost=cost, queue=queue)
        vmask, vcount, xd = _v_pops(trace, npush, prem, popped, popped_f, n)
        return KernelResult(wg, trace, npush, popped, popped_f, npop, vmask, vcount, xd, h)

    return _over_batch(one, mesh, axis, 6)(batch.axiom_order_BxN, batch.premises_BxMxK, batch.head_BxM,
                                           batch.out_edges_BxNxD, batch.goal_B, h_BxN)


def astar_batch(batch: ProblemBatch, *, heuristic: str = "zero", cost: str = "max", queue: str = "auto",
                h_BxN=None, mesh=None, axis: str = "data") -> KernelResult:
    """Batched A* on device. The search is jitted once per (padded sizes, cost, queue); heuristics are separate
    small jits, so the three heuristics share one compiled search.

    heuristic: "zero" | "dependency" | "true" (computed on device) or "given" with `h_BxN` float32 [B, N] (entries
    must be >= 0 or +inf; NaN or negative values raise). queue: "auto" (dense up to a capacity, blocked beyond),
    "dense" or "blocked". mesh: run data-parallel with the batch split over mesh axis `axis` (shard_map); place
    `batch` with NamedSharding(mesh, PartitionSpec(axis)) to avoid a transfer.
    """
    axiom_weight(cost)
    if queue not in ("auto", "dense", "blocked"):
        raise ValueError(f"unknown queue kind {queue!r} (expected 'auto', 'dense' or 'blocked')")
    _check_mesh(batch, mesh, axis)
    if heuristic == "given":
        if h_BxN is None:
            raise ValueError("heuristic='given' needs h_BxN, a float32 [batch, N] array of heuristic values")
        _check_h(h_BxN, batch)
        h_BxN = jnp.asarray(h_BxN, jnp.float32)
    else:
        h_BxN = device_heuristic(batch, heuristic=heuristic, cost=cost, mesh=mesh, axis=axis)
    return _astar_jit(batch, h_BxN, cost=cost, queue_kind=queue, mesh=mesh, axis=axis)


def _check_h(h_BxN, batch: ProblemBatch) -> None:
    import numpy as np

    h = np.asarray(h_BxN)
    want = (batch.batch, batch.sizes[0])
    if h.shape != want:
        raise ValueError(f"h_BxN has shape {h.shape}, expected {want} (batch, padded atoms)")
    n_atoms = np.asarray(batch.n_atoms_B)
    real = np.arange(want[1])[None, :] < n_atoms[:, None]
    bad = real & (np.isnan(h) | (h < 0))
    if bad.any():
        b, i = map(int, np.argwhere(bad)[0])
        raise ValueError(f"heuristic value h[{b}, {i}] = {h[b, i]} for problem {b}, atom {i}: expected a "
                         "non-negative number or +inf (NaN and negative values have no A* meaning)")
