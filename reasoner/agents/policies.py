"""The policy interface of the tool loop and two implementations (scripted replay, OpenAI-compatible HTTP).

A policy maps a batch of conversations to one assistant reply each:

    class Policy(Protocol):
        def respond(self, conversations: Sequence[list[dict]]) -> list[Reply | str]: ...

A conversation is a list of OpenAI-style messages {"role": "system"|"user"|"assistant"|"tool",
"content": str} (tool messages also carry "name"); the last message is a user or tool message and
the policy must continue the conversation as the assistant (multi-turn continuation). A reply is a
`Reply` (text plus optional token counts) or a bare string. Tool calls are written inside the text
as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; the loop parses them. `TOOLS` is the
JSON schema of the two tools, for chat templates and servers that take a `tools` list.

What a policy over the jitted sampler must provide (the third implementation, beside the two here):
`respond(conversations)` with `len(result) == len(conversations)`, in the same order; render each
conversation with the model's chat template (passing `TOOLS` where the template supports tools,
rendering "tool" messages as the template's tool-response turn) with the generation prompt added;
generate the assistant turn as a continuation of that prefix (batched, padded; reusing the KV cache
of the shared prefix is an optimisation, not a requirement); stop at EOS / end-of-turn or right
after `</tool_call>`; return the decoded new text only (special tokens stripped, `<tool_call>` tags
kept) as `Reply(text, prompt_tokens, completion_tokens)`. It must not mutate the message lists.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import time
from typing import Protocol, Sequence

from reasoner.chat_http import ChatEndpoint

TOOLS = [
    {"type": "function", "function": {
        "name": "z3_solve",
        "description": "Run a self-contained SMT-LIB 2 script with Z3; returns success, output, sat_result, error.",
        "parameters": {"type": "object", "properties": {
            "smt_code": {"type": "string", "description": "SMT-LIB 2 script with declarations and (check-sat)"},
            "timeout": {"type": "integer", "description": "seconds, at most 30"}},
            "required": ["smt_code"]}}},
    {"type": "function", "function": {
        "name": "finish",
        "description": "End the episode with the final answer.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}},
                       "required": ["answer"]}}},
]


@dataclasses.dataclass(frozen=True)
class Reply:
    """One assistant turn. `failure` is set (and `text` empty) when the policy's infrastructure failed to produce
    a reply at all (an endpoint unreachable or erroring after its retries): the episode then ends as
    "infrastructure", which curation and metrics exclude instead of counting it against the model."""

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    failure: str | None = None


class Policy(Protocol):
    def respond(self, conversations: Sequence[list[dict]]) -> list[Reply | str]:
        ...


def as_reply(value: Reply | str) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(value)
    raise TypeError(f"a policy must return Reply or str per conversation, got {type(value).__name__}")


class ScriptedPolicy:
    """Replays fixed replies, for tests and demos.

    `scripts[prompt]` holds the episodes written for the conversation whose first user message is
    `prompt`: either one list of replies or a list of such lists (K samples of one problem). The
    k-th distinct conversation object seen with that prompt replays episode k; within an episode
    the reply index is the number of assistant messages already in the conversation.
    """

    def __init__(self, scripts: dict[str, list]):
        self.scripts = {key: [list(e) for e in (episodes if episodes and isinstance(episodes[0], list)
                                                else [episodes])]
                        for key, episodes in scripts.items()}
        self._assigned: dict[int, tuple[list, str, int]] = {}
        self._used: dict[str, int] = {}

    def _episode(self, messages: list[dict]) -> tuple[str, list[str]]:
        if id(messages) not in self._assigned:
            key = next((m["content"] for m in messages if m["role"] == "user"), None)
            if key not in self.scripts:
                raise KeyError(f"ScriptedPolicy has no script for the conversation starting {str(key)[:80]!r}")
            index = self._used.get(key, 0)
            if index >= len(self.scripts[key]):
                raise IndexError(f"ScriptedPolicy has {len(self.scripts[key])} episodes for the conversation "
                                 f"starting {str(key)[:80]!r}; episode {index + 1} was requested")
            self._used[key] = index + 1
            self._assigned[id(messages)] = (messages, key, index)  # holding `messages` keeps its id unique
        _, key, index = self._assigned[id(messages)]
        return key, self.scripts[key][index]

    def respond(self, conversations: Sequence[list[dict]]) -> list[Reply]:
        replies = []
        for messages in conversations:
            key, script = self._episode(messages)
            turn = sum(m["role"] == "assistant" for m in messages)
            if turn >= len(script):
                raise IndexError(f"ScriptedPolicy script has {len(script)} replies; turn {turn} was requested "
                                 f"for the conversation starting {str(key)[:80]!r}")
            replies.append(Reply(script[turn], completion_tokens=len(script[turn].split())))
        return replies


class OpenAIChatPolicy:
    """Teacher rollouts from a served model through `POST {base_url}/chat/completions` (urllib only).

    Structured `tool_calls` in the response are rewritten as `<tool_call>` text so the loop sees one
    format; conversations of a batch are sent concurrently (`max_concurrency`).
    Infrastructure failures (connection errors, timeouts, HTTP 408/409/429/5xx, a body that is not a chat
    completion) are retried `retries` times with exponential backoff (`backoff_s` * 2^attempt, at most 30 s);
    what still fails comes back as a `Reply` with `failure` set (the episode is excluded, never fatal to the
    run). Other HTTP errors (400, 401, 404: a wrong request, key or model) are not retried and fail at once the
    same way, with the server's message.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, temperature: float = 0.9,
                 max_tokens: int = 2048, timeout_s: float = 120.0, max_concurrency: int = 8,
                 send_tools: bool = True, tool_role: str = "tool", retries: int = 4, backoff_s: float = 1.0,
                 sleep=time.sleep):
        self.endpoint = ChatEndpoint(base_url, api_key=api_key, timeout_s=timeout_s, retries=retries,
                                     backoff_s=backoff_s, sleep=sleep)
        self.url, self.model = self.endpoint.url, model
        self.temperature, self.max_tokens = temperature, max_tokens
        self.max_concurrency, self.send_tools = max_concurrency, send_tools
        if tool_role not in ("tool", "user"):
            raise ValueError(f"tool_role must be 'tool' or 'user', got {tool_role!r}")
        # Servers that insist on tool_call_id pairing can get observations as user turns instead.
        self.tool_role = tool_role

    @property
    def failures(self) -> int:
        """Replies given up on after their retries (for logs and tests)."""
        return self.endpoint.failures

    def _request(self, messages: list[dict]) -> Reply:
        """One reply, retried on infrastructure failures; a `Reply(failure=...)` when they persist."""
        body = {"model": self.model, "messages": [_wire_message(m, self.tool_role) for m in messages],
                "temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.send_tools:
            body["tools"] = TOOLS
        reply, error = self.endpoint.complete(body, _reply_of)
        return reply if reply is not None else Reply("", failure=error)

    def respond(self, conversations: Sequence[list[dict]]) -> list[Reply]:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.max_concurrency)) as pool:
            return list(pool.map(self._request, conversations))


def _reply_of(completion: dict) -> Reply:
    """The assistant turn of a chat completion; structured `tool_calls` rewritten as `<tool_call>` text."""
    message = completion["choices"][0]["message"]
    text, calls = message.get("content") or "", message.get("tool_calls") or []
    if not isinstance(text, str) or not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise ValueError(f"expected a string content and a list of tool_calls objects, got {str(message)[:300]}")
    for call in calls:
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        arguments = function.get("arguments", "{}")
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            pass  # keep the broken string: the loop's parser reports or repairs it
        text += "\n<tool_call>" + json.dumps({"name": function.get("name"), "arguments": arguments}) + "</tool_call>"
    usage = completion.get("usage") or {}
    return Reply(text, prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"))


def _wire_message(message: dict, tool_role: str) -> dict:
    """Only role/content/name travel; with tool_role="user" observations become <tool_response> turns."""
    if message["role"] == "tool" and tool_role == "user":
        return {"role": "user", "content": f"<tool_response>\n{message['content']}\n</tool_response>"}
    return {k: v for k, v in message.items() if k in ("role", "content", "name")}
