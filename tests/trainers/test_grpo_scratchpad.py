"""GRPO multi-turn rollouts in the SMT scratchpad protocol (`reasoner.agents.scratchpad.ScratchpadTool`).

A scripted session (fixed replies per row and turn, tokenized with SmolLM2's tokenizer) drives `multiturn.rollout`, so
the test knows every turn: tool-response tokens are exactly the chat template's rendering of the tool messages
(end of turn, tool turn, next generation prompt) and are masked out of the loss; finish() and a reply without a
tool call end the row. One test runs real Z3; one runs a GRPO step with the tiny random model and the tool.
"""

from __future__ import annotations

import concurrent.futures as cf
import json

import numpy as np
import pytest

from reasoner.agents.multiturn import rollout
from reasoner.agents.policies import TOOLS
from reasoner.agents.scratchpad import ScratchpadTool
from reasoner.sampling import SamplingParams
from reasoner.tokenization import encode, load_tokenizer, render_chat
from reasoner.verifiers.z3_runner import Z3Result
from tests.agents.scripted import ScriptedSampler
from tests.trainers.test_grpo import G, one_device_mesh, tiny, tok_dir  # noqa: F401 - tok_dir is a fixture
from trainers import grpo
from trainers.data import as_example


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


SOLVE = "Let me check. " + call("z3_solve", smt_code="(declare-const x Int)(assert (> x 2))(check-sat)")
FINISH = "The answer is B. " + call("finish", answer="B")
# row -> replies of its turns (a row that ends is not asked again)
SCRIPT = {0: [SOLVE, FINISH], 1: [FINISH], 2: [SOLVE, SOLVE, "The answer is A."], 3: ["No tools. Answer: A"]}


class FixedRunner:
    def __init__(self):
        self.calls = []

    def submit(self, code, *, timeout_s):
        self.calls.append(code)
        f = cf.Future()
        f.set_result(Z3Result(success=True, output="sat\n", sat_result="sat", error=None, model=None, elapsed_s=0.0))
        return f


@pytest.fixture(scope="module")
def smol_tok():
    return load_tokenizer("smollm2-135m-instruct")


def _rollout(tok, runner, *, budget=400, max_turns=4, examples=None):
    tool = ScratchpadTool(tok, runner=runner)
    examples = examples or [{"prompt": [{"role": "user", "content": f"Problem {b}: which is true, A or B?"}]}
                            for b in SCRIPT]
    sampler = ScriptedSampler(tok, SCRIPT, per_row=True)
    r = rollout(sampler, prompt_ids=[tool.prompt_ids(e["prompt"]) for e in examples], examples=examples,
                     sampling=SamplingParams(max_new_tokens=64, temperature=1.0, n=1), budget=budget, tool=tool,
                     max_turns=max_turns, tool_reserve=64)
    return r, sampler, examples


def test_tool_responses_are_masked_and_finish_ends_the_row(smol_tok):
    runner = FixedRunner()
    r, sampler, examples = _rollout(smol_tok, runner)
    assert "</tool_call>" in sampler.stops[-1]  # turns stop right after a tool call, as in the SMT evaluation
    terminations = [t.termination for t in r.completions]
    assert terminations == ["finish", "finish", "no_tool_call", "no_tool_call"]
    assert [t.answer for t in r.completions] == ["B", "B", "The answer is A.", "No tools. Answer: A"]
    assert [t.turns for t in r.completions] == [2, 1, 3, 1]
    assert len(runner.calls) == 3 and not r.truncated.any()
    for b, (ids, mask, lp, traj) in enumerate(zip(r.completion_ids, r.tool_mask, r.old_logps, r.completions)):
        # the row's tokens are: reply, then (tool span, reply) per continued turn
        expected_ids, expected_mask = [], []
        messages = list(examples[b]["prompt"])
        prev = render_chat(smol_tok, messages, add_generation_prompt=True, tools=TOOLS)
        for reply in SCRIPT[b][:traj.turns]:
            if expected_ids:  # the tool span before this reply: template rendering of what followed the last reply
                full = render_chat(smol_tok, messages, add_generation_prompt=True, tools=TOOLS)
                span = encode(smol_tok, full[len(prev):])
                expected_ids += span
                expected_mask += [0] * len(span)
                prev = full
            reply_ids = encode(smol_tok, reply)
            expected_ids += reply_ids
            expected_mask += [1] * len(reply_ids)
            prev += reply
            messages.append({"role": "assistant", "content": reply})
            if "z3_solve" in reply:
                messages.append({"role": "tool", "name": "z3_solve", "content": json.dumps(
                    {"success": True, "output": "sat\n", "sat_result": "sat", "error": None})})
        assert ids.tolist() == expected_ids, f"row {b}"
        assert mask.tolist() == expected_mask, f"row {b}"
        assert np.all(lp[mask == 0] == 0.0) and np.all(lp[mask == 1] == -1.0)
        assert traj.messages == messages  # the trajectory the rewards see is the scratchpad's own
    for span in sampler.sessions[-1].extended[0].values():
        text = smol_tok.decode(span)
        assert text.startswith("<|im_end|>") and "<|im_start|>tool" in text and text.endswith("assistant\n")
    host = grpo.pack(r, np.ones(len(SCRIPT), np.float32), prompt_len=256, budget=400, grad_accum=1,
                     pad_id=0, mask_truncated=False)
    assert host.loss_mask.sum() == sum(float(m.sum()) for m in r.tool_mask)
    assert host.loss_mask.sum() < host.completion_mask.sum()
    assert r.texts[0] == SOLVE + FINISH


def test_turn_limit_and_budget_end_rows(smol_tok):
    r, _, _ = _rollout(smol_tok, FixedRunner(), max_turns=1)
    assert [t.termination for t in r.completions] == ["max_turns", "finish", "max_turns", "no_tool_call"]
    assert all(m.min() == 1 for m in r.tool_mask)
    r, _, _ = _rollout(smol_tok, FixedRunner(), budget=60)  # no room for the tool response and another turn
    assert r.truncated[0] and r.truncated[2] and not r.truncated[1]
    assert all(len(ids) <= 60 for ids in r.completion_ids)


def test_real_z3_observations(smol_tok):
    from reasoner.verifiers.z3_runner import Z3Runner

    runner = Z3Runner(timeout_s=10.0)
    try:
        r, _, _ = _rollout(smol_tok, runner)
    finally:
        runner.close()
    obs = r.completions[0].smt_observations
    assert [o["sat_result"] for o in obs] == ["sat"] and obs[0]["success"]
    tool_msgs = [m for m in r.completions[2].messages if m["role"] == "tool"]
    assert len(tool_msgs) == 2 and json.loads(tool_msgs[0]["content"])["sat_result"] == "sat"


def test_config_tool_and_grpo_step_with_tiny_model(tok_dir):  # noqa: F811
    from reasoner.rewards import CompositeReward

    # SmolLM2's tokenizer (the word-level test vocabulary cannot spell "</tool_call>") under a tiny random model
    cfg = tiny(tok_dir, "--config.grpo.max_new_tokens=6", "--config.grpo.max_completion_tokens=24",
               "--config.grpo.max_turns=3", "--config.grpo.tool=scratchpad",
               "--config.model.tokenizer=smollm2-135m-instruct", "--config.model.random.vocab_size=49152")
    steps = grpo.build_grpo(cfg, mesh=one_device_mesh())
    tool = grpo.tool_from_config(cfg, steps.run.tokenizer)
    assert isinstance(tool, ScratchpadTool)
    with pytest.raises(ValueError, match="scratchpad"):
        grpo.tool_from_config(tiny(tok_dir, "--config.grpo.tool=z3"), steps.run.tokenizer)
    examples = [{"prompt": [{"role": "user", "content": "say something"}], "answer": "yes"},
                {"prompt": [{"role": "user", "content": "one two three"}], "answer": "no"}]
    reward = CompositeReward.from_config([{"name": "exact_match"}])
    with tool:
        state, m = grpo.generation_step(steps, grpo.sampler_for(steps.run), steps.run.state, examples=examples,
                                        reward=reward, tool=tool, seed=0)
        assert np.isfinite(m["loss"]) and int(state.step) == 1
        assert all(t.termination in ("no_tool_call", "max_turns") for t in tool.trajectories())
    assert tool._runner is None  # close() stopped the Z3 pool the tool started


def test_smt_task_prompts_as_the_evaluation_and_rewards_read_trajectories(smol_tok, shared_data):
    from reasoner.rewards import CompositeReward
    from reasoner.tasks.logic_llm import load_problems, render_messages

    problem = next(p for p in load_problems(shared_data, "folio", limit=40) if p.answer in ("A", "B"))
    record = {"id": problem.id, "context": problem.context, "question": problem.question,
              "options": list(problem.options), "answer": problem.answer}
    example = as_example(record, task="smt", dataset="folio")
    assert example["prompt"] == render_messages(problem)
    tool = ScratchpadTool(smol_tok)
    # the SMT evaluation's SamplerPolicy renders the same conversation with the same tools
    assert tool.prompt_ids(example["prompt"]) == encode(smol_tok, render_chat(
        smol_tok, render_messages(problem), add_generation_prompt=True, tools=TOOLS))
    r, _, _ = _rollout(smol_tok, FixedRunner(), examples=[example] * len(SCRIPT))
    reward = CompositeReward.from_config([{"name": "smt_scratchpad", "options": {"gate": None}}])
    got = reward(r.completions, examples=r.examples).total_B.tolist()
    assert got == [float(a == problem.answer) for a in ("B", "B", "A", "A")]
