"""Answer-matching correctness rewards: CEDAR-GRPO Table 8's exact, label, integer and set verifiers.

Completions follow CEDAR's `<think>...</think><answer>...</answer>` format; these generic matchers read only the
answer span (the LAST complete one, `extract_span`). A missing span scores 0 (CEDAR App. D.2), as does an
unparseable answer. Set `span_tag=None` to score the whole completion instead. The gold answer is
`example[answer_key]`. CEDAR's own correctness path (`cedar_correctness`, `reasoner cedar check|eval`, the sandbox's
`extract_answer_code`) reads the FIRST complete span, tags in any case (`reasoner.tasks.cedar_verify.answer_span`,
the paper's reading); both come from the one scanner `find_span`.

  exact_match    normalize="lower_ws": collapse whitespace, strip, lowercase (AbductionRules);
                 normalize="upper": strip and uppercase (CauseLogics, ClimateFever labels);
                 normalize="strip": strip only.
  integer_match  the first standalone integer of the answer equals the gold integer (BalancedCOPA's
                 one-based label).
  set_match      the set of standalone integers of the answer equals the gold set (UniADILR's proof
                 sentence ids); order and duplicates are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from reasoner.rewards.registry import completion_text, register_reward

_NORMALIZERS = {
    "lower_ws": lambda s: " ".join(s.split()).lower(),
    "upper": lambda s: s.strip().upper(),
    "strip": lambda s: s.strip(),
}
# A run of digits not glued to letters, digits, or a decimal point: "3", "(3)", "3," but not "s3", "3.5", "3x".
_STANDALONE_INT = re.compile(r"(?<![\w.])[-+]?\d+(?![\w]|\.\d)")


def find_span(text: str, tag: str = "answer", *, first: bool = False, ignore_case: bool = False) -> str | None:
    """Content of the last (or, `first=True`, the first) complete `<tag>...</tag>` span, or None when there is none.

    The spans are those of the lazy regex `<tag>(.*?)</tag>` (left to right, non-overlapping; `ignore_case`: the
    tags in any case), found in one left-to-right pass of literal searches: repeated unclosed `<tag>`s cost linear
    time, not quadratic. The content is returned as written (not stripped)."""
    flags = re.IGNORECASE if ignore_case else 0
    open_re, close_re = re.compile(re.escape(f"<{tag}>"), flags), re.compile(re.escape(f"</{tag}>"), flags)
    span, pos = None, 0
    while True:
        start = open_re.search(text, pos)
        if start is None:
            return span
        end = close_re.search(text, start.end())
        if end is None:
            return span
        span, pos = text[start.end():end.start()], end.end()
        if first:
            return span


def extract_span(text: str, tag: str = "answer") -> str | None:
    """Content of the last complete `<tag>...</tag>` span (tags as written), or None (`find_span`)."""
    return find_span(text, tag)


# Python refuses int(str) beyond this many digits (CVE-2020-10735); such integers are compared as text.
MAX_INT_DIGITS = 4300


def integer_tokens(text: str) -> list[str]:
    """Standalone integers of `text` in canonical text form ("-12", "7", "0"), in order: never raises,
    whatever the number of digits (see `_STANDALONE_INT`)."""
    out = []
    for token in _STANDALONE_INT.findall(text):
        sign = "-" if token[0] == "-" else ""
        digits = token.lstrip("+-").lstrip("0") or "0"
        out.append(("" if digits == "0" else sign) + digits)
    return out


def standalone_integers(text: str) -> list[int]:
    """Integers written on their own in `text`, in order (see `_STANDALONE_INT`); integers longer than
    MAX_INT_DIGITS are left out (use `integer_tokens` to compare those)."""
    return [int(t) for t in integer_tokens(text) if len(t.lstrip("-")) <= MAX_INT_DIGITS]


def _canonical(value) -> str:
    """The canonical text form of a gold integer (an int, or a string holding one)."""
    if isinstance(value, str):
        tokens = integer_tokens(value.strip())
        if len(tokens) != 1:
            raise ValueError(f"gold answer {value[:40]!r} is not one integer")
        return tokens[0]
    return str(int(value))


def _answers(completions: Sequence, span_tag: str | None) -> list[str | None]:
    texts = [completion_text(c) for c in completions]
    return texts if span_tag is None else [extract_span(t, span_tag) for t in texts]


def _gold(example: Mapping, answer_key: str):
    if answer_key not in example:
        raise KeyError(f"example has no {answer_key!r} field (keys: {sorted(example)})")
    return example[answer_key]


def _per_answer(score, *, answer_key: str, span_tag: str | None):
    """The reward function that gives each completion `float(score(answer, gold))`: its answer (the `span_tag`
    span, None when missing; the whole text when `span_tag` is None) against its example's `answer_key` value."""

    def reward(completions, *, examples):
        return [float(score(answer, _gold(example, answer_key)))
                for answer, example in zip(_answers(completions, span_tag), examples)]

    return reward


@register_reward("exact_match")
def exact_match(*, answer_key: str = "answer", normalize: str = "lower_ws", span_tag: str | None = "answer"):
    """1.0 when the normalised answer equals the normalised gold string, else 0.0."""
    if normalize not in _NORMALIZERS:
        raise ValueError(f"normalize={normalize!r}: expected one of {sorted(_NORMALIZERS)}")
    norm = _NORMALIZERS[normalize]

    def score(answer, gold):
        return answer is not None and norm(answer) == norm(str(gold))

    return _per_answer(score, answer_key=answer_key, span_tag=span_tag)


@register_reward("integer_match")
def integer_match(*, answer_key: str = "answer", span_tag: str | None = "answer"):
    """1.0 when the answer's first standalone integer equals int(gold), else 0.0."""

    def score(answer, gold):
        gold = _canonical(gold)
        ints = integer_tokens(answer) if answer is not None else []
        return bool(ints) and ints[0] == gold

    return _per_answer(score, answer_key=answer_key, span_tag=span_tag)


def _gold_set(gold) -> set[str]:
    if isinstance(gold, str):
        return set(integer_tokens(gold))
    if isinstance(gold, Iterable):
        return {_canonical(g) for g in gold}
    return {_canonical(gold)}


@register_reward("set_match")
def set_match(*, answer_key: str = "answer", span_tag: str | None = "answer"):
    """1.0 when the set of standalone integers in the answer equals the gold set (non-empty), else 0.0."""

    def score(answer, gold):
        gold = _gold_set(gold)
        predicted = set(integer_tokens(answer)) if answer is not None else set()
        return bool(gold) and predicted == gold

    return _per_answer(score, answer_key=answer_key, span_tag=span_tag)


def logic_problem(example: Mapping, *, dataset: str = ""):
    """A Logic-LLM record ({id, context, question, options, answer}) as `reasoner.tasks.logic_llm.LogicProblem`."""
    from reasoner.tasks.logic_llm import LogicProblem

    missing = {"context", "question", "options", "answer"} - set(example)
    if missing:
        raise KeyError(f"example lacks Logic-LLM fields {sorted(missing)} (keys: {sorted(example)})")
    return LogicProblem(id=str(example.get("id", "")), dataset=example.get("dataset", dataset),
                        context=str(example["context"]).strip(), question=str(example["question"]).strip(),
                        options=tuple(example["options"]), answer=str(example["answer"]).strip())


def final_answer_text(completion) -> str | None:
    """The answer a completion commits to: a scratchpad `Trajectory`'s answer (its `finish` argument, or the last
    reply at T_max), else the completion's text."""
    if hasattr(completion, "answer") and hasattr(completion, "termination"):
        return completion.answer
    return completion_text(completion)


@register_reward("option_match")
def option_match(*, span_tag: str | None = None, dataset: str = ""):
    """1.0 when the option letter the completion commits to (an option letter, or a True/False/Unknown/Uncertain
    label word, read by `reasoner.tasks.logic_llm.extract_answer`) is the gold letter; 0.0 otherwise,
    including answers that name no option or several."""
    from reasoner.tasks.logic_llm import check_correct

    def reward(completions, *, examples):
        out = []
        for completion, example in zip(completions, examples):
            problem = logic_problem(example, dataset=dataset)
            text = final_answer_text(completion)
            if text is not None and span_tag is not None:
                text = extract_span(text, span_tag)
            out.append(float(check_correct(text, problem)))
        return out

    return reward
