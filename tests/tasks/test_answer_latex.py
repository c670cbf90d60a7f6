"""LaTeX and letter forms on every real record: `\\boxed 5`, nested fractions, option letters past E."""

from fractions import Fraction

import pytest

from reasoner.tasks.answers import (
    _as_fraction, extract_answer, is_correct, is_equiv, last_boxed, normalize_math, to_number,
)
from reasoner.tasks.logic_llm import load_problems
from reasoner.tasks.reasoning import load_task, score

LETTER_FORMS = ("The answer is ({}).", "The answer is {}.", "**Answer: {}**", "\\boxed{{{}}}", "({})",
                "The answer is: **{}**")


def test_logicaldeduction_letters_f_and_g_score(shared_data):
    # options run A-G; the choice kind read only A-E, so the 38 records whose gold is F or G scored 0 in every form
    problems = load_problems(shared_data, "logicaldeduction")
    assert sum(p.answer in "FG" for p in problems) == 38
    for p in problems:
        wrong = next(x for x in p.labels if x != p.answer)
        for form in LETTER_FORMS:
            assert is_correct("choice", extract_answer("choice", form.format(p.answer)), p.answer), (p.id, form)
            assert not is_correct("choice", extract_answer("choice", form.format(wrong)), p.answer), (p.id, form)
    assert [extract_answer("choice", f"The answer is ({x}).") for x in "HIJ"] == ["H", "I", "J"]
    # a bare "I" is the pronoun unless it is written as an option
    assert extract_answer("choice", "The answer is: I think (B).") == "B"
    assert extract_answer("choice", "I said so.") is None and extract_answer("choice", "**Answer: I**") == "I"


def test_boxed_without_braces_on_every_math500_gold(shared_data):
    # Minerva / Hendrycks MATH write "\boxed 5"; it was read as no answer (0 of the 278 golds without a space), and
    # "\boxed {x}" (a space before the brace) as none for all 300
    problems = load_task(shared_data, "math500")
    others = {p.id: next(q.gold for q in problems if not is_equiv(q.gold, p.gold)) for p in problems}
    plain = [p for p in problems if " " not in p.gold and not p.gold.startswith("{")]
    assert len(plain) == 278
    for p in plain:
        assert score(p, f"The final answer is $\\boxed {p.gold}$. I hope it is correct.") == 1.0, p.id
    for p in problems:
        assert score(p, f"So $\\boxed {{{p.gold}}}$.") == 1.0, p.id
        assert score(p, f"So $\\boxed {{{others[p.id]}}}$.") == 0.0, p.id
    assert last_boxed("$\\boxed \\$5$ or \\boxed{6}") == "6" and last_boxed("\\boxed{6} then $\\boxed 7$") == "7"
    assert last_boxed("\\boxed 12\nnext line") == "12" and last_boxed("\\boxed{unclosed") is None


def test_nested_fractions_on_every_rational_math500_and_gsm8k_gold(shared_data):
    # "\frac{\frac{p}{1}}{q}" of a gold p/q read as p/1 over q text (never equal, 0 of the 242 rational MATH-500
    # golds) and, as a number, as its first inner fraction (GSM8K: 598 of 600 wrong)
    problems = load_task(shared_data, "math500")
    rational = [(p, _as_fraction(normalize_math(p.gold))) for p in problems]
    rational = [(p, v) for p, v in rational if v is not None]
    assert len(rational) == 243  # the mixed number 1\frac{4}{5} (test/geometry/826.json), 9/5, among them
    for p, v in rational:
        for form in ("\\boxed{{\\frac{{\\frac{{{}}}{{1}}}}{{{}}}}}", "\\boxed{{\\dfrac{{\\tfrac{{{}}}{{1}}}}{{{}}}}}"):
            assert score(p, form.format(v.numerator, v.denominator)) == 1.0, (p.id, form)
            assert score(p, form.format(v.numerator + 1, v.denominator)) == 0.0, (p.id, form)
    for split in ("test", "train"):
        for q in load_task(shared_data, "gsm8k", split=split):
            assert score(q, f"$\\boxed{{\\frac{{\\frac{{{q.gold}}}{{1}}}}{{1}}}}$") == 1.0, q.id
            assert score(q, f"The answer is $\\frac{{\\frac{{{int(q.gold) + 1}}}{{1}}}}{{1}}$.") == 0.0, q.id


@pytest.mark.parametrize("a,b", [(r"\frac{\frac{1}{2}}{3}", r"\frac{1}{6}"), (r"\tfrac{\frac12}{3}", r"\frac{1}{6}"),
                                 (r"\frac{1}{\frac{2}{3}}", "1.5"), (r"-\dfrac{\frac{1}{2}}{3}", r"-\frac{1}{6}"),
                                 (r"\frac{\sqrt3}{\frac12}", r"\frac{\sqrt{3}}{\frac{1}{2}}")])
def test_nested_fractions_are_equivalent(a, b):
    assert is_equiv(a, b), (normalize_math(a), normalize_math(b))


def test_nested_fractions_as_numbers_and_what_is_no_number():
    assert to_number(r"\frac{\frac{1}{2}}{3}") == 1 / 6  # the quotient 1/6 of two ints, the same float
    assert to_number(r"\frac{1}{\frac{0}{3}}") is None and _as_fraction(r"\frac{\pi}{2}") is None
    assert not is_equiv(r"\frac{\frac{1}{2}}{3}", r"\frac{1}{5}")
    assert extract_answer("number", r"The answer is \frac{1}{\frac{2}{3}} cups.") == "1.5"
    # a fraction glued to a digit is not read into it: MATH's gold "1\frac{4}{5}" is the mixed number 9/5, not 14/5
    assert _as_fraction(r"1\frac{4}{5}") == Fraction(9, 5) and not is_equiv(r"1\frac{4}{5}", r"\frac{14}{5}")
    assert extract_answer("number", r"The answer is \frac{1}{2}.") == "0.5"
