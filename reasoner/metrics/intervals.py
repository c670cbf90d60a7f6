"""Confidence intervals for evaluation reports (A* paper Figs. 2-4: Wilson for accuracy, bootstrap for efficiency).

wilson_interval: the Wilson score interval of a binomial proportion,
    centre = (p + z^2 / 2n) / (1 + z^2 / n),  half width = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2),
    with z the two-sided normal quantile (1.959964 for 95%). It stays inside [0, 1] and is defined at p = 0 or 1.
bootstrap_interval: the percentile bootstrap. Resample the n items with replacement `n_resamples` times
    (paired arrays are resampled with the same indices, so ratios of sums keep their pairing), compute the
    statistic on each resample, and take the (alpha/2, 1 - alpha/2) quantiles. Seeded: the same seed gives the
    same interval. Statistics: "mean", "ratio" (sum of the first array / sum of the second, e.g. efficiency
    as total shortest-proof steps over total steps taken) or a callable on [R, n] arrays returning [R].
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
    z = _z(confidence)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # Clamp float dust so that p = 0 gives exactly 0 and p = 1 exactly 1.
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), confidence, "wilson", int(n))


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
    for start in range(0, n_resamples, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_resamples - start), n))
        stats.append(np.asarray(fn(*(a[idx] for a in arrays)), np.float64))
    stats = np.concatenate(stats)
    alpha = 1.0 - confidence
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    estimate = float(np.asarray(fn(*(a[None, :] for a in arrays))).reshape(-1)[0])
    return Interval(estimate, float(low), float(high), confidence, "bootstrap-percentile", int(n))


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
