"""The Sequent-Prover chain as files: rollouts -> curation -> multi-turn SFT records and DPO pairs -> `reasoner
train` on each, with the tool turns masked (tiny random model; the real chain runs in `reasoner demo smt`)."""

import json
import math
import os
import subprocess
import sys

import pytest

from reasoner.agents.policies import Reply
from reasoner.agents.rollouts import rollout_logic
from reasoner.agents.symbolic_teacher import SymbolicTeacher, encode_logic_llm
from reasoner.config import load_config
from reasoner.tasks.logic_llm import load_problems
from reasoner.verifiers.z3_runner import Z3Runner
from tests.tolerances import dpo_first_step_bounds, model_depth, prob_factor

TRIVIAL = '<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "(assert true)(check-sat)"}}</tool_call>'


class MixedPolicy:
    """Even episodes of a problem: the symbolic teacher (Gold); odd ones: a trivial script, then the same correct
    letter (Silver: correct and finished, but no evidence call) - a hard negative for DPO."""

    def __init__(self, teacher, gold):
        self.teacher, self.gold, self.kind, self.count = teacher, gold, {}, {}

    def respond(self, conversations):
        out = []
        for messages in conversations:
            if id(messages) not in self.kind:
                prompt = next(m["content"] for m in messages if m["role"] == "user")
                self.count[prompt] = self.count.get(prompt, 0) + 1
                self.kind[id(messages)] = (messages, self.count[prompt] % 2 == 1, prompt)
            _, teacher, prompt = self.kind[id(messages)]
            if teacher:
                out.append(self.teacher.respond([messages])[0])
            else:
                turn = sum(m["role"] == "assistant" for m in messages)
                letter = self.gold[prompt]
                out.append(Reply(TRIVIAL if turn == 0 else
                                 f'<tool_call>{{"name": "finish", "arguments": {{"answer": "{letter}"}}}}</tool_call>'))
        return out


@pytest.mark.slow
def test_rollouts_feed_sft_and_dpo_training(shared_data, tmp_path):
    from reasoner.tasks.logic_llm import render_prompt

    problems = load_problems(shared_data, "prontoqa", limit=4)
    encoded, _ = encode_logic_llm(problems)
    policy = MixedPolicy(SymbolicTeacher(encoded), {render_prompt(p): p.answer for p in problems})
    with Z3Runner(timeout_s=10, workers=2) as runner:
        result = rollout_logic(policy, problems, runner=runner, samples=2)
    assert result.metrics["labels"] == {"gold": 4, "silver": 4, "rejected": 0}
    assert len(result.sft) == 4 and len(result.pairs) == 4 and all(p["hard_negative"] for p in result.pairs)
    for name, rows in (("sft", result.sft), ("dpo", result.pairs)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # `reasoner train` as a user runs it, on one CPU device (the suite's 8 simulated devices would need a batch of 8)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    for kind, config in (("sft", "configs/sft_smt.py:tiny"), ("dpo", "configs/dpo_smt.py:tiny")):
        done = subprocess.run([sys.executable, "-m", "reasoner.cli", "train", "--config", config,
                               f"--config.data.path={tmp_path / kind}", "--config.data.seq_len=2048",
                               "--config.train.batch_size=2", "--workdir", str(tmp_path / f"run_{kind}"),
                               "--no-progress"], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and f"[{kind}] done" in done.stdout, done.stderr[-2000:]
    metrics = [json.loads(line) for line in (tmp_path / "run_dpo" / "metrics.jsonl").read_text().splitlines()]
    first = next(m for m in metrics if "loss" in m)
    # policy = reference at the first step: -log sigmoid(0) = ln 2, within the float32 error of the two forwards
    # (tests.tolerances.dpo_first_step_bounds at the tiny model's depth over the longest sequence, 2048)
    config = load_config("configs/dpo_smt.py:tiny")
    k = prob_factor(model_depth(config.model.random, seq_len=2048))
    *_, loss_tol = dpo_first_step_bounds(factor=k, beta=float(config.dpo.beta), logps_chosen=first["logps/chosen"],
                                         logps_rejected=first["logps/rejected"])
    assert abs(first["loss"] - math.log(2)) <= loss_tol, (first["loss"], loss_tol)
