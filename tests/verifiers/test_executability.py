"""What counts as an executable SMT call (`curation.call_outcome`), checked on Z3's own outputs.

Each script is run by real Z3 (`z3_runner.run_script`, the pool worker's function, in this process) and its
Z3Result is turned into the scratchpad's observation record; curation, `smt_metrics` and the K-sample summary
must all read it by the same rule: executable iff Z3 reached sat/unsat before the script's first failure.
"""

import pytest

from reasoner.agents.scratchpad import Trajectory
from reasoner.metrics.smt import skeleton, smt_metrics
from reasoner.metrics.smt_eval import smt_eval_summary
from reasoner.verifiers.curation import call_attributes, call_outcome, curate
from reasoner.verifiers.z3_runner import run_script

ENTITIES = {"max", "sour", "wumpus"}
HEAD = "(declare-sort E 0)(declare-const max E)(declare-fun sour (E) Bool)(declare-fun wumpus (E) Bool)\n"
SCRIPTS = {  # name: (script, Z3's printed output as seen on z3-solver 4.x, executable, verdict of the call)
    "unsat_then_get_model": (
        HEAD + "(assert (forall ((x E)) (=> (wumpus x) (sour x))))(assert (wumpus max))(assert (not (sour max)))"
               "(check-sat)(get-model)",
        ["unsat", '(error "'], True, "unsat"),
    "error_then_check_sat": (
        HEAD + "(assert (wumpus bob))(assert (sour max))(check-sat)",
        ['(error "', "sat"], False, None),
    "sat_then_bad_command": (
        HEAD + "(assert (wumpus max))(assert (sour max))(check-sat)(assert (bitter max))",
        ["sat", '(error "'], True, "sat"),
    "sat_error_then_unsat": (  # the unsat after the error is about a script with the bad assertion dropped
        HEAD + "(assert (sour max))(check-sat)(assert (and (not (sour max)) (bitter max)))(check-sat)"
               "(assert (not (sour max)))(check-sat)",
        ["sat", '(error "', "sat", "unsat"], True, "sat"),
    "unknown_then_error": (  # E-matching without MBQI, stopped after 10 instances, cannot decide this; (get-proof)
        # then fails. Without the cap Z3 instantiates until its timeout, and a timeout ends the script (z3_runner)
        "(set-option :smt.mbqi false)(set-option :smt.qi.max_instances 10)(declare-fun f (Int) Int)(assert (forall ((x Int)) (> (f x) (f (+ x 1)))))"
        "(check-sat)(get-proof) ; max sour wumpus",
        ["unknown", '(error "'], False, "unknown"),
    "clean_unsat": (
        HEAD + "(assert (wumpus max))(assert (not (wumpus max)))(check-sat)",
        ["unsat"], True, "unsat"),
}


def _record(name: str) -> dict:
    """The scratchpad's observation record of one real Z3 run (`scratchpad._SolverCall.result`'s fields)."""
    code = SCRIPTS[name][0]
    r = run_script(code, timeout_s=10)
    return {"tool": "z3_solve", "turn": 0, "smt_code": code, "timeout_s": 10, "success": r.success,
            "sat_result": r.sat_result, "error": r.error, "output": r.output, "model": r.model,
            "elapsed_s": r.elapsed_s}


def _trajectory(record: dict, *, correct: bool = True) -> Trajectory:
    return Trajectory(problem_id="p", messages=[{"role": "user", "content": "Is Max sour?"}], observations=[record],
                      answer="A", verified=True, termination="finish", turns=2, correct=correct)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_rule_on_z3_outputs(name):
    _, printed, executable, verdict = SCRIPTS[name]
    record = _record(name)
    lines = [line for line in record["output"].splitlines() if line.strip()]
    assert [line if not line.startswith('(error "') else '(error "' for line in lines] == printed  # Z3's own order
    assert record["success"] is (len(printed) == 1)  # the runner's contract is unchanged: any error -> False
    assert call_outcome(record) == (executable, verdict)
    attrs = call_attributes(record, ENTITIES)
    assert attrs.executable is executable and attrs.verdict == verdict
    assert attrs.real_verdict is (executable and verdict in ("sat", "unsat"))
    assert skeleton(_trajectory(record)) == f"z3:{verdict if executable else 'error'}>finish"


def test_curation_and_metrics_agree():
    """A refutation followed by (get-model) is Gold evidence and counts in vcr / vcr_unsat everywhere; a verdict
    reached after an error is no evidence (the call is Rejected as not executable)."""
    refutation, after_error = _record("unsat_then_get_model"), _record("error_then_check_sat")
    assert curate(_trajectory(refutation), ENTITIES).label == "gold"
    rejected = curate(_trajectory(after_error), ENTITIES)
    assert rejected.label == "rejected" and rejected.reasons == ("no_executable_smt",)
    undecided = curate(_trajectory(_record("unknown_then_error")), ENTITIES)
    assert undecided.label == "rejected" and undecided.reasons == ("no_executable_smt",)

    trajectories = [_trajectory(refutation), _trajectory(after_error), _trajectory(_record("sat_then_bad_command"))]
    metrics = smt_metrics(trajectories, {"p": ENTITIES})
    assert metrics["vcr"] == pytest.approx(2 / 3) and metrics["vcr_unsat"] == pytest.approx(1 / 3)
    assert metrics["error_rate"] == pytest.approx(1 / 3) and metrics["first_pass_validity"] == pytest.approx(2 / 3)
    assert metrics["verdict_distribution"] == pytest.approx(
        {"sat": 1 / 3, "unsat": 1 / 3, "unknown": 0.0, "error": 1 / 3, "none": 0.0})
    assert metrics["wasted_turns"] == pytest.approx(1 / 3)  # only the non-executable call's turn is wasted
    summary = smt_eval_summary(trajectories, k=3, answers={id(t): "A" for t in trajectories}, gold={"p": "A"},
                               entities={"p": ENTITIES}, max_turns=2, n_resamples=10)
    assert summary["vcr"] == metrics["vcr"] and summary["vcr_unsat"] == metrics["vcr_unsat"]


def test_failures_without_printed_errors():
    """Timeouts, pool failures and refusals: no verdict before the failure unless Z3 printed one."""
    timeout = {"success": False, "sat_result": "unknown", "error": "timeout: Z3 gave up (timeout)",
               "output": "unknown\n"}
    assert call_outcome(timeout) == (False, "unknown")
    assert call_outcome(timeout | {"output": "unsat\nunknown\n"}) == (True, "unsat")  # decided, then gave up
    assert call_outcome({"success": False, "sat_result": "unknown", "error": "timeout: killed", "output": ""}) == (
        False, "unknown")
    assert call_outcome({"success": False, "sat_result": None, "error": "refused before Z3 ran", "output": ""}) == (
        False, None)
    assert call_outcome({"success": False, "sat_result": None, "error": "z3_solve needs smt_code"}) == (False, None)
