"""Environments for multi-turn rollouts: a protocol over chat messages, `ToolEnvironment` (tools served to the model
through Hermes `<tool_call>` JSON), the drivers that run a batch of them, and their adapter to GRPO's rollouts.

The protocol (`Environment`), one episode per instance:
    reset(example) -> the messages the policy starts from (in GRPO: `example["prompt"]` as messages, since the
        prompt's tokens are prefilled before the episode starts; `EnvironmentTool.begin` checks it);
    step(reply) -> EnvStep(messages, state, done): the messages that follow the assistant reply (tool or user
        turns), the reward-relevant state, and whether the episode is over;
    result() -> what the rewards see for the episode (ToolEnvironment: its `Trajectory`), the episode ended as it
        stands.

`ToolEnvironment` serves the tools of a runner (`reasoner.agents.tools.Toolset` for Python functions; the SMT
scratchpad's z3_solve / finish in `reasoner.agents.scratchpad`). Each turn the reply's tool calls are parsed
(`reasoner.agents.tool_calls`) and started in order, then awaited; each comes back as a "tool" message. An
episode ends when a reply calls no tool (its text is the answer, "no_tool_call"), when the designated `finish`
tool returns (its result is the answer, "finish"; calls after it in the reply are not run; a finish call that
fails is an error observation and the episode goes on), after `max_turns` ("max_turns", the last reply is the
answer, `verified` False), or when the policy produced no reply ("infrastructure"). An unknown tool, a malformed
call or a failing tool is an observation the model sees; nothing a model writes raises. A `<tool_call>` whose body
cannot be read (broken JSON, no "name") is such a malformed call, not a reply without one: it is recorded as a call
named MALFORMED (parse_mode "unreadable"), the model is told what was wrong, and the episode goes on within its
turn budget (Sequent-Prover App. E.1: the harness answered the 4B base model's unreadable call with a tool
message and the episode went on), so a typo in a call never counts as a verified answer.

Batches (`step_all`, `run_episodes`, `EnvironmentTool.turn`) start every ToolEnvironment's calls of a turn before
awaiting any, so pool calls of different rows overlap.

    tools = Toolset(["mypkg.tools:search", "mypkg.tools:submit"])           # evaluation with any Policy
    policy = SamplerPolicy(model, tokenizer, tools=tools.schemas)
    trajectories = run_episodes(policy, [ToolEnvironment(tools, finish="submit") for _ in rows], rows, max_turns=5)
    tool = python_tools(tokenizer, ["mypkg.tools:search"], mode="pool")     # GRPO: config.grpo.tool = "python"
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Protocol, Sequence

from reasoner.agents.tool_calls import read_tool_calls
from reasoner.agents.tools import Observation, Resolved, failure


@dataclasses.dataclass
class Trajectory:
    """One episode: the conversation (initial messages, replies, tool messages), every parsed call, every
    observation record, the answer and how the episode ended, and the correctness bit a task may set."""

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
    def metadata(self) -> dict:
        return {"tool_calls": len(self.calls), "errors": [o["error"] for o in self.observations if o.get("error")],
                "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
                "termination": self.termination, "turns": self.turns}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"metadata": self.metadata}


@dataclasses.dataclass(frozen=True)
class EnvStep:
    """What one step produced: the messages that follow the reply, the reward-relevant state, the end flag."""

    messages: list[dict]
    state: object
    done: bool


class Environment(Protocol):
    def reset(self, example: Mapping) -> list[dict]: ...

    def step(self, reply) -> EnvStep: ...

    def result(self): ...


def as_messages(prompt) -> list[dict]:
    """A prompt string as one user message; a message list copied."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]


MALFORMED = "<malformed>"  # the name a `<tool_call>` is recorded under when no call could be read from it


def tool_error(name: str, message: str, turn: int) -> Observation:
    """The default observation of a call the runner cannot take: an unknown tool name, or (name MALFORMED) a
    `<tool_call>` no call could be read from."""
    return failure(name, None, "malformed" if name == MALFORMED else "unknown_tool", message)


class ToolEnvironment:
    """One episode over `runner`'s tools (anything with `names` and `submit(call) -> .result() -> Observation`).

    finish: the name of the runner's tool that ends the episode with its result as the answer (None: only a reply
    without a tool call ends it early). max_turns: the episode's turn limit (None: the driver's). bad_call(name,
    message, turn) -> Observation: the observation of a call of an unknown tool, or of an unreadable one (name
    MALFORMED, message: what was wrong). trajectory_type: the Trajectory
    (sub)class to record into. Observation records are kept as {"tool", "turn", **Observation.record}.
    """

    def __init__(self, runner, *, finish: str | None = None, max_turns: int | None = None,
                 bad_call: Callable[[str, str, int], Observation] = tool_error, trajectory_type=Trajectory):
        if finish is not None and finish not in runner.names:
            raise ValueError(f"finish tool {finish!r}: expected one of the served tools {list(runner.names)}")
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.runner, self.finish, self.max_turns = runner, finish, max_turns
        self.bad_call, self.trajectory_type = bad_call, trajectory_type
        self.trajectory: Trajectory | None = None
        self._pending: list = []

    @property
    def done(self) -> bool:
        return self.trajectory.termination != "running"

    def reset(self, example: Mapping) -> list[dict]:
        self.trajectory = self.trajectory_type(problem_id=str(example.get("id", "")),
                                               messages=as_messages(example.get("prompt", "")))
        self._pending = []
        return [dict(m) for m in self.trajectory.messages]

    def act(self, reply) -> None:
        """The first half of `step`: records the reply and starts its tool calls (none is awaited)."""
        from reasoner.agents.policies import as_reply

        reply, traj = as_reply(reply), self.trajectory
        traj.prompt_tokens += reply.prompt_tokens or 0
        traj.completion_tokens += reply.completion_tokens or 0
        if reply.failure is not None:  # the policy's infrastructure failed: not the model's doing
            traj.answer, traj.verified, traj.termination, traj.failure = None, False, "infrastructure", reply.failure
            return
        traj.messages.append({"role": "assistant", "content": reply.text})
        calls, unreadable = read_tool_calls(reply.text)
        if not calls and not unreadable:
            traj.answer, traj.verified, traj.termination = reply.text, True, "no_tool_call"
            return
        names = ", ".join(self.runner.names)
        for bad in unreadable:  # first: their place in the reply is not kept, and a finish call ends the list
            traj.calls.append({"turn": traj.turns, "name": MALFORMED, "arguments": None, "parse_mode": "unreadable",
                               "raw": bad.raw[:500]})
            self._pending.append((MALFORMED, Resolved(self.bad_call(MALFORMED, bad.why, traj.turns))))
        for call in calls:
            traj.calls.append({"turn": traj.turns, "name": call.name, "arguments": call.arguments,
                               "parse_mode": call.parse_mode})
            if call.name in self.runner.names:
                pending = self.runner.submit(call)
            else:
                pending = Resolved(self.bad_call(call.name, f"unknown tool {call.name!r}; available tools: {names}",
                                                 traj.turns))
            self._pending.append((call.name, pending))
            if call.name == self.finish:
                break

    def observe(self) -> EnvStep:
        """The second half of `step`: awaits the turn's calls and appends their tool messages."""
        traj, new = self.trajectory, []
        for name, pending in self._pending:
            obs = pending.result()
            if name == self.finish and obs.ok:
                traj.answer, traj.verified, traj.termination = obs.content, True, "finish"
                continue
            traj.observations.append({"tool": name, "turn": traj.turns, **obs.record})
            new.append({"role": "tool", "name": name, "content": obs.content})
        self._pending = []
        traj.messages.extend(new)
        traj.turns += 1
        if not self.done and self.max_turns is not None and traj.turns >= self.max_turns:
            self.result()
        return EnvStep(messages=new, state=traj, done=self.done)

    def step(self, reply) -> EnvStep:
        self.act(reply)
        return self.observe()

    def result(self) -> Trajectory:
        """The trajectory; a running episode ends as "max_turns" (answer = last reply, verified False)."""
        traj = self.trajectory
        if not self.done:
            last = next((m["content"] for m in reversed(traj.messages) if m["role"] == "assistant"), None)
            traj.answer, traj.verified, traj.termination = last, False, "max_turns"
        return traj


def step_all(environments: Sequence, replies: Sequence) -> list[EnvStep]:
    """One turn of several environments; every ToolEnvironment's calls are started before any is awaited."""
    for env, reply in zip(environments, replies):
        if isinstance(env, ToolEnvironment):
            env.act(reply)
    return [env.observe() if isinstance(env, ToolEnvironment) else env.step(reply)
            for env, reply in zip(environments, replies)]


def run_episodes(policy, environments: Sequence, examples: Sequence[Mapping], *, max_turns: int) -> list:
    """Runs one episode per (environment, example) with a `reasoner.agents.policies.Policy`, the live episodes of a
    turn answered in one `policy.respond` call, for at most `max_turns` turns; returns each `result()`.

    The policy sees the same list object per episode every turn (grown in place): scripted policies key on it."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    conversations = [env.reset(ex) for env, ex in zip(environments, examples)]
    live = list(range(len(environments)))
    for _ in range(max_turns):
        if not live:
            break
        replies = policy.respond([conversations[i] for i in live])
        if len(replies) != len(live):
            raise ValueError(f"policy returned {len(replies)} replies for {len(live)} conversations")
        steps = step_all([environments[i] for i in live], replies)
        for i, reply, step in zip(live, replies, steps):
            conversations[i] += [{"role": "assistant", "content": getattr(reply, "text", reply)}, *step.messages]
        live = [i for i, step in zip(live, steps) if not step.done]
    return [env.result() for env in environments]


# ============================================================================================== GRPO rollouts
class EnvironmentTool:
    """Multi-turn GRPO rollouts (`reasoner.agents.multiturn.rollout`) over one environment per row.

    make_env() -> a fresh Environment; schemas: the tool list the chat template renders into the prompt; stop: the
    strings that end a turn (right after a tool call). The text appended to a row's cache is the chat template's
    rendering of what follows the reply (`multiturn.ChatCache`), so it is masked out of the loss (tool_mask 0). A
    row ends when its environment says done, or when the re-rendered conversation does not extend the row's cache
    (`mismatches` counts those). The rows' `result()`s are the completions the rewards see. `close()` closes
    `owned` (e.g. the Toolset whose pool the environments share).
    """

    def __init__(self, tokenizer, make_env: Callable[[], object], *, schemas, stop=("</tool_call>",), owned=()):
        from reasoner.agents.multiturn import ChatCache

        self.tokenizer, self.make_env, self.stop, self.owned = tokenizer, make_env, tuple(stop), list(owned)
        self.cache = ChatCache(tokenizer, schemas)
        self.environments: list = []
        self.conversations: list[list[dict]] = []
        self.done: list[bool] = []
        self.mismatches = 0

    messages = staticmethod(as_messages)

    def prompt_ids(self, prompt) -> list[int]:
        from reasoner.tokenization import encode

        return encode(self.tokenizer, self.cache.render(self.messages(prompt)))

    def begin(self, examples: Sequence[Mapping]) -> None:
        """One environment per row (row b plays examples[b]; its id defaults to the row index)."""
        self.environments = [self.make_env() for _ in examples]
        self.conversations = [env.reset({"id": str(b), **ex}) for b, (env, ex) in
                              enumerate(zip(self.environments, examples))]
        self.done = [False] * len(examples)
        texts = [self.cache.render(c) for c in self.conversations]
        for ex, text in zip(examples, texts):
            if text != self.cache.render(self.messages(ex.get("prompt", ""))):
                raise ValueError("environment reset returned a conversation other than example['prompt'], whose "
                                 "tokens the rollout prefilled; start the environment from the example's prompt")
        self.cache.reset(texts)

    def turn(self, completions, *, want_next: bool) -> dict[int, str]:
        """completions: row -> the sampler's completion of this turn. Steps the rows' environments; returns row ->
        text to append for the rows that go on (none when not `want_next`)."""
        from reasoner.agents.multiturn import reply_text

        rows = [b for b in sorted(completions) if not self.done[b]]
        texts = {b: reply_text(self.tokenizer, completions[b]) for b in rows}  # all the row's cache holds
        steps = step_all([self.environments[b] for b in rows], [texts[b] for b in rows])
        out = {}
        for b, step in zip(rows, steps):
            self.conversations[b] += [{"role": "assistant", "content": texts[b]}, *step.messages]
            self.cache.add_reply(b, completions[b])
            self.done[b] = step.done
            if step.done or not want_next:
                continue
            suffix = self.cache.suffix(b, self.cache.render(self.conversations[b]))
            if suffix is None:
                self.mismatches += 1
                continue
            out[b] = suffix
        return out

    def trajectories(self) -> list:
        return [env.result() for env in self.environments]

    def close(self) -> None:
        for thing in self.owned:
            thing.close()

    def __enter__(self) -> EnvironmentTool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def python_tools(tokenizer, functions: Sequence, *, mode: str = "pool", timeout_s: float = 10.0,
                 finish: str | None = None, workers: int = 2) -> EnvironmentTool:
    """GRPO rollouts with Python functions as tools (`reasoner.agents.tools.Toolset`), one ToolEnvironment per row
    sharing the toolset (and its pool, stopped by `close()`)."""
    from reasoner.agents.tools import Toolset

    toolset = Toolset(functions, mode=mode, timeout_s=timeout_s, workers=workers)
    if finish and finish not in toolset.names:
        raise ValueError(f"tool_finish={finish!r}: expected the name of one of the tools {list(toolset.names)}")
    return EnvironmentTool(tokenizer, lambda: ToolEnvironment(toolset, finish=finish or None),
                           schemas=toolset.schemas, owned=[toolset])


def tool_from_settings(g: Mapping, tokenizer):
    """The multi-turn tool a GRPO config section names (`config.grpo`: tool, tools, tool_mode, tool_timeout_s,
    tool_finish, tool_workers), or None for single-turn rollouts. ValueError naming the setting otherwise."""
    name = g.get("tool", "")
    if not name:
        return None
    if name == "scratchpad":
        from reasoner.agents.scratchpad import ScratchpadTool

        return ScratchpadTool(tokenizer)
    if name != "python":
        raise ValueError(f"grpo.tool={name!r}: expected '' (single turn), 'scratchpad' (the SMT scratchpad: "
                         "z3_solve / finish tool calls) or 'python' (the functions grpo.tools names)")
    specs = g.get("tools", ())
    if isinstance(specs, str) or not specs or not all(isinstance(s, str) for s in specs):
        raise ValueError(f"grpo.tools={specs!r}: with grpo.tool='python', expected a list of 'package.module:function'")
    try:
        return python_tools(tokenizer, list(specs), mode=str(g.get("tool_mode", "pool")),
                            timeout_s=g.get("tool_timeout_s", 10.0), finish=str(g.get("tool_finish", "")) or None,
                            workers=int(g.get("tool_workers", 2)))
    except ValueError as err:
        raise ValueError(f"grpo.tools / tool_*: {err}") from err
