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
