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
