"""The A* proof task: prompts, SFT completions (A* traces) and scoring, checked against an independent
graph-search reference on DeepRD problems (unary rules: the hypergraph is a plain digraph, so BFS gives depths,
the dependency heuristic equals the exact distance to the goal, and Eq. 6/7 can be recomputed by hand)."""

from __future__ import annotations

import collections
import json
import re

import numpy as np
import pytest

from reasoner.data.astar_traces import deeprd_records, sft_example, write_jsonl
from reasoner.data.deeprd import DeepRDSpec, generate_problem
from reasoner.tasks.astar import (INSTRUCTION, problem_from_record, prompt_messages, reward_specs, score_completion,
                                  sft_completion)
from tests.data.reference import bfs_distances

SPEC = DeepRDSpec(lookahead=(3, 5), branches=(2, 4), extra_ratio=0.5, max_degree=3)
STEP = re.compile(r'^Since (\w+) is (\w+), by the rule "If someone is (\w+), they are (\w+)\.", (\w+) is (\w+)\.$')


@pytest.fixture(scope="module")
def cases():
    records = deeprd_records(seed=7, split="test", size=12, spec=SPEC)
    raw = [generate_problem(seed=7, split="test", index=i, spec=SPEC) for i in range(12)]
    return [(problem_from_record(r), r, p) for r, p in zip(records, raw)]


def _graph(raw):
    names = raw.vertices
    fwd, back = collections.defaultdict(list), collections.defaultdict(list)
    for a, b in raw.edges:
        fwd[names[a]].append(names[b])
        back[names[b]].append(names[a])
    return names[raw.start], names[raw.goal], fwd, back


def _steps(text, entity):
    """(premise attr, conclusion attr) per step, read with a strict regex (independent of search.parse)."""
    out = []
    for block in text.split("\n\n"):
        m = STEP.match(block)
        assert m, f"step not in the trained format: {block!r}"
        e1, a, r1, r2, e2, b = m.groups()
        assert e1 == e2 == entity and (r1, r2) == (a, b)
        out.append((a, b))
    return out


def test_prompt_holds_instruction_facts_rules_and_goal(cases):
    for problem, record, raw in cases:
        system, user = prompt_messages(problem)
        assert system == {"role": "system", "content": INSTRUCTION}
        assert user["role"] == "user"
        lines = user["content"].split("\n")
        assert lines[0] == f"Facts: {raw.entity} is {raw.vertices[raw.start]}."
        assert lines[1] == "Rules: " + " ".join(json.loads(record["rule_texts"]))
        assert lines[2] == f"Prove: {raw.entity} is {raw.vertices[raw.goal]}."


@pytest.mark.parametrize("heuristic", ["zero", "dependency", "true"])
def test_sft_completion_is_a_valid_forward_proof_with_the_recorded_pushes(cases, heuristic):
    col = {"zero": 0, "dependency": 1, "true": 2}[heuristic]
    for problem, record, raw in cases:
        start, goal, fwd, _ = _graph(raw)
        steps = _steps(sft_completion(problem, heuristic=heuristic), raw.entity)
        derived = {start}
        for a, b in steps:
            assert a in derived and b in fwd[a]  # an existing rule whose premise was derived earlier
            derived.add(b)
        conclusions = [b for _, b in steps]
        assert conclusions.count(goal) == 1 and len(set(conclusions)) == len(conclusions)  # each atom pushed once
        assert len(steps) == record["pushes"][col]
        assert len(steps) >= raw.lookahead


def test_scores_match_hand_computed_efficiency_and_eq7(cases):
    for problem, _record, raw in cases:
        start, goal, fwd, back = _graph(raw)
        w = bfs_distances(fwd, start)  # shortest proof depth of each derivable atom
        h = bfs_distances(back, goal)  # exact cost-to-go = dependency heuristic on unary rules (inf if off-path)
        f = lambda v: w[v] + h.get(v, np.inf)  # noqa: E731
        dep_steps = _steps(sft_completion(problem, heuristic="dependency"), raw.entity)
        alpha = sum(f(v) for v in {a for a, _ in dep_steps})
        for heuristic in ("zero", "dependency", "true"):
            text = sft_completion(problem, heuristic=heuristic)
            steps = _steps(text, raw.entity)
            pops = {a for a, _ in steps}
            s = score_completion(problem, text)
            assert s.correct and s.pushes == len(steps) and s.v_pops == len(pops)
            assert s.efficiency_pushes == pytest.approx(min(1.0, raw.lookahead / len(steps)))
            assert s.efficiency_pops == pytest.approx(min(1.0, raw.lookahead / len(pops)))
            x = sum(f(v) for v in pops)
            expected = 0.0 if np.isinf(x) else 0.5 ** ((x - alpha) / alpha)
            assert s.rewards["astar_dependency"] == pytest.approx(expected, rel=1e-9)
            assert s.rewards["step_count"] == pytest.approx(0.5 ** ((len(steps) - raw.lookahead) / raw.lookahead))
            assert s.rewards["correctness"] == 1.0
        assert score_completion(problem, sft_completion(problem, heuristic="dependency")).rewards[
            "astar_dependency"] == 1.0


def test_broken_and_arbitrary_completions_score_zero(cases):
    problem, _, raw = cases[0]
    text = sft_completion(problem)
    blocks = text.split("\n\n")
    hallucinated = f'Since {raw.entity} is {raw.vertices[raw.start]}, by the rule "If someone is ' \
                   f'{raw.vertices[raw.start]}, they are {raw.vertices[raw.goal]}.", {raw.entity} is ' \
                   f'{raw.vertices[raw.goal]}.'
    goal_text = f"is {raw.vertices[raw.goal]}."
    goal_premise = STEP.match(next(b for b in blocks if b.endswith(goal_text))).group(2)
    without_goal = "\n\n".join(b for b in blocks if not b.endswith(goal_text))
    without_needed = "\n\n".join(b for b in blocks if not b.endswith(f"is {goal_premise}."))
    for bad in ["", "I cannot prove this.", without_goal, without_needed, hallucinated,
                "\x00\ufffd" * 50, text.replace("Since", "")[:10]]:
        s = score_completion(problem, bad)
        assert not s.correct
        assert s.efficiency_pushes is None and s.efficiency_pops is None
        assert all(v == 0.0 for v in s.rewards.values())
    # Chatter between blocks is tolerated (paper §4.1).
    chatty = "Let me search.\n\n" + text.replace("\n\n", "\n\nNext step.\n\n") + "\n\nDone."
    assert score_completion(problem, chatty).correct


def test_bad_inputs_raise_clear_errors(cases):
    problem, record, _ = cases[0]
    with pytest.raises(ValueError, match=r"record r1: missing \['goal'\]"):
        problem_from_record({"id": "r1", "program": record["program"]})
    with pytest.raises(ValueError, match="record r2: unreadable program/goal JSON"):
        problem_from_record({"id": "r2", "program": "{not json", "goal": record["goal"]})
    with pytest.raises(ValueError, match="record r3: 1 rule_texts for"):
        problem_from_record({**record, "id": "r3", "rule_texts": json.dumps(["only one"])})
    with pytest.raises(ValueError, match="heuristic='best'"):
        sft_completion(problem, heuristic="best")
    unprovable = problem_from_record({**record, "id": "r4", "goal": json.dumps(["nowhere", ["Alex"]])})
    with pytest.raises(Exception, match="nowhere"):
        sft_completion(unprovable)
    with pytest.raises(ValueError, match="reward='speed'"):
        reward_specs("speed")


def test_tfds_bytes_records_and_reward_specs_through_the_registry(cases):
    from reasoner.rewards import CompositeReward

    problem, record, _ = cases[1]
    as_bytes = {k: v.encode() if isinstance(v, str) else v for k, v in record.items()}
    assert problem_from_record(as_bytes).record == problem.record
    reward = CompositeReward.from_config(reward_specs("astar_dependency", extra=[("correctness", 0.5)]))
    try:
        text = sft_completion(problem)
        batch = reward([text, "nonsense"], examples=[problem.record] * 2)
        np.testing.assert_allclose(batch.per_function_BxF, [[1.0, 1.0], [0.0, 0.0]])
        np.testing.assert_allclose(batch.total_B, [1.5, 0.0])
    finally:
        reward.close()


def test_sft_examples_jsonl_round_trip(cases, tmp_path):
    problem, _, _ = cases[2]
    ex = sft_example(problem, heuristic="true")
    path = write_jsonl(tmp_path / "sft" / "train.jsonl", [ex, ex])
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [ex, ex] and ex["completion"] == sft_completion(problem, heuristic="true")
    from reasoner.data.chat_jsonl import parse_line

    parsed = parse_line(path.read_text().splitlines()[0], kind="sft", where="train.jsonl:1")
    assert json.loads(parsed["prompt"]) == prompt_messages(problem)
