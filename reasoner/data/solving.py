"""Answer a (program, statement) question with host A*: the statement, its polarity-flipped negation, and the
search statistics that the dataset figures (paper Figs. 5-6) summarize.

A goal outside the program's Herbrand base (a predicate or constant the theory never mentions) is unprovable by
definition: it is reported as not proved without a search (the search would raise `LogicError`).
"""

from __future__ import annotations

import dataclasses

from reasoner.data.proofwriter_atoms import negate
from search.astar import SearchResult, solve
from search.ground import check_goal
from search.heuristics import HEURISTICS
from search.hypergraph import Hypergraph, compile_program
from search.logic import Atom, LogicError, Program

__all__ = ["Decision", "decide", "solve_in_base", "heuristic_counts", "HEURISTICS"]


@dataclasses.dataclass(frozen=True)
class Decision:
    """`pushes`/`pops` come from the run that proved something (statement first), else from the statement's run."""

    proved: bool
    proved_depth: int | None
    negation_proved: bool
    negation_depth: int | None
    pushes: int
    pops: int

    def as_json(self, *, qid: str, statement: str) -> dict:
        return {"id": qid, "statement": statement, "proved": self.proved, "proved_depth": self.proved_depth,
                "negation_proved": self.negation_proved, "negation_depth": self.negation_depth,
                "pushes": self.pushes, "pops": self.pops}


def solve_in_base(hg: Hypergraph, goal: Atom, *, heuristic: str = "zero", cost: str = "max") -> SearchResult | None:
    """A* on a compiled program; None when `goal` lies outside the Herbrand base (so it cannot be proved)."""
    try:
        check_goal(hg.program, goal)
    except LogicError:
        return None
    return solve(hg, goal, heuristic=heuristic, cost=cost)


def decide(program: Program | Hypergraph, statement: Atom, *, heuristic: str = "zero", cost: str = "max") -> Decision:
    """Search the statement and its negation (`not_p` <-> `p`). Raises LogicError for a malformed program."""
    hg = program if isinstance(program, Hypergraph) else compile_program(program)
    pos = solve_in_base(hg, statement, heuristic=heuristic, cost=cost)
    neg = solve_in_base(hg, negate(statement), heuristic=heuristic, cost=cost)
    deciding = pos if (pos and pos.proved) or not (neg and neg.proved) else neg
    return Decision(proved=bool(pos and pos.proved), proved_depth=pos.depth if pos else None,
                    negation_proved=bool(neg and neg.proved), negation_depth=neg.depth if neg else None,
                    pushes=deciding.pushes if deciding else 0, pops=deciding.pops if deciding else 0)


def heuristic_counts(hg: Hypergraph, goal: Atom, *, cost: str = "max") -> dict[str, tuple[int, int]]:
    """{heuristic: (pushes, pops)} of A* under `cost` for a provable goal, for the three heuristics."""
    out = {}
    for h in HEURISTICS:
        result = solve(hg, goal, heuristic=h, cost=cost)
        out[h] = (result.pushes, result.pops)
    return out
