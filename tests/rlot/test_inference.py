"""Baselines and navigator inference through one batched LM: answers, votes, calls and tokens, block patterns."""

import numpy as np
import pytest

from reasoner.agents.rlot import inference
from reasoner.agents.rlot.env import DEBATE, REASON, TERMINATE, ThoughtEnv
from reasoner.agents.rlot.llm import CountingLM, Generation
from reasoner.tasks.reasoning import Problem

PROBLEMS = [Problem(id=f"p{i}", task="toy", question=f"What is {i} + {i}?", gold=str(2 * i), kind="number")
            for i in range(5)]


class EchoLM:
    """Answers 2i for problem i, except for odd i where the first of every k samples is wrong."""

    calls = 0

    def generate(self, prompts, *, max_new_tokens=None, samples=1, temperature=None, seed=None):
        self.calls += 1
        out = []
        for p in prompts:
            i = int(p.split("What is ")[1].split(" ")[0]) if "What is " in p else 0
            for s in range(samples):
                wrong = i % 2 == 1 and (samples == 1 or s == 0)
                text = f"The answer is {2 * i + (1 if wrong else 0)}."
                out.append(Generation(text, prompt_tokens=10, completion_tokens=5))
        return out


def test_baselines_make_one_call_and_vote():
    lm = CountingLM(EchoLM())
    d = inference.direct(lm, PROBLEMS)
    assert d.correct == [True, False, True, False, True] and d.calls == [1] * 5 and d.tokens == [15] * 5
    sc = inference.cot_self_consistency(lm, PROBLEMS, k=3)
    assert sc.correct == [True] * 5 and sc.calls == [3] * 5 and sc.tokens == [45] * 5
    assert lm.batch_sizes == [5, 5]  # one batched call per method (k samples per prompt inside it)
    with pytest.raises(ValueError, match="k=1"):
        inference.cot_self_consistency(lm, PROBLEMS, k=1)


def test_majority_groups_equal_answers_and_ignores_missing():
    assert inference.majority(["18", "18.0", "7", None, None], "number") == "18"
    assert inference.majority([None, None], "number") is None
    assert inference.majority(["a", "b"], "text") == "a"  # tie: the earliest


def test_navigator_inference_and_patterns():
    env = ThoughtEnv(EchoLM(), max_depth=3)
    script = iter([np.full(5, REASON), np.full(5, DEBATE), np.full(5, TERMINATE)])
    nav = inference.navigate(env, lambda obs: next(script), PROBLEMS)
    # EchoLM answers "The answer is ..." to every prompt, so the check-finished reply has no "yes": three blocks
    assert [e.blocks for e in nav.episodes] == [[REASON, DEBATE, TERMINATE]] * 5
    assert nav.calls[0] == sum(1 for stage, rows in env.stage_log if 0 in rows)
    assert inference.block_patterns(nav.episodes, length=2) == [("reason -> debate", 5), ("debate -> terminate", 5)]
    assert inference.block_patterns(nav.episodes, length=3) == [("reason -> debate -> terminate", 5)]


def test_label_word_replies_score_through_the_baselines_and_the_navigator(shared_data):
    """The navigator's answers and the baselines' read a Logic-LLM reply by its label as well as its letter
    (`reasoning.extract`): "The answer is False." names the option "B) False"; it scored 0 on every record when
    these read only letters."""
    from reasoner.tasks.reasoning import load_task

    problems = load_task(shared_data, "proofwriter", limit=12)
    label = {p.id: next(o.split(") ", 1)[1] for o in p.options if o.startswith(p.gold + ")")) for p in problems}
    by_question = {p.question: p.id for p in problems}

    class LabelLM:
        def generate(self, prompts, *, max_new_tokens=None, samples=1, temperature=None, seed=None):
            out = []
            for prompt in prompts:
                pid = next((i for q, i in by_question.items() if q in prompt), None)
                text = f"The answer is {label[pid]}." if pid else "yes"
                out.extend(Generation(text, prompt_tokens=1, completion_tokens=1) for _ in range(samples))
            return out

    assert all(inference.direct(LabelLM(), problems).correct)
    assert all(inference.cot_self_consistency(LabelLM(), problems, k=2).correct)
    env = ThoughtEnv(LabelLM(), max_depth=2)
    nav = inference.navigate(env, lambda obs: np.full(len(problems), TERMINATE), problems)
    assert [e.correct for e in nav.episodes] == [True] * len(problems)
