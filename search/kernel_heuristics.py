"""Device heuristics and inside weights for the A* kernel (issue 5, item 3), for ONE problem (vmapped by callers).

Same definitions as the host `search.heuristics` (the reference):
* inside weights: w = a0 on axioms (0 for cost "max", 1 for "sum"), then Bellman-Ford style relaxation
  w[head] <- min(w[head], g(w[premises])) until nothing changes (a fixpoint equals Knuth's Dijkstra result);
* "zero": h = 0;
* "dependency": min-plus relaxation on the unary relaxed graph over the Herbrand base (relaxed_src_E ->
  relaxed_dst_E over N' = N + E vertices, the first N being the atoms of M; see search.heuristics.relaxed_graph):
  h[goal] = 0, h[src] <- min(h[src], 1 + h[dst]) until nothing changes, then the first N entries
  (host: BFS distance to the goal);
* "true": on-path marking from the goal over tight hyperedges (g(premise weights) == w[head]); on-path h = w_G - w,
  off-path h = inf; all inf when the goal is not a theorem (goal id -1).

Shapes: premises_MxK (int32, -1 pad), head_M (-1 pad), n_atoms N from the array sizes; results are float32 [N].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from search.kernel_rows import put_rows, take_rows

__all__ = ["edge_costs", "inside_weights", "dependency_h", "true_h", "heuristic_h", "heuristic_batch", "HEURISTICS",
           "axiom_weight"]

HEURISTICS = ("zero", "dependency", "true")
_INF = jnp.inf


def axiom_weight(cost: str) -> float:
    if cost not in ("max", "sum"):
        raise ValueError(f"cost {cost!r} is not one of ('max', 'sum')")
    return 0.0 if cost == "max" else 1.0


def edge_costs(w_N, premises_MxK, *, cost: str):
    """g(w[premises]) per hyperedge: 1 + max (cost "max") or 1 + sum ("sum"); padded slots count as 0."""
    pm = premises_MxK >= 0
    pw = jnp.where(pm, w_N[jnp.maximum(premises_MxK, 0)], 0.0)
    return 1.0 + (jnp.max(pw, axis=1) if cost == "max" else jnp.sum(pw, axis=1))


def _fixpoint(step, x0):
    """Iterate x <- step(x) until it stops changing."""
    def cond(c):
        return c[1]

    def body(c):
        x = c[0]
        y = step(x)
        return y, jnp.any(y != x)

    return jax.lax.while_loop(cond, body, (x0, jnp.array(True)))[0]


def inside_weights(axiom_mask_N, premises_MxK, head_M, *, cost: str):
    """Shortest-proof weight of every atom, float32 [N] (inf for atoms without a proof and padding)."""
    n = axiom_mask_N.shape[0]
    w0 = jnp.where(axiom_mask_N, axiom_weight(cost), _INF).astype(jnp.float32)
    tgt = jnp.where(head_M >= 0, head_M, n)  # padding edges write out of bounds: dropped

    def step(w):
        return w.at[tgt].min(edge_costs(w, premises_MxK, cost=cost), mode="drop")

    return _fixpoint(step, w0)


def dependency_h(goal, relaxed_src_E, relaxed_dst_E, n_atoms: int):
    """Distance to the goal in the unary relaxed graph, float32 [N] (inf if unreachable or goal == -1).

    Vertex ids < n_atoms are atoms; extra vertices have ids in [n_atoms, n_atoms + E) (each is an edge source)."""
    nv = n_atoms + relaxed_src_E.shape[0]
    idx = jnp.arange(nv)
    h0 = jnp.where((idx == goal) & (goal >= 0), 0.0, _INF).astype(jnp.float32)
    valid = (relaxed_src_E >= 0) & (relaxed_dst_E >= 0)
    tgt = jnp.where(valid, relaxed_src_E, nv)
    dst = jnp.maximum(relaxed_dst_E, 0)

    def step(h):
        return h.at[tgt].min(1.0 + h[dst], mode="drop")

    return _fixpoint(step, h0)[:n_atoms]


def true_h(goal, w_N, premises_MxK, head_M, *, cost: str):
    """Outside weights of on-path items (w_G - w), inf elsewhere, float32 [N]."""
    n = w_N.shape[0]
    hs = jnp.maximum(head_M, 0)
    tight = (head_M >= 0) & (edge_costs(w_N, premises_MxK, cost=cost) == w_N[hs])
    idx = jnp.arange(n)
    on0 = (idx == goal) & (goal >= 0)
    tgt = jnp.where((premises_MxK >= 0) & tight[:, None], premises_MxK, n)

    def step(on):
        src = jnp.broadcast_to(on[hs][:, None], tgt.shape)
        return on.at[tgt].max(src, mode="drop")

    on = _fixpoint(step, on0)
    wg = w_N[jnp.maximum(goal, 0)]
    return jnp.where(on, wg - w_N, _INF).astype(jnp.float32)


def heuristic_h(name: str, *, goal, axiom_mask_N, premises_MxK, head_M, cost: str, w_N=None,
                relaxed_src_E=None, relaxed_dst_E=None):
    """h [N] for heuristic `name` ("zero" | "dependency" | "true"); `w_N` reuses precomputed inside weights.
    "dependency" needs the relaxed graph's edges (ProblemBatch.relaxed_src_BxE / relaxed_dst_BxE rows)."""
    n = axiom_mask_N.shape[0]
    if name == "zero":
        return jnp.zeros((n,), jnp.float32)
    if name == "dependency":
        if relaxed_src_E is None or relaxed_dst_E is None:
            raise ValueError("heuristic 'dependency' needs relaxed_src_E and relaxed_dst_E (the relaxed graph)")
        return dependency_h(goal, relaxed_src_E, relaxed_dst_E, n)
    if name == "true":
        if w_N is None:
            w_N = inside_weights(axiom_mask_N, premises_MxK, head_M, cost=cost)
        return true_h(goal, w_N, premises_MxK, head_M, cost=cost)
    raise ValueError(f"heuristic {name!r} is not one of {HEURISTICS}")


def heuristic_batch(name: str, *, goal_B, axiom_order_BxN, premises_BxMxK, head_BxM, cost: str,
                    relaxed_src_BxE, relaxed_dst_BxE):
    """h_BxN float32 for a whole padded batch: the same fixpoints as `heuristic_h` (one problem), written on the
    batch axis with flat scatters, because the relaxations are scatter-bound and run once per kernel call."""
    b, n = axiom_order_BxN.shape
    if name == "zero":
        return jnp.zeros((b, n), jnp.float32)
    if name == "dependency":
        nv = n + relaxed_src_BxE.shape[1]
        h0 = jnp.where((jnp.arange(nv)[None, :] == goal_B[:, None]) & (goal_B >= 0)[:, None], 0.0, _INF)
        valid = (relaxed_src_BxE >= 0) & (relaxed_dst_BxE >= 0)

        def relax(h):
            return put_rows(h, relaxed_src_BxE, 1.0 + take_rows(h, relaxed_dst_BxE), valid, "min")

        return _fixpoint(relax, h0.astype(jnp.float32))[:, :n]
    if name != "true":
        raise ValueError(f"heuristic {name!r} is not one of {HEURISTICS}")
    pm = premises_BxMxK >= 0
    has_head = head_BxM >= 0

    def costs(w):
        pw = jnp.where(pm, take_rows(w, premises_BxMxK), 0.0)
        return 1.0 + (jnp.max(pw, axis=2) if cost == "max" else jnp.sum(pw, axis=2))

    ax = axiom_order_BxN >= 0
    w0 = put_rows(jnp.full((b, n), _INF, jnp.float32), axiom_order_BxN,
                  jnp.full((b, n), axiom_weight(cost), jnp.float32), ax, "min")
    w = _fixpoint(lambda w: put_rows(w, head_BxM, costs(w), has_head, "min"), w0)
    tight = has_head & (costs(w) == take_rows(w, head_BxM))
    on0 = ((jnp.arange(n)[None, :] == goal_B[:, None]) & (goal_B >= 0)[:, None]).astype(jnp.float32)
    on_path = tight[:, :, None] & pm

    def mark(on):  # 1.0 on the goal's tight sub-hypergraph: min over -on spreads the marks to premises
        src = jnp.broadcast_to(take_rows(on, head_BxM)[:, :, None], premises_BxMxK.shape)
        return -put_rows(-on, premises_BxMxK, -src, on_path, "min")

    on = _fixpoint(mark, on0) > 0
    wg = take_rows(w, jnp.maximum(goal_B, 0)[:, None])
    return jnp.where(on, wg - w, _INF).astype(jnp.float32)
