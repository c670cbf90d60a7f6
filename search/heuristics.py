"""Cost functions, inside weights and the three A* heuristics (paper §2.2, §3.2, Fig. 7), as lists indexed by atom id.

* cost "max": g = 1 + max(premise weights), axiom weight 0 (Eq. 2, proof depth).
* cost "sum": g2 = 1 + sum(premise weights), axiom weight 1 (appendix A.2, number of vertices).
* "zero": h = 0 everywhere (Dijkstra).
* "dependency": the relaxed unary graph (V', E') of paper §3.2: every ground instantiation b'1..b'K |- c' of every
  rule over the program's constants (the Herbrand base, NOT only the minimal model M) gives one unary edge
  b'_k -> c' per distinct premise, cost 1 under both cost functions; h(v) for v in M = shortest distance from v to
  the goal in (V', E') (inf if none). The paper says the relaxed graph "encodes the dependency of the rules without
  considering which theorems are entailed by the axioms" and contains the original hypergraph (V <= V', E <= E'),
  so relaxed paths may run through non-derivable atoms (e.g. DeepRD rules whose premises are never derived give
  optimistic shortcuts, which is why the paper finds little gain over Dijkstra there). Grounding is lazy: a BFS
  backward from the goal, expanding an atom c' by matching each rule's conclusion to c' and enumerating the
  premises' remaining variables over the constants; it stops as soon as every atom of M has its distance.
  Since E <= E', h(p) <= 1 + h(c) on every hyperedge: consistent, so A* stays exact. When the goal is not a
  theorem there is no proof at all and h = inf everywhere (exact, hence admissible).
* "true": the outside weights of Fig. 7: an item is on-path if it is the goal or a premise of a tight hyperedge
  (g(premise weights) == w(head)) whose head is on-path; on-path items get h = w*_G - w, all others h = inf.
  With an unprovable goal every item is off-path (h = inf).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from collections import deque

from itertools import product

from search.ground import herbrand_signature, match, substitute
from search.hypergraph import Hypergraph
from search.logic import Atom

__all__ = ["COSTS", "HEURISTICS", "axiom_weight", "inside_weights", "heuristic_values", "tight_edges",
           "RelaxedGraph", "relaxed_graph", "relaxed_distances"]

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


@dataclass(frozen=True)
class RelaxedGraph:
    """The explored part of the relaxed unary graph (V', E') of the dependency heuristic.

    Vertices 0..N-1 are the atoms of M in canonical order (hg.atoms), then `extra_atoms` (ground atoms of the
    Herbrand base outside M, in discovery order) as ids N..N'-1. Edges src[E] -> dst[E] (premise -> conclusion),
    all edges into every vertex expanded by the backward search, in discovery order. goal: vertex id or -1.
    """

    num_atoms: int
    extra_atoms: tuple[Atom, ...]
    src: tuple[int, ...]
    dst: tuple[int, ...]
    goal: int

    @property
    def num_vertices(self) -> int:
        return self.num_atoms + len(self.extra_atoms)


def relaxed_graph(hg: Hypergraph, goal_id: int) -> RelaxedGraph:
    """Ground the relaxed graph lazily, backward from the goal (breadth first), until every atom of M is reached
    or nothing is left to expand. Every edge into an expanded vertex is kept, so BFS or min-plus distances over
    the returned edges equal the distances in the full (V', E') for all atoms of M."""
    n = hg.num_atoms
    if goal_id < 0:
        return RelaxedGraph(n, (), (), (), -1)
    consts = sorted(herbrand_signature(hg.program)[0])
    by_head: dict[tuple[str, int], list] = {}
    for rule in hg.program.rules:
        if rule.premises:
            by_head.setdefault((rule.conclusion.predicate, len(rule.conclusion.args)), []).append(rule)
    ids = dict(hg.atom_ids)
    extra: list[Atom] = []
    src: list[int] = []
    dst: list[int] = []
    seen = {goal_id}
    missing = n - 1  # atoms of M without a distance yet
    order: deque[Atom] = deque([hg.atoms[goal_id]])
    while order and missing > 0:
        c = order.popleft()
        ci = ids[c]
        for rule in by_head.get((c.predicate, len(c.args)), ()):
            b = match(rule.conclusion, c.args, {})
            if b is None:
                continue
            for prem in dict.fromkeys(rule.premises):
                free = list(dict.fromkeys(v for v in prem.variables() if v not in b))
                for combo in product(consts, repeat=len(free)):
                    a = substitute(prem, {**b, **dict(zip(free, combo))} if free else b)
                    if a == c:
                        continue  # self-loop: never on a shortest path
                    ai = ids.get(a)
                    if ai is None:
                        ai = ids[a] = n + len(extra)
                        extra.append(a)
                    src.append(ai)
                    dst.append(ci)
                    if ai not in seen:
                        seen.add(ai)
                        order.append(a)
                        missing -= ai < n
    return RelaxedGraph(n, tuple(extra), tuple(src), tuple(dst), goal_id)


def relaxed_distances(rg: RelaxedGraph) -> list[float]:
    """BFS distance to the goal (vertex rg.goal) over the unary edges src -> dst of `rg`, list over its N' vertices."""
    h: list[float] = [INF] * rg.num_vertices
    if rg.goal < 0:
        return h
    rev: list[list[int]] = [[] for _ in range(rg.num_vertices)]
    for p, c in zip(rg.src, rg.dst):
        rev[c].append(p)
    h[rg.goal] = 0
    q = deque([rg.goal])
    while q:
        c = q.popleft()
        for p in rev[c]:
            if h[p] == INF:
                h[p] = h[c] + 1
                q.append(p)
    return h


def _dependency(hg: Hypergraph, goal_id: int) -> list[float]:
    return relaxed_distances(relaxed_graph(hg, goal_id))[: hg.num_atoms]


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
