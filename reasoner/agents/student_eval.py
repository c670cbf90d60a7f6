"""K-sample scratchpad evaluation of a policy on Logic-LLM problems (Sequent-Prover §3, App. B): the episodes,
one row per (problem, sample), and the App. B summary (`reasoner.metrics.smt_eval`).

Problems are evaluated in chunks of `problems_per_batch`; within a chunk every problem's K samples run as one batch
of conversations (with `SamplerPolicy`, the K copies of a prompt share one prefill), and all their Z3 calls of a
turn are submitted to the runner together.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from reasoner.agents.scratchpad import T_MAX, Trajectory, run_scratchpad
from reasoner.metrics.smt_eval import smt_eval_summary
from reasoner.tasks.logic_llm import LogicProblem, check_correct, extract_answer, render_messages
from reasoner.verifiers.curation import problem_entities


@dataclasses.dataclass
class StudentEval:
    trajectories: list[Trajectory]
    rows: list[dict]  # one per (problem, sample): id, sample, correct, verified, answer, gold, turns, z3_calls, ...
    summary: dict


def evaluate_policy(policy, problems: Sequence[LogicProblem], *, runner, k: int, t_max: int = T_MAX,
                    timeout_cap_s: float = 30.0, problems_per_batch: int = 8,
                    on_batch: Callable[[int], None] | None = None, seed: int = 0) -> StudentEval:
    """Runs K episodes per problem through the scratchpad with `runner` (a `Z3Runner`) and scores them."""
    if k < 1 or problems_per_batch < 1:
        raise ValueError(f"k={k}, problems_per_batch={problems_per_batch}: both must be >= 1")
    ids = [p.id for p in problems]
    if len(set(ids)) != len(ids):
        raise ValueError("problem ids must be unique (they key the K samples of each problem)")
    trajectories: list[Trajectory] = []
    for start in range(0, len(problems), problems_per_batch):
        chunk = problems[start:start + problems_per_batch]
        conversations = [(p.id, render_messages(p)) for p in chunk for _ in range(k)]
        trajectories += run_scratchpad(policy, conversations, runner=runner, t_max=t_max, timeout_cap_s=timeout_cap_s)
        if on_batch is not None:
            on_batch(len(chunk))
    by_id = {p.id: p for p in problems}
    answers, rows, sample = {}, [], {}
    for traj in trajectories:
        problem = by_id[traj.problem_id]
        traj.correct = check_correct(traj.answer, problem)
        answers[id(traj)] = extract_answer(traj.answer, problem)
        index = sample.get(traj.problem_id, 0)
        sample[traj.problem_id] = index + 1
        rows.append({"id": traj.problem_id, "dataset": problem.dataset, "sample": index,
                     "correct": traj.correct, "verified": traj.verified, "answer": answers[id(traj)],
                     "raw_answer": traj.answer, "gold": problem.answer, "turns": traj.turns,
                     "z3_calls": len(traj.smt_observations), "termination": traj.termination,
                     "verdicts": [o["sat_result"] for o in traj.smt_observations],
                     "completion_tokens": traj.completion_tokens})
    summary = smt_eval_summary(trajectories, k=k, answers=answers, gold={p.id: p.answer for p in problems},
                               entities={p.id: problem_entities(p.context, p.question) for p in problems},
                               max_turns=t_max, seed=seed)
    return StudentEval(trajectories, rows, summary)
