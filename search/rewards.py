"""Rewards for candidate traces (paper §3.2 Eq. 7, §4.1): correctness, step count, A*-dependency, A*-true.

Eq. 7 with the paper's stated behaviour: for a correct trace

    r = 0.5 ** ((x_delta - alpha) / alpha),     and r = 0 for an incorrect trace.

The paper writes r = exp(beta * (alpha - x)) with beta = log(0.5) / x*, which is NEGATIVE and contradicts its own
"beta > 0"; taken literally it would reward longer traces. We implement the stated intent instead (doubling
x_delta relative to alpha halves the reward; the A* trace itself scores exactly 1; fewer than A* scores above 1),
which equals exp(-beta' * (x - alpha)) with beta' = log(2) / alpha > 0.

* step count: x_delta = number of proof steps of the candidate, alpha = steps of the canonical shortest proof.
* A*-informed (heuristic "dependency" or "true"): x_delta = sum over V_pops(candidate) (Eq. 6) of f(b) = w(b) + h(b),
  with w the shortest-proof weight of b (what A* assigns at pop time) and h the heuristic for this goal;
  alpha = x_delta of A*'s own trace under the same heuristic. Under the true cost-to-go, an off-path premise has
  f = inf, so a correct trace that pops one scores 0.
* alpha == 0 (goal is an axiom, or every premise of the A* trace has f = 0): the denominator is taken as 1, so the
  A* trace still scores 1 and every extra unit of x_delta halves the reward.
* x_delta = inf scores 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from search.astar import solve
from search.heuristics import heuristic_values, inside_weights
from search.hypergraph import Hypergraph, compile_program
from search.logic import Atom, Program
from search.verify import Verdict, efficiency, shortest_proof_edges, verify_edges, step_edges

__all__ = ["decay_reward", "Scores", "ProblemScorer", "REWARDS"]

REWARDS = ("correctness", "step_count", "astar_dependency", "astar_true")


def decay_reward(x_delta: float, alpha: float, *, correct: bool) -> float:
    """0.5 ** ((x_delta - alpha) / alpha) for a correct trace (denominator 1 when alpha == 0), else 0."""
    if not correct or math.isinf(x_delta) or math.isnan(x_delta):
        return 0.0
    return 0.5 ** ((x_delta - alpha) / (alpha if alpha > 0 else 1.0))


@dataclass(frozen=True)
class Scores:
    """Everything the evaluation and GRPO need about one candidate trace."""

    correct: bool
    pushes: int
    v_pops: int
    efficiency_pushes: float | None
    efficiency_pops: float | None
    x_delta: dict[str, float]
    rewards: dict[str, float]
    verdict: Verdict = field(repr=False)


class ProblemScorer:
    """Precomputes, once per (program, goal), what scoring needs; then `score_steps` / `score_edges` are cheap.

    cost: "max" (depth, the paper's choice) or "sum".
    """

    def __init__(self, program: Program | Hypergraph, goal: Atom, *, cost: str = "max"):
        self.hg = program if isinstance(program, Hypergraph) else compile_program(program)
        self.goal = goal
        self.goal_id = self.hg.goal_id(goal)
        self.cost = cost
        w = inside_weights(self.hg, cost=cost)
        self.shortest = shortest_proof_edges(self.hg, self.goal_id, cost=cost)
        self.f: dict[str, list[float]] = {}
        self.alpha: dict[str, float] = {"step_count": float(len(self.shortest))}
        self.astar = {}
        for name in ("dependency", "true"):
            h = heuristic_values(self.hg, self.goal_id, heuristic=name, cost=cost)
            self.f[name] = [wi + hi for wi, hi in zip(w, h)]
            res = solve(self.hg, goal, heuristic=name, cost=cost)
            self.astar[name] = res
            self.alpha[f"astar_{name}"] = self._x(name, {p for e in res.edge_trace for p in self.hg.edge_premises[e]})

    def _x(self, name: str, v_pops) -> float:
        f = self.f[name]
        return float(sum(f[p] for p in v_pops))

    def score_text(self, text: str, verbalizer) -> Scores:
        """Model output -> Scores, through search.parse with this problem's Verbalizer. Never raises on the text."""
        from search.parse import parse_trace

        return self.score_steps(parse_trace(text, verbalizer).steps)

    def score_steps(self, steps: Sequence) -> Scores:
        """Steps with .rule, .premises, .conclusion (search.parse.ParsedStep, search.astar.TraceStep)."""
        return self.score_edges(step_edges(self.hg, steps))

    def score_edges(self, edges: Sequence[int]) -> Scores:
        v = verify_edges(self.hg, self.goal_id, edges)
        eff_push, eff_pop = efficiency(v, self.shortest, self.hg)
        x = {
            "step_count": float(v.pushes),
            "astar_dependency": self._x("dependency", v.v_pops),
            "astar_true": self._x("true", v.v_pops),
        }
        rewards = {"correctness": 1.0 if v.correct else 0.0}
        for k in ("step_count", "astar_dependency", "astar_true"):
            rewards[k] = decay_reward(x[k], self.alpha[k], correct=v.correct)
        return Scores(
            correct=v.correct,
            pushes=v.pushes,
            v_pops=len(v.v_pops),
            efficiency_pushes=eff_push,
            efficiency_pops=eff_pop,
            x_delta=x,
            rewards=rewards,
            verdict=v,
        )
