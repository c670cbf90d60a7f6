"""Z3 runner: scripts that would make Z3 start threads (parallel solver, SAT/SMT worker threads, parallel tactics)
are refused before Z3 runs, naming the option; ordinary options still run. The reference for "starts threads" is
Z3 itself: the thread count of this process while Z3, unguarded, runs the same option."""

import threading
import time

import pytest

from reasoner.verifiers import smtlib
from reasoner.verifiers.z3_runner import Z3Runner, run_script

# Pigeonhole 10 into 9: a few seconds of search for one thread, long enough to count Z3's threads meanwhile
PIGEONS = ("".join(f"(declare-const p{i}_{j} Bool)" for i in range(10) for j in range(9))
           + "".join("(assert (or " + " ".join(f"p{i}_{j}" for j in range(9)) + "))" for i in range(10))
           + "".join(f"(assert (not (and p{i}_{j} p{k}_{j})))" for j in range(9) for i in range(10)
                     for k in range(i + 1, 10)))
THREADED = {  # what a script writes: what it makes Z3 run
    ":parallel.enable": "(set-option :parallel.enable true)(check-sat)",
    ":sat.threads": "(set-option :sat.threads 4)(check-sat-using sat)",
    ":sat.local_search_threads": "(set-option :sat.local_search_threads 2)(check-sat-using sat)",
    ":sat.ddfw.threads": "(set-option :sat.ddfw.threads 2)(check-sat-using sat)",
    ":threads": "(check-sat-using (using-params smt :threads 4))",
    "par-or": "(check-sat-using (par-or smt sat))",
    "psmt": "(check-sat-using psmt)",
}


def _threads() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def _peak_threads_unguarded(script: str) -> int:
    """Threads of this process beyond those before, at their peak while bare Z3 runs `script` (1.5 s timeout)."""
    import z3

    z3.Z3_global_param_reset_all()
    z3.set_param("timeout", 1500)
    base, peak, done = _threads(), [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], _threads())
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    context = z3.Context()
    try:
        z3.Z3_eval_smtlib2_string(context.ref(), script)
    finally:
        done.set()
        watcher.join()
    return peak[0] - base - 1  # less the watcher


@pytest.mark.parametrize("name", ["(set-option :parallel.enable true)(check-sat)",
                                  "(set-option :sat.threads 4)(check-sat-using sat)"])
def test_unguarded_z3_does_start_threads(name):
    plain = _peak_threads_unguarded(PIGEONS + "(check-sat)")
    threaded = _peak_threads_unguarded(PIGEONS + name)
    assert threaded > plain, (plain, threaded)


@pytest.fixture(scope="module")
def runner():
    with Z3Runner(timeout_s=3.0, workers=1, isolate="off") as r:
        yield r


@pytest.mark.parametrize("option", sorted(THREADED))
def test_thread_starting_options_and_tactics_are_refused_by_name(runner, option):
    result = runner.solve(PIGEONS + THREADED[option])
    assert not result.success and result.sat_result is None and result.output == ""
    assert result.error.startswith(f"refused before Z3 ran: {option} would make Z3 start threads"), result.error


@pytest.mark.parametrize("written", ["(set-option :SAT.Threads 2)", "(set-option :parallel.ENABLE true)",
                                     "(set-option :smt.threads 1)", "(set-option :threads.max 8)",
                                     "(check-sat-using (|par-or| smt sat))"])
def test_spellings_z3_accepts_are_refused_too(written):
    assert run_script(written + "(check-sat)", timeout_s=5).error.startswith("refused before Z3 ran: ")


def test_ordinary_options_still_run(runner):
    script = ("(set-option :produce-models true)(set-option :smt.threads.max_conflicts 100)"
              "(set-option :sat.cardinality.solver true)(set-option :smt.random_seed 7)(set-option :timeout 2000)"
              "(declare-const threads Int)(declare-const parallel Bool)(assert (> threads 3))(assert parallel)"
              "(check-sat)(check-sat-using (then simplify smt))(get-value (threads))")
    result = runner.solve(script)
    assert result.success and result.verdicts == ("sat", "sat"), result
    assert smtlib.thread_starts(script) == []
