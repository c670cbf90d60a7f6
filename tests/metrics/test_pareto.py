"""Pareto front against the O(N^2) definition; the accuracy-efficiency PNG is written and well formed."""

from __future__ import annotations

import numpy as np
import pytest

from reasoner.metrics import pareto


def brute_front(pts):
    dominated = [
        any(np.all(q >= p) and np.any(q > p) for j, q in enumerate(pts) if j != i) for i, p in enumerate(pts)
    ]
    return [i for i, d in enumerate(dominated) if not d]


@pytest.mark.parametrize("seed", range(30))
def test_front_equals_definition(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 25))
    pts = rng.integers(0, 6, size=(n, 2)) / 5.0  # a coarse grid forces ties and duplicates
    assert pareto.pareto_front(pts).tolist() == brute_front(pts)


def test_front_known_example_and_bad_input():
    pts = [[0.9, 0.5], [0.5, 0.9], [0.6, 0.6], [0.4, 0.4], [0.9, 0.5], [0.9, 0.4]]
    assert pareto.pareto_front(pts).tolist() == [0, 1, 2, 4]
    assert pareto.pareto_front(np.zeros((0, 2))).tolist() == []
    with pytest.raises(ValueError, match="NaN"):
        pareto.pareto_front([[0.1, np.nan]])
    with pytest.raises(ValueError, match=r"\[N, 2\]"):
        pareto.pareto_front([0.1, 0.2])


def test_plot_writes_png_with_fronts(tmp_path):
    points = [
        pareto.ModelPoint("SFT", 0.60, {"pushes": 0.90, "pops": 0.80}, (0.5, 0.7), {"pushes": (0.85, 0.95)}, "sft"),
        pareto.ModelPoint("GRPO correctness", 0.80, {"pushes": 0.70, "pops": 0.60}, (0.72, 0.86), group="grpo"),
        pareto.ModelPoint("GRPO A* true", 0.75, {"pushes": 0.85, "pops": 0.90}, group="grpo"),
        pareto.ModelPoint("GRPO steps", 0.55, {"pushes": 0.95, "pops": 0.70}, group="grpo"),
    ]
    out = tmp_path / "plots" / "pareto.png"
    fronts = pareto.plot_accuracy_efficiency(points, path=out, title="DeepRD",
                                             reference_efficiency={"pushes": {"A* (true)": 0.97}})
    assert fronts["pushes"] == ["SFT", "GRPO correctness", "GRPO A* true", "GRPO steps"]
    assert fronts["pops"] == ["GRPO correctness", "GRPO A* true"]
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 504)
    with pytest.raises(ValueError, match="no efficiency"):
        pareto.plot_accuracy_efficiency([pareto.ModelPoint("x", 0.5, {"pushes": 0.5})], path=out)


def test_summarise_model_uses_correct_examples_only():
    correct = [True, False, True, True, False]
    pushes = [1.0, None, 0.5, 0.75, 0.2]
    point, report = pareto.summarise_model("SFT", correct=correct, efficiency={"pushes": pushes, "pops": pushes},
                                           n_resamples=500, seed=1)
    assert point.accuracy == 0.6 and report["accuracy"]["method"] == "wilson"
    assert point.efficiency["pushes"] == pytest.approx(0.75)  # mean of 1.0, 0.5, 0.75; the incorrect 0.2 is ignored
    low, high = point.efficiency_interval["pushes"]
    assert 0.5 <= low <= 0.75 <= high <= 1.0 and report["efficiency_pushes"]["n"] == 3
    none_point, none_report = pareto.summarise_model("base", correct=[False, False],
                                                     efficiency={"pushes": [None, None]})
    assert none_report["efficiency_pushes"] is None and none_point.efficiency["pushes"] == 0.0
    with pytest.raises(ValueError, match=r"efficiency\['pops'\] has 1 entries"):
        pareto.summarise_model("x", correct=[True, True], efficiency={"pops": [1.0]})


def _numpy_problem_bootstrap(correct_PxK, eff_PxK, *, seed, n_resamples, confidence=0.95):
    """Independent numpy reimplementation of the problem-level bootstrap of the efficiency: draw the P problems with
    replacement (`default_rng(seed).integers(0, P, size=(n_resamples, P))`, one block since n_resamples <= 1000),
    pool the correct attempts of the drawn problems (with repeats), take their mean; resamples with no correct attempt
    are dropped."""
    P = correct_PxK.shape[0]
    idx = np.random.default_rng(seed).integers(0, P, size=(n_resamples, P))
    stats = []
    for row in idx:
        pooled = np.concatenate([eff_PxK[p][correct_PxK[p]] for p in row])
        if pooled.size:
            stats.append(pooled.mean())
    alpha = 1 - confidence
    return np.quantile(stats, [alpha / 2, 1 - alpha / 2]), n_resamples - len(stats)


def test_efficiency_interval_resamples_problems_not_attempts():
    """K = 16 samples per problem. Problem 0 has 16 identical correct attempts at efficiency 0.25; problems 1-7 one
    correct attempt each at 0.8-1.0; problems 8-9 none. The estimate is the mean over the 23 correct attempts, as
    before; resampling attempts treats problem 0's 16 copies as 16 independent draws and gives a narrow interval,
    resampling problems (each resample in or out of problem 0 as a whole) a much wider one, which equals the
    independent reimplementation. The report says how many problems were resampled and how many resamples drew no
    correct attempt."""
    from reasoner.metrics.intervals import bootstrap_interval

    P, K = 10, 16
    correct = np.zeros((P, K), bool)
    eff = np.full((P, K), 0.5)  # values of incorrect attempts are ignored
    correct[0] = True
    eff[0] = 0.25
    for p in range(1, 8):
        correct[p, 3] = True
        eff[p, 3] = 0.8 + 0.2 * (p - 1) / 6
    problem = np.repeat(np.arange(P), K)
    values = [float(v) if ok else None for v, ok in zip(eff.ravel(), correct.ravel())]
    point, report = pareto.summarise_model("m", correct=correct.ravel(), efficiency={"pushes": values},
                                           problem=problem, n_resamples=1000, seed=5)
    got = report["efficiency_pushes"]
    attempt_level = bootstrap_interval(eff[correct], n_resamples=1000, seed=5)  # what was reported before
    assert got["estimate"] == attempt_level.estimate == float(np.mean(eff[correct]))  # unchanged, bit for bit
    (low, high), undefined = _numpy_problem_bootstrap(correct, eff, seed=5, n_resamples=1000)
    tol = 64 * np.finfo(np.float64).eps
    assert (got["low"], got["high"]) == (pytest.approx(low, abs=tol), pytest.approx(high, abs=tol))
    assert got["undefined_resamples"] == undefined == 0  # 8 of 10 problems solved: a resample misses all w.p. 1e-7
    assert (got["method"], got["n"], got["clusters"]) == ("cluster-bootstrap-percentile", 23, P)
    assert got["high"] - got["low"] > 2.5 * (attempt_level.high - attempt_level.low)
    assert point.efficiency_interval["pushes"] == (got["low"], got["high"])
    # the accuracy interval accounts for the same correlation (problem 0 always right, 8-9 always wrong)
    assert report["accuracy"]["method"] == "wilson-design-effect" and report["accuracy"]["design_effect"] > 1
    assert report["accuracy"]["estimate"] == correct.mean()


def test_single_attempt_problems_keep_wilson_and_resample_every_problem():
    """K = 1 (the paper's greedy evaluation, problem=None): accuracy is the plain Wilson interval; the efficiency
    estimate is unchanged and its resampling draws every problem, the unsolved ones included."""
    from reasoner.metrics.intervals import wilson_interval

    correct = [True, False, True, True, False, False]
    eff = [0.5, None, 1.0, 0.75, None, None]
    _, report = pareto.summarise_model("g", correct=correct, efficiency={"pushes": eff}, n_resamples=800, seed=2)
    assert report["accuracy"] == wilson_interval(3, 6).as_dict()
    (low, high), undefined = _numpy_problem_bootstrap(np.array(correct)[:, None],
                                                      np.array([[v or 0.0] for v in eff]), seed=2, n_resamples=800)
    got = report["efficiency_pushes"]
    assert got["estimate"] == 0.75 and (got["low"], got["high"]) == (pytest.approx(low), pytest.approx(high))
    assert got["undefined_resamples"] == undefined > 0  # (1/2)^6 of resamples draw no solved problem
    with pytest.raises(ValueError, match="one int problem index per attempt"):
        pareto.summarise_model("x", correct=[True, True], efficiency={}, problem=[0])
