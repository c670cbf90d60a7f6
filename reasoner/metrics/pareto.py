"""Accuracy-efficiency Pareto fronts and the plot of the A* paper's Figs. 2-4.

A point dominates another when it is at least as good on both axes and strictly better on one (both axes
are maximised: accuracy and efficiency are proportions where higher is better). The front is the set of
points no other point dominates; identical points are all on it. The plot has one panel per efficiency
measure (pushes, pops), accuracy on the y axis with its interval, efficiency on the x axis with its
interval, front points ringed and joined by the staircase bounding the region they dominate, and optional
dashed reference lines for the efficiency of the search algorithms themselves (Fig. 2's dashed lines).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np


MARKERS = "osD^v<>ph*"


@dataclasses.dataclass(frozen=True)
class ModelPoint:
    """One evaluated model: accuracy and efficiencies, each with an optional (low, high) interval."""

    label: str
    accuracy: float
    efficiency: Mapping[str, float]
    accuracy_interval: tuple[float, float] | None = None
    efficiency_interval: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    group: str = ""  # points of one group share a colour (e.g. one reward model)
    partial: bool = False  # a model of a run that did not finish: drawn with an open marker


def summarise_model(
    label: str,
    *,
    correct: Sequence[bool],
    efficiency: Mapping[str, Sequence[float | None]],
    problem: Sequence[int] | None = None,
    group: str = "",
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> tuple[ModelPoint, dict]:
    """Accuracy and each efficiency with their intervals, as the paper reports them (Wilson for accuracy, bootstrap
    for efficiency), with problems as the sampled unit.

    correct[i] / efficiency[key][i] describe attempt i, and problem[i] (in [0, P)) is the problem it answered (None:
    every attempt is its own problem, the paper's greedy K = 1). efficiency[key][i] is the attempt's proportion
    against the shortest proof; it is only defined for correct proofs (§4.1), so entries of incorrect attempts are
    ignored (they may be None). The efficiency estimate is the mean over all correct attempts; its interval is the
    problem-level (cluster) percentile bootstrap (`intervals.cluster_bootstrap_interval`): the P problems, solved or
    not, are resampled with replacement and each resample's statistic is the mean over its correct attempts, since the
    K attempts of one problem are correlated and resampling attempts would give too narrow an interval. A resample
    that draws no solved problem has no efficiency and is dropped (counted in the report's `undefined_resamples`):
    the interval is conditional on the efficiency being defined, as the estimate is. The paper (greedy, K = 1) says
    only "bootstrap CIs for efficiency"; with K = 1 problems and attempts coincide, the unsolved problems still take
    part in the resampling. With no correct attempt at all the efficiency is undefined: the report says None and the
    plotted point sits at efficiency 0.

    Accuracy: the Wilson interval over the attempts when each problem has one attempt; with several attempts per
    problem the Wilson interval with the design-effect adjusted number of trials (`intervals.
    clustered_wilson_interval`), for the same reason. Returns (point for `plot_accuracy_efficiency`, JSON-ready
    report).
    """
    from reasoner.metrics.intervals import cluster_bootstrap_interval, clustered_wilson_interval, wilson_interval

    correct_arr = np.asarray(correct, bool)
    if correct_arr.ndim != 1 or correct_arr.size == 0:
        raise ValueError(f"correct has shape {correct_arr.shape}: expected a non-empty 1-D sequence")
    if problem is None:
        problem_arr = np.arange(correct_arr.size)
    else:
        problem_arr = np.asarray(problem)
        if problem_arr.shape != correct_arr.shape or problem_arr.dtype.kind not in "iu":
            raise ValueError(f"problem has shape {problem_arr.shape} ({problem_arr.dtype}): expected one int problem "
                             f"index per attempt ({correct_arr.size})")
        if problem_arr.min() < 0:
            raise ValueError("problem: expected indices >= 0")
    # problems renumbered 0..P-1 in sorted order (an index that never occurs is no problem)
    _, problem_arr = np.unique(problem_arr, return_inverse=True)
    n_problems = int(problem_arr.max()) + 1
    trials = np.bincount(problem_arr, minlength=n_problems)
    if np.all(trials == 1):
        acc = wilson_interval(int(correct_arr.sum()), int(correct_arr.size), confidence=confidence)
    else:
        solved = np.bincount(problem_arr, weights=correct_arr.astype(np.float64), minlength=n_problems)
        acc = clustered_wilson_interval(solved, trials, confidence=confidence)
    report = {"label": label, "examples": int(correct_arr.size), "accuracy": acc.as_dict()}
    point_eff, point_eff_iv = {}, {}
    for key, values in efficiency.items():
        if len(values) != correct_arr.size:
            raise ValueError(f"efficiency[{key!r}] has {len(values)} entries: expected one per example "
                             f"({correct_arr.size})")
        kept = np.array([float(v) for v, ok in zip(values, correct_arr) if ok], np.float64)
        if kept.size == 0:
            report[f"efficiency_{key}"] = None
            point_eff[key] = 0.0
            continue
        eff = cluster_bootstrap_interval(kept, problem_arr[correct_arr], n_clusters=n_problems, confidence=confidence,
                                         n_resamples=n_resamples, seed=seed)
        report[f"efficiency_{key}"] = eff.as_dict()
        point_eff[key], point_eff_iv[key] = eff.estimate, (eff.low, eff.high)
    point = ModelPoint(label, acc.estimate, point_eff, (acc.low, acc.high), point_eff_iv, group)
    return point, report


def pareto_front(points) -> np.ndarray:
    """Indices (ascending) of the non-dominated rows of an [N, 2] array, both columns maximised.

    Sort by the first axis descending (second descending for ties); a point is on the front iff its second
    coordinate is >= the best second coordinate among points strictly better on the first axis, and it is not
    beaten on the second axis by a point equal on the first. O(N log N).
    """
    pts = np.asarray(points, np.float64)
    if pts.ndim != 2 or pts.shape[1] != 2:
        raise ValueError(f"points of shape {pts.shape}: expected [N, 2]")
    if not np.all(np.isfinite(pts)):
        raise ValueError("points contain NaN or inf: a Pareto front needs finite coordinates")
    if len(pts) == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((-pts[:, 1], -pts[:, 0]))
    on_front = np.zeros(len(pts), bool)
    best_y_strictly_right = -np.inf  # best y among points with strictly larger x
    i = 0
    while i < len(order):
        j = i
        x = pts[order[i], 0]
        while j < len(order) and pts[order[j], 0] == x:
            j += 1
        block = order[i:j]
        block_best_y = pts[block[0], 1]  # sorted descending in y within equal x
        for idx in block:
            y = pts[idx, 1]
            on_front[idx] = y == block_best_y and y > best_y_strictly_right
        best_y_strictly_right = max(best_y_strictly_right, block_best_y)
        i = j
    return np.flatnonzero(on_front)


def _front_of(points: Sequence[ModelPoint], key: str) -> np.ndarray:
    return pareto_front([[p.efficiency[key], p.accuracy] for p in points])


def plot_accuracy_efficiency(
    points: Sequence[ModelPoint],
    *,
    path,
    efficiency_keys: Sequence[str] = ("pushes", "pops"),
    reference_efficiency: Mapping[str, Mapping[str, float]] | None = None,
    title: str | None = None,
) -> dict[str, list[str]]:
    """Write a PNG with one accuracy-vs-efficiency panel per key; returns the front labels per key.

    reference_efficiency: {key: {name: efficiency}} drawn as dashed vertical lines (e.g. A* itself).
    """
    fronts = plot_accuracy_efficiency_grid({"": (points, reference_efficiency)}, path=path,
                                           efficiency_keys=efficiency_keys, title=title)
    return fronts[""]


def plot_accuracy_efficiency_grid(
    rows: Mapping[str, tuple[Sequence[ModelPoint], Mapping[str, Mapping[str, float]] | None]],
    *,
    path,
    efficiency_keys: Sequence[str] = ("pushes", "pops"),
    title: str | None = None,
) -> dict[str, dict[str, list[str]]]:
    """One row of panels per entry of `rows` ({row title: (points, reference lines)}), one panel per key; each
    row has its own Pareto front (a dataset's models are compared with each other only). Returns
    {row title: {key: front labels}}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows or any(not points for points, _ in rows.values()):
        raise ValueError("points is empty: nothing to plot")
    for points, _ in rows.values():
        for p in points:
            missing = [k for k in efficiency_keys if k not in p.efficiency]
            if missing:
                raise ValueError(f"point {p.label!r} has no efficiency {missing}: expected keys {list(efficiency_keys)}")
    groups = list(dict.fromkeys(p.group or p.label for points, _ in rows.values() for p in points))
    colours = {g: plt.get_cmap("tab10")(i % 10) for i, g in enumerate(groups)}
    # tab10 repeats after 10 groups: the marker shape changes with each block of 10, so no two legend entries match
    markers = {g: MARKERS[(i // 10) % len(MARKERS)] for i, g in enumerate(groups)}
    fig, axes = plt.subplots(len(rows), len(efficiency_keys), figsize=(5.0 * len(efficiency_keys), 4.2 * len(rows)),
                             squeeze=False)
    fronts: dict[str, dict[str, list[str]]] = {}
    for ax_row, (row_title, (points, reference)) in zip(axes, rows.items()):
        fronts[row_title] = {key: _panel(ax, points, key, reference, colours, markers, row_title)
                             for ax, key in zip(ax_row, efficiency_keys)}
    handles: dict = {}
    for ax in axes.flat:  # one legend entry per label over all panels
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    labels = list(handles)
    fig.legend([handles[k] for k in labels], labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8,
               frameon=False)
    if title:
        fig.suptitle(title)
    legend_rows = (len(labels) + 3) // 4
    fig.tight_layout(rect=(0, min(0.5, (0.04 + 0.035 * legend_rows) / len(rows)), 1, 1))
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fronts


def _panel(ax, points: Sequence[ModelPoint], key: str, reference, colours, markers, row_title: str) -> list[str]:
    """One accuracy-vs-`key` panel: points with intervals (open markers for models of partial runs), the front ringed
    and joined, dashed references."""
    import matplotlib.pyplot as plt

    front = set(_front_of(points, key).tolist())
    for i, p in enumerate(points):
        x, y = p.efficiency[key], p.accuracy
        xerr = _err(x, p.efficiency_interval.get(key))
        yerr = _err(y, p.accuracy_interval)
        colour = colours[p.group or p.label]
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=markers[p.group or p.label], color=colour, ecolor=colour,
                    alpha=0.9, capsize=3, markersize=8 if i in front else 6,
                    markeredgecolor="black" if i in front else colour, markeredgewidth=2 if i in front else 1,
                    markerfacecolor="none" if p.partial else colour, label=p.label)
    front_xy = sorted((points[i].efficiency[key], points[i].accuracy) for i in front)
    if len(front_xy) > 1:
        fx, fy = zip(*front_xy)
        ax.step(fx, fy, where="pre", color="black", linewidth=1, alpha=0.5)
    for j, (name, value) in enumerate((reference or {}).get(key, {}).items()):
        ax.axvline(value, linestyle="--", color=plt.get_cmap("Dark2")(j % 8), linewidth=1, label=name)
    ax.set_xlabel(f"efficiency ({key})")
    ax.set_ylabel("accuracy")
    if row_title:
        ax.set_title(row_title)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    return [points[i].label for i in sorted(front)]


def _err(value: float, interval: tuple[float, float] | None):
    if interval is None:
        return None
    low, high = interval
    return [[max(value - low, 0.0)], [max(high - value, 0.0)]]
