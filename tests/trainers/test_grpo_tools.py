"""GRPO with Python functions as tools (`config.grpo.tool="python"`, `reasoner.agents.environment.python_tools`).

The issue's must-show: a tiny GRPO run whose tools include one that raises and one that sleeps past its deadline.
A random model does not write tool calls, so the policy's text is scripted the way tests/trainers/
test_grpo_scratchpad.py scripts it: a sampler whose sessions replay fixed replies per sample and turn
(tests/agents/scripted.py; SmolLM2's tokenizer, which can spell `<tool_call>`), while everything else is the real run: `grpo.train` over
`run_loop` with the tiny random model, the toolset built from the config and run in the verifier pool (jailed
where `unshare` works), the rewards reading the trajectories, the jitted update on the scripted tokens.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from reasoner.agents.tool_schema import function_schema, load_function
from reasoner.rewards import CompositeReward
from reasoner.rewards.registry import WeightedReward
from tests.agents.scripted import ScriptedSampler, expected_row
from tests.trainers.test_grpo import G, one_device_mesh, tiny, tok_dir  # noqa: F401 - tok_dir is a fixture
from trainers import grpo

FIXTURES = "tests.agents.tool_fixtures"
TOOLS = [f"{FIXTURES}:{name}" for name in ("boom", "nap", "add", "submit")]
SCHEMAS = [function_schema(load_function(spec)) for spec in TOOLS]  # what the chat template is given
TIMEOUT_S = 0.5


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


# sample index -> the replies of its turns (a row that ends is not asked again)
SCRIPT = {0: [call("boom", reason="no luck"), call("submit", answer="  "), call("submit", answer=" b ")],
          1: [call("nap", seconds=60), "The answer is A."],
          2: [call("add", a=2, b=3), call("nope"), "It is 5."],
          3: ["No tools needed."]}
assert len(SCRIPT) == G


def test_grpo_run_with_a_raising_and_a_sleeping_tool(tok_dir, tmp_path, monkeypatch):  # noqa: F811
    cfg = tiny(tok_dir, "--config.grpo.max_new_tokens=48", "--config.grpo.max_completion_tokens=192",
               "--config.grpo.max_turns=3", "--config.grpo.tool=python", f"--config.grpo.tools={TOOLS!r}",
               "--config.grpo.tool_mode=pool", f"--config.grpo.tool_timeout_s={TIMEOUT_S}",
               "--config.grpo.tool_finish=submit", "--config.model.tokenizer=smollm2-135m-instruct",
               "--config.model.random.vocab_size=49152", "--config.train.num_steps=2")
    rollouts, samplers = [], []

    def scripted_sampler(run):
        samplers.append(ScriptedSampler(run.tokenizer, SCRIPT))
        return samplers[-1]

    def recorded_rollout(*args, **kwargs):
        rollouts.append(grpo_rollout(*args, **kwargs))
        return rollouts[-1]

    grpo_rollout = grpo.rollout
    monkeypatch.setattr(grpo, "sampler_for", scripted_sampler)
    monkeypatch.setattr(grpo, "rollout", recorded_rollout)
    # the rewards read each row's Trajectory: 1 for an episode the finish tool ended
    reward = CompositeReward([WeightedReward("finished", lambda cs, examples: [
        float(t.termination == "finish") for t in cs])])
    examples = [{"prompt": [{"role": "user", "content": "What is 2 + 3?"}], "answer": "5"},
                {"prompt": [{"role": "user", "content": "Which is true, A or B?"}], "answer": "B"}]
    try:
        result = grpo.train(cfg, workdir=tmp_path / "run", examples=examples, reward=reward,
                            mesh=one_device_mesh(), progress=False)
    finally:
        reward.close()

    # training went on: both steps ran, finite losses, the reward saw the finish tool's episodes
    assert int(result.state.step) == 2 and len(result.history) == 2
    assert all(np.isfinite(h["loss"]) and h["rewards/finished"] == pytest.approx(1 / G) for h in result.history)
    assert samplers[0].stops[0] == ("</tool_call>",)  # turns stop right after a tool call
    assert len(rollouts) == 2
    tok = result.run.tokenizer
    for r in rollouts:
        assert not r.truncated.any()
        for b, (traj, ids, mask, lp) in enumerate(zip(r.completions, r.completion_ids, r.tool_mask, r.old_logps)):
            g = b % G
            contents = [o["content"] for o in traj.observations]
            if g == 0:  # the raising tool, then a finish call that raises, then one that ends the episode
                assert contents == ["error: boom raised ValueError: boom: no luck",
                                    "error: submit raised ValueError: empty answer"]
                assert (traj.termination, traj.answer, traj.turns) == ("finish", "B", 3)
            elif g == 1:  # the sleeping tool, killed at its deadline
                assert contents == [f"error: nap did not finish within {TIMEOUT_S:g} s"]
                assert traj.observations[0]["outcome"] == "timeout"
                assert (traj.termination, traj.answer) == ("no_tool_call", "The answer is A.")
            elif g == 2:
                assert contents == ["5", "error: unknown tool 'nope'; available tools: boom, nap, add, submit"]
                assert traj.termination == "no_tool_call"
            else:
                assert contents == [] and traj.termination == "no_tool_call"
            tool_messages = [m["content"] for m in traj.messages if m["role"] == "tool"]
            assert tool_messages == contents  # every failure is an observation the model reads
            # the row's tokens: replies (mask 1) and the template's tool spans (mask 0, log-prob 0), nothing else
            prompt = r.examples[b]["prompt"]
            want_ids, want_mask = expected_row(tok, traj.messages[len(prompt):], prompt, tools=SCHEMAS)
            assert ids.tolist() == want_ids and mask.tolist() == want_mask, f"row {b}"
            assert np.all(lp[mask == 0] == 0.0) and np.all(lp[mask == 1] == -1.0)
            masked = tok.decode(ids[mask == 0].tolist())
            assert all(c in masked for c in contents)
        host = grpo.pack(r, np.ones(len(r.completion_ids), np.float32), prompt_len=64, budget=192, grad_accum=1,
                         pad_id=0, mask_truncated=False)
        assert host.loss_mask.sum() == sum(float(m.sum()) for m in r.tool_mask) < host.completion_mask.sum()


def test_config_errors_name_the_setting(tok_dir):  # noqa: F811
    from reasoner.tokenization import load_tokenizer

    tok = load_tokenizer("smollm2-135m-instruct")
    base = ["--config.grpo.tool=python"]
    cases = {"grpo.tool='shell'": ["--config.grpo.tool=shell"],
             "grpo.tools=()": base,
             "no.such.module": [*base, "--config.grpo.tools=['no.such.module:f']"],
             "has no 'missing'": [*base, f"--config.grpo.tools=['{FIXTURES}:missing']"],
             "'package.module:function'": [*base, "--config.grpo.tools=['nocolon']"],
             "tool mode 'docker'": [*base, f"--config.grpo.tools=['{FIXTURES}:add']", "--config.grpo.tool_mode=docker"],
             "tool_finish='stop'": [*base, f"--config.grpo.tools=['{FIXTURES}:add']", "--config.grpo.tool_finish=stop"],
             "timeout_s=0": [*base, f"--config.grpo.tools=['{FIXTURES}:add']", "--config.grpo.tool_timeout_s=0"]}
    for match, overrides in cases.items():
        with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")):
            grpo.tool_from_config(tiny(tok_dir, *overrides), tok)
    tool = grpo.tool_from_config(tiny(tok_dir, *base, f"--config.grpo.tools=['{FIXTURES}:add']",
                                      "--config.grpo.tool_mode=inprocess"), tok)
    assert [s["function"]["name"] for s in tool.cache.tools] == ["add"] and tool.stop == ("</tool_call>",)
    tool.close()
