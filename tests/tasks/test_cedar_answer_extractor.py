"""One answer extractor for CEDAR (issue 19): the span scanner `reasoner.rewards.match.find_span` against the lazy
regexes it stands for (brute force over every short tag sequence), and CEDAR's correctness path — the training
reward `cedar_correctness`, `cedar_verify.score` (`reasoner cedar check|eval`) and the sandbox's
`extract_answer_code` / `verify_transform_answer` — reading the same answer (the FIRST complete `<answer>` span,
tags in any case) on code completions that tell the readings apart. `extract_span` keeps the last span (the
generic matchers and every non-CEDAR caller)."""

import itertools
import re

import pytest

from reasoner.rewards.match import extract_span, find_span
from reasoner.tasks.cedar_verify import CedarRecord, answer_code, answer_span, example_of, score

PIECES = ("<answer>", "</answer>", "<ANSWER>", "</Answer>", "a", "\n")


def regex_spans(text: str, *, ignore_case: bool) -> list[str]:
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    return [m.group(1) for m in re.finditer(r"<answer>(.*?)</answer>", text, flags)]


def test_find_span_is_the_lazy_regex_on_every_short_sequence():
    checked = 0
    for n in range(6):
        for parts in itertools.product(PIECES, repeat=n):
            text = "".join(parts)
            exact, any_case = regex_spans(text, ignore_case=False), regex_spans(text, ignore_case=True)
            assert extract_span(text) == find_span(text) == (exact[-1] if exact else None), text
            assert find_span(text, first=True) == (exact[0] if exact else None), text
            assert find_span(text, first=True, ignore_case=True) == (any_case[0] if any_case else None), text
            assert answer_span(text) == (any_case[0].strip() if any_case else None), text
            checked += 1
    assert checked == sum(len(PIECES) ** n for n in range(6))


SHIFT = "def transform(s):\n    return ''.join(chr(ord(c) + 1) for c in s)\n"
WRONG = "def transform(s):\n    return s\n"
TESTS = (("abc", "bcd"), ("HAL", "IBM"))


@pytest.mark.parametrize("completion, reward", [
    (f"<think>draft</think><answer>\n```python\n{SHIFT}```\n</answer> revised: <answer>{WRONG}</answer>", 1.0),
    (f"<answer>{WRONG}</answer> no, rather <answer>\n```python\n{SHIFT}```\n</answer>", 0.0),  # first span rules
    (f"<ANSWER>\n{SHIFT}</Answer>", 1.0),  # tags in any case
    (f"<answer>\n{SHIFT}", 0.0),  # unterminated: no answer
    (SHIFT, 0.0),  # no span at all
])
def test_every_cedar_reader_takes_the_same_answer(completion, reward):
    from reasoner.rewards import CompositeReward
    from reasoner.verifiers.sandbox import SandboxLimits, extract_answer_code, verify_transform_answer

    record = CedarRecord(0, "crypto", tests=TESTS)
    span = answer_span(completion)
    assert extract_answer_code(completion) == answer_code(completion) == (
        "" if span is None else span.replace("```python\n", "").replace("```", "").strip("\n"))
    assert score(record, completion) == reward
    report = verify_transform_answer(completion, list(TESTS), limits=SandboxLimits(timeout_s=5.0))
    assert float(report.passed_all) == reward
    composite = CompositeReward.from_config([{"name": "cedar_correctness", "as": "correctness"}])
    assert composite([completion], examples=[example_of(record)]).total_B.tolist() == [reward]
    composite.close()


def test_the_grpo_cedar_configs_score_correctness_through_cedar_correctness():
    from configs import grpo_cedar

    for variant in (None, "smollm2", "tiny", "paper", "paper_cor"):
        rewards = {r["as"]: r["name"] for r in grpo_cedar.get_config(variant).rewards}
        assert rewards["correctness"] == "cedar_correctness", variant
