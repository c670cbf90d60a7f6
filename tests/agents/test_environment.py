"""The environment protocol (`reasoner.agents.environment`): ToolEnvironment stepped with scripted assistant
messages, its endings (no tool call, the finish tool, max_turns, no reply), the batch drivers, and a non-tool
environment (user-turn feedback) through GRPO's multi-turn rollout with its feedback masked out of the loss."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from reasoner.agents.environment import (EnvironmentTool, EnvStep, ToolEnvironment, python_tools, run_episodes,
                                         step_all)
from reasoner.agents.multiturn import rollout
from reasoner.agents.policies import Reply, ScriptedPolicy
from reasoner.agents.tool_calls import parse_tool_calls
from reasoner.agents.tools import Observation, Toolset
from reasoner.sampling import SamplingParams
from reasoner.tokenization import load_tokenizer
from tests.agents import tool_fixtures as fx
from tests.agents.scripted import ScriptedSampler, expected_row

FIXTURES = "tests.agents.tool_fixtures"


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture(scope="module")
def tools():
    with Toolset([fx.add, fx.boom, fx.nap, fx.submit], mode="inprocess", timeout_s=0.5) as toolset:
        yield toolset


@pytest.fixture(scope="module")
def smol_tok():
    return load_tokenizer("smollm2-135m-instruct")


def test_tool_environment_steps_and_the_finish_tool(tools):
    env = ToolEnvironment(tools, finish="submit")
    assert env.reset({"id": "p1", "prompt": "What is 2 + 3?"}) == [{"role": "user", "content": "What is 2 + 3?"}]
    step = env.step(call("add", a=2, b=3) + " and " + call("boom", reason="why"))
    assert step == EnvStep(messages=[{"role": "tool", "name": "add", "content": "5"},
                                     {"role": "tool", "name": "boom", "content": "error: boom raised ValueError: boom: why"}],
                           state=env.trajectory, done=False)
    step = env.step(call("submit", answer=" "))  # a finish call that fails is an observation; the episode goes on
    assert step.messages[0]["content"] == "error: submit raised ValueError: empty answer" and not step.done
    step = env.step(call("add", a=1) + call("submit", answer="five") + call("boom", reason="never run"))
    assert step.done and [m["content"] for m in step.messages] == ["1"]  # the finish call leaves no message
    traj = env.result()
    assert (traj.problem_id, traj.termination, traj.answer, traj.verified, traj.turns) == ("p1", "finish", "FIVE",
                                                                                            True, 3)
    assert [c["name"] for c in traj.calls] == ["add", "boom", "submit", "add", "submit"]  # nothing after finish
    assert [(o["tool"], o["turn"], o["outcome"]) for o in traj.observations] == [
        ("add", 0, "ok"), ("boom", 0, "error"), ("submit", 1, "error"), ("add", 2, "ok")]
    assert [m["role"] for m in traj.messages] == ["user", "assistant", "tool", "tool", "assistant", "tool",
                                                  "assistant", "tool"]
    assert traj.metadata["errors"] == ["boom raised ValueError: boom: why", "submit raised ValueError: empty answer"]


def test_endings_no_tool_call_max_turns_and_no_reply(tools):
    env = ToolEnvironment(tools)
    env.reset({"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]})
    step = env.step("Just text.")
    assert step.done and step.messages == [] and (env.result().termination, env.result().answer) == (
        "no_tool_call", "Just text.")
    env = ToolEnvironment(tools, max_turns=2)
    env.reset({"prompt": "u"})
    assert not env.step(call("add", a=1)).done
    step = env.step(call("nope"))
    assert step.done and step.messages[0]["content"] == "error: unknown tool 'nope'; available tools: add, boom, " \
                                                        "nap, submit"
    traj = env.result()
    assert (traj.termination, traj.verified, traj.answer) == ("max_turns", False, call("nope"))
    env = ToolEnvironment(tools)
    env.reset({"prompt": "u"})
    assert env.step(Reply("", failure="endpoint down")).done
    assert (env.result().termination, env.result().failure) == ("infrastructure", "endpoint down")
    with pytest.raises(ValueError, match="finish tool 'finish': expected one of the served tools"):
        ToolEnvironment(tools, finish="finish")


def test_step_all_starts_every_call_before_awaiting_any():
    events = []

    class Recording:
        names = ("probe",)

        def submit(self, call):
            events.append(("start", call.arguments["row"]))
            return self

        def result(self):
            events.append(("await",))
            return Observation(content="ok", record={})

    envs = [ToolEnvironment(Recording()) for _ in range(3)]
    for env in envs:
        env.reset({"prompt": "u"})
    steps = step_all(envs, [call("probe", row=b) for b in range(3)])
    assert events == [("start", 0), ("start", 1), ("start", 2), ("await",), ("await",), ("await",)]
    assert all(s.messages == [{"role": "tool", "name": "probe", "content": "ok"}] for s in steps)


def test_run_episodes_with_a_policy_in_the_pool():
    with Toolset([f"{FIXTURES}:add", f"{FIXTURES}:nap", f"{FIXTURES}:submit"], timeout_s=0.5) as pool_tools:
        policy = ScriptedPolicy({"a": [call("add", a=1, b=1), call("submit", answer="two")],
                                 "b": [call("nap", seconds=30), "gave up"],
                                 "c": [call("add", a=1)] * 5})
        envs = [ToolEnvironment(pool_tools, finish="submit") for _ in range(3)]
        trajs = run_episodes(policy, envs, [{"id": k, "prompt": k} for k in "abc"], max_turns=3)
    assert [(t.problem_id, t.termination, t.answer, t.turns) for t in trajs] == [
        ("a", "finish", "TWO", 2), ("b", "no_tool_call", "gave up", 2), ("c", "max_turns", call("add", a=1), 3)]
    assert trajs[1].observations[0]["content"] == "error: nap did not finish within 0.5 s"


@dataclasses.dataclass
class Guesses:
    messages: list[dict]
    guesses: list[int]
    solved: bool


class GuessEnv:
    """A non-tool environment: the model guesses a number in <guess>N</guess>; the user answers higher / lower."""

    def __init__(self, secret: int = 7):
        self.secret = secret

    def reset(self, example):
        self.state = Guesses(messages=[{"role": "user", "content": example["prompt"]}], guesses=[], solved=False)
        return [dict(m) for m in self.state.messages]

    def step(self, reply) -> EnvStep:
        self.state.messages.append({"role": "assistant", "content": reply})
        if "<guess>" not in reply:
            return EnvStep([], self.state, True)
        guess = int(reply.split("<guess>")[1].split("</guess>")[0])
        self.state.guesses.append(guess)
        self.state.solved = guess == self.secret
        feedback = [] if self.state.solved else [{"role": "user", "content": "higher" if guess < self.secret
                                                  else "lower"}]
        self.state.messages += feedback
        return EnvStep(feedback, self.state, self.state.solved)

    def result(self):
        return self.state


def test_a_non_tool_environment_in_the_multi_turn_rollout(smol_tok):
    script = {0: ["<guess>3</guess>", "<guess>9</guess>", "<guess>7</guess>"], 1: ["I give up."]}
    tool = EnvironmentTool(smol_tok, GuessEnv, schemas=None, stop=("</guess>",))
    examples = [{"prompt": "Guess my number between 1 and 10."}]
    sampler = ScriptedSampler(smol_tok, script)
    r = rollout(sampler, prompt_ids=[tool.prompt_ids(e["prompt"]) for e in examples], examples=examples,
                sampling=SamplingParams(max_new_tokens=16, temperature=1.0, n=2), budget=200, tool=tool, max_turns=4,
                tool_reserve=32)
    assert sampler.stops[0] == ("</guess>",)
    solved, gave_up = r.completions
    assert (solved.guesses, solved.solved, gave_up.guesses, gave_up.solved) == ([3, 9, 7], True, [], False)
    prompt = [{"role": "user", "content": examples[0]["prompt"]}]
    for state, ids, mask in zip(r.completions, r.completion_ids, r.tool_mask):
        want_ids, want_mask = expected_row(smol_tok, state.messages[1:], prompt)
        assert ids.tolist() == want_ids and mask.tolist() == want_mask
    feedback = smol_tok.decode(r.completion_ids[0][r.tool_mask[0] == 0].tolist())
    assert "higher" in feedback and "lower" in feedback and "<guess>" not in feedback
    assert r.texts == ["<guess>3</guess><guess>9</guess><guess>7</guess>", "I give up."]
    assert np.all(r.old_logps[0][r.tool_mask[0] == 0] == 0.0)


def test_environment_tool_checks_the_reset_conversation_and_closes_its_toolset(smol_tok):
    class Prefixed(GuessEnv):
        def reset(self, example):
            return [{"role": "system", "content": "extra"}, *super().reset(example)]

    tool = EnvironmentTool(smol_tok, Prefixed, schemas=None)
    with pytest.raises(ValueError, match="other than example\\['prompt'\\]"):
        tool.begin([{"prompt": "Guess."}])
    tool = python_tools(smol_tok, [f"{FIXTURES}:add"], timeout_s=1.0)
    toolset = tool.owned[0]
    (parsed,) = parse_tool_calls(call("add", a=2))
    assert toolset.submit(parsed).result().content == "2" and toolset._pool is not None  # a pool call started it
    tool.close()
    assert toolset._pool is None
    with pytest.raises(ValueError, match="tool_finish='done'"):
        python_tools(smol_tok, [f"{FIXTURES}:add"], finish="done")


def test_an_unreadable_tool_call_is_a_malformed_call_observation(tools):
    """A reply whose only `<tool_call>` cannot be read ended the episode "no_tool_call", verified; the module
    docstring promised an observation. Now the model is told what was wrong and the episode goes on."""
    env = ToolEnvironment(tools, finish="submit", max_turns=3)
    env.reset({"prompt": "u"})
    step = env.step("Let me add. <tool_call>{not json</tool_call>")
    assert not step.done and [m["name"] for m in step.messages] == ["<malformed>"]
    assert step.messages[0]["content"].startswith("error: the tool call is not valid JSON (Expecting property name")
    step = env.step(call("add", a=1, b=2) + "<tool_call></tool_call>")  # beside a good call: reported too
    assert not step.done and [m["content"] for m in step.messages][1] == "3"
    assert "the <tool_call> tag is empty" in step.messages[0]["content"]
    traj = env.result()
    assert [(o["tool"], o["turn"], o["outcome"]) for o in traj.observations] == [
        ("<malformed>", 0, "malformed"), ("<malformed>", 1, "malformed"), ("add", 1, "ok")]
    assert [(c["name"], c["parse_mode"]) for c in traj.calls] == [
        ("<malformed>", "unreadable"), ("<malformed>", "unreadable"), ("add", "json")]
    assert env.step(call("submit", answer="x")).done and env.result().termination == "finish"
