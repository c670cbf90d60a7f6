"""Judge replies -> `Judgement(score, valid, reason)`, never raising, in time linear in the reply's length.

The rubric prompts (App. D.4) ask the judge to think freely and end with one JSON object. Extraction:
  1. one pass over the reply's braces, quotes and backslashes (a single-character regex class: no
     backtracking) records every balanced `{...}` span, strings honoured; the outermost spans are disjoint,
     so parsing all of them costs O(len(reply));
  2. the outermost span that holds the LAST occurrence of the rubric's quoted key decides (the rubric puts the
     verdict at the very end); code fences and prose around the object need no special case, trailing commas
     before `}` / `]` are dropped;
  3. when that span does not parse to an object with the key at its top level, the reply is invalid: an earlier
     object is never taken instead. Earlier objects are the rubric's format example the judge repeated, or JSON
     it quoted from the trace, so falling back to one would let a truncated or malformed verdict score as the
     example does (1.0 for coverage).
A truncated object (an unclosed `{`) is not repaired: a cut-off coverage list would score the details the judge
happened to reach, so it is invalid. With `prompt` given, a verdict equal to an object of the prompt (the
rubric's example, or one the policy planted in its trace for the judge to echo) is invalid too. Invalid or missing
judgements score 0 with `valid=False` (Eqs. 6-7: "invalid or unparseable judge outputs receive zero") and the
reason names what was wrong.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

KINDS = ("coverage", "directionality")
DIRECTIONALITY_LEVELS = (0.0, 0.5, 1.0)
_KEY = {"coverage": "observation_details", "directionality": "directionality_score"}
_TOKENS = re.compile(r'[{}"\\]')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_FALLBACK_BRACES = 4


@dataclasses.dataclass(frozen=True)
class Judgement:
    """score in [0, 1] (0 when invalid); valid: the reply held a judgement the rubric allows; reason: why not."""

    score: float
    valid: bool
    reason: str = ""


def _invalid(reason: str) -> Judgement:
    return Judgement(0.0, False, reason)


def object_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of the outermost balanced `{...}` spans of `text`, last first; end is exclusive.

    Quotes only count inside an open brace (prose quotes stay harmless); a `{` left open at the end (truncation,
    a stray brace in prose) is no span, but the spans that closed inside it still are.
    """
    closed: list[tuple[int, int]] = []  # every balanced span, in the order it closed (by end)
    stack: list[int] = []  # starts of the open braces
    in_string = False
    skip_to = 0  # a backslash inside a string escapes the next character
    for m in _TOKENS.finditer(text):
        ch, i = m.group(), m.start()
        if i < skip_to:
            continue
        if in_string:
            if ch == "\\":
                skip_to = i + 2
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = bool(stack)
        elif ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            closed.append((stack.pop(), i + 1))
    # Balanced spans nest or are disjoint. Walking them by decreasing end, a span is outermost iff it ends
    # before every outermost span kept so far starts (otherwise it lies inside one of them).
    outer: list[tuple[int, int]] = []
    min_start = len(text) + 1
    for start, end in reversed(closed):
        if end <= min_start:
            outer.append((start, end))
            min_start = start
    return outer


def _strip_trailing_commas(span: str) -> str:
    """Drops `,` before `}` or `]` outside strings (a common judge slip that json rejects)."""
    out, last = [], 0
    # String literals are copied as they are; only the text between them is rewritten.
    for m in _STRING.finditer(span):
        out.append(_TRAILING_COMMA.sub(r"\1", span[last:m.start()]))
        out.append(m.group())
        last = m.end()
    out.append(_TRAILING_COMMA.sub(r"\1", span[last:]))
    return "".join(out)


def _parse_object(span: str, key: str) -> dict | None:
    """`span` as a JSON object holding `key` at its top level (trailing commas forgiven), else None."""
    for candidate in (span, _strip_trailing_commas(span)):
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        return value if isinstance(value, dict) and key in value else None
    return None


def _find_object(text: str, key: str) -> dict | None:
    """The outermost object holding the last occurrence of the quoted `key`, or None (module docstring)."""
    last = text.rfind(f'"{key}"')
    if last < 0:
        return None
    for start, end in object_spans(text):
        if start <= last < end:
            return _parse_object(text[start:end], key)
        if end <= last:
            break  # spans come last first: none further holds the key's last occurrence
    # A stray `{` and an odd quote in the prose before the verdict put the scan above inside a "string"; the
    # verdict usually opens at one of the last few braces before the key: decode from each (O(len) apiece), and
    # only an object that reaches past the key's last occurrence counts.
    decoder = json.JSONDecoder()
    brace = last
    for _ in range(_FALLBACK_BRACES):
        brace = text.rfind("{", 0, brace)
        if brace < 0:
            break
        try:
            value, end = decoder.raw_decode(text, brace)
        except (ValueError, RecursionError):
            continue
        if end > last:
            return value if isinstance(value, dict) and key in value else None
    return None


def _objects_in(text: str, key: str) -> set[str]:
    """Canonical JSON of every outermost object of `text` holding `key` (a prompt's example verdicts)."""
    out = set()
    for start, end in object_spans(text):
        if f'"{key}"' in text[start:end]:
            value = _parse_object(text[start:end], key)
            if value is not None:
                out.add(json.dumps(value, sort_keys=True))
    return out


def _coverage(obj: dict) -> Judgement:
    details = obj["observation_details"]
    if not isinstance(details, list):
        return _invalid(f"observation_details is {type(details).__name__}, expected a list")
    addressed = 0
    for k, item in enumerate(details):
        if not isinstance(item, dict):
            return _invalid(f"observation_details[{k}] is {type(item).__name__}, expected an object")
        flag = item.get("addressed")
        if not isinstance(flag, bool):
            return _invalid(f"observation_details[{k}].addressed is {type(flag).__name__}, expected true/false")
        for field in ("detail", "evidence"):
            if field in item and not isinstance(item[field], str):
                return _invalid(f"observation_details[{k}].{field} is {type(item[field]).__name__}, expected a string")
        addressed += flag
    # Eq. 6: addressed / total, 0 when the judge found no details.
    return Judgement(addressed / len(details) if details else 0.0, True)


def _directionality(obj: dict) -> Judgement:
    value = obj["directionality_score"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _invalid(f"directionality_score is {type(value).__name__}, expected a number")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return _invalid(f"directionality_score {value!r} is outside the rubric's [0, 1]")
    # Eq. 7: snapped to the nearest level; a tie (0.25, 0.75) goes to the lower, stricter level.
    snapped = min(DIRECTIONALITY_LEVELS, key=lambda level: (abs(level - value), level))
    return Judgement(snapped, True)


def parse_judgement(kind: str, text, prompt: str | None = None) -> Judgement:
    """Judgement of a `kind` ("coverage" or "directionality") judge reply; never raises (an unknown kind is a
    caller bug and does raise ValueError). `prompt`: the text the judge was given (its messages' contents joined);
    a verdict equal to an object in it is invalid (the judge echoed the rubric's example or a planted one)."""
    if kind not in KINDS:
        raise ValueError(f"judge kind {kind!r}: expected one of {KINDS}")
    if not isinstance(text, str):
        return _invalid(f"reply is {type(text).__name__}, expected text")
    if not text.strip():
        return _invalid("empty reply")
    try:
        obj = _find_object(text, _KEY[kind])
        if obj is None:
            return _invalid(f"no complete JSON object holding the last {_KEY[kind]!r} of the reply "
                            f"({len(text)} chars)")
        if prompt and json.dumps(obj, sort_keys=True) in _objects_in(prompt, _KEY[kind]):
            return _invalid("the verdict repeats an object of the prompt (the rubric's example or one in the trace)")
        return _coverage(obj) if kind == "coverage" else _directionality(obj)
    except Exception as err:  # noqa: BLE001 - a judge reply must never stop a GRPO step
        return _invalid(f"unreadable reply: {type(err).__name__}: {err}")
