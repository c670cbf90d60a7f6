"""Option-letter correctness and the SMT scratchpad reward (curation gate) on a real ProntoQA item, with
scripted rollouts through the real tool loop and Z3."""

from __future__ import annotations

import json

import pytest

from reasoner.rewards import CompositeReward

GOOD_SMT = """(declare-sort Animal 0)
(declare-const max Animal)
(declare-fun yumpus (Animal) Bool) (declare-fun dumpus (Animal) Bool) (declare-fun wumpus (Animal) Bool)
(declare-fun impus (Animal) Bool) (declare-fun tumpus (Animal) Bool) (declare-fun sour (Animal) Bool)
(assert (forall ((x Animal)) (=> (yumpus x) (dumpus x))))
(assert (forall ((x Animal)) (=> (dumpus x) (wumpus x))))
(assert (forall ((x Animal)) (=> (wumpus x) (impus x))))
(assert (forall ((x Animal)) (=> (impus x) (tumpus x))))
(assert (forall ((x Animal)) (=> (tumpus x) (not (sour x)))))
(assert (yumpus max))
(assert (sour max))
(check-sat)"""
TRIVIAL_SMT = "(declare-const p Bool)\n(assert true)\n(check-sat)"


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def prontoqa(shared_data):
    return json.loads((shared_data / "prontoqa" / "logic_llm_dev.json").read_text())[0]  # gold answer "B"


@pytest.fixture(scope="module")
def trajectories(prontoqa):
    from reasoner.agents.policies import ScriptedPolicy
    from reasoner.agents.scratchpad import run_scratchpad
    from reasoner.tasks.logic_llm import LogicProblem, render_messages
    from reasoner.verifiers.z3_runner import Z3Runner

    problem = LogicProblem(id=prontoqa["id"], dataset="prontoqa", context=prontoqa["context"],
                           question=prontoqa["question"], options=tuple(prontoqa["options"]), answer="B")
    scripts = {
        "gold": [call("z3_solve", smt_code=GOOD_SMT, timeout=10), call("finish", answer="B")],
        "trivial": [call("z3_solve", smt_code=TRIVIAL_SMT, timeout=10), call("finish", answer="B")],
        "no_smt": [call("finish", answer="B")],
        "wrong": [call("z3_solve", smt_code=GOOD_SMT, timeout=10), call("finish", answer="A")],
    }
    conversations, policy_scripts = [], {}
    for key, replies in scripts.items():
        messages = render_messages(problem)
        messages[1] = {**messages[1], "content": f"[{key}] " + messages[1]["content"]}
        conversations.append((key, messages))
        policy_scripts[messages[1]["content"]] = replies
    runner = Z3Runner(workers=1, timeout_s=10)
    try:
        trajs = run_scratchpad(ScriptedPolicy(policy_scripts), conversations, runner=runner)
    finally:
        runner.pool.close()
    return dict(zip(scripts, trajs))


def test_option_match_reads_letters_and_labels(prontoqa):
    reward = CompositeReward.from_config([{"name": "option_match"}])
    completions = ["B", "The answer is (B).", "False", "A) True", "True or false, I cannot say", ""]
    batch = reward(completions, examples=[prontoqa] * len(completions))
    assert batch.total_B.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    spans = CompositeReward.from_config([{"name": "option_match", "options": {"span_tag": "answer"}}])
    assert spans(["B", "<answer>B</answer>"], examples=[prontoqa] * 2).total_B.tolist() == [0.0, 1.0]


def test_scratchpad_reward_with_and_without_curation_gate(prontoqa, trajectories):
    assert trajectories["gold"].observations[0]["sat_result"] == "unsat"  # Z3 really refuted "Max is sour"
    names = ["gold", "trivial", "no_smt", "wrong"]
    reward = CompositeReward.from_config([
        {"name": "smt_scratchpad", "as": "plain", "options": {"gate": None}},
        {"name": "smt_scratchpad", "as": "gold", "options": {"gate": "gold"}},
        {"name": "smt_scratchpad", "as": "silver", "options": {"gate": "gold_or_silver"}},
    ])
    batch = reward([trajectories[n] for n in names], examples=[prontoqa] * len(names))
    assert batch.per_function_BxF.tolist() == [
        [1.0, 1.0, 1.0],  # correct with grounded evidence: Gold
        [1.0, 0.0, 1.0],  # correct, executable but trivial SMT: Silver
        [1.0, 0.0, 0.0],  # correct without any solver call: Rejected
        [0.0, 0.0, 0.0],  # wrong answer
    ]
    assert trajectories["gold"].correct is None  # the reward does not modify the trajectory
    bad = CompositeReward.from_config([{"name": "smt_scratchpad"}])
    assert bad(["not a trajectory"], examples=[prontoqa]).total_B.tolist() == [0.0]
    assert "expected a scratchpad Trajectory" in bad.counter_dict()["smt_scratchpad"]["last_error"]
    with pytest.raises(ValueError, match="gate='bronze'"):
        CompositeReward.from_config([{"name": "smt_scratchpad", "options": {"gate": "bronze"}}])
