"""CEDAR-GRPO's rewards: judged evidence coverage r_cov (Eq. 6) and directionality r_dir (Eq. 7), and r_cor routed
by each example's source (`cedar_correctness`).

Each is a registry reward (`judged_coverage`, `judged_directionality`); the composite
R = l_cor r_cor + l_cov r_cov + l_dir r_dir is three entries of `config.rewards` with their weights, so
`CompositeReward` logs every component (`rewards/<as>/mean`) next to the total.
The judge sees the policy's user message (the example's `prompt`: a string or chat messages, last user turn) and
the completion's `<think>` span (the whole completion without one, App. D.3); the dataset note is chosen by the
example's source (`example[source_key]`, or the fixed `source` option). A failed judge call or an invalid reply
scores 0 and is counted in the judge's `JudgeCounters` (never raises, never stops the step).

The rewards take the registry's `cancel` event: a call past its `timeout_s` (its batch already scored 0, counted as
timeouts) sends no further judge request once the event is set (requests in flight finish); the completions left
unjudged get `RewardFailure("timeout")`, what the registry counts a completion scored 0 for time as (None would read
"not applicable" and leave the completion out of the weighted sum; 0.0 would count as scored), and the judge's
counters count their prompts as `cancelled`. Before, a late call of a hung or slow judge went on asking for every
completion of a batch whose rewards were already zeroed, while the next batches' calls queued behind it.

Options: judge = {"endpoint": base_url, "model": name, ...EndpointJudge keywords} or {"sampler": checkpoint path,
"max_new_tokens": n, "batch_size": b}; cache = JSONL path ("" for none). Rewards built with the same judge and
cache share one judge object (one connection pool, one cache, one set of counters).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from reasoner.judges import (CachedJudge, EndpointJudge, Judge, JudgeCounters, SamplerJudge, judge_messages,
                             score_traces, think_span)
from reasoner.judges.prompts import DATASET_NOTES
from reasoner.rewards.registry import RewardFailure, completion_text, register_reward

_JUDGES: dict[str, tuple[Judge, JudgeCounters]] = {}
_JUDGES_LOCK = threading.Lock()


def build_judge(spec: Mapping[str, Any], *, cache: str = "") -> tuple[Judge, JudgeCounters]:
    """The (shared) judge for `spec` and its counters; see the module docstring for the spec's keys."""
    key = json.dumps([dict(spec), cache], sort_keys=True, default=str)
    with _JUDGES_LOCK:
        if key in _JUDGES:
            return _JUDGES[key]
        options = dict(spec)
        if "endpoint" in options:
            judge: Judge = EndpointJudge(options.pop("endpoint"), options.pop("model", "judge"), **options)
        elif "sampler" in options:
            from reasoner.models import load_model
            from reasoner.models.presets import resolve
            from reasoner.tokenization import load_tokenizer

            path = resolve(options.pop("sampler"))
            judge = SamplerJudge(load_model(path), load_tokenizer(path), judge_id=str(path), **options)
        else:
            raise ValueError(f"judge spec {dict(spec)}: expected an 'endpoint' (with 'model') or a 'sampler' path")
        counters = JudgeCounters()
        if cache:
            judge = CachedJudge(judge, cache, counters)
        _JUDGES[key] = (judge, counters)
        return judge, counters


def policy_user_message(prompt) -> str:
    """The policy's user message: the prompt string, or the last user turn of a chat message list."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        if users:
            return str(users[-1].get("content") or "")
    raise ValueError(f"prompt of type {type(prompt).__name__}: expected a string or chat messages with a user turn")


def _judged(kind: str, *, judge: Mapping[str, Any] | Judge, cache: str, source: str, source_key: str,
            prompt_key: str):
    if source and source not in DATASET_NOTES:  # a config typo: refused now, not scored 0 on every completion
        raise ValueError(f"judged_{kind} source={source!r}: expected one of {sorted(DATASET_NOTES)} (or '' to read "
                         f"each example's {source_key!r})")
    if isinstance(judge, Mapping):
        the_judge, counters = build_judge(judge, cache=cache)
    else:
        the_judge, counters = judge, JudgeCounters()

    def reward(completions, *, examples, cancel: threading.Event | None = None):
        prompts = []
        for completion, example in zip(completions, examples):
            name = source or example.get(source_key, "")
            prompts.append(judge_messages(kind, source=name, observation=policy_user_message(example[prompt_key]),
                                          reasoning=think_span(completion_text(completion))))
        judgements = score_traces(the_judge, kind, prompts, counters, cancel=cancel)
        unsent = RewardFailure("timeout", f"judged_{kind}: judge request not sent, the call was cancelled at its "
                                          "deadline")
        return [unsent if j is None else j.score for j in judgements]

    reward.judge, reward.counters = the_judge, counters
    return reward


@register_reward("judged_coverage")
def judged_coverage(*, judge, cache: str = "", source: str = "", source_key: str = "source",
                    prompt_key: str = "prompt"):
    """r_cov = addressed / total observation details, from the coverage judge (0 when invalid or failed)."""
    return _judged("coverage", judge=judge, cache=cache, source=source, source_key=source_key,
                   prompt_key=prompt_key)


@register_reward("judged_directionality")
def judged_directionality(*, judge, cache: str = "", source: str = "", source_key: str = "source",
                          prompt_key: str = "prompt"):
    """r_dir in {0, 0.5, 1} from the directionality judge (0 when invalid or failed)."""
    return _judged("directionality", judge=judge, cache=cache, source=source, source_key=source_key,
                   prompt_key=prompt_key)


@register_reward("cedar_correctness")
def cedar_correctness(*, max_workers: int = 2):
    """r_cor routed by `example["source"]` (reasoner.tasks.cedar_verify: the Table 8 verifier of that source on
    the first `<answer>` span; code in the sandbox). Examples are rows of `cedar_verify.example_of`."""
    import concurrent.futures as cf

    from reasoner.tasks.cedar_verify import record_of, score

    if max_workers < 1:
        raise ValueError(f"max_workers={max_workers}: expected >= 1")

    def reward(completions, *, examples):
        records = [record_of(e) for e in examples]
        texts = [completion_text(c) for c in completions]
        with cf.ThreadPoolExecutor(max_workers=max_workers) as pool:
            return list(pool.map(score, records, texts))

    return reward
