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

from search.kernel_frontier import astar_frontier, initial_agenda
from search.kernel_heuristics import axiom_weight, heuristic_batch, inside_weights
from search.kernel_queue import PackedQueue, choose_queue
from search.kernel_rows import take_rows
from search.kernel_tensors import HypergraphArrays, ProblemBatch

__all__ = ["KernelResult", "astar_batch", "astar_core", "device_heuristic", "from_hypergraph", "problem_arrays"]

_INF = jnp.inf
QUEUE_KINDS = ("auto", "frontier", "dense", "blocked", "packed")


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
    from search.heuristics import relaxed_graph

    rg = relaxed_graph(hg, int(goal_id))
    return HypergraphArrays(n_atoms=hg.num_atoms, axiom_order=tuple(range(hg.num_axioms)),
                            premises=tuple(hg.edge_premises), heads=tuple(hg.edge_head), goal=int(goal_id),
                            name=name, relaxed_extra=len(rg.extra_atoms), relaxed_src=rg.src, relaxed_dst=rg.dst)


def problem_arrays(program, goal, *, name: str = "") -> HypergraphArrays:
    """(search.logic.Program or compiled Hypergraph, goal Atom) -> HypergraphArrays via the host compile."""
    from search.hypergraph import Hypergraph, compile_program

    hg = program if isinstance(program, Hypergraph) else compile_program(program)
    return from_hypergraph(hg, hg.goal_id(goal), name=name)


def astar_core(axiom_order_BxN, premises_BxMxK, head_BxM, out_edges_BxNxD, goal_B, h_BxN, *, cost: str, queue):
    """A* on a padded batch, one pop per unfinished problem per loop step; finished rows are masked (their
    scatters are dropped), so nothing is copied per step beyond what a pop touches.

    Returns (weight_B, trace_BxM, pushes_B, popped_BxN, popped_f_BxN, pops_B).
    """
    b, n, d = out_edges_BxNxD.shape
    m = head_BxM.shape[1]
    rows = jnp.arange(b)[:, None]
    w, f, stamp, live, ax_ok = initial_agenda(axiom_order_BxN, h_BxN, cost=cost)
    k = premises_BxMxK.shape[2]
    # per atom, its out-edges' premises and heads as contiguous rows: a pop reads three slices, not three
    # dependent element gathers
    oe = out_edges_BxNxD.reshape(b, n * d)
    out_prem = take_rows(premises_BxMxK.reshape(b, m * k), oe[:, :, None] * k + jnp.arange(k))
    out_prem = jnp.where((oe >= 0)[:, :, None], out_prem, -1).reshape(b, n, d * k)
    out_head = jnp.where(oe >= 0, take_rows(head_BxM, oe), -1).reshape(b, n, d)
    # cw = weight of chart items, inf off the chart: one gather answers "in the chart?" and "with what weight?"
    state = dict(q=queue.init(f, h_BxN, stamp, live), w=w, cw=jnp.full((b, n), _INF, jnp.float32),
                 counter=jnp.sum(ax_ok, axis=1, dtype=jnp.int32), trace=jnp.full((b, m), -1, jnp.int32),
                 n_trace=jnp.zeros((b,), jnp.int32), popped=jnp.full((b, n), -1, jnp.int32),
                 popped_f=jnp.full((b, n), _INF, jnp.float32), n_pops=jnp.zeros((b,), jnp.int32),
                 done=jnp.zeros((b,), bool), proved=jnp.zeros((b,), bool))
    earlier_DxD = jnp.tril(jnp.ones((d, d), bool), k=-1)  # [j, i]: i comes before j
    later_DxD = earlier_DxD.T

    def row(x_BxNxL, a_B):
        return jnp.take_along_axis(x_BxNxL, jnp.clip(a_B, 0, n - 1)[:, None, None], axis=1)[:, 0]

    def cond(s):
        return jnp.any(~s["done"])

    def body(s):
        q, a, fa, ok = queue.pop(s["q"])
        ok = ok & ~s["done"]
        done = s["done"] | ~ok
        a_col = jnp.where(ok, a, n)[:, None]
        cw = s["cw"].at[rows, a_col].set(take_rows(s["w"], a[:, None]), mode="drop")
        slot = jnp.where(ok, s["n_pops"], n)[:, None]
        popped = s["popped"].at[rows, slot].set(a[:, None], mode="drop")
        popped_f = s["popped_f"].at[rows, slot].set(fa[:, None], mode="drop")
        is_goal = ok & (a == goal_B)
        expand = ok & ~is_goal
        es = row(out_edges_BxNxD, a)  # [B, D]
        ev = (es >= 0) & expand[:, None]
        prem = jnp.where(ev[:, :, None], row(out_prem, a).reshape(b, d, k), -1)  # [B, D, K]
        pm = prem >= 0
        pcw = take_rows(cw, prem)
        all_in = jnp.all((pcw < _INF) | ~pm, axis=2)
        c = row(out_head, a)
        cand = ev & all_in & ~(take_rows(cw, c) < _INF)
        pw = jnp.where(pm, pcw, 0.0)
        g = 1.0 + (jnp.max(pw, axis=2) if cost == "max" else jnp.sum(pw, axis=2))
        same = (c[:, None, :] == c[:, :, None]) & cand[:, None, :]  # [B, j, i]
        prior = jnp.min(jnp.where(same & earlier_DxD, g[:, None, :], _INF), axis=2)
        push = cand & (g < jnp.minimum(take_rows(s["w"], c), prior))
        # a head pushed twice in one pop keeps its last (cheapest, newest) entry, as the host heap pops it first
        last = push & ~jnp.any(same & push[:, None, :] & later_DxD, axis=2)
        rank = jnp.cumsum(push.astype(jnp.int32), axis=1) - 1
        c_col = jnp.where(last, c, n)
        w = s["w"].at[rows, c_col].set(g, mode="drop")
        q = queue.decrease(q, c, g + take_rows(h_BxN, c), s["counter"][:, None] + rank, last)
        tpos = jnp.where(push, s["n_trace"][:, None] + rank, m)
        trace = s["trace"].at[rows, tpos].set(es, mode="drop")
        n_push = jnp.sum(push, axis=1, dtype=jnp.int32)
        return dict(q=q, w=w, cw=cw, counter=s["counter"] + n_push, trace=trace, n_trace=s["n_trace"] + n_push,
                    popped=popped, popped_f=popped_f, n_pops=s["n_pops"] + ok.astype(jnp.int32),
                    done=done | is_goal, proved=s["proved"] | is_goal)

    s = jax.lax.while_loop(cond, body, state)
    weight = jnp.where(s["proved"], take_rows(s["w"], jnp.maximum(goal_B, 0)[:, None])[:, 0], _INF)
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


def _over_shards(fn, mesh, axis: str, n_args: int):
    """Run batched `fn` on the whole batch, or with a mesh per shard of `axis` (shard_map): every device loops
    only until its own problems finish and no collective runs inside a search loop."""
    if mesh is None:
        return fn
    spec = jax.sharding.PartitionSpec(axis)
    # check_vma=False: loop carries start as constants and become per-shard values; every value here is per-shard
    return jax.shard_map(fn, mesh=mesh, in_specs=(spec,) * n_args, out_specs=spec, check_vma=False)


def _over_batch(fn, mesh, axis: str, n_args: int):
    """vmap a one-problem `fn` over the batch, per shard when a mesh is given."""
    return _over_shards(jax.vmap(fn), mesh, axis, n_args)


def _check_mesh(batch: ProblemBatch, mesh, axis) -> None:
    """`axis` is a mesh axis name or a tuple of names (e.g. ("data", "fsdp")) that together split the batch."""
    if mesh is not None:
        names = axis if isinstance(axis, tuple) else (axis,)
        missing = [a for a in names if a not in mesh.shape]
        if missing:
            raise ValueError(f"mesh axes {missing} not in the mesh {dict(mesh.shape)} (expected the batch axis)")
        shards = 1
        for a in names:
            shards *= mesh.shape[a]
        if batch.batch % shards:
            raise ValueError(f"batch of {batch.batch} problems does not split over mesh axis {axis!r} of size "
                             f"{shards}: pack with pack_batch(..., pad_batch_to={shards})")


@functools.partial(jax.jit, static_argnames=("heuristic", "cost", "mesh", "axis"))
def _heuristic_jit(batch: ProblemBatch, *, heuristic: str, cost: str, mesh, axis: str):
    n = batch.sizes[0]

    def run(axo, prem, head, goal, rsrc, rdst):
        return heuristic_batch(heuristic, goal_B=goal, axiom_order_BxN=axo, premises_BxMxK=prem, head_BxM=head,
                               cost=cost, relaxed_src_BxE=rsrc, relaxed_dst_BxE=rdst)

    return _over_shards(run, mesh, axis, 6)(batch.axiom_order_BxN, batch.premises_BxMxK, batch.head_BxM,
                                            batch.goal_B, batch.relaxed_src_BxE, batch.relaxed_dst_BxE)


def device_heuristic(batch: ProblemBatch, *, heuristic: str, cost: str = "max", mesh=None,
                     axis: str = "data") -> jax.Array:
    """h_BxN float32 for heuristic "zero" | "dependency" | "true", computed on device (jitted per heuristic)."""
    if heuristic not in ("zero", "dependency", "true"):
        raise ValueError(f"heuristic {heuristic!r} is not one of ('zero', 'dependency', 'true')")
    axiom_weight(cost)
    _check_mesh(batch, mesh, axis)
    return _heuristic_jit(batch, heuristic=heuristic, cost=cost, mesh=mesh, axis=axis)


def _predicted_pops(axo, prem, head, goal, h, *, cost: str):
    """Per problem, the number of atoms A* can pop: f = w + h <= w*_G (every atom with a proof when the goal has
    none). An upper bound that tracks the real pop count closely, used only to group problems of similar work."""
    n = axo.shape[0]
    w = inside_weights(_axiom_mask(axo, n), prem, head, cost=cost)
    wg = jnp.where(goal >= 0, w[jnp.maximum(goal, 0)], _INF)
    bound = jnp.where(wg < _INF, wg, _INF)
    return jnp.sum(jnp.where(bound < _INF, w + h <= bound, w < _INF), dtype=jnp.int32)


def _in_sub_batches(search, args, *, sub_batches: int, cost: str):
    """Run `search` on `sub_batches` groups of rows with similar predicted work, one while_loop each, so a group
    loops only as long as ITS slowest problem instead of the whole batch's (the straggler cost); results are put
    back in the original row order. Rows are sorted by `_predicted_pops` (on device, once per call)."""
    b = args[0].shape[0]
    k = max((s for s in range(1, sub_batches + 1) if b % s == 0), default=1)
    if k == 1:
        return search(*args)
    axo, prem, head, _, goal, h = args
    work = jax.vmap(functools.partial(_predicted_pops, cost=cost))(axo, prem, head, goal, h)
    order = jnp.argsort(work)
    inverse = jnp.zeros_like(order).at[order].set(jnp.arange(b, dtype=order.dtype))
    size = b // k
    parts = []
    for i in range(k):
        rows = order[i * size:(i + 1) * size]
        parts.append(search(*(x[rows] for x in args)))
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0)[inverse], *parts)


@functools.partial(jax.jit, static_argnames=("cost", "queue_kind", "packed_bits", "mesh", "axis", "sub_batches",
                                             "frontier_width", "frontier_events"))
def _astar_jit(batch: ProblemBatch, h_BxN, *, cost: str, queue_kind: str, packed_bits, mesh,
               axis: str, sub_batches: int, frontier_width: int, frontier_events: int) -> KernelResult:
    n = batch.sizes[0]
    queue = None if queue_kind == "frontier" else choose_queue(n, kind=queue_kind, packed_bits=packed_bits)

    def search(axo, prem, head, oute, goal, h):
        if queue is None:
            return astar_frontier(axo, prem, head, oute, goal, h, cost=cost, width=frontier_width,
                                  events=frontier_events)
        return astar_core(axo, prem, head, oute, goal, h, cost=cost, queue=queue)

    def run(axo, prem, head, oute, goal, h):
        out = _in_sub_batches(search, (axo, prem, head, oute, goal, h), sub_batches=sub_batches, cost=cost)
        wg, trace, npush, popped, popped_f, npop = out
        vmask, vcount, xd = jax.vmap(functools.partial(_v_pops, n=n))(trace, npush, prem, popped, popped_f)
        return KernelResult(wg, trace, npush, popped, popped_f, npop, vmask, vcount, xd, h)

    return _over_shards(run, mesh, axis, 6)(batch.axiom_order_BxN, batch.premises_BxMxK, batch.head_BxM,
                                            batch.out_edges_BxNxD, batch.goal_B, h_BxN)


def astar_batch(batch: ProblemBatch, *, heuristic: str = "zero", cost: str = "max", queue: str = "auto",
                h_BxN=None, mesh=None, axis: str = "data", sub_batches: int = 1,
                frontier_width: int = 16, frontier_events: int = 32) -> KernelResult:
    """Batched A* on device. The search is jitted once per (padded sizes, cost, queue); heuristics are separate
    small jits, so the three heuristics share one compiled search.

    heuristic: "zero" | "dependency" | "true" (computed on device) or "given" with `h_BxN` float32 [B, N] (entries
    must be >= 0 or +inf; NaN or negative values raise). queue: "auto", "frontier", "dense", "blocked" or
    "packed". "frontier" pops up to `frontier_width` items of equal (f, h) per loop step whose out-edges number at
    most `frontier_events` (at least the padded out-degree; search.kernel_frontier; exact for every heuristic,
    fastest when pushes never tie the frontier's key, i.e. h = 0); the others pop one
    item per step ("dense" arg-min, "packed" one int32 key per atom, "blocked" for thousands of atoms). "auto":
    frontier for the zero heuristic (Dijkstra: one step per distinct weight instead of one per pop), else packed
    when keys are small integers or dense up to a capacity, blocked beyond. `sub_batches` > 1 runs groups of
    problems with similar predicted work in separate loops (fewer straggler steps, one more compiled loop each).
    mesh: run data-parallel with the batch split over mesh axis `axis` (shard_map); place
    `batch` with NamedSharding(mesh, PartitionSpec(axis)) to avoid a transfer.
    """
    axiom_weight(cost)
    if queue == "auto" and heuristic == "zero":
        queue = "frontier"
    if queue not in QUEUE_KINDS:
        raise ValueError(f"unknown queue kind {queue!r} (expected one of {QUEUE_KINDS})")
    _check_mesh(batch, mesh, axis)
    n, m = batch.sizes[:2]
    max_h = n  # built-in heuristics under cost "max" are integers <= the number of atoms
    if heuristic == "given":
        if h_BxN is None:
            raise ValueError("heuristic='given' needs h_BxN, a float32 [batch, N] array of heuristic values")
        max_h = _check_h(h_BxN, batch)
        h_BxN = jnp.asarray(h_BxN, jnp.float32)
    else:
        h_BxN = device_heuristic(batch, heuristic=heuristic, cost=cost, mesh=mesh, axis=axis)
    packed = None
    if cost == "max" and max_h is not None:
        packed = PackedQueue.bits_for(n_atoms=n, n_edges=m, max_h=max_h)
    return _astar_jit(batch, h_BxN, cost=cost, queue_kind=queue, packed_bits=packed, mesh=mesh, axis=axis,
                      sub_batches=int(sub_batches), frontier_width=int(frontier_width),
                      frontier_events=int(frontier_events))


def _check_h(h_BxN, batch: ProblemBatch):
    """Validate a given heuristic; return its largest finite value if all finite values are integers (else None)."""
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
    finite = h[real & np.isfinite(h)]
    if finite.size and not np.all(finite == np.round(finite)):
        return None
    return int(finite.max()) if finite.size else 0
