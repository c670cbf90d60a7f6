"""The A* proof task (A* post-training, §3-4, §B.2): prompts, SFT completions and scoring of model output.

A problem is one dataset record (`reasoner.data.records`: `id`, `program` and `goal` as JSON, optional
`rule_texts`), wrapped as an `AStarProblem` together with the verbalizer templates of its dataset.

* Prompt (§B.2): an instruction, then the verbalized (program, goal) pair: "Facts: ...", "Rules: ...",
  "Prove: ..." (`search.verbalize.Verbalizer.context`). The paper's prompt figure is not in our copy of the text;
  our instruction states what the paper says the model must produce: the proof as a search trace, one step per
  block, blocks separated by a blank line, in the form the verbalizer writes. `prompt_messages` returns chat
  messages (the instruction as the system turn, so chat templates do not inject their default system prompt).
* Few-shot (the paper's ICL baselines, §4): `few_shot_messages` puts k solved training examples (user: the
  verbalized problem, assistant: its host-A* trace) before the problem; k defaults to `FEW_SHOT_K` (10 for
  ProofWriter, 5 for DeepRD, the paper's counts); the choice is a seeded sample per problem id, never the problem.
* SFT completion: the verbalized trace of host A* (`search.astar.solve`) under a chosen heuristic
  ("zero" = Dijkstra, "dependency", "true") and cost ("max" or "sum", `COSTS`); each push is a step
  "Since P1 and P2, by the rule "R", C.".
* Scoring: parse (never raises) -> verify -> `search.rewards.Scores`: correctness, efficiency (pushes) and
  efficiency (pops) against the shortest proof (correct traces only), and the four rewards (correctness,
  step_count, astar_dependency, astar_true; Eq. 7).
* GRPO: `reward_specs(...)` gives the weighted reward registry entries (`reasoner.rewards`, name "astar") and
  `examples` are the records, so a trainer can score completions with `CompositeReward.from_config`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence

from search.logic import Atom, Program

__all__ = ["INSTRUCTION", "HEURISTICS", "COSTS", "FEW_SHOT_K", "few_shot_messages", "few_shot_choice",
           "messages_with_shots", "AStarProblem", "problem_from_record", "prompt_messages", "sft_completion",
           "score_completion", "TaskScore", "reward_specs"]

HEURISTICS = ("zero", "dependency", "true")
COSTS = ("max", "sum")  # A* proof cost: depth (Eq. 2) or number of vertices (App. A.2)
FEW_SHOT_K = {"proofwriter": 10, "deeprd": 5}  # in-context examples of the paper's ICL baselines (§4)
INSTRUCTION = (
    "Prove the statement after \"Prove:\" from the facts and rules by forward search. Write one step per "
    "paragraph, as: Since <premises>, by the rule \"<rule>\", <conclusion>."
)


@dataclasses.dataclass(frozen=True)
class AStarProblem:
    """One (program, goal) pair with its verbalization; `record` is what reward functions receive as example."""

    id: str
    program: Program
    goal: Atom
    dataset: str
    rule_texts: tuple[str, ...] | None
    record: Mapping

    @functools.cached_property
    def verbalizer(self):
        from search.verbalize import Verbalizer

        return Verbalizer(self.program, dataset=self.dataset, rule_texts=list(self.rule_texts) if self.rule_texts
                          else None)

    @functools.cached_property
    def scorer(self):
        from search.rewards import ProblemScorer

        return ProblemScorer(self.program, self.goal)


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def problem_from_record(record: Mapping, *, dataset: str = "deeprd") -> AStarProblem:
    """A dataset record (str or TFDS bytes fields) -> AStarProblem. Raises ValueError naming the record on bad input."""
    from reasoner.data.program_json import atom_from_json, program_from_json

    rid = _text(record.get("id", "<no id>"))
    missing = [k for k in ("program", "goal") if k not in record]
    if missing:
        raise ValueError(f"record {rid}: missing {missing}; expected an A* record with 'program' and 'goal' (JSON)")
    try:
        program = program_from_json(_text(record["program"]))
        goal = atom_from_json(_text(record["goal"]))
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(f"record {rid}: unreadable program/goal JSON ({err})") from None
    rule_texts = record.get("rule_texts")
    if isinstance(rule_texts, (str, bytes)):
        rule_texts = json.loads(_text(rule_texts))
    rule_texts = tuple(str(t) for t in rule_texts) if rule_texts else None
    if rule_texts is not None and len(rule_texts) != len(program.rules):
        raise ValueError(f"record {rid}: {len(rule_texts)} rule_texts for {len(program.rules)} rules")
    plain = {"id": rid, "program": _text(record["program"]), "goal": _text(record["goal"]),
             "rule_texts": json.dumps(list(rule_texts or ()))}
    return AStarProblem(id=rid, program=program, goal=goal, dataset=dataset, rule_texts=rule_texts, record=plain)


def prompt_messages(problem: AStarProblem) -> list[dict[str, str]]:
    """The chat prompt: instruction as the system turn, the verbalized problem as the user turn."""
    return [{"role": "system", "content": INSTRUCTION},
            {"role": "user", "content": problem.verbalizer.context(problem.goal)}]


def few_shot_choice(problem: AStarProblem, examples: Sequence[AStarProblem], k: int, *,
                    seed: int = 0) -> list[AStarProblem]:
    """k of `examples` for `problem`: a sample drawn by `random.Random(f"{seed}/{problem.id}")` (the same choice on
    every run and process, independent of other problems), from the examples whose id and (program, goal) differ
    from the problem's, in the order of `examples`' ids as given. ValueError when fewer than k remain."""
    import random

    if k < 0:
        raise ValueError(f"few-shot k={k}: expected k >= 0")
    pool = [e for e in examples if e.id != problem.id and (e.program, e.goal) != (problem.program, problem.goal)]
    if len(pool) < k:
        raise ValueError(f"few-shot k={k} for problem {problem.id}: only {len(pool)} training examples other than "
                         "the problem itself; expected at least k")
    return random.Random(f"{seed}/{problem.id}").sample(pool, k)


def few_shot_messages(problem: AStarProblem, examples: Sequence[AStarProblem], k: int | None = None, *,
                      seed: int = 0, heuristic: str = "dependency", cost: str = "max") -> list[dict[str, str]]:
    """The k-shot chat prompt: the system instruction, then per chosen example (`few_shot_choice`) a user turn
    with its verbalized problem and an assistant turn with its host-A* trace under `heuristic` and `cost`, then
    the problem's user turn. k=None takes `FEW_SHOT_K[problem.dataset]`; k=0 is `prompt_messages`."""
    if k is None:
        if problem.dataset not in FEW_SHOT_K:
            raise ValueError(f"few-shot k for dataset {problem.dataset!r}: give k (defaults exist for "
                             f"{sorted(FEW_SHOT_K)})")
        k = FEW_SHOT_K[problem.dataset]
    shots = few_shot_choice(problem, examples, k, seed=seed)
    return messages_with_shots(problem, [(ex, sft_completion(ex, heuristic=heuristic, cost=cost)) for ex in shots])


def messages_with_shots(problem: AStarProblem, shots: Sequence[tuple[AStarProblem, str]]) -> list[dict[str, str]]:
    """[system, (user: shot's verbalized problem, assistant: its answer) per shot, user: the problem]. With no
    shots this is `prompt_messages(problem)`; evaluation uses it to drop shots from a chosen list without
    drawing a new one (`reasoner.evaluation.build_prompts`)."""
    system, user = prompt_messages(problem)
    turns = []
    for ex, answer in shots:
        turns += [{"role": "user", "content": ex.verbalizer.context(ex.goal)}, {"role": "assistant", "content": answer}]
    return [system, *turns, user]


def sft_completion(problem: AStarProblem, *, heuristic: str = "dependency", cost: str = "max") -> str:
    """The verbalized host-A* search trace under `heuristic` and `cost` ("max": proof depth, Eq. 2; "sum": number
    of vertices, App. A.2), the SFT target. Raises if the goal is unprovable."""
    from search.astar import solve

    if heuristic not in HEURISTICS:
        raise ValueError(f"heuristic={heuristic!r}: expected one of {HEURISTICS}")
    if cost not in COSTS:
        raise ValueError(f"cost={cost!r}: expected one of {COSTS}")
    result = solve(problem.program, problem.goal, heuristic=heuristic, cost=cost)
    if not result.proved:
        raise ValueError(f"problem {problem.id}: goal {problem.goal} is not provable; no A* trace to train on")
    return problem.verbalizer.trace(result.trace)


@dataclasses.dataclass(frozen=True)
class TaskScore:
    """Scores of one completion: correctness, pushes/pops efficiency (None unless correct), the four rewards."""

    correct: bool
    steps_parsed: int
    pushes: int
    v_pops: int
    efficiency_pushes: float | None
    efficiency_pops: float | None
    rewards: dict[str, float]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def score_completion(problem: AStarProblem, text: str) -> TaskScore:
    """Parse (never raises) -> verify -> scores. Any text, including empty, gives a score."""
    from search.parse import parse_trace

    parsed = parse_trace(text if isinstance(text, str) else "", problem.verbalizer)
    s = problem.scorer.score_steps(parsed.steps)
    return TaskScore(correct=bool(s.correct), steps_parsed=len(parsed.steps), pushes=int(s.pushes),
                     v_pops=int(s.v_pops), efficiency_pushes=s.efficiency_pushes, efficiency_pops=s.efficiency_pops,
                     rewards=dict(s.rewards))


def reward_specs(reward: str = "astar_dependency", *, dataset: str = "deeprd", weight: float = 1.0,
                 extra: Sequence[tuple[str, float]] = ()) -> list[dict]:
    """Registry specs for `reasoner.rewards.CompositeReward.from_config`: the main A* reward plus optional
    (reward, weight) extras, each scored by parse -> verify -> Eq. 7 against the example record."""
    from search.rewards import REWARDS

    out = []
    for name, w in ((reward, weight), *extra):
        if name not in REWARDS:
            raise ValueError(f"reward={name!r}: expected one of {REWARDS}")
        out.append({"name": "astar", "as": name, "weight": float(w), "options": {"reward": name, "dataset": dataset}})
    return out
