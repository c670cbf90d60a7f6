"""Answer forms on every real record: `\\boxed 5`, option letters past E."""

from reasoner.tasks.answers import extract_answer, is_correct, is_equiv, last_boxed
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
