"""Verifier and efficiency metrics for candidate traces (paper §3.1 Eq. 6, §4.1).

A step is valid iff its rule index exists, its premises and conclusion are atoms of the minimal model, they form a
ground instantiation of that rule (premises in any order: the hyperedge is looked up by (rule, sorted premise ids,
conclusion)), and every premise is an axiom or the conclusion of an EARLIER VALID step. A trace is correct iff every
step is valid and the goal is an axiom or concluded by some step.

Efficiency (correct traces only, else None), as proportions against the shortest proof, capped at 1:
  efficiency_pushes = steps(shortest proof) / steps(candidate),
  efficiency_pops   = |V_pops(shortest proof)| / |V_pops(candidate)|.
The shortest proof is canonical: from the goal, take the lowest-id tight hyperedge (g(premise weights) == w(head))
into each needed atom, recursively; its steps are the distinct atoms it derives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from search.heuristics import inside_weights, tight_edges
from search.hypergraph import Hypergraph

__all__ = ["Verdict", "verify_steps", "verify_edges", "step_edges", "shortest_proof_edges", "efficiency"]


@dataclass(frozen=True)
class Verdict:
    """correct; valid[i] per step; edges[i] hyperedge id per step (-1 if invalid); pushes = number of steps;
    v_pops = ids of distinct premises of the steps (Eq. 6; only valid steps have ids); error: first problem found."""

    correct: bool
    valid: tuple[bool, ...]
    edges: tuple[int, ...]
    pushes: int
    v_pops: frozenset[int]
    error: str | None


def step_edges(hg: Hypergraph, steps: Sequence) -> list[int]:
    """Hyperedge id of each step (objects with .rule, .premises, .conclusion), -1 if no such instantiation."""
    ids, index, n_rules = hg.atom_ids, hg.edge_index, len(hg.program.rules)
    out = []
    for s in steps:
        try:
            r = s.rule
            if not isinstance(r, int) or not 0 <= r < n_rules or s.conclusion is None:
                out.append(-1)
                continue
            pids = [ids.get(p, -1) if p is not None else -1 for p in s.premises]
            c = ids.get(s.conclusion, -1)
            if c < 0 or -1 in pids:
                out.append(-1)
                continue
            out.append(index.get((r, tuple(sorted(pids)), c), -1))
        except (AttributeError, TypeError):
            out.append(-1)
    return out


def verify_steps(hg: Hypergraph, goal_id: int, steps: Sequence) -> Verdict:
    """Check a candidate trace against the compiled program (goal_id from Hypergraph.goal_id, -1 if unprovable)."""
    edges = step_edges(hg, steps)
    return verify_edges(hg, goal_id, edges)


def verify_edges(hg: Hypergraph, goal_id: int, edges: Sequence[int]) -> Verdict:
    """Same as verify_steps on hyperedge ids (-1 = not an instantiation)."""
    known = [False] * hg.num_atoms
    for i in range(hg.num_axioms):
        known[i] = True
    valid, error = [], None
    vp: set[int] = set()
    m = hg.num_edges
    for i, e in enumerate(edges):
        ok = 0 <= e < m
        if ok:
            prem = hg.edge_premises[e]
            vp.update(prem)
            ok = all(known[p] for p in prem)
            if not ok and error is None:
                error = f"step {i}: a premise is neither an axiom nor concluded by an earlier valid step"
            if ok:
                known[hg.edge_head[e]] = True
        elif error is None:
            error = f"step {i}: not a ground instantiation of a program rule over provable atoms"
        valid.append(ok)
    goal_ok = goal_id >= 0 and known[goal_id]
    if error is None and not goal_ok:
        error = "the goal is never concluded"
    return Verdict(
        correct=all(valid) and goal_ok,
        valid=tuple(valid),
        edges=tuple(edges),
        pushes=len(edges),
        v_pops=frozenset(vp),
        error=error,
    )


def shortest_proof_edges(hg: Hypergraph, goal_id: int, *, cost: str = "max") -> list[int]:
    """The canonical shortest proof as hyperedge ids in a valid order (premises before use); [] for an axiom goal."""
    if goal_id < 0:
        return []
    w = inside_weights(hg, cost=cost)
    if w[goal_id] == float("inf"):
        return []
    tight = tight_edges(hg, w, cost=cost)
    best = [-1] * hg.num_atoms
    for e in range(hg.num_edges - 1, -1, -1):
        if tight[e]:
            best[hg.edge_head[e]] = e
    order: list[int] = []
    seen: set[int] = set()
    # iterative post-order (premises before use); tight edges strictly increase weight, so there are no cycles
    stack: list[tuple[int, bool]] = [(goal_id, False)]
    while stack:
        a, expanded = stack.pop()
        if expanded:
            order.append(best[a])
            continue
        if a in seen or a < hg.num_axioms:
            continue
        seen.add(a)
        stack.append((a, True))
        for p in reversed(hg.edge_premises[best[a]]):
            stack.append((p, False))
    return order


def efficiency(verdict: Verdict, shortest: Sequence[int], hg: Hypergraph) -> tuple[float | None, float | None]:
    """(efficiency_pushes, efficiency_pops) of a correct trace against the shortest proof; (None, None) otherwise."""
    if not verdict.correct:
        return None, None
    ref_pushes = len(shortest)
    ref_pops = len({p for e in shortest for p in hg.edge_premises[e]})
    eff_push = 1.0 if verdict.pushes == 0 else min(1.0, ref_pushes / verdict.pushes)
    eff_pop = 1.0 if not verdict.v_pops else min(1.0, ref_pops / len(verdict.v_pops))
    return eff_push, eff_pop
