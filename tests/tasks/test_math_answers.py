"""Answer checkers on the real staged records: the gold answer scores 1, a perturbed one 0."""

import pytest

from reasoner.tasks.answers import extract_answer, is_equiv, normalize_math
from reasoner.tasks.reasoning import FORMAT_INSTRUCTIONS, load_task, score

FLIP = {"A": "B", "B": "A", "C": "A", "yes": "no", "no": "yes"}


def _gold_reply(p):
    return {"number": f"Some steps. The answer is {p.gold}.", "choice": f"So the answer is ({p.gold}).",
            "boolean": f"Thus the answer is {p.gold}.", "text": f"Therefore $\\boxed{{{p.gold}}}$."}[p.kind]


def _perturbed_reply(p):
    if p.kind == "number":
        return f"The answer is {float(p.gold) + 1:g}."
    if p.kind == "text":
        return f"\\boxed{{{p.gold}+1}}"
    return f"The answer is ({FLIP[p.gold]})." if p.kind == "choice" else f"The answer is {FLIP[p.gold]}."


@pytest.mark.parametrize("task,split", [("gsm8k", "test"), ("gsm8k", "train"), ("strategyqa", "test"),
                                        ("math500", "test"), ("proofwriter", "test"), ("folio", "test"),
                                        ("prontoqa", "test")])
def test_gold_scores_one_and_perturbed_zero(shared_data, task, split):
    problems = load_task(shared_data, task, split=split)
    assert len(problems) >= 200 and len({p.id for p in problems}) == len(problems)
    assert all(p.kind in FORMAT_INSTRUCTIONS for p in problems)
    for p in problems:
        assert score(p, _gold_reply(p)) == 1.0, (p.id, p.gold)
        assert score(p, _perturbed_reply(p)) == 0.0, (p.id, p.gold)
        assert score(p, "I do not know.") == 0.0, p.id


def test_gsm8k_gold_is_the_number_after_hashes(shared_data):
    first = load_task(shared_data, "gsm8k", limit=1)[0]
    assert first.gold == "18" and first.question.startswith("Janet")


def test_math500_solutions_boxed_answer_equals_gold(shared_data):
    import json

    rows = [json.loads(line) for line in (shared_data / "math500" / "test.jsonl").read_text().splitlines()]
    agree = sum(is_equiv(extract_answer("text", r["solution"]), r["answer"]) for r in rows)
    # the staged `answer` field is the boxed content of each solution (a few use \boxed twice); >= 97% agree
    assert agree >= 0.97 * len(rows), agree


@pytest.mark.parametrize("a,b", [(r"\frac12", r"\dfrac{1}{2}"), ("0.5", r"\frac{1}{2}"), ("1/2", r"\frac{1}{2}"),
                                 (r"\left( 3, \frac{\pi}{2} \right)", r"(3,\frac{\pi}{2})"), ("x = 5", "5"),
                                 (r"10^\circ", "10"), (r"\sqrt3", r"\sqrt{3}"), ("5.", "5"), ("1,000", "1000"),
                                 (r"3\text{ cm}", "3"), (r"\$32,\!348", "32348"), (r"\boxed{\frac12}", "0.5"),
                                 (r"\text{east}", "east")])
def test_normaliser_equivalences(a, b):
    assert is_equiv(a, b), (normalize_math(a), normalize_math(b))


@pytest.mark.parametrize("a,b", [(r"\frac12", r"\frac13"), ("(3,4)", "(4,3)"), ("x+1", "x-1"), ("0.5", "0.51"),
                                 (r"\text{even}", r"\text{odd}"), (r"\text{}", r"\text{ }")])
def test_normaliser_keeps_different_answers_apart(a, b):
    assert not is_equiv(a, b)


def test_word_and_dollar_answers_of_math500_score_only_when_right(shared_data):
    """The real MATH-500 answers that are a lone word (the units rule used to erase them, so any word scored 1)
    or hold `\\$` (it left a stray backslash, so the right number scored 0)."""
    problems = {p.id: p for p in load_task(shared_data, "math500")}
    for pid, right in [("test/algebra/1349.json", "Evelyn"), ("test/prealgebra/105.json", "east"),
                       ("test/intermediate_algebra/128.json", "even")]:
        assert score(problems[pid], rf"\boxed{{\text{{{right}}}}}") == 1.0
        assert score(problems[pid], r"\boxed{\text{nobody}}") == 0.0
    dollars = problems["test/algebra/2626.json"]
    assert [score(dollars, rf"\boxed{{{p}}}") for p in ("32,348", "32348", r"\$32348", "32,349")] == [1, 1, 1, 0]


def test_numbers_past_a_float_or_over_zero_are_no_answer():
    # each raised (OverflowError / ValueError) out of the RL-of-Thoughts environment and the baselines; "3/0" read 30
    from reasoner.tasks.answers import to_number
    from reasoner.tasks.reasoning import Problem

    problem = Problem(id="x", task="gsm8k", question="q", gold="30", kind="number")
    for text in ["The answer is 1e999", "The answer is " + "9" * 400, "The answer is " + "1" * 400 + "/3",
                 "The answer is " + "1" * 5000 + "/3", "The answer is 3/0"]:
        assert extract_answer("number", text) is None and score(problem, text) == 0.0
    assert to_number("3/4") == 0.75 and to_number("1e5") == 100000 and to_number("1e400") is None
    assert not is_equiv("\\frac{" + "1" * 400 + "}{3}", "1")


def test_extraction_edge_cases():
    assert extract_answer("number", "I have $1,234.50 left. The answer is $1,234.50.") == "1234.5"
    assert extract_answer("number", "3 + 4 = 7 so 7") == "7"  # no phrase: the last number
    # a fraction, scientific notation and a Unicode minus are read whole (3/4 read as 3, 1e5 as 1, -7 as 7)
    assert [extract_answer("number", f"The answer is {x}.") for x in ("3/4", "1e5", "\u22127")] == ["0.75", "100000",
                                                                                                     "-7"]
    assert extract_answer("choice", "B) False is right") == "B"
    # after "the answer is", the letter whatever follows it; without it, the last option-shaped letter, never the
    # article "A"
    assert extract_answer("choice", "Options: A) True B) False C) Unknown. The answer is C, unknown.") == "C"
    assert extract_answer("choice", "A. Consider the premises. The answer is C because they do not decide.") == "C"
    assert extract_answer("choice", "A cat is not B) a dog, so (C).") == "C"
    assert extract_answer("boolean", "The answer is No, because") == "no"
    assert extract_answer("text", r"\boxed{\frac{a}{\sqrt{b}}} done") == r"\frac{a}{\sqrt{b}}"
    assert extract_answer("text", "nothing") is None
    with pytest.raises(ValueError, match="answer kind"):
        extract_answer("essay", "x")


def test_a_bad_line_of_staged_data_is_named_with_its_line(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "1 + 1?", "answer": "#### 2"}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"gsm8k/test.jsonl:2: expected a JSON object, got list"):
        load_task(tmp_path, "gsm8k")
    with pytest.raises(FileNotFoundError, match=r"math500/test.jsonl: no such file"):
        load_task(tmp_path, "math500")
