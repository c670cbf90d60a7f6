"""Confidence intervals for evaluation reports (A* paper Figs. 2-4: Wilson for accuracy, bootstrap for efficiency).

wilson_interval: the Wilson score interval of a binomial proportion,
    centre = (p + z^2 / 2n) / (1 + z^2 / n),  half width = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2),
    with z the two-sided normal quantile (1.959964 for 95%). It stays inside [0, 1] and is defined at p = 0 or 1.
bootstrap_interval: the percentile bootstrap. Resample the n items with replacement `n_resamples` times
    (paired arrays are resampled with the same indices, so ratios of sums keep their pairing), compute the
    statistic on each resample, and take the (alpha/2, 1 - alpha/2) quantiles. Seeded: the same seed gives the
    same interval. Statistics: "mean", "ratio" (sum of the first array / sum of the second, e.g. efficiency
    as total shortest-proof steps over total steps taken) or a callable on [R, n] arrays returning [R].
cluster_bootstrap_interval: the percentile bootstrap over clusters (problems), for items that come in clusters of
    correlated values (K sampled attempts of one problem): resample the clusters with replacement and take, on each
    resample, the mean over the items of the drawn clusters (sum of their values / number of their items). Clusters
    with no item (a problem with no correct attempt, for an efficiency) are drawn like any other; a resample that
    draws no item has no mean and is left out of the quantiles (counted in `undefined_resamples`).
clustered_wilson_interval: the Wilson interval with the effective number of trials n / deff, deff the design effect
    of the clustered attempts (Kish): K attempts of one problem are not K independent trials.
slope_interval: the least-squares slope of y over x = 0, 1, ... (e.g. GRPO's mean reward per step) with the
    t interval slope +- t_{n-2} * se, se = sqrt(sum(residual^2) / (n - 2) / sum((x - mean x)^2)): whether a
    per-step curve rises beyond its step-to-step noise. Needs n >= 3 points.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping

import numpy as np


@dataclasses.dataclass(frozen=True)
class Interval:
    """A point estimate with its interval; `as_dict` is what JSON reports store."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str
    n: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def format_interval(value: Mapping | None, *, missing: str = "n/a") -> str:
    """An `Interval.as_dict()` as report tables print it, "0.250 [0.100, 0.400]", or `missing` where there is
    none (a metric without data, such as an efficiency with no correct proof)."""
    if value is None:
        return missing
    return f"{value['estimate']:.3f} [{value['low']:.3f}, {value['high']:.3f}]"


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: expected 0 < confidence < 1")
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: int, n: int, *, confidence: float = 0.95) -> Interval:
    """Wilson score interval for successes out of n trials."""
    if int(n) != n or n < 1:
        raise ValueError(f"n={n}: expected a positive number of trials")
    if int(successes) != successes or not 0 <= successes <= n:
        raise ValueError(f"successes={successes}: expected an int in [0, n={n}]")
    p = successes / n
    return Interval(p, *_wilson_bounds(p, n, _z(confidence)), confidence, "wilson", int(n))


def _wilson_bounds(p: float, n: float, z: float) -> tuple[float, float]:
    """The Wilson score bounds of proportion p over n trials (n may be fractional: an effective sample size)."""
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # Clamp float dust so that p = 0 gives exactly 0 and p = 1 exactly 1.
    return max(0.0, centre - half), min(1.0, centre + half)


def _statistic_fn(statistic) -> tuple[Callable, int]:
    if callable(statistic):
        return statistic, -1
    if statistic == "mean":
        return (lambda x: x.mean(axis=-1)), 1
    if statistic == "ratio":
        return (lambda num, den: num.sum(axis=-1) / den.sum(axis=-1)), 2
    raise ValueError(f"statistic={statistic!r}: expected 'mean', 'ratio' or a callable")


def bootstrap_interval(
    *samples,
    statistic="mean",
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    chunk: int = 1_000,
) -> Interval:
    """Percentile bootstrap interval of `statistic` over paired 1-D samples of equal length."""
    fn, arity = _statistic_fn(statistic)
    if not samples:
        raise ValueError("samples: expected at least one 1-D array")
    arrays = [np.asarray(s, np.float64) for s in samples]
    n = arrays[0].shape[0] if arrays[0].ndim == 1 else -1
    if any(a.ndim != 1 or a.shape[0] != n for a in arrays):
        raise ValueError(f"samples of shapes {[a.shape for a in arrays]}: expected 1-D arrays of one length")
    if n == 0:
        raise ValueError("samples are empty: a bootstrap interval needs at least one value")
    if arity != -1 and len(arrays) != arity:
        raise ValueError(f"statistic={statistic!r} takes {arity} sample(s), got {len(arrays)}")
    if any(not np.all(np.isfinite(a)) for a in arrays):
        raise ValueError("samples contain NaN or inf: drop undefined items (e.g. incorrect proofs) first")
    if n_resamples < 1:
        raise ValueError(f"n_resamples={n_resamples}: expected >= 1")
    _z(confidence)  # validates
    rng = np.random.default_rng(seed)
    stats = []
    for idx in _resample_indices(rng, n, n_resamples, chunk):
        stats.append(np.asarray(fn(*(a[idx] for a in arrays)), np.float64))
    stats = np.concatenate(stats)
    alpha = 1.0 - confidence
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    estimate = float(np.asarray(fn(*(a[None, :] for a in arrays))).reshape(-1)[0])
    return Interval(estimate, float(low), float(high), confidence, "bootstrap-percentile", int(n))


@dataclasses.dataclass(frozen=True)
class ClusterInterval(Interval):
    """An `Interval` of a cluster bootstrap: `n` counts the items averaged (e.g. correct attempts), `clusters` the
    units resampled (e.g. problems, solved or not) and `undefined_resamples` the resamples that drew no item."""

    clusters: int
    undefined_resamples: int


def _resample_indices(rng, n: int, n_resamples: int, chunk: int):
    """[rows, n] index blocks of `n_resamples` resamples of n units with replacement: `rng.integers(0, n, size=(rows,
    n))` per block of at most `chunk` rows, in order (the seed semantics of both bootstraps here)."""
    for start in range(0, n_resamples, chunk):
        yield rng.integers(0, n, size=(min(chunk, n_resamples - start), n))


def cluster_bootstrap_interval(
    values,
    clusters,
    *,
    n_clusters: int | None = None,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    chunk: int = 1_000,
) -> ClusterInterval:
    """Percentile bootstrap over clusters of the item mean: `values[i]` is item i's value, `clusters[i]` in
    [0, n_clusters) the cluster (problem) it belongs to; clusters without items (problems where nothing counts, e.g.
    no correct attempt for an efficiency) are part of the resampled population (`n_clusters`, default
    max(clusters) + 1).

    The estimate is the plain mean of `values`, exactly as `bootstrap_interval` computes it (every item weighs the
    same, so a problem with more correct attempts weighs more). Each of the `n_resamples` resamples draws
    n_clusters clusters with replacement (`np.random.default_rng(seed)`, `rng.integers(0, n_clusters,
    size=(rows, n_clusters))` per block of `chunk` rows) and its statistic is sum of the drawn clusters' values / number
    of their items: the mean over the resample's items, counting a cluster drawn twice twice. A resample that draws
    only clusters without items has no mean: it is dropped (the interval is the bootstrap distribution conditional on
    the statistic being defined, the same condition under which the estimate itself exists) and counted in
    `undefined_resamples`; the (alpha/2, 1 - alpha/2) quantiles are taken over the others. With one cluster holding
    items the interval has zero width: there is no between-problem variation to resample. A ValueError when every
    resample is undefined (n_resamples far too small).
    """
    x = np.asarray(values, np.float64)
    g = np.asarray(clusters)
    if x.ndim != 1 or g.shape != x.shape:
        raise ValueError(f"values {x.shape} and clusters {g.shape}: expected 1-D arrays of one length")
    if x.size == 0:
        raise ValueError("values are empty: a bootstrap interval needs at least one value")
    if not np.all(np.isfinite(x)):
        raise ValueError("values contain NaN or inf: drop undefined items (e.g. incorrect proofs) first")
    if g.dtype.kind not in "iu" and not (g.dtype.kind == "f" and np.all(np.mod(g, 1) == 0)):
        raise ValueError(f"clusters of dtype {g.dtype}: expected integer cluster indices")
    g = g.astype(np.int64)
    n_clusters = int(g.max()) + 1 if n_clusters is None else int(n_clusters)
    if g.min() < 0 or g.max() >= n_clusters:
        raise ValueError(f"clusters in [{g.min()}, {g.max()}]: expected indices in [0, n_clusters={n_clusters})")
    if n_resamples < 1:
        raise ValueError(f"n_resamples={n_resamples}: expected >= 1")
    _z(confidence)  # validates
    sums = np.zeros(n_clusters, np.float64)
    np.add.at(sums, g, x)
    counts = np.bincount(g, minlength=n_clusters).astype(np.float64)
    rng = np.random.default_rng(seed)
    stats, undefined = [], 0
    for idx in _resample_indices(rng, n_clusters, n_resamples, chunk):
        num, den = sums[idx].sum(axis=1), counts[idx].sum(axis=1)
        ok = den > 0
        undefined += int((~ok).sum())
        stats.append(num[ok] / den[ok])
    stats = np.concatenate(stats)
    if stats.size == 0:
        raise ValueError(f"all {n_resamples} resamples drew no item (only {int((counts > 0).sum())} of {n_clusters} "
                         "clusters hold any): expected more resamples")
    alpha = 1.0 - confidence
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    estimate = float(x[None, :].mean(axis=-1)[0])  # bootstrap_interval's "mean" estimate, bit for bit
    return ClusterInterval(estimate, float(low), float(high), confidence, "cluster-bootstrap-percentile", int(x.size),
                           n_clusters, undefined)


@dataclasses.dataclass(frozen=True)
class DesignEffectInterval(Interval):
    """A `clustered_wilson_interval`: `n` counts the trials (attempts), `clusters` the problems, `design_effect` the
    deff used and `effective_n` = n / deff the number of trials the Wilson formula was given."""

    clusters: int
    design_effect: float
    effective_n: float


def clustered_wilson_interval(successes, trials, *, confidence: float = 0.95) -> DesignEffectInterval:
    """Wilson interval of the pooled proportion sum(successes) / sum(trials) over clusters (problems) whose trials
    (K sampled attempts of one problem) may be correlated: the Wilson formula with n replaced by the effective number
    of trials n_eff = n / deff, deff Kish's design effect (the use Korn and Graubard make of it for survey
    proportions).

    deff = v / (p (1 - p) / n) with v = P / (P - 1) * sum_p (s_p - p t_p)^2 / n^2, the with-replacement (linearised
    ratio) variance of p = sum s / sum t over the P clusters; deff is clipped to [1, n / P], so n_eff lies between the
    number of clusters (every attempt of a problem alike) and the number of trials (all independent): an estimated
    deff below 1 is noise and may not narrow the interval below the plain Wilson one. At p = 0 or 1 there is no
    variance to estimate deff from, and with P = 1 no between-cluster variance: deff is then 1 (the survey
    convention), the plain Wilson interval over all trials. With one trial per cluster deff is 1 and the bounds are
    exactly `wilson_interval`'s.
    """
    s = np.asarray(successes, np.float64)
    t = np.asarray(trials, np.float64)
    if s.ndim != 1 or s.shape != t.shape or s.size == 0:
        raise ValueError(f"successes {s.shape} and trials {t.shape}: expected non-empty 1-D arrays of one length "
                         "(one entry per cluster)")
    if np.any(t < 1) or np.any(s < 0) or np.any(s > t) or np.any(np.mod(s, 1)) or np.any(np.mod(t, 1)):
        raise ValueError("successes/trials: expected whole counts with 0 <= successes <= trials and trials >= 1")
    n, c, P = float(t.sum()), float(s.sum()), int(s.size)
    p = c / n
    deff = 1.0
    if P > 1 and 0 < c < n:
        v = P / (P - 1) * float(np.sum((s - p * t) ** 2)) / (n * n)
        deff = min(max(v / (p * (1 - p) / n), 1.0), n / P)
    low, high = _wilson_bounds(p, n / deff, _z(confidence))  # deff = 1: n / 1.0 == n, wilson_interval's bits
    return DesignEffectInterval(p, low, high, confidence, "wilson-design-effect", int(n), P, deff, n / deff)


def slope_interval(y, *, confidence: float = 0.95) -> Interval:
    """Least-squares slope of `y` [n] over its index 0..n-1 with the Student-t interval (module docstring)."""
    from scipy import stats

    y = np.asarray(y, np.float64)
    if y.ndim != 1 or y.shape[0] < 3:
        raise ValueError(f"y of shape {y.shape}: expected a 1-D series of at least 3 points for a slope interval")
    if not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or inf: expected a finite value per step")
    _z(confidence)  # validates
    n = y.shape[0]
    x = np.arange(n, dtype=np.float64) - (n - 1) / 2.0
    slope = float(x @ (y - y.mean()) / (x @ x))
    resid = y - y.mean() - slope * x
    se = math.sqrt(float(resid @ resid) / (n - 2) / float(x @ x))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 2)) * se
    return Interval(slope, slope - half, slope + half, confidence, "ols-slope-t", int(n))
