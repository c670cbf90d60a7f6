"""Property tests: arbitrary input makes the parsers report, never crash with anything but their documented error."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from reasoner.data.proofwriter_english import SentenceError, load_logic_llm, parse_sentence, parse_theory_text
from reasoner.data.proofwriter_raw import LoadReport, parse_representation, parse_theory
from search.logic import Atom, Rule

WORDS = st.sampled_from(["If", "if", "something", "someone", "it", "they", "is", "are", "not", "and", "then", "the",
                         "cat", "Bob", "All", "things", "people", "red", "sees", "see", "does", "do", ",", ".",
                         "Every", "a", "tumpus", "Tumpuses", "?", ""])
SENTENCES = st.one_of(st.text(max_size=60), st.lists(WORDS, max_size=12).map(" ".join))


@settings(max_examples=400, deadline=None)
@given(SENTENCES)
def test_sentence_parser_returns_or_raises_sentence_error(text):
    try:
        out = parse_sentence(text)
    except SentenceError as err:
        assert "cannot parse sentence" in str(err)
    else:
        assert isinstance(out, (Atom, Rule))
        if isinstance(out, Atom):
            assert out.is_ground


@settings(max_examples=100, deadline=None)
@given(st.lists(SENTENCES, max_size=6))
def test_theory_parser_reports_each_failure(sentences):
    text = " ".join(s.strip().rstrip(".") + "." for s in sentences)
    program, failures = parse_theory_text(text, theory_id="T")
    assert all(tid == "T" for tid, _ in failures)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: (st.lists(inner, max_size=4)
                                   | st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                    max_leaves=20)


@settings(max_examples=100, deadline=None)
@given(JSON)
def test_logic_llm_loader_never_raises(tmp_path_factory, value):
    path = tmp_path_factory.mktemp("ll") / "x.json"
    path.write_text(json.dumps(value))
    questions, skipped = load_logic_llm(path)
    assert isinstance(questions, list) and isinstance(skipped, list)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='()"->abc +~ ', max_size=40))
def test_representation_parser_raises_only_value_error(text):
    try:
        parse_representation(text)
    except ValueError:
        pass


@settings(max_examples=100, deadline=None)
@given(JSON)
def test_raw_theory_parser_reports_instead_of_raising(value):
    report = LoadReport()
    obj = value if isinstance(value, dict) else {"id": "X", "triples": value}
    parse_theory(obj, report=report)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["triples", "rules", "questions", "rule1", "Q1", "representation", "answer", "QDep"]), JSON)
def test_corrupted_real_shaped_theory_is_reported_not_raised(where, value):
    from tests.data.test_proofwriter_raw import _owa_theory

    obj = _owa_theory()
    if where in ("triples", "rules", "questions"):
        obj[where] = value
    elif where == "rule1":
        obj["rules"]["rule1"] = value
    elif where == "Q1":
        obj["questions"]["Q1"] = value
    elif where == "representation":
        obj["rules"]["rule2"]["representation"] = value
    else:
        obj["questions"]["Q2"][where] = value
    report = LoadReport()
    theory = parse_theory(obj, report=report)
    assert theory is not None or report.skipped[0][0] == "RelNeg-OWA-D3-7"
