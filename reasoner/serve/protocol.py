"""The OpenAI chat-completions wire format: request validation and response bodies.

`parse_chat_request(body)` turns a decoded JSON body into a typed `ChatRequest` or raises `RequestError`
(HTTP 400, OpenAI's error shape `{"error": {"message", "type", "param", "code"}}`) naming the field and what
was expected. Fields that would change the output and that the sampler cannot honour (`logit_bias`,
penalties, `response_format` other than text, a forced `tool_choice`) are refused, never silently ignored;
fields that do not change the output (`user`, `metadata`, `store`, ...) are accepted and ignored. vLLM's
`chat_template_kwargs` (variables for the chat template) is honoured, never ignored: it changes the prompt.
The text-completions endpoint's body is `reasoner.serve.completions`' (it shares this module's field checks).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP_STRINGS = 4  # as OpenAI


class RequestError(Exception):
    """A client error: answered with `status` and OpenAI's error JSON."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.code, self.status, self.kind = message, param, code, status, kind

    def body(self) -> dict:
        return error_body(self.message, param=self.param, code=self.code, kind=self.kind)


def error_body(message: str, *, param: str | None = None, code: str | None = None,
               kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingFields:
    """The fields both endpoints read alike (`_sampling_fields`; `ChatService.sampling` makes the `SamplingParams`).

    max_tokens: None -> the server's default. seed: None -> the server draws one (sampled requests are then not
    reproducible). include_usage: `stream_options.include_usage` (a last chunk with the token counts).
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChatRequest(SamplingFields):
    """One validated `POST /v1/chat/completions` body.

    messages: chat messages as the chat template takes them ({"role", "content"}, assistant `tool_calls`
      with parsed-JSON arguments, tool messages with `tool_call_id`/`name`).
    tools: OpenAI function-tool schemas, or None.
    top_logprobs: alternatives per token (0 when `logprobs` is off).
    template_kwargs: vLLM's `chat_template_kwargs`, extra variables for the chat template (None: none).
    """

    model: str | None
    messages: tuple[dict, ...]
    tools: tuple[dict, ...] | None
    logprobs: bool = False
    top_logprobs: int = 0
    template_kwargs: dict | None = None


def _fail(param: str, expected: str, value: Any) -> RequestError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return RequestError(f"{param}: expected {expected}, got {shown}", param=param)


def _int(body: dict, key: str, *, low: int, high: int | None = None, default=None):
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(key, "an integer", value)
    if value < low or (high is not None and value > high):
        raise _fail(key, f"an integer >= {low}" + (f" and <= {high}" if high is not None else ""), value)
    return value


def _number(body: dict, key: str, *, low: float, high: float, default: float, low_open: bool = False) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(key, "a number", value)
    if value < low or value > high or (low_open and value == low):
        raise _fail(key, f"a number in {'(' if low_open else '['}{low}, {high}]", value)
    return float(value)


def _content_text(content: Any, param: str) -> str | None:
    """A message's content as text: a string, None, or a list of {"type": "text", "text"} parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _fail(f"{param}[{i}]", 'a text part {"type": "text", "text": "..."} (only text is served)', part)
            parts.append(part["text"])
        return "".join(parts)
    raise _fail(param, "a string, null or a list of text parts", content)


def _tool_call(call: Any, param: str) -> dict:
    import json

    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise _fail(param, 'a tool call {"type": "function", "function": {"name", "arguments"}}', call)
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            raise _fail(f"{param}.function.arguments", "a JSON object encoded as a string", args) from None
    if not isinstance(args, dict):
        raise _fail(f"{param}.function.arguments", "a JSON object", args)
    # chat templates (Qwen, Llama 3.x, Hermes) take arguments as a mapping, not as the wire's JSON string
    return {"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def _messages(value: Any) -> tuple[dict, ...]:
    if value is None:
        raise RequestError("messages: required (expected a non-empty list of {role, content} messages)",
                           param="messages")
    if not isinstance(value, list) or not value:
        raise _fail("messages", "a non-empty list of {role, content} messages", value)
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _fail(where, "an object with 'role' and 'content'", m)
        role = m.get("role")
        if role not in ROLES:
            raise _fail(f"{where}.role", f"one of {', '.join(ROLES)}", role)
        content = _content_text(m.get("content"), f"{where}.content")
        message: dict = {"role": "system" if role == "developer" else role, "content": content or ""}
        calls = m.get("tool_calls")
        if calls is not None:
            if role != "assistant" or not isinstance(calls, list):
                raise _fail(f"{where}.tool_calls", "a list, on an assistant message", calls)
            message["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
        elif content is None:
            raise _fail(f"{where}.content", "a string (null only on an assistant message with tool_calls)", None)
        for key in ("name", "tool_call_id"):
            if isinstance(m.get(key), str):
                message[key] = m[key]
        out.append(message)
    return tuple(out)


def _tools(body: dict) -> tuple[dict, ...] | None:
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise _fail("tool_choice", '"auto" or "none" (forcing a call is not supported)', choice)
    if tools is None or choice == "none":
        return None
    if not isinstance(tools, list):
        raise _fail("tools", "a list of function tools", tools)
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _fail(f"tools[{i}]", '{"type": "function", "function": {"name", "description", "parameters"}}', t)
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise _fail(f"tools[{i}].function.parameters", "a JSON schema object", fn["parameters"])
    return tuple(tools) or None


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS \
            or not all(isinstance(s, str) and s for s in stops):
        raise _fail("stop", f"a non-empty string or a list of at most {MAX_STOP_STRINGS} of them", value)
    return tuple(dict.fromkeys(stops))


def _template_kwargs(value: Any) -> dict | None:
    """vLLM's `chat_template_kwargs`: an object of template variables (keys are strings and values JSON values by
    JSON's own rules). Which keys clash with the renderer's arguments depends on the tokenizer: `ChatService`."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail("chat_template_kwargs", 'an object of template variables such as {"enable_thinking": false}',
                    value)
    return dict(value) or None


def _refuse_unsupported(body: dict) -> None:
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise _fail(key, "0 or absent (penalties are not supported)", body[key])
    if body.get("logit_bias"):
        raise _fail("logit_bias", "absent or empty (not supported)", body["logit_bias"])
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise _fail("response_format", '{"type": "text"} or absent (structured output is not supported)', fmt)
    if body.get("parallel_tool_calls") not in (None, True, False):
        raise _fail("parallel_tool_calls", "a boolean", body["parallel_tool_calls"])
    for key, neutral in VLLM_SAMPLING_EXTRAS.items():
        value = body.get(key)
        if not any(value is v or (type(value) is type(v) and value == v) for v in neutral):  # True is not 1
            ok = [v for v in neutral if v is not None]
            shown = f"{json.dumps(ok[0])} or absent" if ok else "absent"
            raise _fail(key, f"{shown} (vLLM's {key} is not supported here)", value)


# vLLM's extra sampling fields (sent through `extra_body` by clients moving from vLLM) with the values that leave
# the output as this server makes it; any other value would be silently ignored otherwise, so it is refused.
VLLM_SAMPLING_EXTRAS = {
    "repetition_penalty": (None, 1, 1.0), "min_p": (None, 0, 0.0), "min_tokens": (None, 0),
    "ignore_eos": (None, False), "use_beam_search": (None, False), "prompt_logprobs": (None,),
    "include_stop_str_in_output": (None, False), "guided_json": (None,), "guided_regex": (None,),
    "guided_choice": (None,), "guided_grammar": (None,),
}


GREEDY_BELOW = 1e-5  # vLLM's rule: a temperature under it decodes greedily


def _temperature(body: dict) -> float:
    """The request's temperature in [0, 2]; below `GREEDY_BELOW` it is 0 (greedy), as vLLM's server does (a
    float32 division by 1e-40 made every logit inf and drew token 0)."""
    t = _number(body, "temperature", low=0.0, high=2.0, default=1.0)
    return 0.0 if t < GREEDY_BELOW else t


def _request_head(body: Any, booleans: tuple[str, ...]) -> tuple[str | None, dict]:
    """The checks both endpoints' bodies start with: a JSON object, no output-changing field we cannot honour, `model`
    a string, each of `booleans` a boolean, `stream_options` an object. Returns (model, stream_options)."""
    if not isinstance(body, dict):
        raise RequestError(f"request body: expected a JSON object, got {type(body).__name__}", param=None)
    _refuse_unsupported(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _fail("model", "a string", model)
    for key in booleans:
        if body.get(key) not in (None, True, False):
            raise _fail(key, "a boolean", body[key])
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise _fail("stream_options", 'an object such as {"include_usage": true}', stream_options)
    return model, stream_options


def _sampling_fields(body: dict, *, max_n: int, stream_options: dict, max_tokens: int | None) -> dict:
    """`SamplingFields`' values of a body whose head `_request_head` checked (a 400 naming the first bad field)."""
    return dict(n=_int(body, "n", low=1, high=max_n, default=1), temperature=_temperature(body),
                top_p=_number(body, "top_p", low=0.0, high=1.0, default=1.0, low_open=True),
                top_k=_int(body, "top_k", low=0, default=0), max_tokens=max_tokens, stop=_stop(body.get("stop")),
                seed=_int(body, "seed", low=0, high=2**32 - 1), stream=bool(body.get("stream")),
                include_usage=bool(stream_options.get("include_usage")))


def parse_chat_request(body: Any, *, max_n: int) -> ChatRequest:
    """Validates a decoded JSON body (see module docstring); `max_n` is the server's rows per batch."""
    model, stream_options = _request_head(body, ("stream", "logprobs"))
    logprobs = bool(body.get("logprobs"))
    top_logprobs = _int(body, "top_logprobs", low=0, high=20, default=0)
    if top_logprobs and not logprobs:
        raise RequestError("top_logprobs: needs logprobs=true", param="top_logprobs")
    max_tokens = _int(body, "max_completion_tokens", low=1)
    max_tokens = _int(body, "max_tokens", low=1, default=max_tokens)
    return ChatRequest(
        model=model, messages=_messages(body.get("messages")), tools=_tools(body), logprobs=logprobs,
        top_logprobs=top_logprobs, template_kwargs=_template_kwargs(body.get("chat_template_kwargs")),
        **_sampling_fields(body, max_n=max_n, stream_options=stream_options, max_tokens=max_tokens))
