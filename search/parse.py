"""Parser: model output text -> candidate trace (paper §4.1 "Evaluation"). It never raises, whatever the input.

Text is split into blocks on blank lines. A block is a proof step if it names a rule, either quoted (`"..."`, curly
quotes too) or by number (`rule 3`, `rule3`, 1-based program order); any other block is commentary and is skipped. A
quoted text that is none of the program's rules names a rule only in a block that reads as a step (a premise or a
conclusion is an atom): "Since Bob is red, by "If something is purple then it is big", Bob is big" cites a rule the
program lacks (rule -1, rejected), while `The question asks: "Is Bob big?"` is commentary. In a step, the text
before the rule names the premises (openers such as "Since", "Because", "Given that", "We know that" are dropped;
premises are separated by "and", commas, ";" or "&") and the text after it names the conclusion (leads such as "so",
"therefore", "we conclude that" are dropped). Atoms and rule texts are matched case-, comma- and
spacing-insensitively through the program's Verbalizer, which also accepts the other datasets' rule templates where
the program makes them unambiguous.

A step with an unknown rule gets rule = -1; an unreadable atom becomes None: the verifier rejects both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from search.logic import Atom, Program
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
_CONNECTIVES = ("by", "using", "applying", "with", "via", "from", "and")
_CACHE_BYTES = 64 << 20  # the block cache is cleared when the blocks it keys on exceed this many bytes
_CACHE_SIZE_KEY = object()  # the cache's running byte count lives under this non-string key
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


def _word_before(text: str, end: int, word: str) -> int:
    """The start of `word` (whole word, case-insensitive) ending at `end` in `text`, or -1."""
    start = end - len(word)
    if start >= 0 and text[start:end].lower() == word and (start == 0 or not _is_word(text[start - 1])):
        return start
    return -1


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _skip_space(text: str, end: int, chars: str = " \t\n\r\f\v") -> int:
    while end > 0 and text[end - 1] in chars:
        end -= 1
    return end


def _strip_middle(before: str) -> str:
    """Drop the words between the premises and the rule: "..., by applying the rule:" -> "...".

    A right-to-left scan with an end index, linear in the text (the regex it replaces went cubic on
    runs of separators such as "and and ..." or " : : ..."): trailing spaces and ":", then
    optionally the word "rule", then optionally the word "the", then any run of connectives ("by",
    "using", "applying", "with", "via", "from", "according to", "and"), then separators (spaces , ; :).
    """
    end = _skip_space(before, len(before))
    if end and before[end - 1] == ":":
        end = _skip_space(before, end - 1)
    for word in ("rule", "the"):
        start = _word_before(before, end, word)
        end = end if start < 0 else _skip_space(before, start)
    while True:
        for word in _CONNECTIVES:
            start = _word_before(before, end, word)
            if start >= 0:
                end = _skip_space(before, start)
                break
        else:
            start = _word_before(before, end, "to")
            start = -1 if start < 0 else _word_before(before, _skip_space(before, start), "according")
            if start < 0:
                break
            end = _skip_space(before, start)
    return before[:_skip_space(before, end, " \t\n\r\f\v,;:")]


def _cited_rule(text: str, verbalizer: Verbalizer) -> tuple[re.Match | None, int]:
    """(where the block names its rule, the rule's index or -1): the first quoted text that is one of the program's
    rules, else a rule number, else the first quoted text (an unknown rule, or no rule at all); (None, -1) when
    the block has neither quotes nor a rule number. A quote is not a rule by being a quote: commentary quotes the
    question or a fact ("The question asks: "... Charlie is kind?"") and a step may quote an atom beside its rule."""
    first = None
    for m in _QUOTED.finditer(text):
        rule = verbalizer.rule_index.get(normalize_text(m.group(1)), -1)
        if rule >= 0:
            return m, rule
        first = first or m
    m = _RULE_NUMBER.search(text)
    if m:
        k = int(m.group(1))
        return m, k - 1 if 1 <= k <= len(verbalizer.program.rules) else -1
    return first, -1


def _reads_as_step(premises: tuple[Atom | None, ...], conclusion: Atom | None, program: Program) -> bool:
    """Whether a premise or the conclusion is an atom over one of the program's predicates (the logic dataset's
    parser reads any bare word, such as "here", as an atom of its own)."""
    atoms = [a for a in (*premises, conclusion) if a is not None]
    if not atoms:
        return False
    known = {a.predicate for a in program.axioms}
    known.update(a.predicate for r in program.rules for a in (*r.premises, r.conclusion))
    return any(a.predicate in known for a in atoms)


def _parse_block(block: str, verbalizer: Verbalizer) -> ParsedStep | None:
    text = re.sub(r"\s+", " ", block).strip()
    m, rule = _cited_rule(text, verbalizer)
    if m is None:
        return None
    before, after = text[: m.start()], text[m.end() :]
    before = _strip_middle(_OPENER.sub("", before, count=1))
    premises = tuple(verbalizer.parse_atom(p) for p in _split_premises(before))
    after = _LEAD.sub("", after, count=1).strip().rstrip(".!;: ").strip()
    conclusion = verbalizer.parse_atom(after) if after else None
    if rule < 0 and m.re is _QUOTED and not _reads_as_step(premises, conclusion, verbalizer.program):
        return None  # a quote that is no rule, in a block that derives nothing the program speaks of: commentary
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
        step = cache.get(block, cache) if len(block) <= _CACHE_BYTES // 64 else cache
        if step is cache:
            try:
                step = _parse_block(block, verbalizer)
            except Exception:  # defensive: a parser bug must read as an invalid step, never crash a reward batch
                step = ParsedStep(rule=-1, premises=(), conclusion=None, text=block.strip())
            size = cache.get(_CACHE_SIZE_KEY, 0) + len(block)
            if size > _CACHE_BYTES:  # bounded by bytes, not entries: 2,000 blocks of 16 KB are 32 MB
                cache.clear()
                size = len(block)
            if len(block) <= _CACHE_BYTES // 64:
                cache[block] = step
                cache[_CACHE_SIZE_KEY] = size
        if step is None:
            skipped += 1
        else:
            steps.append(step)
    return ParsedTrace(tuple(steps), skipped)
