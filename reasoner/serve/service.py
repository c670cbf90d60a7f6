"""Chat completions over the batcher: a validated request -> prompt ids -> a batched job -> OpenAI bodies.

`ChatService.prepare(body)` does everything that can fail on the client's side before any work is queued
(validation, chat-template rendering with the client's `chat_template_kwargs`, which may not set the renderer's own
arguments, the cache-length check, stop strings the tokenizer can produce), so a bad request gets its 400 at once.
`complete` answers a `chat.completion`; `stream` yields the `chat.completion.chunk` bodies of a streamed answer as
the sampler produces stable text.

Text rules (as OpenAI): a stop string is not part of the returned content; finish reasons are `stop` (EOS or a
stop string), `length` (max_tokens or the cache) and `tool_calls` (the reply holds Hermes tool calls, parsed
into `message.tool_calls`). Streamed content holds back a tail that could still become a stop string or a
`<tool_call>` tag, so the chunks concatenate to exactly the non-streamed content.

`budget`, `sampling`, `submit`, `wait_all`, `chat_logprobs`, `content_text` and `stable_deltas` are shared with
`/v1/completions` (`reasoner.serve.completions`), so both endpoints check, batch and decode one way.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
import uuid
from typing import Callable, Iterator

from reasoner.sampling import Completion, SamplingParams
from reasoner.serve.backend import Backend, GenRequest
from reasoner.serve.batcher import Batcher, Job
from reasoner.serve.protocol import ChatRequest, RequestError, parse_chat_request
from reasoner.serve.render import parse_reply, render_prompt, streamable_prefix
from reasoner.tokenization import template_key_clashes, token_bytes

FINISH = {"eos": "stop", "stop": "stop", "length": "length"}


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A request ready to submit: the validated body, its prompt ids and its sampler settings."""

    request: ChatRequest
    prompt_ids: tuple[int, ...]
    params: SamplingParams
    id: str
    created: int


class ChatService:
    """See module docstring. default_max_tokens: budget of a request that names none (cut to the cache)."""

    def __init__(self, backend: Backend, tokenizer, batcher: Batcher, *, model_name: str, default_max_tokens: int):
        self.backend, self.tokenizer, self.batcher = backend, tokenizer, batcher
        self.model_name, self.default_max_tokens = model_name, int(default_max_tokens)
        from reasoner.tokenization import stop_token_ids

        self.eos_ids = frozenset(stop_token_ids(tokenizer))
        # a fast tokenizer's __call__ resets its Rust truncation/padding state: concurrent calls can collide
        self.tokenizer_lock = threading.Lock()

    # ------------------------------------------------------------------------------------------ preparing
    def prepare(self, body) -> Prepared:
        from reasoner.tokenization import encode

        req = parse_chat_request(body, max_n=self.batcher.max_rows)
        if req.top_logprobs:
            raise RequestError("top_logprobs: expected 0 or absent (the sampler records only the chosen token's "
                               "log-prob)", param="top_logprobs")
        extra = req.template_kwargs or {}
        with self.tokenizer_lock:
            clash = next(iter(template_key_clashes(extra, self.tokenizer)), None)
            if clash is not None:
                raise RequestError(f"chat_template_kwargs.{clash}: expected a variable of the template's own; "
                                   f"{clash!r} is an argument the server's chat rendering sets itself",
                                   param=f"chat_template_kwargs.{clash}")
            try:
                text = render_prompt(self.tokenizer, req.messages, req.tools, template_kwargs=extra)
            except Exception as err:  # noqa: BLE001 - jinja raises TemplateError (and others) on messages it refuses
                given = f" with chat_template_kwargs {sorted(extra)}" if extra else ""
                raise RequestError(f"messages: the chat template refused them{given} ({' '.join(str(err).split())})",
                                   param="messages") from None
            ids = tuple(encode(self.tokenizer, text))
        wanted = self.budget(ids, req.max_tokens, default=self.default_max_tokens, field="messages")
        return Prepared(request=req, prompt_ids=ids, params=self.sampling(req, wanted),
                        id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()))

    # ------------------------------------------------------------------ shared with `completions.TextCompletions`
    def budget(self, ids, max_tokens: int | None, *, default: int, field: str) -> int:
        """The token budget of a prompt of `ids`: `max_tokens`, or `default` cut to the room the cache leaves; a 400
        (code context_length_exceeded) naming `field` (the prompt's field) when the prompt or prompt + budget do
        not fit the server's context."""
        max_len = self.backend.max_len
        room = max_len - len(ids)
        wanted = max_tokens if max_tokens is not None else min(default, room)
        if room < 1:
            raise RequestError(
                f"{field}: this server's context is {max_len} tokens (prompt + completion) and the prompt alone has "
                f"{len(ids)}: shorten the {field.split('[')[0]}", param=field, code="context_length_exceeded")
        if len(ids) + wanted > max_len:
            raise RequestError(
                f"{field}: this server's context is {max_len} tokens (prompt + completion); the prompt has "
                f"{len(ids)} tokens and max_tokens is {wanted}: shorten the {field.split('[')[0]} or lower max_tokens",
                param="max_tokens", code="context_length_exceeded")
        return wanted

    def sampling(self, req, wanted: int) -> SamplingParams:
        """`SamplingParams` of a validated request (chat or text: both carry temperature, top_p, top_k, n, seed and
        stop) with a budget of `wanted` tokens, checked against the model (a 400 naming the field otherwise)."""
        try:
            params = SamplingParams(max_new_tokens=wanted, temperature=req.temperature, top_p=req.top_p,
                                    top_k=req.top_k, n=req.n, seed=req.seed or 0, stop=req.stop)
            with self.tokenizer_lock:
                params.check_against(vocab_size=self.backend.vocab_size, max_len=self.backend.max_len + 1,
                                     tokenizer=self.tokenizer)
        except ValueError as err:
            param = "stop" if "stop string" in str(err) else "top_k" if "top_k" in str(err) else None
            raise RequestError(str(err), param=param) from None
        return params

    def submit(self, prompt_ids, params: SamplingParams, *, seeded: bool, on_text=None) -> Job:
        return self.batcher.submit(GenRequest(prompt_ids=tuple(prompt_ids), params=params, seeded=seeded,
                                              on_text=on_text))

    @staticmethod
    def wait_all(jobs, gone: Callable[[], bool] | None) -> list[list[Completion]]:
        """Each job's completions. gone: polled while they run; when it says the client went away every job is
        cancelled and ConnectionResetError raised (nobody is left to answer)."""
        for job in jobs:
            while not job.wait_done(0.25):
                if gone is not None and gone():
                    for other in jobs:
                        other.cancel()
                    raise ConnectionResetError("the client went away before its answer")
        return [job.wait() for job in jobs]

    def _submit(self, prep: Prepared, on_text=None) -> Job:
        return self.submit(prep.prompt_ids, prep.params, seeded=prep.request.seed is not None, on_text=on_text)

    # ------------------------------------------------------------------------------------------ answers
    def _content(self, prep: Prepared, c: Completion) -> str:
        return content_text(c, prep.request.stop)

    def chat_logprobs(self, c: Completion) -> dict:
        """The chat wire's `logprobs`: one entry per generated token but a final end-of-turn marker (not part of
        the text), with the model's log-prob at temperature 1 (`Completion.model_logprobs`)."""
        tokens = [int(t) for t in c.tokens]
        if tokens and c.finish_reason == "eos" and tokens[-1] in self.eos_ids:
            tokens = tokens[:-1]  # the end-of-turn marker is not part of the text
        content = []
        for t, lp in zip(tokens, c.model_logprobs):
            piece = self.tokenizer.decode([t], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            content.append({"token": piece, "logprob": float(lp), "bytes": token_bytes(self.tokenizer, t),
                            "top_logprobs": []})
        return {"content": content}

    def _usage(self, prep: Prepared, completions) -> dict:
        generated = sum(c.num_tokens for c in completions)
        return {"prompt_tokens": len(prep.prompt_ids), "completion_tokens": generated,
                "total_tokens": len(prep.prompt_ids) + generated}

    def complete(self, prep: Prepared, *, gone: Callable[[], bool] | None = None) -> dict:
        """The chat.completion body. gone: polled while the job runs; when it says the client went away the job
        is cancelled and ConnectionResetError raised (nobody is left to answer)."""
        (completions,) = self.wait_all([self._submit(prep)], gone)
        choices = []
        for c in completions:
            reply = parse_reply(self._content(prep, c), tools_offered=bool(prep.request.tools),
                                names=_tool_names(prep.request.tools))
            message = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                message["tool_calls"] = list(reply.tool_calls)
            choices.append({"index": c.sample_index, "message": message,
                            "logprobs": self.chat_logprobs(c) if prep.request.logprobs else None,
                            "finish_reason": "tool_calls" if reply.tool_calls else FINISH[c.finish_reason]})
        return {"id": prep.id, "object": "chat.completion", "created": prep.created, "model": self.model_name,
                "choices": choices, "usage": self._usage(prep, completions)}

    def _chunk(self, prep: Prepared, choices: list, usage: dict | None = None) -> dict:
        body = {"id": prep.id, "object": "chat.completion.chunk", "created": prep.created, "model": self.model_name,
                "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return body

    def stream(self, prep: Prepared) -> Iterator[dict]:
        """Chunk bodies: the role, content deltas as text becomes final, tool calls and finish reasons, usage."""
        events: queue.Queue = queue.Queue()
        job = self._submit(prep, on_text=lambda j, delta: events.put((j, delta)))
        try:
            yield from self._stream_chunks(prep, job, events)
        finally:  # the consumer stopped early (its client went away): drop the job
            if not job.done():
                job.cancel()

    def _stream_chunks(self, prep: Prepared, job: Job, events: queue.Queue) -> Iterator[dict]:
        req = prep.request
        tools = bool(req.tools)
        yield self._chunk(prep, [{"index": j, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                  "finish_reason": None} for j in range(req.n)])
        sent: dict[int, int] = {}
        for j, delta in stable_deltas(events, [job], hold=req.stop, sent=sent,
                                      limit=lambda raw: streamable_prefix(raw, tools_offered=tools)):
            yield self._chunk(prep, [{"index": j, "delta": {"content": delta}, "logprobs": None,
                                      "finish_reason": None}])
        completions = job.wait()
        for c in completions:
            j = c.sample_index
            reply = parse_reply(self._content(prep, c), tools_offered=tools, names=_tool_names(req.tools))
            rest = (reply.content or "")[sent.get(j, 0):]
            delta = {"content": rest} if rest else {}
            if reply.tool_calls:
                delta["tool_calls"] = [dict(call, index=k) for k, call in enumerate(reply.tool_calls)]
            yield self._chunk(prep, [{"index": j, "delta": delta,
                                      "logprobs": self.chat_logprobs(c) if req.logprobs else None,
                                      "finish_reason": "tool_calls" if reply.tool_calls else FINISH[c.finish_reason]}])
        if req.include_usage:
            yield self._chunk(prep, [], usage=self._usage(prep, completions))


def content_text(c: Completion, stop: tuple[str, ...]) -> str:
    """A completion's text as the wire returns it (chat content, text completion): the sampler's text without the
    stop string that ended it (OpenAI's rule; the sampler keeps it, cut right after)."""
    text = c.text
    if c.finish_reason == "stop":
        hits = [s for s in stop if text.endswith(s)]
        if hits:
            text = text[: len(text) - max(len(s) for s in hits)]
    return text


def stable_deltas(events: queue.Queue, jobs, *, hold: tuple[str, ...], sent: dict[int, int],
                  limit: Callable[[str], int] = len) -> Iterator[tuple[int, str]]:
    """(choice index, text) pieces of streamed choices as they become final, until every job is done.

    events: (choice index, delta) pairs put by the jobs' `on_text`. A tail as long as the longest of the `hold`
    stop strings may still be (the start of) one, so it is held back; `limit(raw)` may hold back more (a possible
    `<tool_call>`). `sent[index]` is how much of each choice's text was yielded: the caller sends the rest of the
    final text after the jobs end, so the pieces concatenate to exactly the non-streamed text."""
    tail = max((len(s) for s in hold), default=0)
    raw: dict[int, str] = {}
    while True:
        try:
            j, delta = events.get(timeout=0.05)
        except queue.Empty:
            if all(job.done() for job in jobs):
                return
            continue
        raw[j] = raw.get(j, "") + delta
        end = min(len(raw[j]) - tail, limit(raw[j]))
        if end > sent.get(j, 0):
            yield j, raw[j][sent.get(j, 0):end]
            sent[j] = end


def _tool_names(tools) -> tuple[str, ...]:
    """The names of the offered tools (`protocol` has checked each is {"type": "function", "function": {...}})."""
    return tuple(t["function"]["name"] for t in tools or ())
