"""Degenerate model replies (one character repeated for the whole token budget) parse in linear time; a reply
holding a lone surrogate does not stop an episode batch.

SmolLM2's tokenizer spells 1,000 "#", spaces or backticks in 17 tokens, so a reply that repeats one of them up to
the authors' 4,096 new tokens is ~240,000 characters. The block parsers (Decompose's subtasks, Debate's plans and
verdict), the arithmetic PRM's "= value" and the Z3 PRM's code fences backtracked quadratically over such a run
(16,000 "#" took 3.5 s, so a 4,096-token reply minutes, per row, inside `ThoughtEnv.step`). The timeout below is a
hang guard, not a timing assertion: with the linear patterns each test takes about a second, with the old ones each
ran past 150 s (checked on 2026-12-04 by swapping the old patterns in; they gave the same answers on the well-formed
replies).
"""

import numpy as np
import pytest

from reasoner.agents.rlot import prompts as P
from reasoner.agents.rlot.env import DEBATE, DECOMPOSE, ThoughtEnv
from reasoner.agents.rlot.llm import Generation
from reasoner.agents.rlot.prm import VerifierPRM, arithmetic_check
from reasoner.agents.rlot.z3_prm import smt_scripts
from reasoner.tasks.reasoning import Problem

N = 240_000  # 4,096 tokens of a repeated "#" or " "
pytestmark = pytest.mark.timeout(120)


def test_block_parsers_on_runs_of_hashes_and_spaces():
    hashes = "#" * N
    assert P.parse_subtasks(hashes, limit=5) == [hashes]  # no subtask format: the whole reply is one subtask
    assert P.parse_plans(hashes) == [hashes]
    assert P.parse_subtasks("### Subtask1: " + hashes, limit=5) == [hashes]
    assert P.parse_plans("### Plan1: add\n### Plan2:" + " " * N + "x") == ["add", "x"]
    assert P.parse_best_plan("The most promising plan is" + " " * N, 3) == 0
    assert P.parse_best_plan("The most promising plan is" + " " * N + "Plan 3: short", 3) == 2
    # the well-formed replies parse as before
    assert P.parse_subtasks("#### Subtask 1. a\n## Subtask2: b\n", limit=5) == ["a", "b"]
    assert P.parse_plans("### Plan1: a ### Plan2: b# x\n### Plan3: c") == ["a", "b# x", "c"]
    assert P.parse_best_plan("The most promising plan is **Plan [2]**: it is short", 3) == 1


def test_prm_parsers_on_runs_of_spaces_and_backticks():
    assert arithmetic_check("q", ["x =" + " " * N]) == 0.5  # no number after the "=": nothing to check
    assert arithmetic_check("q", ["2 + 2 =" + " " * N + "4"]) == 1.0
    assert arithmetic_check("q", ["2 + 2 = $ 5"]) == 0.0
    assert smt_scripts("`" * (4 * N)) == [] and smt_scripts("```a" * N) == []
    script = "```smt2\n(declare-const x Int)\n(assert (> x 0))\n(check-sat)\n``` so it is sat"
    assert [(s.code, s.claim) for s in smt_scripts(script)] == [
        ("(declare-const x Int)\n(assert (> x 0))\n(check-sat)", "sat")]


def _hash_reply(prompt: str) -> str:
    """Every block reply is N "#"; evaluations follow the score format, the check-finished reply says no."""
    if prompt.endswith(P.EVALUATE):
        return "\n".join(f"{k} score=[2] reason=[ok]" for k in P.SCORE_KEYS)
    return "No." if prompt.endswith(P.CHECK_FINISHED) else "#" * N


class HashLM:
    calls = 0

    def generate(self, prompts, *, max_new_tokens=None):
        self.calls += 1
        return [Generation(text=_hash_reply(p), prompt_tokens=1, completion_tokens=1) for p in prompts]


def test_an_episode_batch_of_degenerate_decompose_and_debate_replies_steps():
    problems = [Problem(id=f"p{i}", task="toy", question=f"What is {i} + 1?", gold=str(i + 1), kind="number")
                for i in range(2)]
    env = ThoughtEnv(HashLM(), problems, prm=VerifierPRM(arithmetic_check), max_depth=3)
    env.reset_problems(problems)
    obs, reward, done = env.step(np.array([DECOMPOSE, DEBATE]))
    assert not done.any() and (obs == 2).all()
    np.testing.assert_array_equal(reward, [0.5, 0.5])  # a step without equations: unsure
    assert [e.steps for e in env.episodes] == [["#" * N], ["#" * N]]


class SurrogateLM(HashLM):
    """Block replies hold a lone surrogate, as an endpoint's JSON "\\ud800" decodes to."""

    def generate(self, prompts, *, max_new_tokens=None):
        out = super().generate(prompts, max_new_tokens=max_new_tokens)
        return [g if g.text.startswith(("A1", "No")) else Generation("2 + 2 = 4 \ud800 done", 1, 1) for g in out]


def test_a_lone_surrogate_in_a_reply_does_not_stop_the_batch(tiny_model, tokenizer):
    from reasoner.agents.rlot.env import REASON
    from reasoner.agents.rlot.prm import MathShepherdPRM

    problem = Problem(id="p", task="toy", question="What is 2 + 2?", gold="4", kind="number")
    prm = MathShepherdPRM(tiny_model, tokenizer, max_len=256)
    env = ThoughtEnv(SurrogateLM(), [problem], prm=prm, max_depth=3)
    env.reset_problems([problem])
    _, reward, done = env.step(np.array([REASON]))  # the PRM's tokenizer raised a TypeError on the surrogate
    assert env.episodes[0].steps == ["2 + 2 = 4 ? done"] and not done[0]
    assert reward[0] == prm.score([problem.question], [["2 + 2 = 4 ? done"]])[0]
