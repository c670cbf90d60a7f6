"""The SMT scratchpad agent loop of Sequent-Prover (§2.2, App. A.2) with tools z3_solve and finish.

Per episode, at most `t_max` (10) assistant turns. Each turn the policy replies; the tool calls in
the reply are run in order:
  * `z3_solve(smt_code, timeout)` goes to the Z3 runner (the verifier pool; timeout clamped to
    [1, timeout_cap_s]) and its {success, output, sat_result, error} comes back as a tool message;
  * `finish(answer)` ends the episode with that answer (termination "finish", verified=True); a finish without an
    answer (missing or null) gets an error observation instead, like any call with bad arguments;
  * a reply without any tool call also ends it: its text is the answer ("no_tool_call", verified=True); a reply
    whose `<tool_call>` cannot be read (broken JSON, no "name") is a malformed call, not such a reply: an error
    observation says what was wrong and the episode goes on (App. E.1: the base model's unreadable call got a tool
    message and the loop continued);
  * after `t_max` turns without an end the last reply's text is the answer ("max_turns",
    verified=False): `verified` is the commitment bit of App. A.2, not correctness;
  * a reply the policy could not produce (`Reply.failure`: an endpoint down after its retries) ends the
    episode as "infrastructure": callers exclude such episodes (the paper discarded 63 of them).
Calls of unknown tools or with bad arguments get an error observation and the episode continues. So does a z3_solve
call the Z3 runner cannot take (its pool failed to start: a worker that never reported ready, a spawn OSError; a
closed pool): its observation is a pool crash's, error "crash: the Z3 pool could not be started (...)", counted in
the trajectory's errors like any failed call and in `ScratchpadTool.counts`; the pool is started again on a later
call (`ScratchpadTool.restart_after_s`), since the failure may pass (a loaded host, a full process table).
Episodes of a batch advance together: one `policy.respond` per turn for every live episode, then all
their solver calls are submitted to the pool at once and collected, so a trainer can overlap them.

The loop is one instance of `reasoner.agents.environment.ToolEnvironment`: its runner (`ScratchpadTools`) serves
z3_solve through the Z3 runner and finish as the designated finish tool (its result is the answer), with the
observation records and messages of this protocol ({success, output, sat_result, error} as JSON).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import threading
import time
from typing import Callable, Sequence

from reasoner.agents import environment
from reasoner.agents.environment import EnvironmentTool, ToolEnvironment, run_episodes
from reasoner.agents.policies import Policy
from reasoner.agents.tools import Observation, Resolved

T_MAX = 10
OUTPUT_CHARS = 4000


@dataclasses.dataclass
class Trajectory(environment.Trajectory):
    """One episode: tau = (x, h_T, y_hat, mu) of §2.3 plus the correctness bit set by the task."""

    @property
    def smt_observations(self) -> list[dict]:
        """Observations of z3_solve calls that carried SMT code, in order."""
        return [o for o in self.observations if o.get("tool") == "z3_solve" and o.get("smt_code") is not None]

    @property
    def metadata(self) -> dict:
        smt = self.smt_observations
        return {"solver_calls": len(smt), "verdicts": [o["sat_result"] for o in smt],
                "errors": [o["error"] for o in self.observations if o.get("error")],
                "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
                "termination": self.termination, "turns": self.turns}


def _visible(payload: dict) -> str:
    """The tool message of a z3_solve observation: {success, output, sat_result, error}, output cut."""
    visible = {k: payload.get(k) for k in ("success", "output", "sat_result", "error")}
    if visible["output"] and len(visible["output"]) > OUTPUT_CHARS:
        visible["output"] = visible["output"][:OUTPUT_CHARS] + "\n...[truncated]"
    return json.dumps(visible)


def _bad_call(error: str) -> Observation:
    record = {"smt_code": None, "success": False, "sat_result": None, "error": error, "output": "", "elapsed_s": 0.0}
    return Observation(content=_visible(record), record=record, ok=False)


def _clamp_timeout(value, cap: float) -> float:
    """A model's `timeout` argument within [1, cap] seconds; anything not a finite number (NaN and inf parse from
    its JSON, and a NaN deadline killed the pool thread that served the call) gets the cap."""
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return float(cap)
    return float(min(max(seconds, 1.0), cap)) if math.isfinite(seconds) else float(cap)


class PoolNotRestarted(RuntimeError):
    """The Z3 pool's last start failed less than `ScratchpadTool.restart_after_s` ago; the message is its error."""


def _solver_observation(r, code: str, timeout_s: float) -> Observation:
    """The observation of a z3_solve call from its Z3Result `r`."""
    record = {"smt_code": code, "timeout_s": timeout_s, "success": r.success, "sat_result": r.sat_result,
              "verdicts": list(r.verdicts), "reason_unknown": r.reason_unknown, "error": r.error, "output": r.output,
              "model": r.model, "elapsed_s": r.elapsed_s}
    return Observation(content=_visible(record), record=record)


class _SolverCall:
    """A z3_solve call in flight: `result()` awaits the runner's Z3Result."""

    def __init__(self, future, code: str, timeout_s: float):
        self.future, self.code, self.timeout_s = future, code, timeout_s

    def result(self) -> Observation:
        return _solver_observation(self.future.result(), self.code, self.timeout_s)


class ScratchpadTools:
    """The scratchpad's tool runner for `ToolEnvironment`: z3_solve through `runner()` (a `Z3Runner`, or anything
    with `submit(code, timeout_s=...) -> Future[Z3Result]`), finish(answer) returning its answer.

    `submit` never raises: a runner that cannot be had or cannot take the call (`runner()` failing to start the pool,
    `submit` on a closed one) answers the call as the pool answers a worker it could not start, a "crash" result, and
    counts it in `counts["unstarted_calls"]` (shared by the episodes of one `ScratchpadTool`). Before, the exception
    escaped `ToolEnvironment.act` into the rollout and ended the training step."""

    names = ("z3_solve", "finish")

    def __init__(self, runner: Callable[[], object], *, timeout_cap_s: float = 30.0,
                 counts: collections.Counter | None = None):
        self.runner, self.timeout_cap_s = runner, float(timeout_cap_s)
        self.counts = collections.Counter() if counts is None else counts

    def submit(self, call):
        if call.name == "finish":
            answer = call.arguments.get("answer")
            if answer is None:  # finish() or finish(answer=null): no answer to commit to; the episode goes on
                return Resolved(_bad_call("finish needs an argument 'answer'; got arguments "
                                          f"{sorted(call.arguments)}"))
            return Resolved(Observation(content=answer if isinstance(answer, str) else json.dumps(answer),
                                        record={}))
        code = call.arguments.get("smt_code")
        if not isinstance(code, str) or not code.strip():
            return Resolved(_bad_call("z3_solve needs a non-empty string argument "
                                      f"'smt_code'; got arguments {sorted(call.arguments)}"))
        timeout = _clamp_timeout(call.arguments.get("timeout", self.timeout_cap_s), self.timeout_cap_s)
        try:
            return _SolverCall(self.runner().submit(code, timeout_s=timeout), code, timeout)
        except Exception as err:  # noqa: BLE001 - no solver for this call: an observation, the episode goes on
            from reasoner.verifiers.z3_runner import failure_result

            self.counts["unstarted_calls"] += 1
            why = str(err) if isinstance(err, PoolNotRestarted) else f"{type(err).__name__}: {err}"
            result = failure_result("crash", f"the Z3 pool could not be started ({why})", elapsed_s=0.0)
            return Resolved(_solver_observation(result, code, timeout))


def scratchpad_environment(runner: Callable[[], object], *, timeout_cap_s: float = 30.0,
                           counts: collections.Counter | None = None) -> ToolEnvironment:
    """One scratchpad episode: z3_solve and finish (the finish tool), records into this module's `Trajectory`;
    `counts` gathers the failures of several episodes (`ScratchpadTools`)."""
    return ToolEnvironment(ScratchpadTools(runner, timeout_cap_s=timeout_cap_s, counts=counts), finish="finish",
                           bad_call=lambda name, message, turn: _bad_call(message), trajectory_type=Trajectory)


def run_scratchpad(policy: Policy, conversations: Sequence[tuple[str, list[dict]]], *, runner,
                   t_max: int = T_MAX, timeout_cap_s: float = 30.0) -> list[Trajectory]:
    """Run one episode per (problem_id, initial messages); returns the trajectories in input order.

    `runner` is a `Z3Runner` (or anything with `submit(code, timeout_s=...) -> Future[Z3Result]`).
    """
    if t_max < 1:
        raise ValueError(f"t_max must be >= 1, got {t_max}")
    envs = [scratchpad_environment(lambda: runner, timeout_cap_s=timeout_cap_s) for _ in conversations]
    return run_episodes(policy, envs, [{"id": pid, "prompt": messages} for pid, messages in conversations],
                        max_turns=t_max)


class ScratchpadTool(EnvironmentTool):
    """Multi-turn rollouts (`reasoner.agents.multiturn.rollout`, GRPO) in this module's SMT scratchpad protocol.

    The same format the SMT evaluation (`run_scratchpad` over `SamplerPolicy`) runs: prompts rendered with the chat
    template and the `TOOLS` schema; a turn stops right after `</tool_call>`; one scratchpad environment per row
    (`EnvironmentTool`: z3_solve through the verifier pool, every call of the turn submitted before any is awaited;
    observations come back as "tool" messages, masked out of the loss). finish(), a reply without a tool call, or
    the turn limit ends the row. The rows' `Trajectory` objects are the completions the rewards see (e.g. the
    "smt_scratchpad" reward). The Z3 pool starts on first use; `close()` (or leaving a `with` block) stops it.

    A pool that fails to start fails the calls that needed it (error observations, see the module docstring), never
    the rollout; `counts` says how often: "pool_start_failures" (starts tried and failed) and "unstarted_calls"
    (z3_solve calls answered so). The next start is tried by the first call `restart_after_s` seconds after the last
    failure; the calls in between fail at once with that failure's error, so a pool whose workers hang until
    `PoolConfig.start_timeout_s` (60 s) costs a turn one such wait, not one per row.
    """

    def __init__(self, tokenizer, *, runner=None, timeout_cap_s: float = 30.0, tools=None,
                 restart_after_s: float = 30.0):
        from reasoner.agents.policies import TOOLS

        if isinstance(restart_after_s, bool) or not isinstance(restart_after_s, (int, float)) \
                or not math.isfinite(restart_after_s) or restart_after_s < 0:
            raise ValueError(f"restart_after_s={restart_after_s!r}: expected a finite number of seconds >= 0")
        super().__init__(tokenizer, self._environment, schemas=TOOLS if tools is None else tools,
                         stop=("</tool_call>",))
        self.timeout_cap_s, self.restart_after_s = float(timeout_cap_s), float(restart_after_s)
        self._runner = runner
        self._owns_runner = runner is None
        self.counts = collections.Counter(pool_start_failures=0, unstarted_calls=0)  # GRPO logs them as tool/<key>
        self._start_lock = threading.Lock()
        self._failed: tuple[float, str] | None = None  # (monotonic time, error) of the last failed start

    @property
    def runner(self):
        """The Z3 runner, started on first use (single-turn configs never spawn the verifier pool); raises when it
        cannot be started (counted), or at once within `restart_after_s` of the last failed start."""
        with self._start_lock:
            if self._runner is None:
                if self._failed is not None and time.monotonic() - self._failed[0] < self.restart_after_s:
                    ago = time.monotonic() - self._failed[0]
                    raise PoolNotRestarted(f"{self._failed[1]}; {ago:.1f} s ago, tried again "
                                           f"{self.restart_after_s:g} s after it")
                from reasoner.verifiers.z3_runner import Z3Runner

                try:
                    self._runner = Z3Runner(timeout_s=self.timeout_cap_s)
                except Exception as err:
                    self.counts["pool_start_failures"] += 1
                    self._failed = (time.monotonic(), f"{type(err).__name__}: {err}")
                    raise
                self._failed = None
            return self._runner

    def _environment(self) -> ToolEnvironment:
        return scratchpad_environment(lambda: self.runner, timeout_cap_s=self.timeout_cap_s, counts=self.counts)

    def close(self) -> None:
        """Stops the Z3 pool this tool started (a runner passed in belongs to the caller); a no-op when none was
        started (or its start failed: a failed VerifierPool start stops its own workers)."""
        with self._start_lock:
            if self._owns_runner and self._runner is not None:
                self._runner.close()
                self._runner = None
