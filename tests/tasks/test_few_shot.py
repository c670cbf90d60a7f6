"""Few-shot A* prompts (the paper's ICL baselines): k solved training examples before the problem, a seeded
choice per problem that never includes the problem itself, every shot's answer a correct A* trace."""

from __future__ import annotations

import dataclasses

import pytest

from reasoner.data.astar_traces import deeprd_records
from reasoner.data.deeprd import DeepRDSpec
from reasoner.tasks.astar import (FEW_SHOT_K, few_shot_choice, few_shot_messages, problem_from_record,
                                  prompt_messages, score_completion)

SPEC = DeepRDSpec(lookahead=(2, 3), branches=(2, 3), extra_ratio=0.0, max_degree=3)


@pytest.fixture(scope="module")
def train():
    return [problem_from_record(r) for r in deeprd_records(seed=3, split="train", size=12, spec=SPEC)]


@pytest.fixture(scope="module")
def test_problem():
    return problem_from_record(deeprd_records(seed=3, split="test", size=1, spec=SPEC)[0])


def test_default_k_is_the_papers_and_shots_are_solved_examples(train, test_problem):
    assert FEW_SHOT_K == {"proofwriter": 10, "deeprd": 5}
    messages = few_shot_messages(test_problem, train)
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 5 + ["user"]
    assert [messages[0], messages[-1]] == prompt_messages(test_problem)
    by_context = {p.verbalizer.context(p.goal): p for p in train}
    for user, assistant in zip(messages[1:-1:2], messages[2:-1:2]):
        shot = by_context[user["content"]]
        assert score_completion(shot, assistant["content"]).correct  # each shot's answer proves its goal


def test_choice_is_seeded_per_problem_and_never_the_problem(train, test_problem):
    twin = dataclasses.replace(test_problem, id="another-id")  # same program and goal under another id
    pool = train + [test_problem, twin]
    for seed in range(10):
        chosen = few_shot_choice(test_problem, pool, 5, seed=seed)
        assert len({c.id for c in chosen}) == 5
        assert all(c.id != test_problem.id and c.id != twin.id for c in chosen)
        assert [c.id for c in chosen] == [c.id for c in few_shot_choice(test_problem, pool, 5, seed=seed)]
    for p in train[:3]:  # a training problem as the query: it is excluded from its own shots
        assert p.id not in {c.id for c in few_shot_choice(p, train, 11, seed=0)}
    choices = {tuple(c.id for c in few_shot_choice(test_problem, pool, 5, seed=s)) for s in range(10)}
    assert len(choices) > 1  # the seed changes the choice (C(12, 5) = 792 possible sets)


def test_k_zero_and_bad_k(train, test_problem):
    assert few_shot_messages(test_problem, train, 0) == prompt_messages(test_problem)
    with pytest.raises(ValueError, match="only 12 training examples"):
        few_shot_messages(test_problem, train, 13)
    with pytest.raises(ValueError, match="k >= 0"):
        few_shot_choice(test_problem, train, -1)
    odd = dataclasses.replace(test_problem, dataset="other")
    with pytest.raises(ValueError, match="give k"):
        few_shot_messages(odd, train)
