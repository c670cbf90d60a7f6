"""Wilson intervals against SciPy's binomtest and the closed form; percentile bootstrap against SciPy and theory."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reasoner.metrics import intervals as iv

scipy_stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("successes,n", [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (157, 200), (499, 500)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_wilson_matches_scipy(successes, n, confidence):
    ours = iv.wilson_interval(successes, n, confidence=confidence)
    ref = scipy_stats.binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    # both evaluate the closed form in float64 from the same z (ppf correct to a few ulps): ~10 operations on values
    # <= z^2 ~ 6.7 at 99%, so within ~70 eps64; allow 128 eps64
    assert (ours.low, ours.high) == pytest.approx((ref.low, ref.high), abs=128 * np.finfo(np.float64).eps)
    assert ours.estimate == successes / n and ours.n == n


def test_wilson_closed_form_known_value():
    # 8/10 at 95%: the textbook Wilson interval (0.4902, 0.9433).
    got = iv.wilson_interval(8, 10)
    z = 1.959963984540054
    centre = (0.8 + z * z / 20) / (1 + z * z / 10)
    half = z / (1 + z * z / 10) * math.sqrt(0.8 * 0.2 / 10 + z * z / 400)
    assert (got.low, got.high) == pytest.approx((centre - half, centre + half), abs=128 * np.finfo(np.float64).eps)
    assert (round(got.low, 4), round(got.high, 4)) == (0.4902, 0.9433)


def test_bootstrap_mean_agrees_with_scipy_and_normal_theory():
    x = np.random.default_rng(1).normal(0.7, 0.1, size=400)
    ours = iv.bootstrap_interval(x, statistic="mean", n_resamples=4000, seed=3)
    ref = scipy_stats.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", random_state=3,
                                vectorized=True).confidence_interval
    se = x.std(ddof=1) / math.sqrt(x.size)
    assert ours.estimate == pytest.approx(x.mean(), rel=8 * np.finfo(np.float64).eps)  # one float64 mean each
    # Monte Carlo error of a 2.5% quantile from B = 4000 resamples: sqrt(p (1 - p) / B) / phi(1.96) se = 0.042 se;
    # two independent estimates differ by sd 0.06 se, and the bootstrap vs normal theory (n = 400) by less than
    # that: 0.25 se is 4 sd
    assert ours.low == pytest.approx(ref.low, abs=0.25 * se) and ours.high == pytest.approx(ref.high, abs=0.25 * se)
    assert ours.low == pytest.approx(x.mean() - 1.96 * se, abs=0.25 * se)
    assert ours.high == pytest.approx(x.mean() + 1.96 * se, abs=0.25 * se)


def test_bootstrap_is_seeded():
    x = np.array([0.2, 0.5, 0.9, 1.0])
    a = iv.bootstrap_interval(x, seed=7, n_resamples=500)
    assert a == iv.bootstrap_interval(x, seed=7, n_resamples=500)
    assert a != iv.bootstrap_interval(x, seed=8, n_resamples=500)


def test_bootstrap_covers_the_true_mean_at_its_nominal_rate():
    """Coverage on a known distribution: M = 400 data sets of n = 60 draws from Exponential(1) (true mean 1, skewed,
    so the interval is not symmetric by construction), a 90% percentile interval each. The count of intervals
    containing 1 is Binomial(M, c) with c the true coverage; the percentile bootstrap of a mean at n = 60 from a
    skewed law under-covers by at most ~2 points, so c is in [0.88, 0.90], and we accept the count within 4
    binomial sd (sqrt(0.9 * 0.1 / 400) = 0.015) of that range: [0.82, 0.96]. A 50% or 99% interval, or one that
    resampled without replacement (zero width), lands far outside."""
    rng = np.random.default_rng(2024)
    m, n = 400, 60
    covered = 0
    for i in range(m):
        x = rng.exponential(1.0, size=n)
        got = iv.bootstrap_interval(x, confidence=0.9, n_resamples=500, seed=i)
        covered += got.low <= 1.0 <= got.high
    assert 0.82 <= covered / m <= 0.96, covered / m


def test_bootstrap_ratio_keeps_pairs():
    shortest = np.array([3, 4, 5, 6, 7, 8], float)
    taken = shortest * np.array([1, 1, 2, 1, 1.5, 1])
    got = iv.bootstrap_interval(shortest, taken, statistic="ratio", seed=0, n_resamples=2000)
    # two float64 sums of 6 terms and a division, summed in possibly different orders: within 16 eps64
    assert got.estimate == pytest.approx(shortest.sum() / taken.sum(), rel=16 * np.finfo(np.float64).eps)
    assert 0.5 <= got.low <= got.estimate <= got.high <= 1.0
    const = iv.bootstrap_interval(np.full(5, 0.75), seed=0, n_resamples=100)
    assert (const.low, const.estimate, const.high) == (0.75, 0.75, 0.75)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="n=0"):
        iv.wilson_interval(0, 0)
    with pytest.raises(ValueError, match="successes=11"):
        iv.wilson_interval(11, 10)
    with pytest.raises(ValueError, match="confidence=1.5"):
        iv.wilson_interval(1, 10, confidence=1.5)
    with pytest.raises(ValueError, match="empty"):
        iv.bootstrap_interval(np.array([]))
    with pytest.raises(ValueError, match="NaN"):
        iv.bootstrap_interval(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="takes 2"):
        iv.bootstrap_interval(np.ones(3), statistic="ratio")
    with pytest.raises(ValueError, match="statistic='median'"):
        iv.bootstrap_interval(np.ones(3), statistic="median")


def test_slope_interval_matches_scipy_linregress():
    """Slope and its t interval equal scipy.stats.linregress's slope +- t_{n-2} * stderr."""
    y = np.array([0.5, 0.125, 0.0, 0.375, 0.6, 0.7, 0.55, 0.9])
    got = iv.slope_interval(y, confidence=0.9)
    ref = scipy_stats.linregress(np.arange(len(y)), y)
    half = scipy_stats.t.ppf(0.95, len(y) - 2) * ref.stderr
    tol = 64 * np.finfo(np.float64).eps  # a handful of float64 sums of O(1) values
    assert got.estimate == pytest.approx(ref.slope, abs=tol)
    assert got.low == pytest.approx(ref.slope - half, abs=tol)
    assert got.high == pytest.approx(ref.slope + half, abs=tol)
    assert (got.n, got.method) == (8, "ols-slope-t")


def test_slope_interval_of_a_flat_series_is_exactly_zero():
    """All-equal rewards (e.g. every completion failed): slope 0 with a zero-width interval, where scipy's
    linregress returns a NaN stderr (0/0 in its correlation)."""
    got = iv.slope_interval([0.0, 0.0, 0.0, 0.0])
    assert (got.estimate, got.low, got.high) == (0.0, 0.0, 0.0)


def test_slope_interval_bad_inputs_raise():
    with pytest.raises(ValueError, match="at least 3 points"):
        iv.slope_interval([0.1, 0.2])
    with pytest.raises(ValueError, match="NaN or inf"):
        iv.slope_interval([0.1, float("nan"), 0.2])
