"""One reading of a Logic-LLM reply for the RL-of-Thoughts tasks (`reasoning.score`) and the SMT rewards
(`logic_llm.check_correct`), on every real ProofWriter / FOLIO / ProntoQA record."""

import pytest

from reasoner.tasks.logic_llm import check_correct, extract_answer, load_problems
from reasoner.tasks.reasoning import extract, load_task, score

SETS = ["proofwriter", "folio", "prontoqa"]


def _word(options, letter):
    return next(o for o in options if o.startswith(letter + ")")).partition(")")[2].strip()


@pytest.mark.parametrize("task", SETS)
def test_a_label_word_scores_like_its_letter_and_two_labels_never(shared_data, task):
    # reasoning.score read only letters: "The answer is False." scored 0 on all 1304 records while check_correct
    # read it as B; a "true" argued about before "The answer is False." made check_correct give up (0 of 1304)
    problems, logic = load_task(shared_data, task), load_problems(shared_data, task)
    assert [p.gold for p in problems] == [q.answer for q in logic]
    for p, q in zip(problems, logic):
        wrong = "B" if p.gold == "A" else "A"
        right_word, wrong_word = _word(p.options, p.gold), _word(p.options, wrong)
        for form in ("The answer is {}.", "The answer is: **{}**", "Answer: {}", "The statement is {}.",
                     "Suppose the statement were " + wrong_word + ": a premise rules that out. The answer is {}."):
            assert score(p, form.format(right_word)) == 1.0 and check_correct(form.format(right_word), q), (p.id, form)
            assert extract(p, form.format(right_word)) == p.gold == extract_answer(form.format(right_word), q)
            assert score(p, form.format(wrong_word)) == 0.0 and not check_correct(form.format(wrong_word), q)
        for hedge in (f"The answer is {right_word} or {wrong_word}.", f"It is {right_word}, or maybe {wrong_word}."):
            assert extract(p, hedge) is None and score(p, hedge) == 0.0, (p.id, hedge)
        assert score(p, f"The answer is {right_word.lower()}") == 1.0


@pytest.mark.parametrize("task", SETS)
def test_yes_and_no_are_labels_only_where_they_open_the_answer(shared_data, task):
    # "no premise contradicts it" read as the label False beside the True the reply concludes: a hedge, scored 0
    counted = 0
    for q in load_problems(shared_data, task):
        right = q.labels[q.answer]
        if right not in ("true", "false"):
            continue
        counted += 1
        assert check_correct(f"The statement is {right}; no premise contradicts it.", q), q.id
        assert check_correct(f"There is no doubt: it is {right}.", q), q.id
        said = "Yes" if right == "true" else "No"
        assert check_correct(f"{said}, that follows from the premises.", q), q.id
        assert check_correct(f"The answer is {said.lower()}.", q), q.id
    assert counted > 100


@pytest.mark.parametrize("task", SETS)
def test_quoted_and_text_boxed_letters_are_read_by_check_correct(shared_data, task):
    # 'The answer is "B".' and "\boxed{\text{(B)}}" scored 1 through reasoning.score but 0 through check_correct
    for q in load_problems(shared_data, task):
        wrong = "B" if q.answer == "A" else "A"
        for form in ('The answer is "{}".', "So $\\boxed{{\\text{{({})}}}}$", "\\boxed{{\\textbf{{{}}}}}"):
            assert check_correct(form.format(q.answer), q), (q.id, form)
            assert extract_answer(form.format(wrong), q) == wrong, (q.id, form)


def test_problems_without_options_read_by_kind(shared_data):
    p = load_task(shared_data, "gsm8k", limit=1)[0]
    assert p.options == () and extract(p, "The answer is 18.") == "18"
