"""Negated labels in Logic-LLM replies ("The answer is not True.") on every real ProofWriter / FOLIO / ProntoQA
record: never read as the label negated, nor guessed as another; the label stated after the negation counts."""

import pytest

from reasoner.tasks.logic_llm import check_correct, extract_answer, load_problems
from reasoner.tasks.reasoning import extract, load_task, score

SETS = {"proofwriter": 600, "folio": 204, "prontoqa": 500}  # 1,304 records in all
# the gold word in the forms the other Logic-LLM tests use: these scored on every record and still do
GOLD_FORMS = ("The answer is {r}.", "The answer is: **{r}**", "Answer: {r}", "The statement is {r}.",
              "Suppose the statement were {w}: a premise rules that out. The answer is {r}.", "The answer is {l}")
# a negated wrong label, then the gold one: read as the gold (before: a hedge between the two, scored 0)
NEXT_FORMS = ("The answer is not {w}, it is {r}.", "The answer is not {w}. It is {r}.", "Answer: not {w}; {r}",
              "The statement is not necessarily {w}; it is {r}.", "The statement isn't {lw}. It is {r}.",
              "It is not {lw} that every premise applies, so the statement is {r}.",
              "The statement is {r}. It is not {lw} that every premise applies.")
# the gold label negated, with nothing or only argument after it: no answer (before: read as the gold, scored 1)
NEGATED_FORMS = ("The answer is not {r}.", "Answer: not {l}", "The statement isn't {l}.", "The answer is **not** {r}",
                 "The statement is not {r}.", "The statement cannot be {l}.", "It is not {l} that the statement holds.",
                 "Premise 1 is {lw}, so the statement is not {l}.", "The answer is not {r}. A premise makes it {l} only "
                 "if Bob is big.", "The statement is {w}, not {r}.")


def _word(options, letter):
    return next(o for o in options if o.startswith(letter + ")")).partition(")")[2].strip()


@pytest.mark.parametrize("task", sorted(SETS))
def test_negated_labels_on_every_record(shared_data, task):
    problems, logic = load_task(shared_data, task), load_problems(shared_data, task)
    assert len(problems) == len(logic) == SETS[task]
    for p, q in zip(problems, logic):
        wrong = "B" if p.gold == "A" else "A"
        r, w = _word(p.options, p.gold), _word(p.options, wrong)
        words = {"r": r, "w": w, "l": r.lower(), "lw": w.lower()}
        for form in GOLD_FORMS + NEXT_FORMS:
            reply = form.format(**words)
            assert extract(p, reply) == p.gold == extract_answer(reply, q) and score(p, reply) == 1.0, (p.id, reply)
            assert check_correct(reply, q), (p.id, reply)
        for form in NEGATED_FORMS:  # neither the label negated nor the other one of ProntoQA's two: no answer
            reply = form.format(**words)
            assert extract(p, reply) is None and extract_answer(reply, q) is None, (p.id, reply)
            assert score(p, reply) == 0.0 and not check_correct(reply, q), (p.id, reply)
            wrong_reply = form.format(**{"r": w, "w": r, "l": w.lower(), "lw": r.lower()})
            assert extract_answer(wrong_reply, q) is None, (p.id, wrong_reply)


@pytest.fixture(scope="module")
def hawk(shared_data):
    problem = next(p for p in load_problems(shared_data, "folio") if p.id == "FOLIO_dev_163")
    assert problem.labels == {"A": "true", "B": "false", "C": "unknown"} and problem.answer == "B"
    return problem


CASES = {  # FOLIO_dev_163: A True, B False, C Uncertain
    "The answer is not True.": None, "The answer is not False.": None, "Answer: not true": None,
    "The statement isn\u2019t true.": None, "It is not definitely true, so the answer is Uncertain.": "C",
    "The answer is neither True nor False; it is Uncertain.": "C", "It is neither true nor false.": None,
    "The answer is not uncertain: it is false.": "B", "The statement cannot be shown to be true.": None,
    "The statement is True, not False.": None,  # a hedge before negations were read, no answer still
    "The answer is not True. Premise 2 is false.": "B",  # the label the reply states after the negated one
    "It is not true that all birds land. The answer is False.": "B", "No, it is not true.": None,
    "The statement is not only true but obvious.": "A",  # "only" takes the "not" off the label
    "The premises don't contradict it: true.": "A",  # "don't" negates "contradict", not the label
}


def test_negations_of_a_three_way_label(hawk):
    assert {text: extract_answer(text, hawk) for text in CASES} == CASES
