"""Parse tool calls out of a model reply: Hermes/Qwen `<tool_call>{json}</tool_call>`, the qwen3_coder
XML form, and calls written as plain text.

Small models break the JSON in predictable ways; each repair below is tried in order and the one
that worked is recorded in `ToolCall.parse_mode`:
  1. "json":      strict `json.loads` of the tagged body (a Markdown code fence around it removed);
  2. "lenient":   raw newlines/tabs inside strings allowed, text after the object (or several objects, or a
                  list of them) in one tag, trailing commas, an unterminated string and missing closing
                  braces repaired (outside strings only), a missing closing tag (the body ends at the next
                  `<tool_call>`), Python-style single quotes / True / None accepted;
  3. "fields":    regex recovery of `"name"` and each known argument when the object stays broken
                  (the usual cause: unescaped quotes inside the SMT code);
  4. "xml":       `<function=NAME><parameter=KEY>value</parameter></function>` (qwen3_coder);
  5. "text":      a plain-text call of a known tool, `z3_solve(smt_code="...")`, `finish("B")`,
                  `finish(answer=B)`, or a bare `{"name": ..., "arguments": ...}` object.
A `<tool_call>` body none of these reads is left out of `parse_tool_calls`; `read_tool_calls` also returns it, with
what is wrong (`Unreadable`), so an environment can answer it as a malformed call.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re

KNOWN_TOOLS = ("z3_solve", "finish")
ARGUMENT_NAMES = {"z3_solve": ("smt_code", "timeout"), "finish": ("answer",)}

_CLOSER_NEXT = re.compile(r"\s*[}\]]")
_TEXT_CALL = re.compile(r"\b(" + "|".join(KNOWN_TOOLS) + r")\s*\(", re.DOTALL)


def _spans(text: str, open_tag: str, close_tags: tuple[str, ...]) -> list[tuple[int, int, int]]:
    """(tag start, body start, body end) of each `open_tag ... close` span, left to right; a body ends at
    the first of `close_tags` (not consumed when it is itself an opening tag) or at the end of the text.
    One pass of `str.find`, so repeated unclosed tags cost linear time (a lazy regex is quadratic)."""
    spans, pos = [], 0
    found = {tag: -2 for tag in close_tags}  # next occurrence of each close tag (-1: none left)
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            return spans
        body = start + len(open_tag)
        for tag, at in found.items():
            if -1 < at < body or at == -2:  # each search resumes past the last: linear overall
                found[tag] = text.find(tag, body)
        ends = [(at, tag) for tag, at in found.items() if at >= 0]
        end, tag = min(ends) if ends else (len(text), "")
        spans.append((start, body, end))
        pos = end if tag.startswith(open_tag) or not tag else end + len(tag)
        if pos >= len(text):
            return spans


def _named_spans(text: str, prefix: str, close_tags: tuple[str, ...]) -> list[tuple[str, str]]:
    """(NAME, body) of each `<prefix NAME>body` span, NAME in [\\w.-]+ (qwen3_coder's XML form)."""
    out = []
    for start, body_start, end in _spans(text, prefix, close_tags):
        close = text.find(">", body_start, end)
        name = text[body_start:close] if close >= 0 else ""
        if name and all(c.isalnum() or c in "_.-" for c in name):
            out.append((name, text[close + 1:end]))
    return out


_OPEN_OR_QUOTE = re.compile(r'\\.|"|<tool_call>', re.DOTALL)


def _tagged(reply: str) -> list[str]:
    """Bodies of `<tool_call> ... </tool_call>`, stripped; an unclosed one runs to the next `<tool_call>` (a model
    that forgets a closing tag opens the next call) or to the end. A `<tool_call>` inside a JSON string (an
    argument that quotes the tag) is text, not the next call."""
    bodies = []
    for _, b, e in _spans(reply, "<tool_call>", ("</tool_call>",)):
        quoted, start = False, b
        for m in _OPEN_OR_QUOTE.finditer(reply, b, e):
            if m.group() == '"':
                quoted = not quoted
            elif m.group() == "<tool_call>" and not quoted:
                bodies.append(reply[start:m.start()].strip())
                start = m.end()
        bodies.append(reply[start:e].strip())
    return bodies


@dataclasses.dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict
    parse_mode: str
    raw: str = ""


def _repaired(text: str, quotes: str) -> str:
    """`text` with what a model drops or adds around a JSON object mended, outside strings only (a `}`, `]` or
    `, }` inside an SMT string is content): trailing commas removed, an unterminated string closed, then every
    still-open `{` / `[` closed in order. `quotes`: the characters that open a string ('"', or '"\'' for Python)."""
    out, stack, quote, i = [], [], None, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i:i + 2])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in quotes:
            quote = ch
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if stack and stack[-1] == ch:
                stack.pop()
        elif ch == "," and _CLOSER_NEXT.match(text, i + 1):
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out) + (quote or "") + "".join(reversed(stack))


def _json_value(value):
    """A Python literal a model wrote as the JSON value it stands for: tuples and sets as lists, keys as strings,
    and what JSON cannot hold (bytes, complex) as its repr; arguments are written to the trajectory's JSON rows and
    a finish answer's JSON is the answer, so `finish(answer={1, 2})` must not carry a set."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [_json_value(v) for v in sorted(value, key=repr)]
    return value if value is None or isinstance(value, (str, bool, int, float)) else repr(value)


class _Literals(ast.NodeTransformer):
    """JSON's true / false / null as Python's constants (names only: the same words inside strings stay)."""

    def visit_Name(self, node):
        words = {"true": True, "false": False, "null": None}
        return ast.copy_location(ast.Constant(words[node.id]), node) if node.id in words else node


def _lenient_json(body: str):
    text = body.strip()
    try:
        return json.loads(_repaired(text, '"'), strict=False)
    except (ValueError, RecursionError):
        pass
    try:
        tree = _Literals().visit(ast.parse(_repaired(text, "\"'"), mode="eval"))
        value = ast.literal_eval(tree)
        return _json_value(value) if isinstance(value, dict) else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _leading_objects(body: str) -> list[tuple[dict, str]]:
    """The JSON objects at the start of `body`, one after another (a list of them counts as its items), with the
    text of each; what follows the last one (prose, a stray brace) is left out. [] when none parses there."""
    decoder, out, i = json.JSONDecoder(strict=False), [], 0
    while True:
        while i < len(body) and body[i].isspace():
            i += 1
        try:
            value, end = decoder.raw_decode(body, i)
        except (ValueError, RecursionError):
            return out
        items = value if isinstance(value, list) else [value]
        out += [(item, body[i:end] if len(items) == 1 else json.dumps(item)) for item in items]
        i = end


def _string_field(body: str, key: str) -> str | None:
    """The value of `"key": "..."` in broken JSON: up to the last quote before `}` or the next key."""
    match = re.search(rf'"{key}"\s*:\s*"', body)
    if not match:
        match_num = re.search(rf'"{key}"\s*:\s*([\w.+-]+)', body)
        return match_num.group(1) if match_num else None
    rest = body[match.end():]
    next_key = re.search(r'"\s*,\s*"(?:' + "|".join(k for ks in ARGUMENT_NAMES.values() for k in ks)
                         + r'|name|arguments)"\s*:', rest)
    end = next_key.start() if next_key else rest.rfind('"')
    if end < 0:
        return None
    raw = rest[:end]
    try:
        return json.loads(f'"{raw}"', strict=False)
    except ValueError:
        return raw.replace('\\n', '\n').replace('\\"', '"').replace('\\t', '\t')


def _from_object(obj) -> tuple[str, dict] | None:
    if not isinstance(obj, dict):
        return None
    # OpenAI-style {"function": {"name", "arguments"}} or Hermes-style {"name", "arguments"}.
    source = obj["function"] if isinstance(obj.get("function"), dict) else obj
    name = source.get("name")
    args = source.get("arguments", source.get("parameters", {}))
    if isinstance(args, str):
        args = _lenient_json(args) or {}
    if not isinstance(name, str) or not isinstance(args, dict):
        return None
    return name, args


def _unfenced(body: str) -> str:
    """A tagged body without the Markdown code fence small models wrap it in (```json ... ```)."""
    if not body.startswith("```"):
        return body
    body = body.split("\n", 1)[1] if "\n" in body else body[3:]
    body = body.rstrip()
    return body[:-3].rstrip() if body.endswith("```") else body


def _parse_tagged(body: str) -> list[ToolCall]:
    body = _unfenced(body)
    try:
        parsed = _from_object(json.loads(body))
        if parsed:
            return [ToolCall(*parsed, parse_mode="json", raw=body)]
    except (ValueError, RecursionError):
        pass
    # Complete objects followed by text, or several in one tag (or a list of them): each object is a call.
    leading = [(parsed, raw) for obj, raw in _leading_objects(body) if (parsed := _from_object(obj))]
    if leading:
        return [ToolCall(*parsed, parse_mode="lenient", raw=raw) for parsed, raw in leading]
    parsed = _from_object(_lenient_json(body))
    if parsed:
        return [ToolCall(*parsed, parse_mode="lenient", raw=body)]
    if "<function=" in body:
        return []
    name = _string_field(body, "name")
    if name is None:
        return []
    args = {key: value for key in ARGUMENT_NAMES.get(name, ())
            if (value := _string_field(body, key)) is not None}
    return [ToolCall(name, args, parse_mode="fields", raw=body)]


def _parse_xml(text: str) -> list[ToolCall]:
    calls = []
    for name, inner in _named_spans(text, "<function=", ("</function>",)):
        args = {key: value.strip() for key, value in _named_spans(inner, "<parameter=", ("</parameter>", "<parameter="))}
        calls.append(ToolCall(name, args, parse_mode="xml", raw=inner))
    return calls


def _call_arguments(name: str, inside: str) -> dict | None:
    inside = inside.strip()
    if inside.startswith("{"):
        obj = _lenient_json(inside)
        return obj if isinstance(obj, dict) else None
    try:
        node = ast.parse(f"f({inside})", mode="eval").body
        args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
        for key, value in zip(ARGUMENT_NAMES[name], node.args):
            args[key] = ast.literal_eval(value)
        return _json_value(args)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        if name == "finish" and re.fullmatch(r"[\w ()=-]+", inside):
            key, _, value = inside.partition("=")
            return {"answer": (value or key).strip()}
        return None


def _balanced_call_end(text: str, open_index: int) -> int:
    depth, quote = 0, None
    i = open_index
    while i < len(text):
        ch = text[i]
        if quote:
            if text.startswith(quote, i):
                i += len(quote) - 1
                quote = None
            elif ch == "\\":
                i += 1
        elif text.startswith('"""', i) or text.startswith("'''", i):
            quote = text[i:i + 3]
            i += 2
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _parse_plain_text(text: str) -> list[ToolCall]:
    calls, covered = [], 0
    for match in _TEXT_CALL.finditer(text):
        if match.start() < covered:  # inside an earlier call's argument: part of that argument
            continue
        end = _balanced_call_end(text, match.end() - 1)
        covered = end + 1
        if end < 0:  # unclosed: the rest of the text is its argument, so no later call can close either
            break
        args = _call_arguments(match.group(1), text[match.end():end])
        if args is not None:
            calls.append(ToolCall(match.group(1), args, parse_mode="text", raw=text[match.start():end + 1]))
    if not calls:
        for obj_text in re.findall(r"\{[^{}]*\"name\"\s*:\s*\"(?:z3_solve|finish)\".*\}", text, re.DOTALL):
            parsed = _from_object(_lenient_json(obj_text))
            if parsed:
                calls.append(ToolCall(*parsed, parse_mode="text", raw=obj_text))
    return calls


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """A `<tool_call>` body no call could be read from, and why (for the model: what to mend)."""

    raw: str
    why: str


def parse_tool_calls(reply: str) -> list[ToolCall]:
    """Every tool call in `reply`, in order; [] when the reply calls no tool. Never raises, and runs in
    time linear in the reply (an unreadable call is left out, not an error: `read_tool_calls` reports it)."""
    return read_tool_calls(reply)[0]


def read_tool_calls(reply: str) -> tuple[list[ToolCall], list[Unreadable]]:
    """`parse_tool_calls`'s calls, and the `<tool_call>` bodies none could be read from (an environment must not
    take a reply whose call is broken for a reply without a call: that would end the episode on the model's typo).
    A broken body is not reported when the plain-text fallback read a call out of the reply. Never raises."""
    if not isinstance(reply, str):
        return [], []
    try:
        return _read_tool_calls(reply)
    except (RecursionError, MemoryError, ValueError, TypeError) as err:  # last line of defence: one reply, no batch
        return [], [Unreadable(reply[:200], f"the reply could not be parsed ({type(err).__name__})")] \
            if "<tool_call>" in reply else []


def _why_unreadable(body: str) -> str:
    """What is wrong with a tagged body no call came from, in the words a model can act on."""
    form = 'expected <tool_call>{"name": <tool name>, "arguments": {<argument>: <value>, ...}}</tool_call>'
    if not body:
        return f"the <tool_call> tag is empty; {form}"
    if "<function=" in body:  # the qwen3_coder form: answer in its terms, not JSON's
        return ("the <function=NAME> call has no readable NAME (letters, digits, '_', '.', '-'); expected "
                "<tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>")
    try:
        obj = json.loads(_unfenced(body))
    except ValueError as err:
        return f"the tool call is not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); {form}"
    except RecursionError:
        return f"the tool call is nested too deeply; {form}"
    if not isinstance(obj, dict):
        return f"the tool call is a JSON {type(obj).__name__}, not an object; {form}"
    source = obj["function"] if isinstance(obj.get("function"), dict) else obj
    if not isinstance(source.get("name"), str):
        return f'the tool call has no "name" string (keys: {sorted(source)}); {form}'
    return f'the "arguments" of the tool call are not an object; {form}'


def _read_tool_calls(reply: str) -> tuple[list[ToolCall], list[Unreadable]]:
    tagged = _tagged(reply) if "<tool_call>" in reply else []
    calls, unreadable = [], []
    for body in tagged:
        found = _parse_tagged(body) or _parse_xml(body)
        calls.extend(found)
        if not found:
            unreadable.append(Unreadable(body, _why_unreadable(body)))
    if calls:
        return calls, unreadable
    if "<function=" in reply:
        calls = _parse_xml(reply)
    else:
        calls = _parse_plain_text(reply)
    return calls, [] if calls else unreadable
