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
