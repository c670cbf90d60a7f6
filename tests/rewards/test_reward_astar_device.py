"""Device A* rewards (one jitted kernel call per batch) against the host ProblemScorer path, on generated DeepRD
records: A* traces under each heuristic, wrong traces (a step dropped, steps reversed, a foreign problem's trace),
truncated text, garbage and empty completions. Also the evaluation's device scoring against its host scoring."""

from __future__ import annotations

import random

import numpy as np
import pytest

from reasoner.data.astar_traces import deeprd_records
from reasoner.data.deeprd import DeepRDSpec
from reasoner.evaluation import evaluate_completions, score_problems
from reasoner.rewards import CompositeReward, build_reward
from reasoner.rewards.astar_device import _score_batch
from reasoner.rewards.registry import RewardFailure
from reasoner.tasks.astar import problem_from_record, sft_completion
from search.astar import solve
from tests.tolerances import score_atol, ulps

NAMES = ("correctness", "step_count", "astar_dependency", "astar_true")
SPEC = DeepRDSpec(lookahead=(2, 4), branches=(2, 3), extra_ratio=0.3, max_degree=3)
G = 8


def _candidates(problem, other, rng: random.Random) -> list[str]:
    """G completions of one problem: correct, wrong, truncated, garbage, empty."""
    traces = {h: solve(problem.program, problem.goal, heuristic=h).trace for h in ("zero", "dependency", "true")}
    v = problem.verbalizer
    true_text = v.trace(traces["true"])
    return [
        v.trace(traces["dependency"]),
        "Let me search.\n\n" + true_text + "\n\nSo the goal holds.",
        v.trace(traces["zero"]),
        v.trace(traces["true"][1:]),                      # first step dropped: a later premise is unproved
        v.trace(list(reversed(traces["zero"]))),          # valid instantiations in a wrong order
        true_text[: rng.randint(1, max(1, len(true_text) - 1))],  # truncated mid-text
        rng.choice(["garbage \x00 text ]]", other, "Since nothing is a thing, nothing is a thing."]),
        "",
    ]


@pytest.fixture(scope="module")
def corpus():
    problems = [problem_from_record(r) for r in deeprd_records(seed=5, split="train", size=40, spec=SPEC)]
    rng = random.Random(0)
    texts = [_candidates(p, sft_completion(problems[i - 1], heuristic="true"), rng) for i, p in enumerate(problems)]
    return problems, texts


def test_device_rewards_equal_host_rewards(corpus):
    problems, texts = corpus
    completions = [t for row in texts for t in row]
    examples = [p.record for p in problems for _ in range(G)]
    assert len(completions) >= 300
    host = CompositeReward.from_config([{"name": "astar", "as": n, "options": {"reward": n}} for n in NAMES])
    device = CompositeReward.from_config([{"name": "astar", "as": n, "options": {"reward": n, "device": True}}
                                          for n in NAMES])
    want, got = host(completions, examples=examples), device(completions, examples=examples)
    np.testing.assert_allclose(got.per_function_BxF, want.per_function_BxF, rtol=0,
                               atol=score_atol(np.nanmax(np.abs(want.per_function_BxF))))
    # the total: a sum of F unit-weight terms, each within score_atol, plus F roundings of the sum
    F = want.per_function_BxF.shape[1]
    np.testing.assert_allclose(got.total_B, want.total_B, rtol=0,
                               atol=F * score_atol(np.nanmax(np.abs(want.per_function_BxF)))
                               + ulps(np.nanmax(np.abs(want.total_B)), F))
    assert all(c["errors"] == 0 and c["non_finite"] == 0 for c in device.counter_dict().values())
    # the corpus exercises every outcome: correct with rewards 1, correct but worse, wrong
    correct = want.per_function_BxF[:, 0]
    assert 0 < correct.mean() < 1
    assert np.any((correct == 1) & (want.per_function_BxF[:, 3] < 1))
    # the next step's batch (other completions of the same sizes) reuses the compiled program
    compiled = _score_batch._cache_size()
    rotated = completions[G:] + completions[:G]
    again = device(rotated, examples=examples[G:] + examples[:G])
    assert _score_batch._cache_size() == compiled
    np.testing.assert_allclose(again.per_function_BxF, np.roll(got.per_function_BxF, -G, axis=0), atol=0)


def test_device_reward_bad_records_score_zero_and_are_counted(corpus):
    problems, texts = corpus
    good = problems[0].record
    bad = {"id": "broken", "program": "{not json", "goal": good["goal"]}
    fn = build_reward("astar", reward="correctness", device=True)
    out = fn([texts[0][0], texts[0][0], "x"], examples=[good, bad, {"goal": good["goal"]}])
    assert out[0] == 1.0
    assert isinstance(out[1], RewardFailure) and isinstance(out[2], RewardFailure)
    assert "program" in out[2].message
    comp = CompositeReward.from_config([{"name": "astar", "options": {"reward": "correctness", "device": True}}])
    batch = comp([texts[0][0], "x"], examples=[good, bad])
    assert batch.total_B.tolist() == [1.0, 0.0] and comp.counter_dict()["astar"]["errors"] == 1


def test_evaluation_device_scoring_equals_host(corpus):
    problems, texts = corpus
    subset, comps = problems[:16], [row[:4] for row in texts[:16]]  # K = 4 samples per problem
    host = score_problems(subset, comps, scoring="host")
    device = score_problems(subset, comps, scoring="device")
    for hrow, drow in zip(host, device):
        for h, d in zip(hrow, drow):
            assert (h.correct, h.steps_parsed, h.pushes, h.v_pops) == (d.correct, d.steps_parsed, d.pushes, d.v_pops)
            assert (h.efficiency_pushes, h.efficiency_pops) == (d.efficiency_pushes, d.efficiency_pops)
            for k in NAMES:
                assert abs(h.rewards[k] - d.rewards[k]) <= score_atol(h.rewards[k])
    rep_h = evaluate_completions(subset, comps, label="h", ks=(1, 4), n_resamples=500, scoring="host").report
    rep_d = evaluate_completions(subset, comps, label="d", ks=(1, 4), n_resamples=500, scoring="device").report
    for key in ("accuracy", "efficiency_pushes", "efficiency_pops", "reliability"):
        assert rep_h[key] == rep_d[key], key


def test_bad_scoring_names_the_setting(corpus):
    from reasoner.evaluation import EvalSettings

    with pytest.raises(ValueError, match="scoring='gpu'"):
        EvalSettings(scoring="gpu")
    with pytest.raises(ValueError, match="scoring='gpu'"):
        score_problems(corpus[0][:1], [["x"]], scoring="gpu")
