"""Answers written the ways models write them, on every real staged record: the gold scores 1, another answer 0."""

import json

import pytest

from reasoner.tasks.answers import extract_answer, is_correct
from reasoner.tasks.reasoning import load_task, score

CHOICE_FORMS = ("The answer is: **{}**", "The answer is **({})**", "**Answer: {}**", "\\boxed{{{}}}",
                "The answer is $\\boxed{{{}}}$.", 'The answer is "{}".', "So $\\boxed{{\\text{{({})}}}}$",
                "Answer: ({})", "The answer is {}.", "({})")


@pytest.mark.parametrize("task", ["proofwriter", "folio", "prontoqa"])
def test_bold_and_boxed_option_letters_score_on_every_record(shared_data, task):
    # "The answer is: **B**", "**Answer: B**" and "\boxed{B}" extracted as None (scored 0) on every record
    for p in load_task(shared_data, task):
        wrong = "B" if p.gold == "A" else "A"
        for form in CHOICE_FORMS:
            assert score(p, form.format(p.gold)) == 1.0, (p.id, form)
            assert score(p, form.format(wrong)) == 0.0, (p.id, form)


def test_mmlu_stem_letters_of_every_record(shared_data):
    rows = [json.loads(line) for line in (shared_data / "mmlu_stem" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == 300
    for r in rows:
        gold, wrong = "ABCD"[r["answer"]], "ABCD"[(r["answer"] + 1) % 4]
        for form in CHOICE_FORMS:
            assert is_correct("choice", extract_answer("choice", form.format(gold)), gold), (r["question"], form)
            assert not is_correct("choice", extract_answer("choice", form.format(wrong)), gold)


def test_the_a_of_a_star_is_not_an_option():
    assert extract_answer("choice", "A* search expands fewer nodes.") is None
    assert extract_answer("choice", "A* expands fewer nodes: **C**") == "C"


def test_math500_units_letters_and_thin_spaces_written_plainly(shared_data):
    """Real MATH-500 golds whose plain form scored 0: "864 \\mbox{ inches}^2" (the units rule knew only a final
    \\text{}), "\\text{(C)}" (a model boxes the letter), "10,\\!080" written with a thin space or "{,}", and degrees
    written with the sign. Minerva's normalize_final_answer accepts each of them."""
    problems = {p.id: p for p in load_task(shared_data, "math500")}
    cases = {"test/geometry/473.json": (["864", r"864\text{ in}^2", r"864 \text{ square inches}"], ["865", "864^2"]),
             "test/precalculus/819.json": (["C", "(C)", r"\textbf{(C)}", r"\text{C}"], ["D", "(D)", "CD"]),
             "test/precalculus/452.json": (["E", r"\text{(E)}"], ["C"]),
             "test/intermediate_algebra/754.json": (["B", "(B)"], ["E"]),
             "test/counting_and_probability/508.json": (["10080", r"10{,}080", r"10\,080", "10,080"], ["10081"]),
             "test/number_theory/417.json": ([r"11\,111\,111\,100", r"11{,}111{,}111{,}100"], ["11111111000"]),
             "test/precalculus/927.json": (["90", "90\u00b0", r"90^{\circ}"], ["91\u00b0", "9"])}
    for pid, (right, wrong) in cases.items():
        assert [score(problems[pid], rf"\boxed{{{x}}}") for x in right] == [1.0] * len(right), pid
        assert [score(problems[pid], rf"\boxed{{{x}}}") for x in wrong] == [0.0] * len(wrong), pid


def test_whole_numbers_compare_exactly(shared_data):
    """A relative float tolerance took 11111111101 for MATH-500's 11111111100 (1e-9 x 1.1e10 = 11) and 1000001 for a
    number gold of 1000000 (1e-6 x 1e6 = 1). Brute force over the real golds: the gold +- 1 scores 0."""
    from fractions import Fraction

    from reasoner.tasks.answers import normalize_math
    from reasoner.tasks.reasoning import Problem

    whole = 0
    for p in load_task(shared_data, "math500"):
        norm = normalize_math(p.gold)
        if norm.lstrip("-").isdigit():
            whole += 1
            for off in (-1, 1):
                assert score(p, rf"\boxed{{{int(norm) + off}}}") == 0.0, p.id
            assert score(p, rf"\boxed{{{p.gold}}}") == 1.0
    assert whole >= 100
    assert score(load_task(shared_data, "math500")[0], r"\boxed{\frac{1}{3}}") == 0.0  # a non-number stays apart
    assert is_correct("text", "0.0000672", ".0000672") and not is_correct("text", "0.0000673", ".0000672")
    assert is_correct("text", r"\frac{10}{4}", "2.5") and Fraction("2.5") == Fraction(10, 4)
    big = Problem(id="x", task="gsm8k", question="q", gold="1000000", kind="number")
    assert [score(big, f"The answer is {x}.") for x in ("1,000,000", "1000001", "999,999", "1e6")] == [1, 0, 0, 1]
    half = Problem(id="y", task="gsm8k", question="q", gold="2.5", kind="number")
    assert [score(half, f"The answer is {x}.") for x in ("2.50", "5/2", "2.6")] == [1, 1, 0]


def test_a_latex_fraction_is_one_number(shared_data):
    # "The answer is \frac{3}{4}" read 3 (the first number after the phrase), "\boxed{\dfrac{15}{2}}" read 2
    from reasoner.tasks.answers import to_number
    from reasoner.tasks.reasoning import Problem

    p = Problem(id="x", task="gsm8k", question="q", gold="0.75", kind="number")
    for reply in (r"The answer is \frac{3}{4}.", r"The answer is $\dfrac{3}{4}$", r"So \boxed{\tfrac{3}{4}}", "3/4"):
        assert score(p, reply) == 1.0, reply
    assert score(p, r"The answer is \frac{3}{5}.") == 0.0 and score(p, r"\boxed{\frac{1}{0}}") == 0.0
    assert to_number(r"-\frac{1}{2}") == -0.5 and to_number(r"\frac{-1}{2}") == -0.5
    for q in load_task(shared_data, "gsm8k"):  # every real gold as an integer fraction over 1 and 2
        assert score(q, rf"The answer is $\frac{{{q.gold}}}{{1}}$.") == 1.0, q.id
        assert score(q, rf"The answer is $\frac{{{q.gold}}}{{2}}$.") == (1.0 if q.gold == "0" else 0.0), q.id


def test_minerva_final_answer_sentence_on_every_math500_gold(shared_data):
    # lm-eval's minerva_math format scored 0 of 300: the text after "answer is" ran to the end of the reply
    # ("$X$. I hope it is correct."), so only a reply ending with the answer was read
    problems = load_task(shared_data, "math500")
    others = {p.id: next(q.gold for q in problems if not is_correct("text", q.gold, p.gold)) for p in problems}
    for form in ("Final Answer: The final answer is ${}$. I hope it is correct.", "The answer is ${}$.\n\nDone.",
                 "The answer is {}\nChecked.", "The answer is $$ {} $$ (checked)"):
        for p in problems:
            assert score(p, form.format(p.gold)) == 1.0, (p.id, form)
            assert score(p, form.format(others[p.id])) == 0.0, (p.id, form)
    assert extract_answer("text", "The answer is 3.5. Good.") == "3.5"
    assert extract_answer("text", "The answer is $\\$32$.") == "\\$32"


@pytest.mark.parametrize("task", ["proofwriter", "folio", "prontoqa"])
def test_the_letter_after_answer_colon_beats_letters_discussed_after_it(shared_data, task):
    # "**Answer: B**" then an explanation naming "(A)": the last option-shaped letter, A, was taken
    for p in load_task(shared_data, task):
        wrong = "B" if p.gold == "A" else "A"
        for form in ("**Answer: {}**\n\nExplanation: ({}) is ruled out.", "Answer: ({})\n({}) fails the premises.",
                     "Final answer:\n\n**{}**\n\nNot ({})."):
            assert score(p, form.format(p.gold, wrong)) == 1.0, (p.id, form)
            assert score(p, form.format(wrong, p.gold)) == 0.0, (p.id, form)
    # "Answer:" that opens an argument names no letter right after it: the last option-shaped letter still counts
    assert extract_answer("choice", "Answer: Let me think. (A) is wrong, so (C).") == "C"


def test_strategyqa_answer_colon_and_boxed_on_every_record(shared_data):
    # "Answer: Yes" then a sentence holding "no", or "\boxed{No}, though yes ...": the last word in the text was taken
    problems = load_task(shared_data, "strategyqa")
    assert {p.gold for p in problems} == {"yes", "no"}
    for p in problems:
        wrong = "no" if p.gold == "yes" else "yes"
        for form in ("**Answer:** {}.\n\nOne might say {}, but the facts disagree.", "Answer: {}\nNot {}.",
                     "\\boxed{{{}}} (a hasty reader says {})", "The answer is: **{}**. Not {}."):
            for gold, other in ((p.gold, wrong), (p.gold.capitalize(), wrong.capitalize())):
                assert score(p, form.format(gold, other)) == 1.0, (p.id, form)
                assert score(p, form.format(other, gold)) == 0.0, (p.id, form)
    assert extract_answer("boolean", "Answer: let me see. Maybe yes... no.") == "no"  # no word right after it


@pytest.mark.parametrize("split", ["test", "train"])
def test_gsm8k_number_after_answer_colon_on_every_record(shared_data, split):
    # "Answer: 18 (20 eggs less 2)": the last number of the text, 2, was taken
    for p in load_task(shared_data, "gsm8k", split=split):
        gold = int(p.gold)
        for form in ("Answer: {} ({} less 2)", "**Answer:** ${:,}. Check: {} - 2."):
            assert score(p, form.format(gold, gold + 2)) == 1.0, (p.id, form)
            assert score(p, form.format(gold + 2, gold)) == 0.0, (p.id, form)
    assert extract_answer("number", "Answer: let me add 3 + 4 = 7") == "7"  # no number right after it: the last
