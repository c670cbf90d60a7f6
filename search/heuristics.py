"""Cost functions, inside weights and the three A* heuristics (paper §2.2, §3.2, Fig. 7), as lists indexed by atom id.

* cost "max": g = 1 + max(premise weights), axiom weight 0 (Eq. 2, proof depth).
* cost "sum": g2 = 1 + sum(premise weights), axiom weight 1 (appendix A.2, number of vertices).
* "zero": h = 0 everywhere (Dijkstra).
* "dependency": relax every hyperedge of the hypergraph into one unary edge per distinct premise (premise -> head,
  cost g(w) = 1 + w under both cost functions); h = shortest distance to the goal in that graph (inf if none).
  The relaxed graph is built on the vertices of the original hypergraph (atoms of M), as the paper's definition
  ("the corresponding vertices in the original hypergraph") reads. Consistent, so A* stays exact.
* "true": the outside weights of Fig. 7: an item is on-path if it is the goal or a premise of a tight hyperedge
  (g(premise weights) == w(head)) whose head is on-path; on-path items get h = w*_G - w, all others h = inf.
  With an unprovable goal every item is off-path (h = inf).
"""

from __future__ import annotations

import heapq
import math
from collections import deque

from search.hypergraph import Hypergraph

__all__ = ["COSTS", "HEURISTICS", "axiom_weight", "inside_weights", "heuristic_values", "tight_edges"]

COSTS = ("max", "sum")
HEURISTICS = ("zero", "dependency", "true")
INF = math.inf


def _check_cost(cost: str) -> None:
    if cost not in COSTS:
        raise ValueError(f"cost {cost!r} is not one of {COSTS}")


def axiom_weight(cost: str) -> int:
    _check_cost(cost)
    return 0 if cost == "max" else 1


def inside_weights(hg: Hypergraph, *, cost: str = "max") -> list[float]:
    """Weight w(c) of the shortest proof of every atom (Knuth's generalization of Dijkstra); ints, inf if none."""
    _check_cost(cost)
    n = hg.num_atoms
    w: list[float] = [INF] * n
    done = [False] * n
    remaining = list(hg.edge_num_distinct)
    a0 = axiom_weight(cost)
    heap = [(a0, i) for i in range(hg.num_axioms)]
    for i in range(hg.num_axioms):
        w[i] = a0
    use_max = cost == "max"
    prem, head, byp = hg.edge_premises, hg.edge_head, hg.edges_by_premise
    while heap:
        wi, i = heapq.heappop(heap)
        if done[i]:
            continue
        done[i] = True
        for e in byp[i]:
            remaining[e] -= 1
            if remaining[e] == 0:
                c = head[e]
                g = 1 + (max(w[p] for p in prem[e]) if use_max else sum(w[p] for p in prem[e]))
                if g < w[c]:
                    w[c] = g
                    heapq.heappush(heap, (g, c))
    return w


def tight_edges(hg: Hypergraph, w: list[float], *, cost: str = "max") -> list[bool]:
    """Per hyperedge: does it attain its head's shortest-proof weight (g(premise weights) == w(head))?"""
    use_max = cost == "max"
    out = []
    for prems, c in zip(hg.edge_premises, hg.edge_head):
        g = 1 + (max(w[p] for p in prems) if use_max else sum(w[p] for p in prems))
        out.append(g == w[c])
    return out


def _dependency(hg: Hypergraph, goal_id: int) -> list[float]:
    h: list[float] = [INF] * hg.num_atoms
    if goal_id < 0:
        return h
    rev: list[list[int]] = [[] for _ in range(hg.num_atoms)]
    for prems, c in zip(hg.edge_premises, hg.edge_head):
        for p in dict.fromkeys(prems):
            rev[c].append(p)
    h[goal_id] = 0
    q = deque([goal_id])
    while q:
        c = q.popleft()
        for p in rev[c]:
            if h[p] == INF:
                h[p] = h[c] + 1
                q.append(p)
    return h


def _true(hg: Hypergraph, goal_id: int, cost: str) -> list[float]:
    h: list[float] = [INF] * hg.num_atoms
    if goal_id < 0:
        return h
    w = inside_weights(hg, cost=cost)
    tight = tight_edges(hg, w, cost=cost)
    into: list[list[int]] = [[] for _ in range(hg.num_atoms)]
    for e, c in enumerate(hg.edge_head):
        if tight[e]:
            into[c].append(e)
    wg = w[goal_id]
    on = [False] * hg.num_atoms
    on[goal_id] = True
    stack = [goal_id]
    while stack:
        c = stack.pop()
        for e in into[c]:
            for p in hg.edge_premises[e]:
                if not on[p]:
                    on[p] = True
                    stack.append(p)
    for i in range(hg.num_atoms):
        if on[i]:
            h[i] = wg - w[i]
    return h


def heuristic_values(hg: Hypergraph, goal_id: int, *, heuristic: str = "zero", cost: str = "max") -> list[float]:
    """h[N] for the named heuristic (ints as floats-compatible numbers, inf where the goal is unreachable)."""
    _check_cost(cost)
    if heuristic == "zero":
        return [0] * hg.num_atoms
    if heuristic == "dependency":
        return _dependency(hg, goal_id)
    if heuristic == "true":
        return _true(hg, goal_id, cost)
    raise ValueError(f"heuristic {heuristic!r} is not one of {HEURISTICS}")
