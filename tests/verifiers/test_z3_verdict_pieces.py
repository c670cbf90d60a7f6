"""Z3 runner, run piece by piece: a timeout cannot be hidden by a later (reset) and check-sat, verdicts are only
what check-sat commands printed, and the output is, line for line, what Z3 prints for the whole script."""

import glob

import pytest

from reasoner.cli.smt import read_script
from reasoner.verifiers import smtlib
from reasoner.verifiers.curation import call_outcome
from reasoner.verifiers.z3_runner import Z3Runner, run_script

FERMAT_CUBES = ("(declare-const x Int)(declare-const y Int)(declare-const z Int)"
                "(assert (> x 2))(assert (> y 2))(assert (> z 2))"
                "(assert (= (+ (* x x x) (* y y y)) (* z z z)))(check-sat)")


def whole_script_output(smt_code: str, *, timeout_s: float = 5.0, memory_mb: int = 256) -> str:
    """The reference: what Z3 prints for the whole script in one evaluation, with the runner's parameters."""
    import z3

    z3.Z3_global_param_reset_all()
    z3.set_param("timeout", int(timeout_s * 1000))
    z3.set_param("memory_max_size", memory_mb)
    context = z3.Context()
    try:
        return z3.Z3_eval_smtlib2_string(context.ref(), smt_code)
    except z3.Z3Exception as err:
        return err.value.decode() if isinstance(err.value, bytes) else str(err.value)


@pytest.mark.parametrize("after", ["(reset)(check-sat)", "(reset)(declare-const a Bool)(assert a)(check-sat)",
                                   "(reset-assertions)(check-sat)", "(assert false)(check-sat)",
                                   "(push)(pop)(check-sat)"])
def test_a_timeout_is_not_hidden_by_what_follows(after):
    # Z3 itself reads on: its last verdict is the later one, a real sat/unsat standing in for the timeout
    reference = whole_script_output(FERMAT_CUBES + after, timeout_s=1.0)
    assert reference.splitlines()[0] == "unknown" and reference.splitlines()[-1] in ("sat", "unsat", "unknown")
    result = run_script(FERMAT_CUBES + after, timeout_s=1.0)
    assert not result.success and not result.real_verdict
    assert result.sat_result == "unknown" and result.verdicts == ("unknown",), result
    assert result.error.startswith("timeout") and result.reason_unknown == "timeout"
    assert result.output == "unknown\n"  # the script ended at the check-sat that gave up


def test_the_pool_reports_the_timeout_too():
    with Z3Runner(timeout_s=1.0, workers=1, isolate="off") as runner:
        result = runner.solve(FERMAT_CUBES + "(reset)(check-sat)")
    assert result.sat_result == "unknown" and result.error.startswith("timeout"), result


def test_an_unknown_that_is_not_a_timeout_does_not_end_the_script():
    script = "(declare-const x Int)(assert (> x 0))(check-sat-using fail)(check-sat)"
    result = run_script(script, timeout_s=5.0)
    assert result.verdicts == ("unknown", "sat") and result.success and result.real_verdict
    assert result.output == whole_script_output(script)


@pytest.mark.parametrize("script", ["(declare-const sat Bool)(simplify sat)",
                                    "(declare-const sat Bool)(simplify sat)(assert undeclared)(check-sat)",
                                    "(declare-const x Int)(check-sat)(declare-const unsat Bool)(display unsat)(assert y)",
                                    "(declare-const unknown Bool)(assert unknown)(check-sat)(simplify unknown)"])
def test_a_verdict_line_printed_by_another_command_fails_the_call(script):
    """Z3 prints `sat` for a (simplify sat): read as a verdict, it made a script without check-sat a real verdict
    and, before an error, gold evidence for curation."""
    reference = whole_script_output(script)
    said = [line for line in reference.splitlines() if line in ("sat", "unsat", "unknown")]
    assert len(said) > script.count("(check-sat)")
    result = run_script(script, timeout_s=5.0)
    assert not result.success and result.error.startswith("refused while Z3 ran: a command other than check-sat")
    assert len(result.verdicts) <= script.count("(check-sat)") and reference.startswith(result.output)
    assert call_outcome(result.to_dict())[0] is False


def test_a_verdict_line_inside_an_error_message_is_not_a_verdict():
    script = "(assert |a\nunsat\nb|)(check-sat)"
    reference = whole_script_output(script)
    assert "unsat" in reference.splitlines()
    result = run_script(script, timeout_s=5.0)
    assert result.output == reference and result.verdicts == ("sat",) and call_outcome(result.to_dict()) == (False, None)


SCRIPTS = ["(assert x)", "(check-sat)(assert x)", "(check-sat)\n  (assert\n x)", '(check-sat)(assert "é" x)',
           "(check-sat) (CHECK-SAT)", "(check-sat)\n (check-sat) (CHECK-SAT)", "(check-sat))(check-sat)",
           "(check-sat)(assert true", "a (check-sat) b\n c (check-sat-assuming (q)) (get-model)",
           "(set-option :print-success true)(check-sat)(declare-const a Int)(check-sat)",
           "(declare-const x Int)(assert (> x 0))(check-sat-using skip)(assert y) (check-sat-using fail)(assert z)\n"
           "(assert w)", "(declare-const é Int)(check-sat)\n(assert (> é 1))(check-sat)(assert é)",
           "(|check-sat|)(assert q)(check-sat)(exit)(assert r)(check-sat)", "(check-sat) ; (check-sat)\n(assert v)",
           '(echo "(check-sat)")(check-sat)(echo "a"', "(declare-rel p ())(rule p)(query p)(assert u)",
           "(exit 1)(check-sat)", "(exit (a))(check-sat)", "(check-sat)(exit ; c\n)(check-sat)", "(|exit|)(check-sat)"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_output_and_error_positions_are_those_of_the_whole_script(script):
    assert run_script(script, timeout_s=5.0).output == whole_script_output(script)


def test_output_on_the_z3test_sample_is_that_of_the_whole_script(shared_data):
    """Every sample script that Z3 decides within the limits prints the same text run whole or in pieces."""
    compared = 0
    for path in sorted(glob.glob(str(shared_data / "smtlib" / "z3test_sample" / "*.smt2"))):
        script = read_script(path)
        try:
            result = run_script(script, timeout_s=5.0)
        except MemoryError:  # needs more than 256 MB
            continue
        if (result.error or "").startswith("refused before Z3 ran"):  # :trace, :parallel.enable, par-or
            continue
        if result.reason_unknown in ("timeout", "canceled"):
            continue
        assert result.output == whole_script_output(script), path
        compared += 1
    assert compared >= 50


def test_pieces_join_to_the_script_up_to_exit():
    script = "a (assert x)(check-sat) ; c\n(|check-sat|)((check-sat))(exit)(check-sat)"
    pieces = smtlib.verdict_pieces(script)
    assert [(script[a:b], c) for a, b, c in pieces] == [
        ("a (assert x)", None), ("(check-sat)", "check-sat"), (" ; c\n", None), ("(|check-sat|)", "check-sat"),
        ("((check-sat))(exit)", None)]
    unterminated = '(check-sat)(echo "(check-sat)'
    assert [c for _, _, c in smtlib.verdict_pieces(unterminated)] == ["check-sat", None]
    assert smtlib.verdict_pieces("") == []


def test_a_forged_verdict_after_a_huge_output_keeps_the_output_cap():
    doubling = "(define-fun s0 () String \"abcdefghijklmnop\")" + "".join(
        f"(define-fun s{i} () String (str.++ s{i - 1} s{i - 1}))" for i in range(1, 19))
    script = doubling + "(check-sat)(simplify s18)(check-sat)(declare-const sat Bool)(simplify sat)"
    assert len(whole_script_output(script, timeout_s=20)) > 4_000_000  # 16 x 2^18 characters before the 'sat'
    result = run_script(script, timeout_s=20)
    assert result.error.startswith("refused while Z3 ran") and "[truncated: " in result.output
    assert len(result.output) < 70_000
