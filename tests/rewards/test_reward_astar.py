"""A* rewards through the registry: hand-derived values (below, at and above 1) on a small program, real DeepRD
records for Dijkstra's trace and broken traces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reasoner.data.deeprd import DeepRDSpec, generate_problem, problem_record
from reasoner.data.program_json import atom_to_json, program_to_json
from reasoner.rewards import CompositeReward
from search.astar import solve
from search.hypergraph import compile_program
from search.verbalize import Verbalizer
from tests.search.test_rewards import DIAMOND_CASES, diamond_program, diamond_step

NAMES = ("correctness", "step_count", "astar_dependency", "astar_true")


@pytest.fixture(scope="module")
def problem():
    spec = DeepRDSpec()
    p = generate_problem(seed=3, split="train", index=0, spec=spec)
    record = problem_record(p)
    verbalizer = Verbalizer(p.program, dataset="deeprd", rule_texts=json.loads(record["rule_texts"]))
    hg = compile_program(p.program)
    traces = {h: solve(hg, p.goal_atom, heuristic=h).trace for h in ("zero", "dependency", "true")}
    return record, verbalizer, traces


def composite():
    return CompositeReward.from_config(
        [{"name": "astar", "as": n, "options": {"reward": n, "dataset": "deeprd"}} for n in NAMES])


def test_hand_derived_rewards_through_the_registry():
    """The diamond of tests/search/test_rewards.py (derivations there) as a record, traces verbalized as a model
    would write them: the registry returns the hand-derived rewards, stored as float32."""
    prog, goal = diamond_program()
    record = {"program": program_to_json(prog), "goal": atom_to_json(goal)}
    verbalizer = Verbalizer(prog, dataset="deeprd")
    completions = [verbalizer.trace([diamond_step(r) for r in steps]) for steps, _, _ in DIAMOND_CASES]
    batch = composite()(completions, examples=[record] * len(completions))
    for row, (steps, step_reward, astar_reward) in enumerate(DIAMOND_CASES):
        want = [1.0 if step_reward else 0.0, step_reward, astar_reward, astar_reward]
        # the float64 reward rounded once to float32: equal to float32(hand value) or one float32 ulp from it
        got = batch.per_function_BxF[row]
        assert np.all(np.abs(got - np.float32(want)) <= np.spacing(np.float32(want))), (steps, got, want)


def test_broken_traces_score_zero(problem):
    record, verbalizer, traces = problem
    true_trace = verbalizer.trace(traces["true"])
    dropped = verbalizer.trace(traces["true"][1:])  # first step removed: later premises are unproved
    completions = [true_trace, "Chatter before.\n\n" + true_trace + "\n\nDone.", dropped, "", "garbage \x00 text"]
    batch = composite()(completions, examples=[record] * len(completions))
    per = {n: batch.per_function_BxF[:, i].tolist() for i, n in enumerate(NAMES)}
    assert per["correctness"] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert per["astar_true"][0] == per["astar_true"][1] > 0  # chatter around the trace changes nothing
    for n in NAMES:
        assert per[n][2:] == [0.0, 0.0, 0.0]
    assert all(c["errors"] == 0 for c in composite().counter_dict().values())


def test_dijkstra_trace_is_correct_but_less_rewarded(problem):
    record, verbalizer, traces = problem
    zero = verbalizer.trace(traces["zero"])
    batch = composite()([zero], examples=[record])
    correctness, steps, dep, true = batch.per_function_BxF[0].tolist()
    assert correctness == 1.0
    # Step count: Eq. 7 with alpha = steps of the shortest proof = the DeepRD lookahead L (chain of unary rules).
    depth = record["depth"]
    assert len(traces["zero"]) > depth
    # stored as float32: the float64 value rounded once, so within one float32 ulp of it
    want = 0.5 ** ((len(traces["zero"]) - depth) / depth)
    assert abs(steps - want) <= np.spacing(np.float32(want))
    # Dijkstra pops distractor items whose cost-to-go is inf (Fig. 7). DeepRD rules are unary, so the dependency
    # relaxation is the problem itself and those items have h = inf there too: both A* rewards are 0.
    assert true == 0.0 and dep == 0.0


def test_record_without_program_is_counted_as_error():
    reward = composite()
    batch = reward(["anything"], examples=[{"id": "x"}])
    assert batch.total_B.tolist() == [0.0]
    assert reward.counter_dict()["astar_true"]["errors"] == 1
    assert "'program'" in reward.counter_dict()["astar_true"]["last_error"]
