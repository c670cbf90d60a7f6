"""A*-post-training rewards (paper §3.2 Eq. 7, §4.1) as registry functions over dataset records.

Each completion is a verbalized search trace; it is parsed with `search.parse.parse_trace` (never raises;
an unparseable completion is an incorrect trace and scores 0) and scored by `search.rewards.ProblemScorer`:
  correctness       1 if the trace proves the goal, else 0
  step_count        Eq. 7 with x = proof steps, alpha = steps of the shortest proof
  astar_dependency  Eq. 7 with x = sum of f over V_pops, A* with the dependency heuristic
  astar_true        Eq. 7 with x = sum of f over V_pops, A* with the true cost-to-go
Option `device=True` scores the batch on device with the jitted A* kernel instead (`reasoner.rewards.astar_device`).
Examples are the records of `reasoner.data.records` (fields `program` and `goal`, JSON; str or TFDS bytes)
with an optional `rule_texts` (JSON list of the theory's rule sentences, as the verbalizer used them).
The scorer of a (program, goal) is cached, since the G completions of a prompt share it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

from reasoner.rewards.registry import completion_text, register_reward
from search.rewards import REWARDS

_SCORER_CACHE_SIZE = 256


def _key(value) -> str:
    if isinstance(value, bytes):  # TFDS text features come back as bytes
        value = value.decode("utf-8")
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _rule_texts(value) -> tuple[str, ...] | None:
    """The record's `rule_texts`: a JSON list (string or bytes, as records store it) or a list; empty -> None."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    return tuple(str(t) for t in value) or None


@functools.lru_cache(maxsize=_SCORER_CACHE_SIZE)
def _scorer_and_verbalizer(program_json: str, goal_json: str, dataset: str, rule_texts: tuple[str, ...] | None,
                           cost: str):
    from reasoner.data.program_json import atom_from_json, program_from_json
    from search.rewards import ProblemScorer
    from search.verbalize import Verbalizer

    program = program_from_json(program_json)
    goal = atom_from_json(goal_json)
    verbalizer = Verbalizer(program, dataset=dataset, rule_texts=list(rule_texts) if rule_texts else None)
    return ProblemScorer(program, goal, cost=cost), verbalizer


def score_completion(text: str, example: Mapping, *, dataset: str, cost: str = "max"):
    """`search.rewards.Scores` of one completion against its record."""
    from search.parse import parse_trace

    for field in ("program", "goal"):
        if field not in example:
            raise KeyError(f"example has no {field!r} field (keys: {sorted(example)}): expected an A* record")
    scorer, verbalizer = _scorer_and_verbalizer(
        _key(example["program"]), _key(example["goal"]), dataset, _rule_texts(example.get("rule_texts")), cost
    )
    return scorer.score_steps(parse_trace(text, verbalizer).steps)


@register_reward("astar")
def astar_reward(*, reward: str = "astar_true", dataset: str = "deeprd", cost: str = "max", device: bool = False):
    """One of `search.rewards.REWARDS` for each completion; `dataset` picks the verbalizer templates.

    device=True scores the whole batch with the jitted A* kernel (`reasoner.rewards.astar_device`: host parse,
    one device call for the B completions, compile cached across steps); False scores each completion with the
    host `ProblemScorer`. Both give the same rewards (within 1e-6, float32 on device).
    """
    if reward not in REWARDS:
        raise ValueError(f"reward={reward!r}: expected one of {REWARDS}")
    if device:
        from reasoner.rewards.astar_device import score_records
        from reasoner.rewards.registry import RewardFailure

        def device_fn(completions, *, examples):
            scores = score_records([completion_text(c) for c in completions], list(examples), dataset=dataset,
                                   cost=cost)
            return [s if isinstance(s, RewardFailure) else s.rewards[reward] for s in scores]

        device_fn.__name__ = reward
        return device_fn

    def fn(completions, *, examples):
        return [
            score_completion(completion_text(c), e, dataset=dataset, cost=cost).rewards[reward]
            for c, e in zip(completions, examples)
        ]

    fn.__name__ = reward
    return fn
