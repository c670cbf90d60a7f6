"""Chat messages -> prompt text, and a reply -> (content, tool calls), in the Hermes `<tool_call>` format.

Rendering goes through the model's chat template (`apply_chat_template(..., tools=...)`). A template that never
reads `tools` (SmolLM2's plain ChatML, for one) would drop them silently; for those the tool schemas are
written into the system message in the Hermes/Qwen 2.5 wording, and past assistant tool calls and tool results
are written as `<tool_call>` / `<tool_response>` text, so the model sees the same protocol either way.

Replies are parsed with `reasoner.agents.tool_calls.parse_tool_calls`, only when they contain `<tool_call>`, and
only its tagged calls of the tools the client offered count (its plain-text modes, such as `finish("B")` in prose,
are for the SMT agent, not for a general server): the content is the text before the first tag, the calls are
returned with JSON-encoded arguments as the wire wants.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Sequence

TOOL_TAG = "<tool_call>"

HERMES_TOOLS_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{schemas}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    "XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>"
)


def template_reads_tools(tokenizer) -> bool:
    """Whether the chat template uses the `tools` variable (else it would ignore them)."""
    template = tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default") or ""
    return "tools" in (template or "")


def _as_text_protocol(messages: Sequence[dict], tools: Sequence[dict] | None) -> list[dict]:
    """Messages for a template without tool support: schemas in the system message, calls/results as text."""
    out = []
    for m in messages:
        m = dict(m)
        calls = m.pop("tool_calls", None)
        if calls:
            text = "\n".join(f"{TOOL_TAG}\n" + json.dumps({"name": c["function"]["name"],
                                                            "arguments": c["function"]["arguments"]})
                             + "\n</tool_call>" for c in calls)
            m["content"] = (m["content"] + "\n" if m["content"] else "") + text
        if m["role"] == "tool":
            m = {"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
        out.append({"role": m["role"], "content": m["content"]})
    if tools:
        prompt = HERMES_TOOLS_PROMPT.format(schemas="\n".join(json.dumps(t) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def render_prompt(tokenizer, messages: Sequence[dict], tools: Sequence[dict] | None, *,
                  template_kwargs: dict | None = None) -> str:
    """The prompt text (generation prompt included) the model continues. template_kwargs: extra variables for the
    chat template (vLLM's `chat_template_kwargs`, e.g. Qwen3's `enable_thinking`); a template that does not read
    one renders as without it. The caller checks them first (`reasoner.tokenization.template_key_clashes`)."""
    from reasoner.tokenization import render_chat, template_call_kwargs

    uses_tools = any(m.get("tool_calls") or m["role"] == "tool" for m in messages) or bool(tools)
    if uses_tools and not template_reads_tools(tokenizer):  # the tools go into the text, not the template call
        return render_chat(tokenizer, _as_text_protocol(messages, tools), **template_call_kwargs(None, template_kwargs))
    return render_chat(tokenizer, list(messages), **template_call_kwargs(tools, template_kwargs))


@dataclasses.dataclass(frozen=True)
class Reply:
    """An assistant reply split for the wire: `content` (None when only tool calls remain) and `tool_calls`
    (OpenAI dicts with JSON-string arguments)."""

    content: str | None
    tool_calls: tuple[dict, ...] = ()


def parse_reply(text: str, *, tools_offered: bool, names: Sequence[str] = ()) -> Reply:
    """Splits a generated reply into content and Hermes tool calls (see module docstring). Only calls inside
    `<tool_call>` tags count (never the SMT agent's plain-text forms), and with `names` (the offered tools' names)
    only calls of those tools: a reply calling nothing the client offered is all content."""
    if not tools_offered or TOOL_TAG not in text:
        return Reply(content=text)
    from reasoner.agents.tool_calls import parse_tool_calls

    calls = [c for c in parse_tool_calls(text[text.index(TOOL_TAG):])
             if c.parse_mode != "text" and (not names or c.name in names)]
    if not calls:
        return Reply(content=text)
    head = text[:text.index(TOOL_TAG)]  # not stripped: streamed content is this same prefix
    wire = tuple({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                  "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in calls)
    return Reply(content=head if head.strip() else None, tool_calls=wire)


def streamable_prefix(text: str, *, tools_offered: bool) -> int:
    """How much of a growing reply may be streamed as content now: all of it, or (with tools offered) up to the
    first `<tool_call>` or a tail that could be the start of one (that part may become a tool call), and nothing
    while that part is only whitespace (a reply that is only tool calls has no content: `parse_reply`)."""
    if not tools_offered:
        return len(text)
    end = len(text)
    if TOOL_TAG in text:
        end = text.index(TOOL_TAG)
    else:
        for k in range(min(len(TOOL_TAG) - 1, len(text)), 0, -1):
            if text.endswith(TOOL_TAG[:k]):
                end = len(text) - k
                break
    return end if text[:end].strip() else 0
