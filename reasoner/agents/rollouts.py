"""Teacher/student rollouts on Logic-LLM tasks: K scratchpad episodes per problem, scored, curated,
measured; the rows written by `reasoner smt rollout`.
"""

from __future__ import annotations

import dataclasses

from reasoner.agents.policies import TOOLS
from reasoner.agents.scratchpad import T_MAX, Trajectory, run_scratchpad
from reasoner.metrics.smt import smt_metrics
from reasoner.tasks.logic_llm import LogicProblem, check_correct, render_messages
from reasoner.verifiers.curation import curate, dpo_pairs, problem_entities


@dataclasses.dataclass
class RolloutSet:
    trajectories: list[Trajectory]
    rows: list[dict]  # one JSON-ready record per trajectory, with its label and reasons
    pairs: list[dict]  # DPO triples, Silver traces first as hard negatives
    metrics: dict
    failures: list[dict] = dataclasses.field(default_factory=list)  # {"id", "error"} per infrastructure failure
    sft: list[dict] = dataclasses.field(default_factory=list)  # Gold trajectories as multi-turn SFT records


def rollout_logic(policy, problems: list[LogicProblem], *, runner, samples: int = 1, t_max: int = T_MAX,
                  timeout_cap_s: float = 30.0, problems_per_batch: int | None = None) -> RolloutSet:
    """`samples` episodes per problem, scored with `check_correct` and curated. Problems run in chunks of
    `problems_per_batch` (None: all at once), each chunk's `problems_per_batch x samples` episodes advanced
    together, so a local policy's batch (and its KV cache) stays the size the caller chose."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if problems_per_batch is not None and problems_per_batch < 1:
        raise ValueError(f"problems_per_batch must be >= 1 or None, got {problems_per_batch}")
    step = problems_per_batch or max(1, len(problems))
    everything: list[Trajectory] = []
    for start in range(0, len(problems), step):
        conversations = [(p.id, render_messages(p)) for p in problems[start:start + step] for _ in range(samples)]
        everything += run_scratchpad(policy, conversations, runner=runner, t_max=t_max, timeout_cap_s=timeout_cap_s)
    # Episodes whose policy could not answer (endpoint down after retries) are infrastructure failures: recorded,
    # excluded from curation and metrics, and not written as rows, so a resumed run retries their problems.
    failed = [t for t in everything if t.termination == "infrastructure"]
    trajectories = [t for t in everything if t.termination != "infrastructure"]
    by_id = {p.id: p for p in problems}
    entities = {p.id: problem_entities(p.context, p.question) for p in problems}
    rows, curated = [], []
    for traj in trajectories:
        problem = by_id[traj.problem_id]
        traj.correct = check_correct(traj.answer, problem)
        result = curate(traj, entities[traj.problem_id])
        curated.append(result)
        rows.append(traj.to_dict() | {"dataset": problem.dataset, "gold_answer": problem.answer,
                                      "label": result.label, "reasons": list(result.reasons)})
    metrics = smt_metrics(trajectories, entities)
    metrics["labels"] = {label: sum(c.label == label for c in curated) for label in ("gold", "silver", "rejected")}
    metrics["infrastructure_failures"] = len(failed)
    pairs = [pair | {"tools": TOOLS} for pair in dpo_pairs(trajectories, curated)]
    return RolloutSet(trajectories, rows, pairs, metrics,
                      failures=[{"id": t.problem_id, "error": t.failure} for t in failed],
                      sft=sft_records(trajectories, curated))


def sft_records(trajectories, curated) -> list[dict]:
    """The Gold trajectories as multi-turn SFT records (`reasoner.data.chat_jsonl`): the prompt messages up to
    the first user turn, then every assistant and tool turn (the loss trains the assistant turns only), with the
    scratchpad's tool schema so training renders them as the scratchpad does at inference."""
    out = []
    for traj, cur in zip(trajectories, curated):
        if cur.label != "gold":
            continue
        cut = next(i + 1 for i, m in enumerate(traj.messages) if m["role"] == "user")
        turns = [{k: v for k, v in m.items() if k in ("role", "content", "name")} for m in traj.messages[cut:]]
        out.append({"id": traj.problem_id, "prompt": traj.messages[:cut], "completion": turns, "tools": TOOLS})
    return out
