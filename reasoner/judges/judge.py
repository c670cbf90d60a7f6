"""Judges: a chat model that reads a rubric prompt and replies with text, behind one interface.

`Judge.reply(prompts)` takes B chat prompts (lists of {"role", "content"} messages) and returns B replies, each
a string or None when the judge could not answer (timeout, HTTP error, dead server): a failure never raises.
The judges here also take `reply(prompts, cancel=event)`: once the event is set they send no further prompt (those
in flight finish) and answer the rest `UNSENT`, so a reward call past its batch deadline (`rewards.registry` sets
the event there) stops spending judge requests on rewards already zeroed; `ask_judge` counts them as `cancelled`.
Implementations:
  - `SamplerJudge`: a model in this process through `reasoner.sampling.Sampler`, greedy, `batch_size` prompts
    per device call;
  - `EndpointJudge`: any OpenAI-compatible `POST {base_url}/chat/completions` (`reasoner serve` included),
    temperature 0, a timeout per request, retries with backoff on 408/429/5xx/connection errors, at most
    `max_concurrency` requests in flight;
  - `CachedJudge` (`reasoner.judges.cache`): wraps either with an on-disk JSONL cache keyed by (judge id, prompt),
    so the same trace is never judged twice (temperature 0: the reply would not change); one file per writer.
The judge id names everything besides the prompt (which carries the rubric) that decides a reply: an endpoint's
URL, model, temperature and max_tokens; a sampler's label, model architecture and dtypes, chat template,
max_new_tokens and max_len. Settings that only decide whether a reply comes (API key, timeout, retries,
concurrency, batch size) are left out: a failure is never cached, and the key never reaches the cache file.
`score_traces` turns replies into `Judgement`s and counts invalid and failed ones in `JudgeCounters`.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import hashlib
import inspect
import json
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from reasoner.chat_http import ChatEndpoint
from reasoner.judges.parse import Judgement, parse_judgement
from reasoner.judges.prompts import (COVERAGE_SYSTEM, COVERAGE_USER, DATASET_NOTES, DIRECTIONALITY_SYSTEM,
                                     DIRECTIONALITY_USER)

Messages = list[dict]


class Judge(Protocol):
    judge_id: str  # names the model and its settings; part of the cache key

    def reply(self, prompts: Sequence[Messages]) -> list[str | None]: ...  # may also take `cancel=` (module doc)


class _Unsent:
    """The type of UNSENT: one object, its repr its name."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSENT"


UNSENT = _Unsent()
"""The reply of a prompt not sent because the caller's `cancel` was set: no judge failure, never cached."""


def _takes_cancel(method) -> bool:
    try:
        return "cancel" in inspect.signature(method).parameters
    except (TypeError, ValueError):  # a callable without a signature
        return False


def reply_with_cancel(judge: Judge, prompts: list[Messages], cancel: threading.Event | None) -> list:
    """`judge.reply(prompts)`, passing `cancel` to a judge whose `reply` takes it (it stops sending once the event
    is set); a judge without it is asked for all prompts, or for none (all UNSENT) when the event is already set."""
    if cancel is None:
        return judge.reply(prompts)
    if _takes_cancel(judge.reply):
        return judge.reply(prompts, cancel=cancel)
    return [UNSENT] * len(prompts) if cancel.is_set() else judge.reply(prompts)


def judge_messages(kind: str, *, source: str, observation: str, reasoning: str) -> Messages:
    """The App. D.4 system + user messages judging `reasoning` (the trace) against `observation` (the policy's
    user message) for a training `source` (a key of DATASET_NOTES)."""
    if source not in DATASET_NOTES:
        raise ValueError(f"source {source!r}: expected one of {sorted(DATASET_NOTES)}")
    note = DATASET_NOTES[source]
    if kind == "coverage":
        system, user = COVERAGE_SYSTEM, COVERAGE_USER.format(
            dataset_name=note.name, coverage_dataset_note=note.coverage, policy_user_message=observation,
            extracted_think_span=reasoning)
    elif kind == "directionality":
        system, user = DIRECTIONALITY_SYSTEM, DIRECTIONALITY_USER.format(
            dataset_name=note.name, directionality_dataset_note=note.directionality,
            policy_user_message=observation, extracted_think_span=reasoning)
    else:
        raise ValueError(f"judge kind {kind!r}: expected 'coverage' or 'directionality'")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def think_span(completion: str) -> str:
    """The `<think>...</think>` content of a completion (an unterminated `<think>` runs to the end); the text before
    a lone `</think>` when the chat template opened the block in the prompt (DeepSeek-R1-style templates end the
    generation prompt with `<think>`, so the completion holds only the close); the whole completion when there is
    neither (App. D.3: the judges then see everything)."""
    lower = completion.lower()
    start = lower.find("<think>")
    if start < 0:
        close = lower.find("</think>")
        return completion[:close].strip() if close >= 0 else completion
    end = lower.find("</think>", start)
    return completion[start + len("<think>"):end if end >= 0 else len(completion)].strip()


@dataclasses.dataclass
class JudgeCounters:
    """What one judge's judgements came to since construction, counted by `ask_judge` (and by a `CachedJudge` given
    them): `reasoner cedar eval` reports them under `judge`; GRPO logs the first four as `judge/<field>`, summed over
    its distinct judges."""

    requests: int = 0
    """Judgements asked for: one per prompt sent (or answered from the cache), = valid + invalid + failed."""
    valid: int = 0
    """Replies the parser read as a valid judgement."""
    invalid: int = 0
    """Replies the parser could not read as a judgement (why: `last_reason`)."""
    failed: int = 0
    """Prompts the judge gave no reply for (None: timeout, HTTP error, dead server)."""
    cache_hits: int = 0
    """Prompts a `CachedJudge` answered from its cache instead of asking the judge (counted in the counters it holds
    and in those `ask_judge` counts into)."""
    cache_misses: int = 0
    """Prompts a `CachedJudge` did not find in its cache (passed on to the judge; identical ones asked once)."""
    last_reason: str = ""
    """Why the latest invalid or failed judgement was not valid (the parser's reason, or "judge call failed")."""
    cancelled: int = 0
    """Prompts not sent because the caller's `cancel` was set (a reward call past its deadline); not in requests."""


def ask_judge(judge: Judge, prompts: Sequence[Messages], parse, *, failed, counters: JudgeCounters | None = None,
              cancel: threading.Event | None = None, unsent=None):
    """Asks `judge` for every prompt; each reply goes through `parse(text, messages) -> (result, valid, reason)`
    (messages: the prompt it answers), a failed call (None reply) gives `failed`, a prompt not sent because `cancel`
    was set gives `unsent`. Returns the results in prompt order and counts every request in `counters` (and, through
    a `CachedJudge`, its cache hits and misses)."""
    from reasoner.judges.cache import CachedJudge

    replies = (judge.reply(list(prompts), counters=counters, cancel=cancel) if isinstance(judge, CachedJudge)
               else reply_with_cancel(judge, list(prompts), cancel))
    if len(replies) != len(prompts):
        raise ValueError(f"judge {judge.judge_id!r} returned {len(replies)} replies for {len(prompts)} prompts")
    out = []
    for messages, text in zip(prompts, replies):
        if text is UNSENT:
            if counters is not None:
                counters.cancelled += 1
            out.append(unsent)
            continue
        result, valid, reason = (failed, False, "judge call failed") if text is None else parse(text, messages)
        if counters is not None:
            counters.requests += 1
            if text is None:
                counters.failed += 1
            elif valid:
                counters.valid += 1
            else:
                counters.invalid += 1
            if not valid:
                counters.last_reason = reason
        out.append(result)
    return out


def score_traces(judge: Judge, kind: str, prompts: Sequence[Messages], counters: JudgeCounters | None = None, *,
                 cancel: threading.Event | None = None) -> list[Judgement | None]:
    """One `Judgement` per prompt; a failed call or an invalid reply scores 0 and is counted. With `cancel`, the
    prompts not sent because it was set are None (counted as cancelled): they were not judged at all."""
    def parse(text, messages):
        prompt = "\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))
        judgement = parse_judgement(kind, text, prompt)
        return judgement, judgement.valid, judgement.reason

    return ask_judge(judge, prompts, parse, failed=Judgement(0.0, False, "judge call failed"), counters=counters,
                     cancel=cancel)


class EndpointJudge:
    """A judge behind an OpenAI-compatible chat endpoint (urllib only, temperature 0)."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, max_tokens: int = 8192,
                 timeout_s: float = 60.0, retries: int = 2, backoff_s: float = 1.0, max_concurrency: int = 8,
                 sleep=time.sleep):
        if max_concurrency < 1 or max_tokens < 1:
            raise ValueError(f"max_concurrency={max_concurrency}, max_tokens={max_tokens}: expected both >= 1")
        self.endpoint = ChatEndpoint(base_url, api_key=api_key, timeout_s=timeout_s, retries=retries,
                                     backoff_s=backoff_s, sleep=sleep)
        self.url, self.model, self.max_tokens, self.max_concurrency = self.endpoint.url, model, max_tokens, max_concurrency
        self.judge_id = f"endpoint:{self.url}:{model}:t0:max{max_tokens}"

    @property
    def failures(self) -> int:
        """Requests that got no reply (the endpoint's retries spent, or a failure it does not retry)."""
        return self.endpoint.failures

    @property
    def last_error(self) -> str:
        return self.endpoint.last_error

    def reply(self, prompts: Sequence[Messages], *, cancel: threading.Event | None = None) -> list:
        """One reply per prompt, at most `max_concurrency` requests in flight; once `cancel` is set no further request
        starts (those in flight finish, with their retries) and the rest are UNSENT."""
        if not prompts:
            return []
        with cf.ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompts))) as pool:
            return list(pool.map(functools.partial(self._request, cancel=cancel), prompts))

    def _request(self, messages: Messages, *, cancel: threading.Event | None = None):
        if cancel is not None and cancel.is_set():  # checked as each request's turn comes, not when it was queued
            return UNSENT
        body = {"model": self.model, "messages": messages, "temperature": 0.0, "max_tokens": self.max_tokens}
        # ChatEndpoint never raises (a reply cut off mid-body is retried, then None): a failure is a None reply
        return self.endpoint.complete(body, _content_of, cancel=cancel)[0]


def _content_of(completion: dict) -> str:
    """The reply's text. A reasoning judge (gpt-oss behind vLLM) that spends max_tokens thinking answers with no
    content and finish_reason "length": that is its reply (empty: invalid, scored 0, cached), the same on every
    retry at temperature 0, not a failed call to repeat. Any other non-string content is a bad body (retried)."""
    choice = completion["choices"][0]
    content = choice["message"].get("content")
    if content is None and choice.get("finish_reason") == "length":
        return ""
    if not isinstance(content, str):
        raise ValueError(f"message content is {type(content).__name__}, expected a string")
    return content


def sampler_fingerprint(model, tokenizer) -> str:
    """12 hex digits over what decides an in-process judge's greedy reply besides its weights and the prompt: the
    model's architecture and dtypes (`model.cfg`) and the tokenizer's chat template (it renders the prompt). The
    caller's label names the weights; a label such as "random-seed0" is shared by models of every shape."""
    blob = json.dumps([repr(getattr(model, "cfg", None)), getattr(tokenizer, "name_or_path", ""),
                       getattr(tokenizer, "chat_template", None)], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


class SamplerJudge:
    """A judge model in this process: greedy decoding through `reasoner.sampling.Sampler`, `batch_size` prompts
    per call (a short last batch is padded with copies so every call has one shape: one compile). Calls from
    several threads (the reward pool scores two batches at once; a batch past its deadline keeps running beside the
    next) take turns: the sampler and the fast tokenizer are not made for concurrent use, and one model gains
    nothing from it."""

    def __init__(self, model, tokenizer, *, judge_id: str, max_new_tokens: int = 1024, batch_size: int = 8,
                 max_len: int | None = None):
        from reasoner.sampling import Sampler, SamplingParams

        if batch_size < 1 or max_new_tokens < 1:
            raise ValueError(f"batch_size={batch_size}, max_new_tokens={max_new_tokens}: expected >= 1")
        self.sampler = Sampler(model, tokenizer)
        self.tokenizer = tokenizer
        self.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
        self.batch_size, self.max_len = batch_size, max_len
        # max_len caps prompt + reply (a row that reaches it stops there), so it changes replies as max_new_tokens
        # does; the label alone does not tell two architectures or chat templates apart (`sampler_fingerprint`)
        self.judge_id = (f"sampler:{judge_id}:{sampler_fingerprint(model, tokenizer)}:greedy:max{max_new_tokens}"
                         + (f":len{max_len}" if max_len else ""))
        self.calls = 0
        self._lock = threading.Lock()

    def reply(self, prompts: Sequence[Messages], *, cancel: threading.Event | None = None) -> list:
        """The greedy replies; once `cancel` is set no further batch runs (the rest are UNSENT), so a call past its
        deadline does not hold the model, and the next batch's call waiting for it, any longer than its batch."""
        if not prompts:
            return []
        with self._lock:
            return self._reply(prompts, cancel)

    def _reply(self, prompts: Sequence[Messages], cancel: threading.Event | None) -> list:
        from reasoner.sampling.buckets import bucket_length
        from reasoner.tokenization import chat_ids

        ids = [chat_ids(self.tokenizer, list(p)) for p in prompts]
        max_len = self.max_len or bucket_length(max(len(x) for x in ids) + self.params.max_new_tokens)
        out: list[str | None] = []
        for lo in range(0, len(ids), self.batch_size):
            chunk = ids[lo:lo + self.batch_size]
            if cancel is not None and cancel.is_set():
                out.extend([UNSENT] * len(chunk))
                continue
            padded = chunk + [chunk[-1]] * (self.batch_size - len(chunk))
            completions = self.sampler.generate(padded, self.params, max_len=max_len)
            self.calls += 1
            out.extend(c.text for c in completions[:len(chunk)])
        return out

