"""A Z3 pool that fails to start is an error observation of the z3_solve call that needed it, and a later call
starts it again; before, the exception escaped `ScratchpadTools.submit` into the GRPO rollout and ended the step.

The pool is made to fail for real: its workers are started with `sys.executable` as the interpreter, so pointing that
at `/bin/false` gives workers that exit without reporting ready (`verifier worker failed to start (got 'crash')`),
and pointing it at a missing file gives a spawn that fails. The call after it runs real Z3.
"""

import json
import subprocess
import sys
import time

import pytest

from reasoner.agents.scratchpad import ScratchpadTool
from trainers.grpo_eval import tool_metrics

UNSAT = "(declare-const x Int)\n(assert (> x 2))\n(assert (< x 1))\n(check-sat)"
NOT_READY = "crash: the Z3 pool could not be started (RuntimeError: verifier worker failed to start (got 'crash'))"


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture
def worker_starts(monkeypatch):
    """The verifier worker processes started during the test (their command lines)."""
    started, real = [], subprocess.Popen

    class Counting(real):
        def __init__(self, args, *rest, **kwargs):
            if "reasoner.verifiers.worker" in list(args):
                started.append(list(args))
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Counting)
    return started


def _episode(tool):
    env = tool.make_env()
    env.reset({"id": "p", "prompt": [{"role": "user", "content": "is x > 2 and x < 1 satisfiable?"}]})
    return env


def _first_call_without_a_pool(monkeypatch, executable: str):
    """A fresh tool and episode whose first z3_solve call runs with `executable` as the workers' interpreter;
    retries are immediate (`restart_after_s` 0). Returns (tool, env, step)."""
    tool = ScratchpadTool(None, timeout_cap_s=10.0)
    tool.restart_after_s = 0.0  # try again on the very next call
    env = _episode(tool)
    with monkeypatch.context() as patch:
        patch.setattr(sys, "executable", executable)
        step = env.step(call("z3_solve", smt_code=UNSAT))
    return tool, env, step


def test_a_failed_start_is_an_error_observation_and_the_next_call_runs_real_z3(monkeypatch, worker_starts):
    assert tool_metrics(ScratchpadTool(None)) == {"tool/pool_start_failures": 0.0, "tool/unstarted_calls": 0.0}
    assert tool_metrics(None) == {}  # single-turn rollouts
    tool, env, step = _first_call_without_a_pool(monkeypatch, "/bin/false")
    assert not step.done and step.state.termination == "running" and tool._runner is None
    (record,) = step.state.observations
    assert (record["error"], record["success"], record["sat_result"], record["smt_code"]) == (
        NOT_READY, False, None, UNSAT)
    assert json.loads(step.messages[0]["content"]) == {"success": False, "output": "", "sat_result": None,
                                                       "error": NOT_READY}
    assert dict(tool.counts) == {"pool_start_failures": 1, "unstarted_calls": 1}
    assert tool_metrics(tool) == {"tool/pool_start_failures": 1.0, "tool/unstarted_calls": 1.0}  # GRPO's metrics
    assert len(worker_starts) == 2  # the pool's two workers were tried
    tool.close()  # safe after a failed start: nothing to stop
    step = env.step(call("z3_solve", smt_code=UNSAT))  # the interpreter is back: this call starts the pool
    last = step.state.observations[-1]
    assert (last["success"], last["sat_result"], last["verdicts"], last["error"]) == (True, "unsat", ["unsat"], None)
    assert dict(tool.counts) == {"pool_start_failures": 1, "unstarted_calls": 1} and len(worker_starts) == 4
    step = env.step(call("finish", answer="unsat"))
    traj = env.result()
    assert step.done and (traj.termination, traj.answer, traj.turns) == ("finish", "unsat", 3)
    assert traj.metadata["errors"] == [NOT_READY] and traj.metadata["verdicts"] == [None, "unsat"]
    tool.close()
    assert tool._runner is None
    tool.close()


def test_a_spawn_that_fails_is_an_observation_too(monkeypatch, worker_starts):
    """A missing interpreter: the spawn itself fails (FileNotFoundError), or, where the workers are jailed, the
    `unshare` wrapper cannot run it and the worker never reports ready."""
    tool, env, step = _first_call_without_a_pool(monkeypatch, "/nonexistent/python3")
    error = step.state.observations[0]["error"]
    assert error in (NOT_READY, "crash: the Z3 pool could not be started (FileNotFoundError: [Errno 2] No such file "
                                "or directory: '/nonexistent/python3')")
    assert not step.done and dict(tool.counts) == {"pool_start_failures": 1, "unstarted_calls": 1}
    step = env.step(call("z3_solve", smt_code=UNSAT))
    assert step.state.observations[-1]["sat_result"] == "unsat"
    tool.close()


def test_calls_soon_after_a_failed_start_fail_at_once_and_one_later_starts_the_pool(monkeypatch, worker_starts):
    """Within `restart_after_s` of a failed start the calls of a turn do not each wait for another start (a hung
    worker costs `start_timeout_s`, 60 s, per try); the first call after it tries again."""
    tool = ScratchpadTool(None, timeout_cap_s=10.0, restart_after_s=2.0)
    env = _episode(tool)
    with monkeypatch.context() as patch:
        patch.setattr(sys, "executable", "/bin/false")
        step = env.step(call("z3_solve", smt_code=UNSAT) + call("z3_solve", smt_code=UNSAT))
    first, second = (o["error"] for o in step.state.observations)
    assert first == NOT_READY and len(worker_starts) == 2  # one start tried, for the first call only
    assert second.startswith(NOT_READY[:-1] + "; ") and second.endswith(" s ago, tried again 2 s after it)")
    assert dict(tool.counts) == {"pool_start_failures": 1, "unstarted_calls": 2}
    time.sleep(2.1)
    step = env.step(call("z3_solve", smt_code=UNSAT))
    assert step.state.observations[-1]["sat_result"] == "unsat" and len(worker_starts) == 4
    tool.close()
    with pytest.raises(ValueError, match="restart_after_s=-1"):
        ScratchpadTool(None, restart_after_s=-1)
