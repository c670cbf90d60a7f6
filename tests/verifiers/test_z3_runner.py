"""Z3 runner: result fields, the rule for several check-sat / errors / exit, isolation between calls,
hostile scripts, and agreement with Z3's own expected verdicts on the z3test sample."""

import csv
import os
import pathlib
import time

import pytest

from reasoner.cli.smt import read_script
from reasoner.verifiers import smtlib
from reasoner.verifiers.pool import descendant_pids
from reasoner.verifiers.sandbox import unshare_works
from reasoner.verifiers.z3_runner import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, Z3Runner, parse_output, run_script

FERMAT_CUBES = ("(declare-const x Int)(declare-const y Int)(declare-const z Int)"
                "(assert (> x 2))(assert (> y 2))(assert (> z 2))"
                "(assert (= (+ (* x x x) (* y y y)) (* z z z)))(check-sat)")
FACTOR_4096_BITS = ("(declare-const x (_ BitVec 4096))(declare-const y (_ BitVec 4096))"
                    "(assert (= (bvmul x y) (bvnot (_ bv0 4096))))(assert (bvugt x (_ bv1 4096)))"
                    "(assert (bvugt y (_ bv1 4096)))(assert (bvult x y))(check-sat)")


@pytest.fixture(scope="module")
def runner():
    with Z3Runner(timeout_s=3.0, memory_mb=128, workers=2) as r:
        yield r


def test_defaults_follow_the_paper():
    assert (DEFAULT_TIMEOUT_S, DEFAULT_MEMORY_MB) == (30.0, 256)


def test_sat_with_model_and_unsat(runner):
    sat = runner.solve("(declare-const x Int)(assert (> x 41))(assert (< x 43))(check-sat)(get-model)")
    assert sat.success and sat.sat_result == "sat" and sat.error is None and sat.real_verdict
    assert "define-fun x () Int" in sat.model and "42" in sat.model
    unsat = runner.solve("(declare-const p Bool)(assert p)(assert (not p))(check-sat)")
    assert unsat.to_dict()["sat_result"] == "unsat" and unsat.model is None and unsat.elapsed_s > 0


def test_parser_and_sort_errors_carry_z3_message(runner):
    unknown_constant = runner.solve("(declare-const x Int)(assert (> x y))(check-sat)")
    assert not unknown_constant.success and "unknown constant y" in unknown_constant.error
    sort = runner.solve("(declare-const x Int)(assert (and x true))(check-sat)")
    assert not sort.success and "Sort mismatch" in sort.error
    not_bool = runner.solve("(declare-const x Int)(assert (+ x 1))(check-sat)")
    assert "not Boolean" in not_bool.error
    unbalanced = runner.solve("(declare-const x Int)(assert (> x 0)")
    assert not unbalanced.success and unbalanced.sat_result is None and "line 1" in unbalanced.error


def test_rule_several_check_sat_and_error_after_verdict(runner):
    several = runner.solve("(declare-const x Int)(assert (> x 0))(check-sat)(assert (< x 0))(check-sat)")
    assert several.verdicts == ("sat", "unsat") and several.sat_result == "unsat" and several.success
    after = runner.solve("(declare-const x Int)(assert (> x 0))(check-sat)(assert (> x z))(check-sat)")
    # The second check-sat still runs (Z3 continues after an error); the verdict is kept, success is not.
    assert after.verdicts == ("sat", "sat") and after.sat_result == "sat"
    assert not after.success and "unknown constant z" in after.error and not after.real_verdict
    no_model = runner.solve("(declare-const x Int)(assert (= x 1))(assert (= x 2))(check-sat)(get-model)")
    assert no_model.sat_result == "unsat" and "model is not available" in no_model.error


def test_exit_stops_the_script(runner):
    result = runner.solve("(declare-const x Int)(assert (> x 0))(check-sat)(exit)(assert false)(check-sat)")
    assert result.verdicts == ("sat",) and result.success


def test_global_options_do_not_leak_between_calls():
    """`set-option` changes Z3's global parameters; the runner resets them before every call."""
    leaky = "(set-option :smt.arith.solver 6)(declare-fun a () Real)(check-sat)"
    nonlinear = "(declare-const a Int)(declare-const b Int)(assert (<= (* a b) 8))(assert (> a 3))(check-sat)"
    run_script(leaky, timeout_s=5)
    assert run_script(nonlinear, timeout_s=5).sat_result == "sat"


def test_parse_output_reads_echo_lines_and_models():
    out = parse_output('hello\nsat\n(\n  (define-fun p () Bool\n    true)\n)\n(error "line 3: oops")\n', elapsed_s=0.1)
    assert out.verdicts == ("sat",) and out.error == "line 3: oops" and "define-fun p" in out.model


def _assert_hostile(runner, script, *, max_s):
    before = descendant_pids()
    start = time.monotonic()
    result = runner.solve(script)
    elapsed = time.monotonic() - start
    assert elapsed < max_s, elapsed
    deadline = time.monotonic() + 10
    while descendant_pids() - before - runner.pool.worker_processes():  # a killed worker's replacement
        assert time.monotonic() < deadline, "a process was left behind"   # registers a moment later
        time.sleep(0.05)
    follow_up = runner.solve("(declare-const p Bool)(assert p)(check-sat)")
    assert follow_up.sat_result == "sat" and follow_up.success
    return result


def test_hostile_loop_forever(runner):
    result = _assert_hostile(runner, FERMAT_CUBES, max_s=runner.timeout_s + 1.5)
    assert not result.success and result.sat_result == "unknown" and "timeout" in result.error


def test_hostile_malformed(runner):
    result = _assert_hostile(runner, "(((((assert (declare-const )))) \"unterminated", max_s=2.0)
    assert not result.success and result.error


def test_hostile_ten_megabytes():
    """Two 10 MB scripts, each built so that one outcome must happen whatever the CPU's speed.

    Z3 parses 600,000 asserts in seconds (7.8 s on a 2-core Sapphire Rapids), so a script of them plus an easy
    check-sat would be sat or a timeout depending on the machine. Instead: (1) 10 MB of comment, which Z3's lexer
    skips in milliseconds, around an easy problem: sat, with the 10 MB still shipped to the worker and scanned by
    the file-access guard; (2) 10 MB of asserts ending in Fermat's cubes, which Z3 cannot decide: a timeout, either
    in the parser (the pool's hard deadline) or in the check-sat (Z3's own), and no verdict but `unknown` either way.
    """
    padded = ("(declare-const x Int)\n; " + "x" * 10_000_000 + "\n(assert (> x 41))(assert (< x 43))"
              "(check-sat)(get-model)\n")
    undecidable = "(declare-const w Int)\n" + "(assert (> w 0))\n" * 600_000 + FERMAT_CUBES + "\n"
    assert len(padded) > 10_000_000 and len(undecidable) > 10_000_000
    with Z3Runner(timeout_s=3.0, workers=1) as big:
        sat = _assert_hostile(big, padded, max_s=big.timeout_s + 1.5)
        assert sat.success and sat.verdicts == ("sat",) and "42" in sat.model, sat.error
        slow = _assert_hostile(big, undecidable, max_s=big.timeout_s + 1.5)
    assert not slow.success and slow.sat_result == "unknown" and slow.error.startswith("timeout"), slow.error


def test_hostile_exit_with_garbage_after(runner):
    result = _assert_hostile(runner, "(check-sat)(exit)(this is not smt", max_s=2.0)
    assert result.verdicts == ("sat",) and result.success


def test_z3test_sample_agrees_with_expected(shared_data):
    """>= 56 of 61; the known one: 3123 (does not finish in time with z3 5.4.1); three that set `:trace true`,
    which makes Z3 write z3.log into its working directory, and two that run Z3 in parallel threads (3591 sets
    `:parallel.enable true`; strategy-par-or-2 runs 15 solvers in `par-or`): refused by design, with the option
    or tactic named."""
    folder = shared_data / "smtlib" / "z3test_sample"
    with open(folder / "expected.tsv", newline="") as f:
        expected = {r["file"]: r["expected"] for r in csv.DictReader(f, delimiter="\t")}
    with Z3Runner(timeout_s=5.0, workers=2) as r:
        futures = {name: r.submit(read_script(str(folder / name))) for name in expected}
        results = {name: fut.result() for name, fut in futures.items()}
    refused = {name for name, res in results.items() if (res.error or "").startswith("refused before Z3 ran: :trace ")}
    parallel = {name for name, res in results.items() if (res.error or "").startswith(
        ("refused before Z3 ran: :parallel.enable would make Z3 start threads", "refused before Z3 ran: par-or "))}
    disagree = {name for name in expected if results[name].sat_result != expected[name]} - refused - parallel
    assert len(expected) == 61 and refused == {"3547.smt2", "3559.smt2", "3754.smt2"}
    assert parallel == {"3591.smt2", "strategy-par-or-2.smt2"}
    assert len(disagree) <= 1 and disagree <= {"3123.smt2"}, disagree


JAILED = pytest.mark.skipif(not unshare_works(), reason="unshare --net --pid --mount is not permitted here")
PROBE = "/tmp/z3_escape_probe.txt"
FILE_SCRIPTS = [f'(set-option :regular-output-channel "{PROBE}")(check-sat)',
                f'(set-option :diagnostic-output-channel "{PROBE}")(check-sat)',
                f'(include "{PROBE}")(check-sat)',
                f'(set-option :DIAGNOSTIC_output-channel "{PROBE}")(check-sat)',
                f'(check-sat-using (using-params smt :solver.proof.log "{PROBE}"))',
                '(set-option :trace true)(check-sat)',
                # Z3 rejects a backslash in |...| and reads on from elsewhere: it hid this set-option from the scan
                f'(set-info :source |a\\| |)\n(set-option :regular-output-channel "{PROBE}")\n; |\n(check-sat)',
                f'(|include| "{PROBE}")(check-sat)'] + [
    f'(set-option :{name} "{PROBE}")(check-sat)' for name in sorted(smtlib.FILE_OPTIONS)]


@pytest.mark.parametrize("script", FILE_SCRIPTS)
def test_file_touching_options_are_refused_before_z3(runner, script):
    result = runner.solve(script)
    assert not result.success and result.sat_result is None and result.error.startswith("refused before Z3 ran")
    assert not os.path.exists(PROBE)


def test_harmless_options_and_symbols_named_like_commands_run():
    for script in ("(set-option :produce-proofs true)(check-sat)", "(declare-const include Int)(check-sat)",
                   '(echo ":regular-output-channel")(check-sat)', "; (include \"x\")\n(check-sat)"):
        assert run_script(script, timeout_s=5).verdicts == ("sat",), script


def test_nul_a_symbol_named_memout_and_huge_outputs_get_their_own_answers(runner):
    """An echoed verdict word is refused (it read as a check-sat's answer before an error). A NUL would end the script for Z3 while curation grades the whole text: refused. An unknown constant named
    `memout` is an ordinary error, not a memory-out that kills the worker. A 4 MB output is cut to
    MAX_OUTPUT_CHARS in the result, its verdicts read first."""
    from reasoner.verifiers.z3_runner import MAX_OUTPUT_CHARS

    forged = run_script('(declare-const x Int)(echo "unsat")(assert (> x undeclared))(check-sat)', timeout_s=5)
    assert not forged.success and forged.verdicts == () and forged.error.startswith(
        'refused before Z3 ran: (echo "unsat") would print a verdict no check-sat gave')
    assert run_script('(echo "x\nSAT ")(check-sat)', timeout_s=5).error.startswith("refused")  # a line of it
    assert run_script('(echo "unsatisfiable, we expect")(check-sat)', timeout_s=5).verdicts == ("sat",)
    nul = run_script("(assert false)(check-sat)\x00(declare-const a Bool)(assert a)(check-sat)", timeout_s=5)
    assert not nul.success and nul.error.startswith("refused before Z3 ran: a NUL character at offset 25")
    named = runner.solve("(declare-const x Int)(assert (> x memout))(check-sat)")
    assert named.error.endswith("unknown constant memout") and runner.pool.stats()["memory_kills"] == 0
    doubling = "(define-fun s0 () String \"abcdefghijklmnop\")" + "".join(
        f"(define-fun s{i} () String (str.++ s{i - 1} s{i - 1}))" for i in range(1, 19))
    big = run_script(doubling + "(check-sat)(simplify s18)", timeout_s=20)  # 16 x 2^18 = 4 MB of output
    assert big.verdicts == ("sat",) and MAX_OUTPUT_CHARS < len(big.output) < MAX_OUTPUT_CHARS + 64
    assert big.output.endswith("characters]") and "[truncated: " in big.output


def test_memout_hidden_by_get_model_is_detected_and_the_worker_recycled():
    with Z3Runner(timeout_s=10.0, memory_mb=64, workers=1) as small:
        first = small.pool.worker_pids()
        oom = _assert_hostile(small, FACTOR_4096_BITS + "(get-model)(echo \"done\")", max_s=small.timeout_s + 1.5)
        assert oom.error.startswith("memory:") and "out of memory" in oom.error, oom
        assert small.pool.stats()["memory_kills"] == 1 and small.pool.stats()["restarts"] == 1
        assert small.pool.worker_pids() != first
        innocent = [small.submit(f"(declare-const x Int)(assert (= x {i}))(check-sat)(get-model)") for i in range(20)]
        assert [f.result().sat_result for f in innocent] == ["sat"] * 20
        again = small.solve(FACTOR_4096_BITS)  # the same script meets the same absolute cap again
        assert again.error.startswith("memory:"), again


@JAILED
def test_z3_workers_run_in_the_jail():
    from tests.verifiers import z3_unguarded  # noqa: F401 - importable by the workers too

    with Z3Runner(timeout_s=5.0, workers=1, isolate="strict") as jailed:
        assert jailed.pool.isolation() == {"netns+pidns+mountns": True, "uid": True, "rlimits": True, "seccomp": True}
        (pid,) = jailed.pool.worker_pids()
        with open(f"/proc/{pid}/status") as f:
            assert "Uid:\t65534\t65534\t65534\t65534" in f.read()
        pool = jailed.pool
        who = pool.submit("tests.verifiers.z3_unguarded:identity").result()
        # nobody; of the host's /work and /tmp only the checkout's own top folder shows (read-only), the rest is hidden
        repo = pathlib.Path(__file__).resolve().parents[2]
        top = {base: [repo.relative_to(base).parts[0]] if repo.is_relative_to(base) else [] for base in ("/work", "/tmp")}
        assert who.ok and who.value == [65534, 65534, top["/work"], top["/tmp"]], who
        for path in ("/work/z3_escape_probe.txt", "/root/z3_escape_probe.txt"):
            wrote = pool.submit("tests.verifiers.z3_unguarded:write_file", path).result()
            # read-only where the path is exposed to the jail (a checkout under /work), absent where it is hidden
            # (a checkout elsewhere, as in CI's fresh clone): either way the write fails and nothing reaches the host
            assert wrote.value in ("OSError: Read-only file system", "OSError: No such file or directory"), wrote
            assert not os.path.exists(path)
        channel = f'(set-option :regular-output-channel "/work/z3_escape_probe.txt")(check-sat)'
        unguarded = pool.submit("tests.verifiers.z3_unguarded:eval_unguarded", channel).result()
        assert unguarded.ok and not os.path.exists("/work/z3_escape_probe.txt"), unguarded
        include = pool.submit("tests.verifiers.z3_unguarded:eval_unguarded", '(include "/etc/shadow")').result()
        assert "could not open" in include.value or "error" in include.value, include
        assert jailed.solve("(declare-const x Int)(assert (> x 1))(check-sat)").sat_result == "sat"


def test_runner_arguments_are_checked():
    for bad in ({"timeout_s": -5}, {"memory_mb": 0}, {"workers": 0}):
        with pytest.raises(ValueError, match="must be a positive number"):
            Z3Runner(**bad)
