"""Mixed numbers ("1\\frac{4}{5}" is 9/5, MATH's own way of writing them) on the real MATH-500 records."""

from fractions import Fraction

import pytest

from reasoner.tasks.answers import _as_fraction, extract_answer, is_equiv, normalize_math, to_number
from reasoner.tasks.reasoning import Problem, load_task, score

GOLD_FORMS = ("Therefore $\\boxed{{{}}}$.", "So $\\boxed {{{}}}$.", "The answer is ${}$.\n\nDone.",
              "Final Answer: The final answer is ${}$. I hope it is correct.")
MIXED_FORMS = ("\\boxed{{{}{}\\frac{{{}}}{{{}}}}}", "\\boxed{{{}{}\\tfrac{{{}}}{{{}}}}}", "\\boxed{{{}{} \\frac{{{}}}{{{}}}}}",
               "The final answer is ${}{}\\dfrac{{{}}}{{{}}}$. I hope it is correct.", "\\boxed{{{}{}\\frac{}{}}}")


def _mixed(value: Fraction, whole_offset: int = 0) -> tuple[str, int, int, int]:
    """(sign, whole, numerator, denominator) of |value| as a mixed number, the whole part moved by `whole_offset`."""
    whole, rest = divmod(abs(value), 1)
    return "-" if value < 0 else "", int(whole) + whole_offset, rest.numerator, rest.denominator


def test_every_math500_gold_still_scores_and_improper_golds_score_as_mixed_numbers(shared_data):
    # a whole number glued to a fraction was read as no number: the 14 golds that are improper fractions
    # (\frac{14}{3}, 1.25, -\frac{35}{9}, \frac{270}7\text{ degrees}, ...) scored 0 of 14 in every mixed form, and
    # the 15th, the gold 1\frac{4}{5} of test/geometry/826.json, was no number (matched neither \frac{9}{5} nor 1.8)
    problems = load_task(shared_data, "math500")
    assert len(problems) == 300
    for form in GOLD_FORMS:
        assert sum(score(p, form.format(p.gold)) for p in problems) == 300, form
    improper = [(p, v) for p in problems if (v := _as_fraction(normalize_math(p.gold))) is not None
                and v.denominator != 1 and abs(v) > 1]
    assert len(improper) == 15 and sum(v < 0 for _, v in improper) == 1
    for p, v in improper:
        sign, whole, numerator, denominator = _mixed(v)
        one_digit = numerator < 10 and denominator < 10  # "\frac45" only where both are one digit
        for form in MIXED_FORMS[:4] + (MIXED_FORMS[4:] if one_digit else ()):
            assert score(p, form.format(sign, whole, numerator, denominator)) == 1.0, (p.id, form)
            assert score(p, form.format(*_mixed(v, 1))) == 0.0, (p.id, form)
            product = Fraction(whole * numerator, denominator) * (-1 if sign else 1)  # the other reading
            assert product == v or score(p, f"\\boxed{{{product.numerator}/{product.denominator}}}") == 0.0, p.id


def test_the_mixed_number_gold_of_geometry_826(shared_data):
    p = next(q for q in load_task(shared_data, "math500") if q.id == "test/geometry/826.json")
    assert p.gold == "1\\frac{4}{5}"
    right = ["\\frac{9}{5}", "\\dfrac95", "1.8", "9/5", "1\\tfrac{4}{5}", "1 \\frac{4}{5}", "1.80"]
    wrong = ["\\frac{14}{5}", "\\frac{4}{5}", "1", "1.9", "\\frac{9}{4}", "2\\frac{4}{5}"]
    assert [score(p, f"\\boxed{{{x}}}") for x in right] == [1.0] * len(right)
    assert [score(p, f"\\boxed{{{x}}}") for x in wrong] == [0.0] * len(wrong)


@pytest.mark.parametrize("a,b", [(r"2\tfrac{1}{3}", r"\frac{7}{3}"), (r"-3\frac{1}{2}", "-3.5"),
                                 (r"-3\frac{1}{2}", r"-\frac{7}{2}"), (r"10\frac{1}{2}\%", r"10.5\%"),
                                 (r"x = 1\frac{1}{4}", "1.25"), (r"33\frac{1}{3}", "100/3")])
def test_mixed_numbers_are_equivalent(a, b):
    assert is_equiv(a, b), (normalize_math(a), normalize_math(b))


def test_mixed_numbers_as_numbers_and_what_stays_apart():
    gsm = Problem(id="x", task="gsm8k", question="q", gold="2.5", kind="number")
    replies = [r"The answer is 2\frac{1}{2} hours.", r"The answer is $2 \tfrac12$.", r"So \boxed{2\dfrac{1}{2}}",
               r"The answer is 3\frac{1}{2}.", r"The answer is 2\frac{1}{3}."]
    assert [score(gsm, r) for r in replies] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert to_number(r"-3\frac{1}{2}") == -3.5 and extract_answer("number", r"Answer: 1\frac{4}{5}") == "1.8"
    assert extract_answer("number", r"It is 5 - 1\frac{1}{2} = 3\frac{1}{2}.") == "3.5"
    # not mixed numbers: an improper or zero fraction part, an exponent, a decimal whole part, a variable
    for text in (r"1\frac{5}{4}", r"1\frac{0}{5}", r"x^2\frac{1}{2}", r"x^{2}\frac{1}{2}", r"1.5\frac{1}{2}",
                 r"\frac{4}{5}x", r"a_1\frac{1}{2}"):
        assert _as_fraction(normalize_math(text)) is None, text
    assert not is_equiv(r"1\frac{5}{4}", r"\frac{9}{4}") and not is_equiv(r"\frac{4}{5}x", "0.8")
    assert _as_fraction("1" * 5000 + r"\frac{1}{2}") is None  # past Python's int limit: no number, no error
