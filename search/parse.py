"""Parser: model output text -> candidate trace (paper §4.1 "Evaluation"). It never raises, whatever the input.

Text is split into blocks on blank lines. A block is a proof step if it names a rule, either quoted
(`"..."`, curly quotes too) or by number (`rule 3`, `rule3`, 1-based program order); any other block is commentary
and is skipped. In a step, the text before the rule names the premises (openers such as "Since", "Because",
"Given that", "We know that" are dropped; premises are separated by "and", commas, ";" or "&") and the text after it
names the conclusion (leads such as "so", "therefore", "we conclude that" are dropped). Atoms and rule texts are
matched case-, comma- and spacing-insensitively through the program's Verbalizer, which also accepts the other
datasets' rule templates where the program makes them unambiguous.

A step with an unknown rule gets rule = -1; an unreadable atom becomes None: the verifier rejects both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from search.logic import Atom
from search.verbalize import Verbalizer, normalize_text

__all__ = ["ParsedStep", "ParsedTrace", "parse_trace"]

_BLOCKS = re.compile(r"\n[ \t\r\f\v]*\n")
_QUOTED = re.compile(r"[\"\u201c\u201d]([^\"\u201c\u201d]+)[\"\u201c\u201d]")
_RULE_NUMBER = re.compile(r"\brule\s*#?\s*(\d{1,6})\b", re.IGNORECASE)
_OPENER = re.compile(
    r"^(?:step\s*\d+\s*[:.)]\s*|\d+\s*[.)]\s*|[-*]\s+)?"
    r"(?:(?:since|because|as|given(?:\s+that)?|we\s+(?:know|have)(?:\s+that)?|from(?:\s+the\s+facts?)?(?:\s+that)?)\b\s*)?",
    re.IGNORECASE,
)
_MIDDLE = re.compile(
    r"[\s,;:]*(?:(?:by|using|applying|with|via|from|according\s+to|and)\b\s*)*(?:the\s+)?(?:rule\b)?\s*:?\s*$",
    re.IGNORECASE,
)
_LEAD = re.compile(
    r"^[\s,.;:)\]-]*(?:(?:so|therefore|thus|hence|then|and)\b[\s,]*)?"
    r"(?:(?:it\s+follows\s+that|we\s+(?:can\s+)?(?:conclude|infer|derive|deduce|get|know|have|obtain)(?:\s+that)?)\b\s*)?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ParsedStep:
    """A candidate proof step: rule index (-1 unknown), premises and conclusion (None where unreadable)."""

    rule: int
    premises: tuple[Atom | None, ...]
    conclusion: Atom | None
    text: str = ""


@dataclass(frozen=True)
class ParsedTrace:
    steps: tuple[ParsedStep, ...]
    skipped_blocks: int


def _split_premises(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if depth == 0 and ch in ",;&":
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    out = []
    for p in parts:
        out.extend(re.split(r"\s+and\s+", p, flags=re.IGNORECASE))
    return [p.strip() for p in out if p.strip()]


def _parse_block(block: str, verbalizer: Verbalizer) -> ParsedStep | None:
    text = re.sub(r"\s+", " ", block).strip()
    m = _QUOTED.search(text)
    if m:
        rule = verbalizer.rule_index.get(normalize_text(m.group(1)), -1)
    else:
        m = _RULE_NUMBER.search(text)
        if not m:
            return None
        k = int(m.group(1))
        rule = k - 1 if 1 <= k <= len(verbalizer.program.rules) else -1
    before, after = text[: m.start()], text[m.end() :]
    before = _MIDDLE.sub("", _OPENER.sub("", before, count=1), count=1)
    premises = tuple(verbalizer.parse_atom(p) for p in _split_premises(before))
    after = _LEAD.sub("", after, count=1).strip().rstrip(".!;: ").strip()
    conclusion = verbalizer.parse_atom(after) if after else None
    return ParsedStep(rule=rule, premises=premises, conclusion=conclusion, text=block.strip())


def parse_trace(text, verbalizer: Verbalizer) -> ParsedTrace:
    """Model output -> ParsedTrace. Non-string input parses as an empty trace; never raises."""
    if not isinstance(text, str):
        return ParsedTrace((), 0)
    steps, skipped = [], 0
    for block in _BLOCKS.split(text.replace("\r\n", "\n")):
        if not block.strip():
            continue
        cache = verbalizer.block_cache
        step = cache.get(block, cache)
        if step is cache:
            try:
                step = _parse_block(block, verbalizer)
            except Exception:  # defensive: a parser bug must read as an invalid step, never crash a reward batch
                step = ParsedStep(rule=-1, premises=(), conclusion=None, text=block.strip())
            if len(cache) < 100_000:
                cache[block] = step
        if step is None:
            skipped += 1
        else:
            steps.append(step)
    return ParsedTrace(tuple(steps), skipped)
