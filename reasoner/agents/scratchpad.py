"""The SMT scratchpad agent loop of Sequent-Prover (§2.2, App. A.2) with tools z3_solve and finish.

Per episode, at most `t_max` (10) assistant turns. Each turn the policy replies; the tool calls in
the reply are run in order:
  * `z3_solve(smt_code, timeout)` goes to the Z3 runner (the verifier pool; timeout clamped to
    [1, timeout_cap_s]) and its {success, output, sat_result, error} comes back as a tool message;
  * `finish(answer)` ends the episode with that answer (termination "finish", verified=True);
  * a reply without any tool call also ends it: its text is the answer ("no_tool_call", verified=True);
  * after `t_max` turns without an end the last reply's text is the answer ("max_turns",
    verified=False): `verified` is the commitment bit of App. A.2, not correctness;
  * a reply the policy could not produce (`Reply.failure`: an endpoint down after its retries) ends the
    episode as "infrastructure": callers exclude such episodes (the paper discarded 63 of them).
Calls of unknown tools or with bad arguments get an error observation and the episode continues.
Episodes of a batch advance together: one `policy.respond` per turn for every live episode, then all
their solver calls are submitted to the pool at once and collected, so a trainer can overlap them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Sequence

from reasoner.agents.policies import Policy, as_reply
from reasoner.agents.tool_calls import parse_tool_calls

T_MAX = 10
OUTPUT_CHARS = 4000


@dataclasses.dataclass
class Trajectory:
    """One episode: tau = (x, h_T, y_hat, mu) of §2.3 plus the correctness bit set by the task."""

    problem_id: str
    messages: list[dict]
    calls: list[dict] = dataclasses.field(default_factory=list)
    observations: list[dict] = dataclasses.field(default_factory=list)
    answer: str | None = None
    verified: bool = False
    termination: str = "running"
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    correct: bool | None = None
    failure: str | None = None  # why the policy produced no reply (termination "infrastructure")

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

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"metadata": self.metadata}


def _observation_message(payload: dict) -> dict:
    visible = {k: payload.get(k) for k in ("success", "output", "sat_result", "error")}
    if visible["output"] and len(visible["output"]) > OUTPUT_CHARS:
        visible["output"] = visible["output"][:OUTPUT_CHARS] + "\n...[truncated]"
    return {"role": "tool", "name": payload["tool"], "content": json.dumps(visible)}


def _bad_call(tool: str, error: str, turn: int) -> dict:
    return {"tool": tool, "turn": turn, "smt_code": None, "success": False, "sat_result": None,
            "error": error, "output": "", "elapsed_s": 0.0}


class Episode:
    """One running episode: its Trajectory and the solver calls of the current turn."""

    def __init__(self, problem_id: str, messages: list[dict]):
        self.trajectory = Trajectory(problem_id=problem_id, messages=[dict(m) for m in messages])
        self.pending: list = []  # (observation index, future) of this turn's solver calls

    @property
    def done(self) -> bool:
        return self.trajectory.termination != "running"


def _clamp_timeout(value, cap: float) -> float:
    try:
        return float(min(max(float(value), 1.0), cap))
    except (TypeError, ValueError):
        return float(cap)


def _apply_reply(episode: Episode, text: str, *, runner, timeout_cap_s: float) -> None:
    traj = episode.trajectory
    turn = traj.turns
    traj.messages.append({"role": "assistant", "content": text})
    calls = parse_tool_calls(text)
    if not calls:
        traj.answer, traj.verified, traj.termination = text, True, "no_tool_call"
        return
    for call in calls:
        traj.calls.append({"turn": turn, "name": call.name, "arguments": call.arguments,
                           "parse_mode": call.parse_mode})
        if call.name == "finish":
            answer = call.arguments.get("answer")
            traj.answer = answer if isinstance(answer, str) else json.dumps(answer)
            traj.verified, traj.termination = True, "finish"
            return
        if call.name != "z3_solve":
            traj.observations.append(_bad_call(call.name, f"unknown tool {call.name!r}; "
                                               "available tools: z3_solve, finish", turn))
            continue
        code = call.arguments.get("smt_code")
        if not isinstance(code, str) or not code.strip():
            traj.observations.append(_bad_call("z3_solve", "z3_solve needs a non-empty string argument "
                                               f"'smt_code'; got arguments {sorted(call.arguments)}", turn))
            continue
        timeout = _clamp_timeout(call.arguments.get("timeout", timeout_cap_s), timeout_cap_s)
        traj.observations.append({"tool": "z3_solve", "turn": turn, "smt_code": code, "timeout_s": timeout})
        episode.pending.append((len(traj.observations) - 1, runner.submit(code, timeout_s=timeout)))


def _collect(episode: Episode) -> None:
    traj = episode.trajectory
    for index, future in episode.pending:
        result = future.result()
        traj.observations[index].update(success=result.success, sat_result=result.sat_result,
                                         error=result.error, output=result.output, model=result.model,
                                         elapsed_s=result.elapsed_s)
    episode.pending = []
    for obs in traj.observations:
        if obs["turn"] == traj.turns:
            traj.messages.append(_observation_message(obs))


def run_scratchpad(policy: Policy, conversations: Sequence[tuple[str, list[dict]]], *, runner,
                   t_max: int = T_MAX, timeout_cap_s: float = 30.0) -> list[Trajectory]:
    """Run one episode per (problem_id, initial messages); returns the trajectories in input order.

    `runner` is a `Z3Runner` (or anything with `submit(code, timeout_s=...) -> Future[Z3Result]`).
    """
    if t_max < 1:
        raise ValueError(f"t_max must be >= 1, got {t_max}")
    episodes = [Episode(pid, messages) for pid, messages in conversations]
    for _ in range(t_max):
        live = [e for e in episodes if not e.done]
        if not live:
            break
        replies = policy.respond([e.trajectory.messages for e in live])
        if len(replies) != len(live):
            raise ValueError(f"policy returned {len(replies)} replies for {len(live)} conversations")
        advance(live, [as_reply(raw) for raw in replies], runner=runner, timeout_cap_s=timeout_cap_s)
    return close(episodes)


def advance(episodes: Sequence[Episode], replies: Sequence, *, runner, timeout_cap_s: float = 30.0) -> None:
    """One turn of live episodes: each reply (str or Reply) is appended and its tool calls run; every solver call
    of the turn is submitted before any is awaited; then the observations are appended as tool messages.
    Used by `run_scratchpad` and by `ScratchpadTool` (multi-turn rollouts, GRPO)."""
    for episode, raw in zip(episodes, replies):
        reply = as_reply(raw)
        episode.trajectory.prompt_tokens += reply.prompt_tokens or 0
        episode.trajectory.completion_tokens += reply.completion_tokens or 0
        if reply.failure is not None:  # the policy's infrastructure failed: not the model's doing
            traj = episode.trajectory
            traj.answer, traj.verified, traj.termination = None, False, "infrastructure"
            traj.failure = reply.failure
            continue
        _apply_reply(episode, reply.text, runner=runner, timeout_cap_s=timeout_cap_s)
    for episode in episodes:
        _collect(episode)
        episode.trajectory.turns += 1


def close(episodes: Sequence[Episode]) -> list[Trajectory]:
    """Ends every episode still running as "max_turns" (answer = last reply, verified False); the trajectories."""
    for episode in episodes:
        traj = episode.trajectory
        if not episode.done:
            last = next((m["content"] for m in reversed(traj.messages) if m["role"] == "assistant"), None)
            traj.answer, traj.verified, traj.termination = last, False, "max_turns"
    return [e.trajectory for e in episodes]


class ScratchpadTool:
    """Multi-turn rollouts (`reasoner.agents.multiturn.rollout`, GRPO) in this module's SMT scratchpad protocol.

    The same format the SMT evaluation (`run_scratchpad` over `SamplerPolicy`) runs: prompts rendered with the chat
    template and the `TOOLS` schema; a turn stops right after `</tool_call>`; its Hermes tool calls are parsed by
    `reasoner.agents.tool_calls` and run by `advance` (z3_solve through the verifier pool, every call of the turn
    submitted before any is awaited); observations come back as "tool" messages. The tokens appended to a row's
    cache are the chat template's rendering of what follows the reply (`multiturn.ChatCache`), so they are masked
    out of the loss. finish(), a reply without a tool call, or the turn limit ends the row. The rows' `Trajectory`
    objects are the completions the rewards see (e.g. the "smt_scratchpad" reward). The Z3 pool starts on first
    use; `close()` (or leaving a `with` block) stops it.
    """

    stop = ("</tool_call>",)

    def __init__(self, tokenizer, *, runner=None, timeout_cap_s: float = 30.0, tools=None):
        from reasoner.agents.multiturn import ChatCache
        from reasoner.agents.policies import TOOLS

        self.tokenizer = tokenizer
        self.cache = ChatCache(tokenizer, TOOLS if tools is None else tools)
        self.timeout_cap_s = float(timeout_cap_s)
        self._runner = runner
        self._owns_runner = runner is None
        self.episodes: list[Episode] = []
        self.mismatches = 0  # rows ended because the re-rendered conversation did not extend the cache's text

    @property
    def runner(self):
        if self._runner is None:  # started on first use: single-turn configs never spawn the verifier pool
            from reasoner.verifiers.z3_runner import Z3Runner

            self._runner = Z3Runner(timeout_s=self.timeout_cap_s)
        return self._runner

    def close(self) -> None:
        """Stops the Z3 pool this tool started (a runner passed in belongs to the caller)."""
        if self._owns_runner and self._runner is not None:
            self._runner.close()
            self._runner = None

    def __enter__(self) -> ScratchpadTool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def messages(prompt) -> list[dict]:
        return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]

    def prompt_ids(self, prompt) -> list[int]:
        from reasoner.tokenization import encode

        return encode(self.tokenizer, self.cache.render(self.messages(prompt)))

    def begin(self, prompts: Sequence) -> None:
        """One episode per row (row b answers prompts[b])."""
        self.episodes = [Episode(str(b), self.messages(p)) for b, p in enumerate(prompts)]
        self.cache.reset([self.cache.render(e.trajectory.messages) for e in self.episodes])

    def turn(self, completions, *, want_next: bool) -> dict[int, str]:
        """completions: row -> the sampler's completion of this turn. Runs the turn's tool calls; returns
        row -> text to append for the rows that go on (none when not `want_next`)."""
        rows = [b for b in sorted(completions) if not self.episodes[b].done]
        advance([self.episodes[b] for b in rows], [completions[b].text for b in rows], runner=self.runner,
                timeout_cap_s=self.timeout_cap_s)
        out = {}
        for b in rows:
            self.cache.add_reply(b, completions[b])
            if self.episodes[b].done or not want_next:
                continue
            suffix = self.cache.suffix(b, self.cache.render(self.episodes[b].trajectory.messages))
            if suffix is None:
                self.mismatches += 1
                continue
            out[b] = suffix
        return out

    def trajectories(self) -> list[Trajectory]:
        return close(self.episodes)
