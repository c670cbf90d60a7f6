"""A* rewards through the registry on real DeepRD records: the A* trace scores 1, broken traces score 0."""

from __future__ import annotations

import json

import pytest

from reasoner.data.deeprd import DeepRDSpec, generate_problem, problem_record
from reasoner.rewards import CompositeReward
from search.astar import solve
from search.hypergraph import compile_program
from search.verbalize import Verbalizer

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


def test_astar_trace_scores_one_and_broken_traces_zero(problem):
    record, verbalizer, traces = problem
    true_trace = verbalizer.trace(traces["true"])
    dropped = verbalizer.trace(traces["true"][1:])  # first step removed: later premises are unproved
    completions = [true_trace, "Chatter before.\n\n" + true_trace + "\n\nDone.", dropped, "", "garbage \x00 text"]
    batch = composite()(completions, examples=[record] * len(completions))
    per = {n: batch.per_function_BxF[:, i].tolist() for i, n in enumerate(NAMES)}
    assert per["correctness"] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert per["astar_true"][:2] == [1.0, 1.0]  # the A* (true cost-to-go) trace itself scores exactly 1
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
    assert steps == pytest.approx(0.5 ** ((len(traces["zero"]) - depth) / depth), rel=1e-6)  # stored as float32
    # Dijkstra pops distractor items whose cost-to-go is inf (Fig. 7). DeepRD rules are unary, so the dependency
    # relaxation is the problem itself and those items have h = inf there too: both A* rewards are 0.
    assert true == 0.0 and dep == 0.0


def test_dependency_trace_scores_one_on_its_own_reward(problem):
    record, verbalizer, traces = problem
    batch = composite()([verbalizer.trace(traces["dependency"])], examples=[record])
    assert batch.per_function_BxF[0, NAMES.index("astar_dependency")] == 1.0


def test_record_without_program_is_counted_as_error():
    reward = composite()
    batch = reward(["anything"], examples=[{"id": "x"}])
    assert batch.total_B.tolist() == [0.0]
    assert reward.counter_dict()["astar_true"]["errors"] == 1
    assert "'program'" in reward.counter_dict()["astar_true"]["last_error"]
