"""Judges: a chat model that reads a rubric prompt and replies with text, behind one interface.

`Judge.reply(prompts)` takes B chat prompts (lists of {"role", "content"} messages) and returns B replies, each
a string or None when the judge could not answer (timeout, HTTP error, dead server): a failure never raises.
Implementations:
  - `SamplerJudge`: a model in this process through `reasoner.sampling.Sampler`, greedy, `batch_size` prompts
    per device call;
  - `EndpointJudge`: any OpenAI-compatible `POST {base_url}/chat/completions` (`reasoner serve` included),
    temperature 0, a timeout per request, retries with backoff on 408/429/5xx/connection errors, at most
    `max_concurrency` requests in flight;
  - `CachedJudge`: wraps either with an on-disk JSONL cache keyed by (judge id, prompt), so the same trace is
    never judged twice (temperature 0: the reply would not change). Failures are not cached. In a job of several
    processes each appends to its own file (process k > 0: `<stem>.p<k><suffix>` beside the path) and every file
    is read back at start: appends of several processes to one file (a shared workdir, NFS) can interleave and
    tear lines, while per-process files keep every process's replies for the next run.
The judge id names everything besides the prompt (which carries the rubric) that decides a reply: an endpoint's
URL, model, temperature and max_tokens; a sampler's label, model architecture and dtypes, chat template,
max_new_tokens and max_len. Settings that only decide whether a reply comes (API key, timeout, retries,
concurrency, batch size) are left out: a failure is never cached, and the key never reaches the cache file.
`score_traces` turns replies into `Judgement`s and counts invalid and failed ones in `JudgeCounters`.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import json
import pathlib
import re
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

    def reply(self, prompts: Sequence[Messages]) -> list[str | None]: ...


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
    """Judgements asked for: one per prompt, = valid + invalid + failed."""
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


def ask_judge(judge: Judge, prompts: Sequence[Messages], parse, *, failed, counters: JudgeCounters | None = None):
    """Asks `judge` for every prompt; each reply goes through `parse(text, messages) -> (result, valid, reason)`
    (messages: the prompt it answers), a failed call (None reply) gives `failed`. Returns the results in prompt
    order and counts every request in `counters` (and, through a `CachedJudge`, its cache hits and misses)."""
    replies = (judge.reply(list(prompts), counters=counters) if isinstance(judge, CachedJudge)
               else judge.reply(list(prompts)))
    if len(replies) != len(prompts):
        raise ValueError(f"judge {judge.judge_id!r} returned {len(replies)} replies for {len(prompts)} prompts")
    out = []
    for messages, text in zip(prompts, replies):
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


def score_traces(judge: Judge, kind: str, prompts: Sequence[Messages],
                 counters: JudgeCounters | None = None) -> list[Judgement]:
    """One `Judgement` per prompt; a failed call or an invalid reply scores 0 and is counted."""
    def parse(text, messages):
        prompt = "\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))
        judgement = parse_judgement(kind, text, prompt)
        return judgement, judgement.valid, judgement.reason

    return ask_judge(judge, prompts, parse, failed=Judgement(0.0, False, "judge call failed"), counters=counters)


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

    def reply(self, prompts: Sequence[Messages]) -> list[str | None]:
        if not prompts:
            return []
        with cf.ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompts))) as pool:
            return list(pool.map(self._request, prompts))

    def _request(self, messages: Messages) -> str | None:
        body = {"model": self.model, "messages": messages, "temperature": 0.0, "max_tokens": self.max_tokens}
        # ChatEndpoint never raises (a reply cut off mid-body is retried, then None): a failure is a None reply
        return self.endpoint.complete(body, _content_of)[0]


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

    def reply(self, prompts: Sequence[Messages]) -> list[str | None]:
        if not prompts:
            return []
        with self._lock:
            return self._reply(prompts)

    def _reply(self, prompts: Sequence[Messages]) -> list[str | None]:
        from reasoner.sampling.buckets import bucket_length
        from reasoner.tokenization import chat_ids

        ids = [chat_ids(self.tokenizer, list(p)) for p in prompts]
        max_len = self.max_len or bucket_length(max(len(x) for x in ids) + self.params.max_new_tokens)
        out: list[str | None] = []
        for lo in range(0, len(ids), self.batch_size):
            chunk = ids[lo:lo + self.batch_size]
            padded = chunk + [chunk[-1]] * (self.batch_size - len(chunk))
            completions = self.sampler.generate(padded, self.params, max_len=max_len)
            self.calls += 1
            out.extend(c.text for c in completions[:len(chunk)])
        return out


def cache_files(path: str | pathlib.Path) -> list[pathlib.Path]:
    """The files of the judge cache at `path`: `path` itself (process 0's) and `<stem>.p<k><suffix>` of every other
    process that appended to it, in process order."""
    path = pathlib.Path(path)
    pattern = re.compile(re.escape(path.stem) + r"\.p(\d+)" + re.escape(path.suffix))
    names = [f for f in path.parent.iterdir()] if path.parent.is_dir() else []  # not glob: a '[' in the name
    others = sorted(((int(m.group(1)), f) for f in names if (m := pattern.fullmatch(f.name))), key=lambda p: p[0])
    return ([path] if path.exists() else []) + [f for _, f in others]


class CachedJudge:
    """`judge` behind an append-only JSONL cache at `path`: one `{"key", "reply"}` line per answered prompt, the
    key the sha256 of (judge id, prompt). Thread-safe; a torn last line (a killed run) is skipped on load.

    process: the index of this process in the job (default `reasoner.distributed.process_index()`); process 0
    appends to `path`, process k to `<stem>.p<k><suffix>`, and all of them (`cache_files`) are read at start.
    counters: hits and misses are counted here, and in the counters a call passes (`ask_judge`)."""

    def __init__(self, judge: Judge, path: str | pathlib.Path, counters: JudgeCounters | None = None, *,
                 process: int | None = None):
        from reasoner import distributed

        self.judge, self.path = judge, pathlib.Path(path)
        self.judge_id = judge.judge_id
        self.counters = counters
        process = distributed.process_index() if process is None else int(process)
        if process < 0:
            raise ValueError(f"process={process}: expected a process index >= 0")
        self.write_path = self.path if process == 0 else self.path.with_name(
            f"{self.path.stem}.p{process}{self.path.suffix}")
        self._lock = threading.Lock()
        self._replies: dict[str, str] = {}
        for file in cache_files(self.path):
            for line in file.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    self._replies[row["key"]] = row["reply"]
                except (ValueError, KeyError, TypeError):
                    continue
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def key(self, prompt: Messages) -> str:
        blob = json.dumps([self.judge_id, prompt], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def reply(self, prompts: Sequence[Messages], *, counters: JudgeCounters | None = None) -> list[str | None]:
        """The replies, cached ones first; hits and misses counted in `self.counters` and `counters` (once when they
        are the same object)."""
        keys = [self.key(p) for p in prompts]
        with self._lock:
            out: list[str | None] = [self._replies.get(k) for k in keys]
            missing = [i for i, r in enumerate(out) if r is None]
            for c in {id(c): c for c in (self.counters, counters) if c is not None}.values():
                c.cache_hits += len(prompts) - len(missing)
                c.cache_misses += len(missing)
        # Identical prompts in one batch (G samples that wrote the same trace) are asked once.
        unique = list(dict.fromkeys(keys[i] for i in missing))
        first = {k: next(i for i in missing if keys[i] == k) for k in unique}
        fresh = self.judge.reply([prompts[first[k]] for k in unique]) if unique else []
        if len(fresh) != len(unique):  # zip would drop the rest, and a KeyError name a hash
            raise ValueError(f"judge {self.judge_id!r} returned {len(fresh)} replies for {len(unique)} prompts")
        got = dict(zip(unique, fresh))
        with self._lock, self.write_path.open("a", encoding="utf-8") as f:
            for k, text in got.items():
                if text is not None and k not in self._replies:
                    self._replies[k] = text
                    f.write(json.dumps({"key": k, "reply": text}, ensure_ascii=False) + "\n")
        for i in missing:
            out[i] = got[keys[i]]
        return out
