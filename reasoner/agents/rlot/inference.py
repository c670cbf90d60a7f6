"""Inference with the navigator and the baselines it is compared with, all through one batched `BatchLM`.

    direct(lm, problems)              one call: the question and the answer format, "answer directly"
    chain_of_thought(lm, problems)    one call: zero-shot CoT ("Let's think step by step")
    cot_self_consistency(lm, problems, k=5, temperature=0.7)  one call, k samples per problem, majority vote
    navigate(env, choose, problems)   the navigator's episodes (greedy `choose` = trained Q-network's argmax)
    navigate_self_consistency(env, choose, problems, k)        k navigator episodes per problem in one batch
                                                                (the env's LM samples), majority vote

Each returns a `MethodResult`: per problem the final answer and correctness, and the LLM calls and tokens spent
per problem (a "call" is one prompt answered; one batched `generate` answers many).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Sequence

import numpy as np

from reasoner.tasks.answers import is_correct
from reasoner.tasks.reasoning import FORMAT_INSTRUCTIONS, Problem, extract

DIRECT = "{question}\n\nAnswer directly without explanation. {format}"
COT = "{question}\n\nLet's think step by step. {format}"


@dataclasses.dataclass
class MethodResult:
    """answers[i] / correct[i] for problems[i]; calls and tokens are per-problem totals."""

    name: str
    answers: list[str | None]
    correct: list[bool]
    calls: list[int]
    tokens: list[int]
    episodes: list = dataclasses.field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return float(np.mean(self.correct)) if self.correct else 0.0


def majority(answers: Sequence[str | None], kind: str) -> str | None:
    """The most frequent extracted answer (None votes ignored; ties go to the earliest), grouping equal answers
    with the kind's comparison (e.g. 18 and 18.0)."""
    groups: list[list[str]] = []
    for a in answers:
        if a is None:
            continue
        for g in groups:
            if is_correct(kind, a, g[0]):
                g.append(a)
                break
        else:
            groups.append([a])
    if not groups:
        return None
    return max(groups, key=len)[0]  # max keeps the first of equal lengths


def _single_call(name: str, lm, problems: Sequence[Problem], template: str, *, max_new_tokens: int | None,
                 samples: int = 1, temperature: float | None = None) -> MethodResult:
    prompts = [template.format(question=p.question, format=FORMAT_INSTRUCTIONS[p.kind]) for p in problems]
    kwargs = {"max_new_tokens": max_new_tokens}
    if samples > 1:
        kwargs.update(samples=samples, temperature=temperature)
    outs = lm.generate(prompts, **kwargs)
    answers, correct, calls, tokens = [], [], [], []
    for i, p in enumerate(problems):
        mine = outs[i * samples:(i + 1) * samples]
        votes = [extract(p, g.text) for g in mine]
        a = votes[0] if samples == 1 else majority(votes, p.kind)
        answers.append(a)
        correct.append(is_correct(p.kind, a, p.gold))
        calls.append(len(mine))
        tokens.append(sum(g.prompt_tokens + g.completion_tokens for g in mine))
    return MethodResult(name=name, answers=answers, correct=correct, calls=calls, tokens=tokens)


def direct(lm, problems, *, max_new_tokens: int | None = 32) -> MethodResult:
    return _single_call("direct", lm, problems, DIRECT, max_new_tokens=max_new_tokens)


def chain_of_thought(lm, problems, *, max_new_tokens: int | None = None) -> MethodResult:
    return _single_call("cot", lm, problems, COT, max_new_tokens=max_new_tokens)


def cot_self_consistency(lm, problems, *, k: int = 5, temperature: float = 0.7,
                         max_new_tokens: int | None = None) -> MethodResult:
    if k < 2:
        raise ValueError(f"cot_self_consistency: k={k}; expected >= 2 samples per problem")
    return _single_call(f"cot_sc@{k}", lm, problems, COT, max_new_tokens=max_new_tokens, samples=k,
                        temperature=temperature)


def _episode_result(name: str, problems, episodes, k: int) -> MethodResult:
    answers, correct, calls, tokens = [], [], [], []
    for i, p in enumerate(problems):
        mine = episodes[i * k:(i + 1) * k]
        a = mine[0].answer if k == 1 else majority([e.answer for e in mine], p.kind)
        answers.append(a)
        correct.append(is_correct(p.kind, a, p.gold))
        calls.append(sum(e.llm_calls for e in mine))
        tokens.append(sum(e.prompt_tokens + e.completion_tokens for e in mine))
    return MethodResult(name=name, answers=answers, correct=correct, calls=calls, tokens=tokens, episodes=episodes)


def navigate(env, choose: Callable[[np.ndarray], np.ndarray], problems: Sequence[Problem]) -> MethodResult:
    """One episode per problem, all problems stepped together."""
    from reasoner.agents.rlot.env import rollout

    return _episode_result("navigator", problems, rollout(env, choose, list(problems)), 1)


def navigate_self_consistency(env, choose, problems: Sequence[Problem], *, k: int) -> MethodResult:
    """k episodes per problem in one batch (problem-major); useful when the env's LM samples (temperature > 0)."""
    from reasoner.agents.rlot.env import rollout

    repeated = [p for p in problems for _ in range(k)]
    return _episode_result(f"navigator_sc@{k}", problems, rollout(env, choose, repeated), k)


def block_patterns(episodes, *, length: int, top: int = 5) -> list[tuple[str, int]]:
    """The most frequent contiguous `length`-block sequences over the episodes' blocks (the paper's Table 5),
    as ("reason -> debate", count)."""
    from reasoner.agents.rlot.env import BLOCK_NAMES

    counts = collections.Counter()
    for e in episodes:
        names = [BLOCK_NAMES[b] for b in e.blocks]
        for j in range(len(names) - length + 1):
            counts[" -> ".join(names[j:j + length])] += 1
    return counts.most_common(top)
