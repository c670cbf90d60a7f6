"""SMT scratchpad correctness (Sequent-Prover §2.2-2.3) as a GRPO reward, with the curation predicate as a gate.

Completions are `reasoner.agents.scratchpad.Trajectory` objects (multi-turn rollouts through the z3_solve /
finish tool loop); examples are Logic-LLM records. The reward is 1.0 when the final answer is correct
(`reasoner.tasks.logic_llm.check_correct`) and, if a gate is set, the trajectory's curation label
(`reasoner.verifiers.curation.curate`) is allowed by it:
  gate=None              correctness only
  gate="gold"            correct, finished, with at least one executable, non-trivial, grounded Z3 call that
                         reached sat/unsat (the acceptance predicate A(x, y*, tau))
  gate="gold_or_silver"  correct, finished, with at least one executable Z3 call
Otherwise 0.0. The trajectory passed in is not modified.
"""

from __future__ import annotations

import dataclasses

from reasoner.rewards.match import logic_problem
from reasoner.rewards.registry import register_reward

GATES = (None, "gold", "gold_or_silver")
_ALLOWED = {"gold": {"gold"}, "gold_or_silver": {"gold", "silver"}}


def scratchpad_reward_value(trajectory, example, *, gate: str | None = "gold") -> float:
    from reasoner.tasks.logic_llm import check_correct
    from reasoner.verifiers.curation import curate, problem_entities

    if not (hasattr(trajectory, "answer") and hasattr(trajectory, "smt_observations")):
        raise TypeError(f"completion of type {type(trajectory).__name__}: expected a scratchpad Trajectory")
    problem = logic_problem(example)
    correct = check_correct(trajectory.answer, problem)
    if not correct or gate is None:
        return float(correct)
    scored = dataclasses.replace(trajectory, correct=True)
    label = curate(scored, problem_entities(problem.context, problem.question)).label
    return float(label in _ALLOWED[gate])


@register_reward("smt_scratchpad")
def smt_scratchpad(*, gate: str | None = "gold"):
    """Correctness of each scratchpad trajectory, gated by its curation label (see module docstring)."""
    if gate not in GATES:
        raise ValueError(f"gate={gate!r}: expected one of {GATES}")

    def reward(completions, *, examples):
        return [scratchpad_reward_value(t, e, gate=gate) for t, e in zip(completions, examples)]

    return reward
