"""OpenAI's legacy text-completions endpoint, `POST /v1/completions` (what vLLM serves and the official client
calls as `client.completions.create`), over the chat endpoint's machinery: the same `ChatService` budget and
sampler-settings checks, the same batcher and backend, the same text and log-prob rules. No chat template.

Request (`parse_completion_request`): `prompt` is a string, a list of strings (several prompts), a list of token
ids or a list of lists of token ids (as vLLM accepts); each prompt gets its own `n` choices, numbered as OpenAI
documents, `index = prompt_index * n + j`. A string is tokenized by `reasoner.tokenization.encode_prompt` (the
tokenizer's BOS where it adds one, as vLLM's /v1/completions; see its docstring for the one deliberate
difference); token ids are taken as given. `max_tokens` defaults to 16 (OpenAI's default for this endpoint), cut
to the room the cache leaves as the chat endpoint cuts its default. Each prompt is one job of the batcher, so the
prompts of one request are decoded in shared batches with everything else that arrives.

Choices: `text` is exactly the chat endpoint's content for the same ids (`service.content_text`: the sampler's
text, special tokens skipped, without the stop string that ended it); `finish_reason` maps eos/stop to "stop" and
length to "length", as chat does; `usage.prompt_tokens` counts every prompt once (not once per sample, as vLLM).

`logprobs` is an int here (0..5 in OpenAI's API). The sampler records the chosen token's log-prob only, not the
most likely alternatives, so: 0 reports `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}` with each
position's `top_logprobs` holding the chosen token alone (vLLM's form for 0: it always adds the chosen token); 1 is
accepted only for greedy decoding, where the chosen token is the most likely one and that same dict is exact;
anything else is a 400 naming `logprobs`. The values are the chat endpoint's (`ChatService.chat_logprobs`: the
model's log-probs at temperature 1, a final end-of-turn token left out). `text_offset[k]` is where token k starts
in the choice's text, counted as vLLM counts it: the summed lengths of the token strings before it.

`echo` returns the prompt before the completion: a string prompt as sent, a token-id prompt decoded (special
tokens kept, as vLLM). The prompt's own log-probs are not computed by the sampler, so `echo` with `logprobs` is a
400 naming `echo`. Refused, never silently ignored (protocol.py's policy): a non-empty `suffix`, `best_of` other
than 1, penalties, `logit_bias` and vLLM's output-changing extras. Streaming follows the chat stream: text
pieces as they become final (a tail that could still be a stop string held back), then one chunk per choice with
the rest of its text, its `logprobs` and its finish reason, then usage if `stream_options.include_usage`.
"""

from __future__ import annotations

import dataclasses
import queue
import time
import uuid
from typing import Any, Callable, Iterator

from reasoner.sampling import Completion, SamplingParams
from reasoner.serve.protocol import (
    RequestError, SamplingFields, _fail, _int, _request_head, _sampling_fields,
)
from reasoner.serve.service import FINISH, ChatService, content_text, stable_deltas

DEFAULT_MAX_TOKENS = 16  # OpenAI's (and vLLM's) default for /v1/completions
MAX_LOGPROBS = 5  # OpenAI's limit for this endpoint
PROMPT_FORMS = "a string, a list of strings, a list of token ids or a list of lists of token ids"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompletionRequest(SamplingFields):
    """One validated `POST /v1/completions` body.

    prompts: each prompt, a string or a tuple of token ids; fields: the name each prompt's errors carry ("prompt"
      for a single one, "prompt[i]" in a list). logprobs: None (off) or 0/1 (see module docstring).
    """

    model: str | None
    prompts: tuple[str | tuple[int, ...], ...]
    fields: tuple[str, ...]
    logprobs: int | None = None
    echo: bool = False


def _token_ids(value: list, field: str) -> tuple[int, ...]:
    if not value:
        raise _fail(field, "a non-empty list of token ids", value)
    for k, t in enumerate(value):
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise _fail(f"{field}[{k}]", "a token id (an integer >= 0)", t)
    return tuple(value)


def _prompts(value: Any) -> tuple[tuple, tuple[str, ...]]:
    """(prompts, their field names) of the `prompt` field, in any of OpenAI's four forms."""
    if value is None:
        raise RequestError(f"prompt: required (expected {PROMPT_FORMS})", param="prompt")
    if isinstance(value, str):
        return (value,), ("prompt",)
    if not isinstance(value, list) or not value:
        raise _fail("prompt", PROMPT_FORMS, value)
    if all(isinstance(p, str) for p in value):
        return tuple(value), tuple(f"prompt[{i}]" for i in range(len(value)))
    if all(isinstance(p, int) and not isinstance(p, bool) for p in value):
        return (_token_ids(value, "prompt"),), ("prompt",)
    if all(isinstance(p, list) for p in value):
        fields = tuple(f"prompt[{i}]" for i in range(len(value)))
        return tuple(_token_ids(p, f) for p, f in zip(value, fields)), fields
    raise _fail("prompt", f"{PROMPT_FORMS} (not a mix)", value)


def parse_completion_request(body: Any, *, max_n: int) -> CompletionRequest:
    """Validates a decoded JSON body (see module docstring); `max_n` is the server's rows per batch."""
    model, stream_options = _request_head(body, ("stream", "echo"))
    if body.get("suffix") not in (None, ""):
        raise _fail("suffix", "absent or empty (inserting text after the completion is not supported)",
                    body["suffix"])
    prompts, fields = _prompts(body.get("prompt"))
    sampling = _sampling_fields(body, max_n=max_n, stream_options=stream_options,
                                max_tokens=_int(body, "max_tokens", low=1))
    best_of = _int(body, "best_of", low=1, default=None)
    if best_of is not None and not best_of == sampling["n"] == 1:
        raise _fail("best_of", "1 with n=1, or absent (server-side best-of selection is not supported)", best_of)
    logprobs = _int(body, "logprobs", low=0, high=MAX_LOGPROBS, default=None)
    if logprobs is not None and logprobs > (1 if sampling["temperature"] == 0 else 0):
        raise _fail("logprobs", "0 or absent, or 1 with temperature 0 (the sampler records only the chosen token's "
                    "log-prob, which is the top-1 alternative only when decoding greedily)", logprobs)
    echo = bool(body.get("echo"))
    if echo and logprobs is not None:
        raise RequestError("echo: expected false or absent when logprobs is set (the prompt's own log-probs are "
                           "not computed)", param="echo")
    return CompletionRequest(model=model, prompts=prompts, fields=fields, logprobs=logprobs, echo=echo, **sampling)


@dataclasses.dataclass(frozen=True)
class PreparedText:
    """A text-completion request ready to submit: per prompt its ids, echoed text ('' without echo) and settings."""

    request: CompletionRequest
    prompt_ids: tuple[tuple[int, ...], ...]
    echoes: tuple[str, ...]
    params: tuple[SamplingParams, ...]
    id: str
    created: int


class TextCompletions:
    """`/v1/completions` over a `ChatService`'s batcher, backend and checks (see module docstring)."""

    def __init__(self, chat: ChatService):
        self.chat = chat

    def prepare(self, body) -> PreparedText:
        """Everything that can fail on the client's side, before any work is queued: a 400 at once."""
        from reasoner.tokenization import encode_prompt

        chat = self.chat
        req = parse_completion_request(body, max_n=chat.batcher.max_rows)
        vocab = chat.backend.vocab_size
        ids_all, echoes, budgets = [], [], []
        for prompt, field in zip(req.prompts, req.fields):
            with chat.tokenizer_lock:
                if isinstance(prompt, str):
                    ids, echo = tuple(encode_prompt(chat.tokenizer, prompt)), prompt
                else:
                    ids = prompt
                    bad = next((k for k, t in enumerate(ids) if t >= vocab), None)
                    if bad is not None:
                        raise _fail(f"{field}[{bad}]", f"a token id below the vocabulary size {vocab}", ids[bad])
                    echo = chat.tokenizer.decode(list(ids), skip_special_tokens=False,
                                                 clean_up_tokenization_spaces=False)
            if not ids:
                raise _fail(field, "a prompt of at least one token", prompt)
            budgets.append(chat.budget(ids, req.max_tokens, default=DEFAULT_MAX_TOKENS, field=field))
            ids_all.append(ids)
            echoes.append(echo if req.echo else "")
        params = chat.sampling(req, max(budgets))
        return PreparedText(request=req, prompt_ids=tuple(ids_all), echoes=tuple(echoes),
                            params=tuple(params.replace(max_new_tokens=b) for b in budgets),
                            id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()))

    def _submit_all(self, prep: PreparedText, on_text: Callable[[int, int, str], None] | None = None) -> list:
        """One batcher job per prompt (`on_text(prompt index, sample, delta)` when streamed); if a later submission
        is refused (the server is closing), the jobs already queued are dropped."""
        jobs = []
        try:
            for i, (ids, params) in enumerate(zip(prep.prompt_ids, prep.params)):
                hook = None if on_text is None else (lambda j, delta, i=i: on_text(i, j, delta))
                jobs.append(self.chat.submit(ids, params, seeded=prep.request.seed is not None, on_text=hook))
        except BaseException:
            for job in jobs:
                job.cancel()
            raise
        return jobs

    # ------------------------------------------------------------------------------------------ answers
    def _logprobs(self, c: Completion, start: int) -> dict:
        entries = self.chat.chat_logprobs(c)["content"]
        offsets, at = [], start
        for e in entries:
            offsets.append(at)
            at += len(e["token"])
        return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [{e["token"]: e["logprob"]} for e in entries], "text_offset": offsets}

    def _choice(self, prep: PreparedText, i: int, c: Completion, *, text: str) -> dict:
        req = prep.request
        return {"index": i * req.n + c.sample_index, "text": text,
                "logprobs": self._logprobs(c, len(prep.echoes[i])) if req.logprobs is not None else None,
                "finish_reason": FINISH[c.finish_reason]}

    def _usage(self, prep: PreparedText, results: list[list[Completion]]) -> dict:
        prompt = sum(len(ids) for ids in prep.prompt_ids)
        generated = sum(c.num_tokens for completions in results for c in completions)
        return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}

    def _body(self, prep: PreparedText, choices: list, usage: dict | None) -> dict:
        body = {"id": prep.id, "object": "text_completion", "created": prep.created, "model": self.chat.model_name,
                "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return body

    def complete(self, prep: PreparedText, *, gone: Callable[[], bool] | None = None) -> dict:
        """The text_completion body (gone: as `ChatService.complete`'s)."""
        results = self.chat.wait_all(self._submit_all(prep), gone)
        stop = prep.request.stop
        choices = [self._choice(prep, i, c, text=prep.echoes[i] + content_text(c, stop))
                   for i, completions in enumerate(results) for c in completions]
        return self._body(prep, sorted(choices, key=lambda ch: ch["index"]), self._usage(prep, results))

    def stream(self, prep: PreparedText) -> Iterator[dict]:
        """Chunk bodies (`object` "text_completion", as OpenAI's): echoed prompts, text pieces as they become
        final, each choice's last piece with its logprobs and finish reason, usage."""
        n = prep.request.n
        events: queue.Queue = queue.Queue()
        jobs = self._submit_all(prep, on_text=lambda i, j, delta: events.put((i * n + j, delta)))
        try:
            yield from self._chunks(prep, jobs, events)
        finally:  # the consumer stopped early (its client went away): drop the jobs
            for job in jobs:
                if not job.done():
                    job.cancel()

    def _chunks(self, prep: PreparedText, jobs: list, events: queue.Queue) -> Iterator[dict]:
        req = prep.request
        if req.echo:
            yield self._body(prep, [{"index": i * req.n + j, "text": prep.echoes[i], "logprobs": None,
                                     "finish_reason": None} for i in range(len(jobs)) for j in range(req.n)], None)
        sent: dict[int, int] = {}
        for index, delta in stable_deltas(events, jobs, hold=req.stop, sent=sent):
            yield self._body(prep, [{"index": index, "text": delta, "logprobs": None, "finish_reason": None}], None)
        results = [job.wait() for job in jobs]
        for i, completions in enumerate(results):
            for c in completions:
                rest = content_text(c, req.stop)[sent.get(i * req.n + c.sample_index, 0):]
                yield self._body(prep, [self._choice(prep, i, c, text=rest)], None)
        if req.include_usage:
            yield self._body(prep, [], self._usage(prep, results))
