"""Raw ProofWriter loader: QDep on the real CWA sample, the OWA polarity encoding, NAF handling, bad input."""

import json

import pytest

from reasoner.data.proofwriter_examples import FilterReport, raw_records
from reasoner.data.proofwriter_raw import LoadReport, load_raw, parse_representation
from search.astar import shortest_depth
from search.logic import Atom
from tests.data.reference import naive_depths


@pytest.fixture(scope="session")
def cwa_mini(shared_data):
    report = LoadReport()
    theories = load_raw(shared_data / "proofwriter" / "raw_cwa_mini.jsonl", report=report)
    return theories, report


def test_shortest_depth_equals_qdep_for_proofs_without_naf(cwa_mini, shared_data):
    theories, report = cwa_mini
    # Count the eligible questions straight from the file, independently of the loader.
    expected = 0
    for line in (shared_data / "proofwriter" / "raw_cwa_mini.jsonl").read_text().splitlines():
        for q in json.loads(line)["questions"].values():
            expected += q["strategy"] in ("proof", "inv-proof") and "NAF" not in q["proofs"]
    checked = 0
    for theory in theories:
        ref = naive_depths(theory.program)
        for q in theory.questions:
            if q.strategy not in ("proof", "inv-proof"):
                continue
            depth = shortest_depth(theory.program, q.provable_goal)
            assert depth == q.qdep == ref[q.provable_goal], q.id
            checked += 1
    assert checked == expected == 11


def test_naf_is_skipped_and_counted(cwa_mini):
    theories, report = cwa_mini
    assert report.naf_questions == 1
    assert ("RelNeg-CWA-D2-1420_Q4", "proof needs negation as failure (CWA)") in report.skipped
    rel = next(t for t in theories if t.id == "RelNeg-CWA-D2-1420")
    assert rel.dropped_naf_rules == ("rule3", "rule6") and report.naf_rules == 2
    assert [r.name for r in rel.program.rules] == ["rule1", "rule2", "rule4", "rule5"]


def test_filter_keeps_provable_goals_of_depth_at_least_min(cwa_mini):
    theories, _ = cwa_mini
    report = FilterReport()
    assert list(raw_records(theories, min_depth=3, report=report)) == []  # a depth-2 sample: nothing survives
    kept = list(raw_records(theories, min_depth=2, report=FilterReport()))
    assert sorted(r["id"] for r in kept) == ["AttNoneg-CWA-D2-1286_Q5", "AttNoneg-CWA-D2-1286_Q6",
                                             "RelNeg-CWA-D2-1420_Q5", "RelNeg-CWA-D2-1420_Q6"]
    assert report.counts["kept"] == 0 and report.counts["too_shallow"] == 11
    assert report.counts["not_provable"] == 12  # CWA answers resting on failure


def _owa_theory(tid="RelNeg-OWA-D3-7"):
    return {
        "id": tid, "theory": "...",
        "triples": {"triple1": {"representation": '("Bob" "is" "big" "+")'},
                    "triple2": {"representation": '("bald eagle" "likes" "Bob" "-")'}},
        "rules": {
            "rule1": {"representation": '((("something" "is" "big" "+")) -> ("something" "is" "red" "-"))'},
            "rule2": {"representation": '((("something" "is" "red" "-") ("bald eagle" "likes" "Bob" "-")) -> '
                                        '("something" "chases" "bald eagle" "+"))'},
            "rule3": {"representation": '((("Bob" "chases" "bald eagle" "+")) -> ("bald eagle" "is" "cold" "+"))'},
        },
        "questions": {
            "Q1": {"question": "The bald eagle is cold.", "answer": True, "QDep": 3, "strategy": "proof",
                   "representation": '("bald eagle" "is" "cold" "+")', "proofs": "[...]"},
            "Q2": {"question": "Bob is red.", "answer": False, "QDep": 1, "strategy": "inv-proof",
                   "representation": '("Bob" "is" "red" "+")', "proofs": "[...]"},
            "Q3": {"question": "Bob is kind.", "answer": "Unknown", "QDep": 0, "strategy": "rconc",
                   "representation": '("Bob" "is" "kind" "+")', "proofs": "[]"},
        },
    }


def test_owa_negation_becomes_polarity_tagged_predicates(tmp_path):
    path = tmp_path / "meta-dev.jsonl"
    path.write_text(json.dumps(_owa_theory()) + "\n")
    (theory,) = load_raw(path)
    assert theory.world == "OWA"
    assert theory.program.axioms == (Atom("big", ("Bob",)), Atom("not_likes", ("the bald eagle", "Bob")))
    r2 = theory.program.rules[1]
    assert r2.premises == (Atom("not_red", ("?x",)), Atom("not_likes", ("the bald eagle", "Bob")))
    assert r2.conclusion == Atom("chases", ("?x", "the bald eagle"))
    q1, q2, q3 = theory.questions
    assert shortest_depth(theory.program, q1.provable_goal) == q1.qdep == 3
    assert q2.provable_goal == Atom("not_red", ("Bob",)) and shortest_depth(theory.program, q2.provable_goal) == 1
    assert q3.answer is None and q3.provable_goal is None


def test_bad_lines_theories_and_questions_are_reported_and_loading_continues(tmp_path):
    broken_rule = _owa_theory("Bad-OWA-1")
    broken_rule["rules"]["rule1"]["representation"] = '((("something" "is" "big")) -> '
    broken_question = _owa_theory("Half-OWA-2")
    broken_question["questions"]["Q2"]["answer"] = "maybe"
    lines = [json.dumps(broken_rule), "{not json", "[1, 2]", json.dumps(broken_question), json.dumps(_owa_theory())]
    path = tmp_path / "meta-train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report = LoadReport()
    theories = load_raw([path, tmp_path / "meta-missing.jsonl"], report=report)
    assert [t.id for t in theories] == ["Half-OWA-2", "RelNeg-OWA-D3-7"]
    assert len(theories[0].questions) == 2
    ids = [i for i, _ in report.skipped]
    assert ids == ["Bad-OWA-1", f"{path}:2", f"{path}:3", "Half-OWA-2_Q2", str(tmp_path / "meta-missing.jsonl")]
    assert "unreadable file" in report.skipped[-1][1]


@pytest.mark.parametrize("bad", ['("a" "is"', '("a")) ', '("a" "is" "b" "+") ("c")', "(a b)"])
def test_representation_errors_are_clear(bad):
    with pytest.raises(ValueError, match="representation"):
        parse_representation(bad)


def test_english_parser_agrees_with_the_raw_representations(cwa_mini):
    """Two independent readings of the same real theories: the English sentences vs the S-expressions."""
    from reasoner.data.proofwriter_english import parse_statement, parse_theory_text

    theories, _ = cwa_mini
    for theory in theories:
        program, failures = parse_theory_text(theory.text, theory_id=theory.id)
        assert failures == []
        assert set(program.axioms) == set(theory.program.axioms)
        # CWA rules with "not" premises are NAF in the raw loader (dropped); English reads them as not_ premises.
        english_rules = [(r.premises, r.conclusion) for r in program.rules
                         if not any(p.predicate.startswith("not_") for p in r.premises)]
        assert english_rules == [(r.premises, r.conclusion) for r in theory.program.rules]
        for q in theory.questions:
            assert parse_statement(q.text) == q.statement, q.id
