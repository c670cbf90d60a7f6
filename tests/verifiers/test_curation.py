"""Curation edge cases: entity extraction, grounding bounds, the Silver fallback reason, bad inputs."""

import pytest

from reasoner.agents.scratchpad import Trajectory
from reasoner.metrics.smt import smt_metrics
from reasoner.tasks.logic_llm import check_correct, load_problems
from reasoner.verifiers.curation import LAMBDA_GND, curate, dpo_pairs, grounding, problem_entities, singular


@pytest.mark.parametrize("word,stem", [("jompuses", "jompus"), ("ponies", "pony"), ("cats", "cat"),
                                       ("glasses", "glass"), ("boxes", "box"), ("bus", "bus"), ("is", "is")])
def test_singular(word, stem):
    assert singular(word) == stem


def test_proofwriter_entities_and_answers(shared_data):
    problem = load_problems(shared_data, "proofwriter", limit=1)[0]
    entities = problem_entities(problem.context, problem.question)
    assert {"bob", "charlie", "dave", "fiona", "cold", "quiet", "red", "smart", "kind", "rough", "round"} == entities
    assert problem.answer == "A" and check_correct("True", problem) and not check_correct("Unknown", problem)
    assert LAMBDA_GND == 0.25
    assert grounding("(declare-const x Int)", set()) == 0.0
    assert grounding("(assert (and (kind charlie) (red bob)))", entities) == pytest.approx(4 / 11)
    assert grounding("; charlie\n(assert (kind bob))", entities, without_comments=True) == pytest.approx(2 / 11)


def _traj(observations, *, correct=True, termination="finish"):
    return Trajectory(problem_id="p", messages=[{"role": "user", "content": "q"}],
                      observations=[{"tool": "z3_solve", "turn": i, "elapsed_s": 0.0, **o}
                                    for i, o in enumerate(observations)],
                      answer="A", verified=termination == "finish", termination=termination,
                      turns=len(observations) + 1, correct=correct)


def test_silver_when_no_single_call_is_evidence():
    entities = {"alpha", "beta", "gamma", "delta"}
    grounded_but_trivial = {"smt_code": "; alpha beta\n(check-sat)", "success": True, "sat_result": "sat", "error": None}
    nontrivial_ungrounded = {"smt_code": "(declare-const p Bool)(assert p)(check-sat)", "success": True,
                             "sat_result": "sat", "error": None}
    result = curate(_traj([grounded_but_trivial, nontrivial_ungrounded]), entities)
    assert result.label == "silver" and result.reasons == ("no_single_evidence_call",)
    unknown_only = {"smt_code": "(declare-const alpha Bool)(assert alpha)(check-sat)", "success": True,
                    "sat_result": "unknown", "error": None}
    assert curate(_traj([unknown_only]), entities).reasons == ("no_real_verdict",)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="trajectory p: correct is unset"):
        curate(_traj([], correct=None), set())
    with pytest.raises(ValueError, match="2 trajectories but 1 curation results"):
        dpo_pairs([_traj([]), _traj([])], [curate(_traj([]), set())])
    with pytest.raises(ValueError, match="needs `correct` set"):
        smt_metrics([_traj([], correct=None)], {})


def test_verdict_distribution_separates_errors_timeouts_and_no_verdict():
    calls = [{"smt_code": "(declare-const a Bool)(assert a)(check-sat)", "success": True, "sat_result": "sat", "error": None},
             {"smt_code": "(declare-const a Bool)(assert a)", "success": True, "sat_result": None, "error": None},
             {"smt_code": "(assert (> x", "success": False, "sat_result": None, "error": "parse"},
             {"smt_code": "(check-sat)", "success": False, "sat_result": "unknown", "error": "timeout: ..."}]
    metrics = smt_metrics([_traj(calls)], {"p": {"alpha"}})
    assert metrics["verdict_distribution"] == {"sat": 0.25, "unsat": 0.0, "unknown": 0.25, "error": 0.25, "none": 0.25}
    assert metrics["error_rate"] == 0.5 and metrics["no_verdict_rate"] == 0.75


def test_metrics_of_no_attempts_are_none():
    metrics = smt_metrics([], {})
    assert metrics["attempts"] == 0 and metrics["vcr"] is None and metrics["error_rate"] is None
    assert metrics["structural_divergence"]["across"] is None
