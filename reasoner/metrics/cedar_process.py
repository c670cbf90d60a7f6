"""Text-only proxies of three of CEDAR-GRPO's App. E process metrics (counts per reasoning trace).

The paper extracts these with an LLM judge (Gemini 3 Flash, one `{excerpt, explanation}` item per occurrence);
here they are counted from the trace's text with the cue lists App. E gives, so they need no judge and are
deterministic, but they are lexical: a cue inside a quote or a negated context still counts.
  uncertainty_markers  E.2.1's "Counted" lexicon (probability qualifiers, epistemic modals, hedges, degree
                       qualifiers, uncertainty statements, frequency limiters), every occurrence.
  backtracking         E.2.3's cue phrases of an admitted error or restart ("wait", "I made a mistake", "on second
                       thought", "let me re-read", "I realise I forgot", ...).
  branchiness          E.2.2's competing-hypothesis cues ("alternatively", "another possibility", "if ... we would
                       expect", "hypothesis 1 / 2" comparisons ...); a rough proxy, the paper's judge also excludes
                       refinements and immediately rejected alternatives, which text matching cannot tell apart.
Matching is case-insensitive on word boundaries; `count_markers(text)` -> {metric: count}.
"""

from __future__ import annotations

import re

UNCERTAINTY = (
    "probably", "likely", "unlikely", "possibly", "in all likelihood", "with high probability", "most likely",
    "might", "may", "could", "seems to", "appears to", "tends to", "i believe", "i think", "i suspect",
    "this suggests", "this may indicate", "approximately", "roughly", "to some extent", "somewhat", "fairly",
    "we cannot be sure", "it is unclear", "the evidence is inconclusive", "this remains to be confirmed", "often",
    "typically", "generally", "sometimes", "in some cases", "less common")
BACKTRACKING = (
    "wait", "that's wrong", "that is wrong", "i made a mistake", "my mistake", "hold on", "let me re-read",
    "let me reread", "let me reconsider", "on second thought", "that approach doesn't work",
    "that approach does not work", "i realise i forgot", "i realize i forgot", "i missed", "actually, no")
BRANCHING = (
    "alternatively", "another possibility", "another explanation", "another hypothesis", "a competing hypothesis",
    "on the other hand", "if instead", "we would expect", "one possibility", "second possibility",
    "other possibility", "competing explanation")
LEXICONS = {"uncertainty_markers": UNCERTAINTY, "backtracking": BACKTRACKING, "branchiness": BRANCHING}


def _pattern(phrases) -> re.Pattern:
    # Longest first, so "most likely" is one match rather than "likely" inside it.
    alternatives = sorted((re.escape(p).replace(r"\ ", r"\s+") for p in phrases), key=len, reverse=True)
    return re.compile(r"(?<![\w'])(?:" + "|".join(alternatives) + r")(?![\w'])", re.IGNORECASE)


_PATTERNS = {name: _pattern(words) for name, words in LEXICONS.items()}


def count_markers(text: str) -> dict[str, int]:
    """Non-overlapping cue occurrences of each metric in `text` (a reasoning trace)."""
    return {name: len(pattern.findall(text)) for name, pattern in _PATTERNS.items()}
