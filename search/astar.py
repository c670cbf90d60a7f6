"""Host A* over the hypergraph of a logic program: the reference implementation of the paper's Alg. 1.

Agenda order: lowest f = w + h, ties by lower h, then last-in-first-out (the push stamp, axioms included, counts up
from 0 in push order; axioms are pushed in atom-id order). Popping an item already in the chart is skipped and not
counted. When an item is popped, the hyperedges it completes (all distinct premises now in the chart) are visited in
ascending canonical hyperedge id (see search.hypergraph); a conclusion is pushed iff it is not in the chart and its
new weight is strictly smaller than its current one (line 18). Every such push is one proof step of the trace;
axiom pushes are not part of the trace (they stay in the prompt). The search stops when the goal is popped.

Counts: `pushes` = len(trace) (proof steps, axioms excluded); `pops` = items added to the chart (goal included);
`v_pops` = |V_pops(trace)| (Eq. 6: distinct premises used by the trace); `x_delta` = sum of f over V_pops with f the
priority at pop time (the A* reward's alpha, Eq. 7).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from search.heuristics import axiom_weight, heuristic_values, inside_weights
from search.hypergraph import Hypergraph, compile_program
from search.logic import Atom, Program

__all__ = ["TraceStep", "SearchResult", "solve", "search", "shortest_depth"]

INF = math.inf


@dataclass(frozen=True)
class TraceStep:
    """One push = one proof step: premises (in the rule's premise order) |-_rule conclusion, via hyperedge `edge`."""

    rule: int
    premises: tuple[Atom, ...]
    conclusion: Atom
    edge: int = -1


@dataclass(frozen=True)
class SearchResult:
    """Outcome of A* on (program, goal).

    proved: goal popped. weight: w*_G (int) or math.inf if unprovable. trace: the push steps in order.
    edge_trace: the same as hyperedge ids. pops/pushes/v_pops/x_delta: see module docstring.
    popped: atom ids in pop order; popped_f: their priorities f at pop time. heuristic/cost: what was used.
    """

    proved: bool
    weight: float
    trace: tuple[TraceStep, ...]
    edge_trace: tuple[int, ...]
    pops: int
    pushes: int
    v_pops: int
    x_delta: float
    popped: tuple[int, ...]
    popped_f: tuple[float, ...]
    goal_id: int
    heuristic: str = "zero"
    cost: str = "max"

    @property
    def depth(self) -> int | None:
        """w*_G as an int, None when unprovable (JSON-friendly)."""
        return int(self.weight) if self.proved else None


def search(
    hg: Hypergraph, goal_id: int, h: list[float], *, cost: str = "max"
) -> tuple[float, list[int], list[int], list[float]]:
    """The A* loop on int ids. Returns (w_goal or inf, pushed edge ids, popped atom ids, f of popped atoms).

    goal_id = -1 (unprovable) runs until the agenda is empty, as Alg. 1 does.
    """
    n = hg.num_atoms
    w: list[float] = [INF] * n
    in_chart = [False] * n
    remaining = list(hg.edge_num_distinct)
    prem, head, byp = hg.edge_premises, hg.edge_head, hg.edges_by_premise
    use_max = cost == "max"
    a0 = axiom_weight(cost)
    heap: list[tuple[float, float, int, int]] = []
    stamp = 0
    for i in range(hg.num_axioms):
        w[i] = a0
        heap.append((a0 + h[i], h[i], -stamp, i))
        stamp += 1
    heapq.heapify(heap)
    pushes: list[int] = []
    popped: list[int] = []
    popped_f: list[float] = []
    while heap:
        f, _, _, i = heapq.heappop(heap)
        if in_chart[i]:
            continue
        in_chart[i] = True
        popped.append(i)
        popped_f.append(f)
        if i == goal_id:
            return w[i], pushes, popped, popped_f
        for e in byp[i]:
            remaining[e] -= 1
            if remaining[e]:
                continue
            c = head[e]
            if in_chart[c]:
                continue
            ps = prem[e]
            if use_max:
                g = w[ps[0]]
                for p in ps:
                    if w[p] > g:
                        g = w[p]
                g += 1
            else:
                g = 1
                for p in ps:
                    g += w[p]
            if g < w[c]:
                w[c] = g
                heapq.heappush(heap, (g + h[c], h[c], -stamp, c))
                stamp += 1
                pushes.append(e)
    return (w[goal_id] if goal_id >= 0 else INF), pushes, popped, popped_f


def _compiled(program: Program | Hypergraph) -> Hypergraph:
    return program if isinstance(program, Hypergraph) else compile_program(program)


def solve(
    program: Program | Hypergraph, goal: Atom, *, heuristic: str = "zero", cost: str = "max"
) -> SearchResult:
    """A* (Alg. 1) for `goal` under `program` (or its precompiled Hypergraph, to reuse it across goals).

    heuristic: "zero" (Dijkstra) | "dependency" (§3.2) | "true" (outside weights); cost: "max" (depth) | "sum".
    Raises search.logic.LogicError for a malformed program or a goal outside the Herbrand base.
    """
    hg = _compiled(program)
    gid = hg.goal_id(goal)
    h = heuristic_values(hg, gid, heuristic=heuristic, cost=cost)
    wg, edges, popped, popped_f = search(hg, gid, h, cost=cost)
    atoms, rules = hg.atoms, hg.edge_rule
    trace = tuple(
        TraceStep(rules[e], tuple(atoms[p] for p in hg.edge_premises[e]), atoms[hg.edge_head[e]], e) for e in edges
    )
    f_at_pop = dict(zip(popped, popped_f))
    vp = {p for e in edges for p in hg.edge_premises[e]}
    proved = gid >= 0 and wg < INF
    return SearchResult(
        proved=proved,
        weight=wg if proved else INF,
        trace=trace,
        edge_trace=tuple(edges),
        pops=len(popped),
        pushes=len(edges),
        v_pops=len(vp),
        x_delta=float(sum(f_at_pop[p] for p in vp)),
        popped=tuple(popped),
        popped_f=tuple(float(x) for x in popped_f),
        goal_id=gid,
        heuristic=heuristic,
        cost=cost,
    )


def shortest_depth(program: Program | Hypergraph, goal: Atom, *, cost: str = "max") -> int | None:
    """w*_G (depth of the shallowest proof under cost "max"), None if the goal is unprovable; 0 for an axiom."""
    hg = _compiled(program)
    gid = hg.goal_id(goal)
    if gid < 0:
        return None
    w = inside_weights(hg, cost=cost)[gid]
    return None if w == INF else int(w)
