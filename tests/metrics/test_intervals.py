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


# ---------------------------------------------------------------------------------------------- cluster bootstrap
def _brute_cluster_bootstrap(values, clusters, n_clusters, *, seed, n_resamples, confidence=0.95, chunk=1000):
    """Independent reimplementation, one resample at a time in plain Python: the same seed semantics (the index
    blocks `rng.integers(0, P, size=(rows, P))` of at most `chunk` rows), the mean over the items of the drawn
    problems, resamples drawing no item left out."""
    rng = np.random.default_rng(seed)
    members = [[v for v, c in zip(values, clusters) if c == p] for p in range(n_clusters)]
    stats, undefined = [], 0
    for start in range(0, n_resamples, chunk):
        for row in rng.integers(0, n_clusters, size=(min(chunk, n_resamples - start), n_clusters)):
            items = [v for p in row for v in members[p]]
            if items:
                stats.append(math.fsum(items) / len(items))
            else:
                undefined += 1
    alpha = 1 - confidence
    return (*np.quantile(stats, [alpha / 2, 1 - alpha / 2]), undefined)


@pytest.mark.parametrize("n_resamples", [700, 2500])  # one index block, and three (the last one short)
def test_cluster_bootstrap_matches_a_brute_force_reimplementation(n_resamples):
    # 6 problems: one with 5 correct attempts, one with none (undefined resamples occur), the rest 1-3 attempts
    values = [0.5, 0.5, 0.5, 0.5, 0.5, 1.0, 0.8, 0.9, 1.0, 0.25, 1.0, 0.6]
    clusters = [0, 0, 0, 0, 0, 1, 1, 2, 3, 3, 3, 5]  # problem 4 has no correct attempt
    got = iv.cluster_bootstrap_interval(values, clusters, n_clusters=6, seed=11, n_resamples=n_resamples)
    low, high, undefined = _brute_cluster_bootstrap(values, clusters, 6, seed=11, n_resamples=n_resamples)
    # the same resamples; each statistic is a sum of <= 30 values in [0, 1] and one division, in another order:
    # within 64 eps64 of each other, and the quantiles interpolate between the same neighbours
    assert (got.low, got.high) == (pytest.approx(low, abs=64 * np.finfo(np.float64).eps),
                                   pytest.approx(high, abs=64 * np.finfo(np.float64).eps))
    assert got.undefined_resamples == undefined and (got.n, got.clusters) == (12, 6)
    assert got.estimate == float(np.mean(values)) and got.method == "cluster-bootstrap-percentile"


def test_cluster_bootstrap_equals_the_exact_bootstrap_distribution():
    """Three problems: A with three correct attempts at 0.2, B one at 1.0, C none. The 27 equally likely resamples
    give (0.6 a + b) / (3 a + b) for a copies of A and b of B, undefined when a = b = 0 (one in 27). The percentile
    interval of 20,000 resamples is the exact distribution's 2.5% and 97.5% quantiles, which sit on atoms whose
    cumulative probabilities are far (> 20 Monte Carlo sd) from 0.025 and 0.975."""
    import itertools
    from fractions import Fraction

    values, clusters = [0.2, 0.2, 0.2, 1.0], [0, 0, 0, 1]
    dist: dict[Fraction, int] = {}
    for draw in itertools.product(range(3), repeat=3):
        a, b = draw.count(0), draw.count(1)
        if a + b:
            stat = (Fraction(1, 5) * 3 * a + b) / (3 * a + b)
            dist[stat] = dist.get(stat, 0) + 1
    atoms = sorted(dist)
    cdf = np.cumsum([dist[x] for x in atoms]) / 26
    exact_low = float(atoms[int(np.searchsorted(cdf, 0.025))])
    exact_high = float(atoms[int(np.searchsorted(cdf, 0.975))])
    B = 20_000
    sd = math.sqrt(0.025 * 0.975 / B)
    assert np.min(np.abs(cdf - 0.025)) > 20 * sd and np.min(np.abs(cdf - 0.975)) > 20 * sd
    got = iv.cluster_bootstrap_interval(values, clusters, n_clusters=3, seed=0, n_resamples=B)
    assert got.low == pytest.approx(exact_low, abs=1e-12) and got.high == pytest.approx(exact_high, abs=1e-12)
    # the all-A draws (1 in 26 defined ones: above 2.5%) and the draws of B without A (7 in 26) at the two ends
    assert (exact_low, exact_high) == (0.2, 1.0)
    # undefined resamples: Binomial(B, 1/27), within 5 sd
    assert abs(got.undefined_resamples - B / 27) < 5 * math.sqrt(B / 27 * 26 / 27)
    assert got.estimate == pytest.approx(1.6 / 4)


def test_cluster_bootstrap_of_single_attempt_problems_is_the_attempt_bootstrap():
    """With one item per cluster and no empty cluster the two bootstraps draw the same indices and compute the same
    means: identical intervals, bit for bit."""
    x = np.random.default_rng(5).uniform(0.2, 1.0, size=37)
    for seed, b in ((0, 999), (3, 2345)):
        a = iv.bootstrap_interval(x, seed=seed, n_resamples=b)
        c = iv.cluster_bootstrap_interval(x, np.arange(37), seed=seed, n_resamples=b)
        assert (a.estimate, a.low, a.high, a.n) == (c.estimate, c.low, c.high, c.n) and c.undefined_resamples == 0


def test_cluster_bootstrap_covers_where_the_attempt_bootstrap_does_not():
    """M = 200 data sets of P = 30 problems x K = 8 correct attempts: problem means mu_p ~ Beta(2, 2), attempts mu_p
    plus small noise, so the attempts of a problem are strongly correlated; the target is E[mu] = 0.5. The 90%
    problem-level interval covers at about its nominal rate (percentile bootstrap at P = 30: ~0.87-0.90; accepted in
    [0.80, 0.96], 4 binomial sd of 0.021 around that), the attempt-level one far less often (it treats 240 values
    as independent: its width is about 1/sqrt(K deff) of the right one, coverage ~0.45)."""
    rng = np.random.default_rng(7)
    P, K, M = 30, 8, 200
    hits_cluster = hits_attempt = 0
    for i in range(M):
        mu = rng.beta(2, 2, size=P)
        x = np.clip(mu[:, None] + rng.normal(0, 0.02, size=(P, K)), 0, 1).ravel()
        c = iv.cluster_bootstrap_interval(x, np.repeat(np.arange(P), K), confidence=0.9, n_resamples=400, seed=i)
        a = iv.bootstrap_interval(x, confidence=0.9, n_resamples=400, seed=i)
        hits_cluster += c.low <= 0.5 <= c.high
        hits_attempt += a.low <= 0.5 <= a.high
        assert c.estimate == a.estimate
    assert 0.80 <= hits_cluster / M <= 0.96, hits_cluster / M
    assert hits_attempt / M < 0.65, hits_attempt / M


def test_cluster_bootstrap_bad_inputs_raise():
    with pytest.raises(ValueError, match="empty"):
        iv.cluster_bootstrap_interval([], [])
    with pytest.raises(ValueError, match="one length"):
        iv.cluster_bootstrap_interval([0.5, 0.5], [0])
    with pytest.raises(ValueError, match="NaN"):
        iv.cluster_bootstrap_interval([0.5, np.nan], [0, 1])
    with pytest.raises(ValueError, match="n_clusters=2"):
        iv.cluster_bootstrap_interval([0.5, 0.5], [0, 2], n_clusters=2)
    with pytest.raises(ValueError, match="integer cluster"):
        iv.cluster_bootstrap_interval([0.5, 0.5], [0.5, 1.0])
    # one solved problem among 50: a resample misses it with probability (49/50)^50 = 0.36; find a seed whose only
    # resample misses it (the same draw the function makes), and every resample is undefined
    seed = next(s for s in range(100) if 0 not in np.random.default_rng(s).integers(0, 50, size=(1, 50)))
    with pytest.raises(ValueError, match="all 1 resamples drew no item"):
        iv.cluster_bootstrap_interval([0.5], [0], n_clusters=50, seed=seed, n_resamples=1)


# ---------------------------------------------------------------------------------------------- design-effect Wilson
def test_clustered_wilson_of_single_trials_is_wilson():
    for s in ([0, 1, 1, 0, 1], [1] * 7, [0] * 4):
        got = iv.clustered_wilson_interval(s, [1] * len(s))
        ref = iv.wilson_interval(sum(s), len(s))
        assert (got.estimate, got.low, got.high, got.n) == (ref.estimate, ref.low, ref.high, ref.n)
        assert (got.design_effect, got.effective_n, got.clusters) == (1.0, len(s), len(s))


def test_clustered_wilson_of_identical_attempts_counts_problems():
    """K = 4 attempts per problem that always agree carry the information of one attempt each: deff = K, and the
    interval is Wilson's over the P problems."""
    solved = np.array([1, 0, 1, 1, 0, 0, 1, 0, 0, 1])
    got = iv.clustered_wilson_interval(4 * solved, np.full(10, 4))
    ref = iv.wilson_interval(int(solved.sum()), 10)
    assert got.design_effect == 4.0 and got.effective_n == 10.0 and got.n == 40
    tol = 16 * np.finfo(np.float64).eps
    assert (got.estimate, got.low, got.high) == (ref.estimate, pytest.approx(ref.low, abs=tol),
                                                 pytest.approx(ref.high, abs=tol))


def test_clustered_wilson_design_effect_is_the_bootstrap_variance_ratio():
    """deff = v / (p (1 - p) / n) with v the linearised variance of the pooled proportion; v is within Monte Carlo
    error (and the P / (P - 1) factor) of the variance of the pooled proportion over problem-level resamples."""
    rng = np.random.default_rng(3)
    P, K = 80, 6
    theta = rng.beta(0.6, 0.6, size=P)
    s = rng.binomial(K, theta)
    got = iv.clustered_wilson_interval(s, np.full(P, K))
    n, p = P * K, s.sum() / (P * K)
    idx = rng.integers(0, P, size=(20_000, P))
    boot_var = np.var(s[idx].sum(1) / n)
    v = got.design_effect * p * (1 - p) / n
    # bootstrap variance (ddof 0 over P) = (P - 1) / P * v to first order; 20,000 resamples: ~1% Monte Carlo error,
    # the ratio's second-order terms at P = 80 a few % more
    assert boot_var == pytest.approx((P - 1) / P * v, rel=0.06)
    assert 1 < got.design_effect < K and got.effective_n == pytest.approx(n / got.design_effect)


def test_clustered_wilson_covers_where_wilson_over_attempts_does_not():
    """M = 400 evaluations of P = 40 problems x K = 8 attempts, per-problem solve rates theta_p ~ Beta(0.5, 0.5)
    (mean 0.5: problems mostly always or never solved). The design-effect Wilson 95% interval covers 0.5 at about
    its nominal rate (accepted >= 0.90), Wilson over the 320 attempts as if independent far less often."""
    rng = np.random.default_rng(11)
    P, K, M = 40, 8, 400
    hit_clustered = hit_plain = 0
    for _ in range(M):
        s = rng.binomial(K, rng.beta(0.5, 0.5, size=P))
        c = iv.clustered_wilson_interval(s, np.full(P, K))
        w = iv.wilson_interval(int(s.sum()), P * K)
        hit_clustered += c.low <= 0.5 <= c.high
        hit_plain += w.low <= 0.5 <= w.high
    assert hit_clustered / M >= 0.90, hit_clustered / M
    assert hit_plain / M < 0.75, hit_plain / M


def test_clustered_wilson_extremes_and_bad_inputs():
    zero = iv.clustered_wilson_interval([0, 0, 0], [4, 4, 4])
    assert (zero.low, zero.estimate, zero.design_effect) == (0.0, 0.0, 1.0)
    assert zero.high == iv.wilson_interval(0, 12).high
    one = iv.clustered_wilson_interval([4, 4], [4, 4])
    assert (one.estimate, one.high, one.low) == (1.0, 1.0, iv.wilson_interval(8, 8).low)
    with pytest.raises(ValueError, match="successes <= trials"):
        iv.clustered_wilson_interval([3], [2])
    with pytest.raises(ValueError, match="one entry per cluster"):
        iv.clustered_wilson_interval([], [])
