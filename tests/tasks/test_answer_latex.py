"""Answer forms on every real record: option letters past E."""

from reasoner.tasks.answers import extract_answer, is_correct
from reasoner.tasks.logic_llm import load_problems

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
