"""Z3 runner: `(set-option :error-behavior immediate-exit)` makes Z3 call exit() at the script's first error, which
ended the pool worker (a crash and a restart per call) or the caller's own process (`run_script` in process, as
`entailment.classify` without a runner). Such scripts are refused by name; `continued-execution` still runs.
Also here: a script with a lone surrogate is refused, not raised out of `run_script`."""

import pytest

from reasoner.verifiers.pool import VerifierPool
from reasoner.verifiers.z3_runner import Z3Runner, run_script

EXITING = "(set-option :error-behavior immediate-exit)(assert undeclared)(check-sat)"


def test_unguarded_z3_exits_the_worker():
    """The reference: Z3 itself, past the guard, ends the worker process (its call is a crash)."""
    with VerifierPool(workers=1, deadline_s=10.0) as pool:
        result = pool.submit("tests.verifiers.z3_unguarded:eval_unguarded", EXITING).result()
        assert result.outcome == "crash" and "exit status 1" in result.error, result


@pytest.mark.parametrize("written", ["immediate-exit", "|immediate-exit|"])
def test_immediate_exit_is_refused_and_the_worker_lives(written):
    script = EXITING.replace("immediate-exit", written)
    with Z3Runner(timeout_s=5.0, workers=1, isolate="off") as runner:
        before = runner.pool.worker_pids()
        result = runner.solve(script)
        assert result.error.startswith(f"refused before Z3 ran: :error-behavior {written} would make Z3 exit")
        assert runner.pool.worker_pids() == before and runner.pool.stats()["crashes"] == 0
    assert run_script(script).error.startswith("refused")  # in this process too: it is still alive to check


def test_continued_execution_still_runs():
    result = run_script("(set-option :error-behavior continued-execution)(assert undeclared)(check-sat)")
    assert result.verdicts == ("sat",) and "unknown constant undeclared" in result.error


def test_a_lone_surrogate_is_refused_not_raised():
    """json.loads makes a lone surrogate of "\\ud800" in a tool call; Z3's API raised UnicodeEncodeError on it, out of
    `run_script` (in process) instead of a result."""
    import json

    script = json.loads('"(check-sat)\\ud800"')
    result = run_script(script)
    assert not result.success and result.error.startswith("refused before Z3 ran: the character '\\ud800' at offset 11")
