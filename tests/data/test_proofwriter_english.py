"""ProofWriter processed-English parser: the real 600-question Logic-LLM dev file, templates, bad input."""

import json

import pytest

from reasoner.data.proofwriter_english import (SentenceError, load_logic_llm, parse_sentence, parse_statement,
                                               parse_theory_text)
from reasoner.data.solving import decide
from search.logic import Atom, Rule
from tests.data.reference import naive_depths

X = "?x"


@pytest.fixture(scope="session")
def owa_dev(shared_data):
    questions, skipped = load_logic_llm(shared_data / "proofwriter" / "logic_llm_owa_d5_dev.json")
    return questions, skipped


def test_every_theory_parses_and_answers_match_astar(owa_dev):
    questions, skipped = owa_dev
    assert skipped == []  # the failure list is empty
    assert len(questions) == 600
    counts = {"A_proved": 0, "B_negation_proved": 0, "C_neither": 0, "wrong": []}
    for q in questions:
        d = decide(q.program, q.statement)
        if q.answer is True and d.proved and not d.negation_proved:
            counts["A_proved"] += 1
        elif q.answer is False and d.negation_proved and not d.proved:
            counts["B_negation_proved"] += 1
        elif q.answer is None and not d.proved and not d.negation_proved:
            counts["C_neither"] += 1
        else:
            counts["wrong"].append(q.id)
    print("logic_llm_owa_d5_dev:", {k: v for k, v in counts.items() if k != "wrong"})
    assert counts == {"A_proved": 200, "B_negation_proved": 200, "C_neither": 200, "wrong": []}


def test_astar_depths_match_naive_fixpoint_on_real_theories(owa_dev):
    questions, _ = owa_dev
    seen = set()
    for q in questions[:120]:
        if q.context in seen:
            continue
        seen.add(q.context)
        ref = naive_depths(q.program)
        d = decide(q.program, q.statement)
        assert d.proved_depth == ref.get(q.statement), q.id


@pytest.mark.parametrize("sentence,expected", [
    ("Bob is cold.", Atom("cold", ("Bob",))),
    ("The bald eagle does not eat the cat.", Atom("not_eats", ("the bald eagle", "the cat"))),
    ("The cat chases the dog.", Atom("chases", ("the cat", "the dog"))),
    ("The bald eagle likes Bob.", Atom("likes", ("the bald eagle", "Bob"))),
    ("Red, cold things are round.", Rule((Atom("red", (X,)), Atom("cold", (X,))), Atom("round", (X,)))),
    ("All quiet people are not rough.", Rule((Atom("quiet", (X,)),), Atom("not_rough", (X,)))),
    ("If something is quiet and not cold then it does not chase the dog.",
     Rule((Atom("quiet", (X,)), Atom("not_cold", (X,))), Atom("not_chases", (X, "the dog")))),
    ("If someone sees the cat and they are not green then they see the cow.",
     Rule((Atom("sees", (X, "the cat")), Atom("not_green", (X,))), Atom("sees", (X, "the cow")))),
    ("If something likes the tiger and the dog likes the cat then it likes the mouse.",
     Rule((Atom("likes", (X, "the tiger")), Atom("likes", ("the dog", "the cat"))), Atom("likes", (X, "the mouse")))),
    ("If something likes the tiger then the tiger visits the dog.",
     Rule((Atom("likes", (X, "the tiger")),), Atom("visits", ("the tiger", "the dog")))),
    ("If Dave is smart and Dave is kind then Dave is quiet.",
     Rule((Atom("smart", ("Dave",)), Atom("kind", ("Dave",))), Atom("quiet", ("Dave",)))),
    ("Tumpuses are wumpuses.", Rule((Atom("tumpus", (X,)),), Atom("wumpus", (X,)))),
    ("Every impus is not angry.", Rule((Atom("impus", (X,)),), Atom("not_angry", (X,)))),
    ("Wren is a tumpus.", Atom("tumpus", ("Wren",))),
    ("If someone is gratrex, they are fitizun.", Rule((Atom("gratrex", (X,)),), Atom("fitizun", (X,)))),
])
def test_templates(sentence, expected):
    got = parse_sentence(sentence)
    if isinstance(expected, Rule):
        assert (got.premises, got.conclusion) == (expected.premises, expected.conclusion)
    else:
        assert got == expected


@pytest.mark.parametrize("bad", ["", "Hello world.", "Bob is", "If it is red then it is big.",
                                 "The cat is very very red.", "All things are."])
def test_unparseable_sentence_names_the_sentence(bad):
    with pytest.raises(SentenceError, match="cannot parse sentence"):
        parse_sentence(bad)


def test_statement_from_question():
    q = "Based on the above information, is the following statement true, false, or unknown? The cat is not round."
    assert parse_statement(q) == Atom("not_round", ("the cat",))


def test_bad_items_are_reported_with_ids_and_the_load_goes_on(tmp_path):
    good = {"id": "ok_1", "context": "Bob is big. Big things are red.", "question": "x? Bob is red.",
            "options": [], "answer": "A"}
    records = [
        {"id": "bad_sentence", "context": "Bob is big. Zorp blah frobnicates wildly.", "question": "x? Bob is big.",
         "options": [], "answer": "A"},
        {"id": "bad_answer", "context": "Bob is big.", "question": "x? Bob is big.", "options": [], "answer": "Q"},
        {"id": "missing_field", "context": "Bob is big."},
        good,
    ]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(records))
    questions, skipped = load_logic_llm(path)
    assert [q.id for q in questions] == ["ok_1"]
    ids = [i for i, _ in skipped]
    assert ids == ["bad_sentence", "bad_answer", "missing_field"]
    assert "Zorp blah frobnicates wildly" in skipped[0][1]
    assert decide(questions[0].program, questions[0].statement).proved_depth == 1


def test_unreadable_file_is_reported(tmp_path):
    questions, skipped = load_logic_llm(tmp_path / "missing.json")
    assert questions == [] and "unreadable file" in skipped[0][1]
    (tmp_path / "garbage.json").write_bytes(b"\xff\xfe not json")
    questions, skipped = load_logic_llm(tmp_path / "garbage.json")
    assert questions == [] and skipped[0][0].endswith("garbage.json")


def test_prontoqa_sentences(shared_data):
    records = json.loads((shared_data / "prontoqa" / "logic_llm_dev.json").read_text())
    right = 0
    for rec in records:
        program, failures = parse_theory_text(rec["context"], theory_id=rec["id"])
        assert failures == []
        d = decide(program, parse_statement(rec["question"]))
        right += d.proved if rec["answer"] == "A" else d.negation_proved
    assert right == len(records) == 500
