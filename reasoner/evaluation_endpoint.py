"""An OpenAI-compatible chat endpoint as a model of the A* evaluation (`reasoner eval --endpoint URL
--endpoint-model NAME`): how a user compares with a large API model, as the paper does with DeepSeek-V3.2 (§4,
App. B.3: 2048 new tokens on ProofWriter, 5000 on DeepRD).

Requests go through the project's one HTTP client, `reasoner.chat_http.ChatEndpoint` (retries with exponential
backoff on connection errors, timeouts, HTTP 408/409/429/5xx and bodies that are not chat completions; no retry on
other 4xx). One request per sample (`num_samples` requests per problem, each `n=1`: many APIs reject `n > 1`),
`max_concurrency` in flight, results in problem order. Body: `model`, `messages`, `max_tokens` =
settings.max_new_tokens (the endpoint's own budget), `temperature`; with temperature > 0 also `top_p` and
`seed` = settings.seed + sample index (servers that honour seeds, such as `reasoner serve`, then reproduce a run).

A request that still fails after its retries never ends the evaluation: its text is "" (scored as wrong, like any
unparseable answer), its finish reason "error", and `generation.endpoint` in the report counts the failed requests
and the problems they hit, with the last error. Completion tokens come from the response's `usage` (None when the
server sends none).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence

from reasoner.chat_http import ChatEndpoint

__all__ = ["EndpointModel", "EndpointReply"]


@dataclasses.dataclass(frozen=True)
class EndpointReply:
    """One sample: its text ("" when the request failed), finish reason ("error" then) and completion tokens."""

    text: str
    finish_reason: str
    completion_tokens: int | None
    error: str = ""


class EndpointModel:
    """A served model evaluated like a local one: `generate(prompts, settings)` -> (K texts per prompt, stats)."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 300.0,
                 retries: int = 2, backoff_s: float = 1.0, max_concurrency: int = 8,
                 sleep: Callable[[float], None] = time.sleep):
        if not model:
            raise ValueError("endpoint model name is empty: expected the served model's name (--endpoint-model)")
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency={max_concurrency!r}: expected an int >= 1")
        self.endpoint = ChatEndpoint(base_url, api_key=api_key, timeout_s=timeout_s, retries=retries,
                                     backoff_s=backoff_s, sleep=sleep)
        self.url, self.model, self.max_concurrency = self.endpoint.url, model, max_concurrency

    def body(self, messages: list[dict[str, str]], settings, sample: int) -> dict:
        """The request of one sample (see module docstring)."""
        body = {"model": self.model, "messages": messages, "max_tokens": int(settings.max_new_tokens),
                "temperature": float(settings.temperature)}
        if settings.temperature > 0:
            body["top_p"] = float(settings.top_p)
            body["seed"] = int(settings.seed) + sample
        return body

    def request(self, messages: list[dict[str, str]], settings, sample: int = 0) -> EndpointReply:
        reply, error = self.endpoint.complete(self.body(messages, settings, sample), _reply_of)
        return reply if reply is not None else EndpointReply("", "error", None, error)

    def generate(self, prompts: Sequence[list[dict[str, str]]], settings, *, progress: bool = True,
                 desc: str = "eval") -> tuple[list[list[str]], dict]:
        """settings.num_samples texts per prompt (prompt order) and the generation stats of the report."""
        from tqdm import tqdm

        k = settings.num_samples
        jobs = [(i, j) for i in range(len(prompts)) for j in range(k)]
        start = time.perf_counter()
        with tqdm(total=len(jobs), desc=desc, unit="request", disable=not progress, dynamic_ncols=True) as bar, \
                cf.ThreadPoolExecutor(max_workers=min(self.max_concurrency, max(1, len(jobs)))) as pool:
            def one(job):
                out = self.request(prompts[job[0]], settings, job[1])
                bar.update(1)
                return out

            replies = list(pool.map(one, jobs))
        seconds = time.perf_counter() - start
        texts = [[r.text for r in replies[i * k:(i + 1) * k]] for i in range(len(prompts))]
        failed = [r for r in replies if r.finish_reason == "error"]
        counted = [r.completion_tokens for r in replies if r.completion_tokens is not None]
        tokens = sum(counted)
        return texts, {
            "finish_reasons": dict(Counter(r.finish_reason for r in replies)),
            "mean_completion_tokens": tokens / len(counted) if counted else None,
            "generation_seconds": seconds, "tokens_per_second": tokens / max(seconds, 1e-9) if counted else None,
            "endpoint": {"url": self.url, "model": self.model, "max_tokens": int(settings.max_new_tokens),
                         "requests": len(replies), "failed": len(failed),
                         "failed_problems": sum(any(r.finish_reason == "error" for r in replies[i * k:(i + 1) * k])
                                                for i in range(len(prompts))),
                         "last_error": failed[-1].error if failed else ""}}


def _reply_of(completion: dict) -> EndpointReply:
    """The first choice's text, finish reason and the usage's completion tokens; ValueError (a retryable bad body)
    when the content is neither a string nor null (null, as some servers send for an empty answer, reads as "")."""
    choice = completion["choices"][0]
    content = choice["message"].get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"message content is {type(content).__name__}, expected a string")
    usage = completion.get("usage") if isinstance(completion.get("usage"), dict) else {}
    tokens = usage.get("completion_tokens")
    return EndpointReply(content or "", str(choice.get("finish_reason") or "unknown"),
                         int(tokens) if isinstance(tokens, int) else None)
