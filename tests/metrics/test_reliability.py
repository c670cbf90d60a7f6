"""avg@N, pass@k, pass^k and stability against brute-force enumeration of k-subsets (exact fractions)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from reasoner.metrics import reliability as rel


def brute_force(n: int, c: int, k: int) -> tuple[Fraction, Fraction]:
    """Over all k-subsets of n attempts (c correct): fraction with any correct, fraction with all correct."""
    attempts = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    any_ok = sum(any(attempts[i] for i in s) for s in subsets)
    all_ok = sum(all(attempts[i] for i in s) for s in subsets)
    return Fraction(any_ok, len(subsets)), Fraction(all_ok, len(subsets))


@pytest.mark.parametrize("n", range(1, 9))
def test_single_problem_estimators_equal_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            at, hat = brute_force(n, c, k)
            assert rel.pass_at_k_single(n, c, k) == pytest.approx(float(at), abs=1e-12), (n, c, k)
            assert rel.pass_hat_k_single(n, c, k) == pytest.approx(float(hat), abs=1e-12), (n, c, k)


def test_dataset_metrics_on_random_matrix():
    rng = np.random.default_rng(0)
    correct = rng.random((40, 6)) < rng.random((40, 1))  # problems of varying difficulty
    counts = correct.sum(axis=1)
    report = rel.reliability_report(correct, ks=(1, 4))
    exact = {k: [brute_force(6, int(c), k) for c in counts] for k in (1, 4)}
    assert report["avg@N"] == pytest.approx(correct.mean())
    assert report["pass@1"] == pytest.approx(correct.mean())  # pass@1 = pass^1 = avg@N
    assert report["pass^1"] == pytest.approx(correct.mean())
    at4 = float(sum(a for a, _ in exact[4]) / 40)
    hat4 = float(sum(h for _, h in exact[4]) / 40)
    assert report["pass@4"] == pytest.approx(at4, abs=1e-12)
    assert report["pass^4"] == pytest.approx(hat4, abs=1e-12)
    assert report["stability@4"] == pytest.approx(hat4 / at4)
    assert report["problems"] == 40 and report["attempts"] == 240


def test_ragged_counts_and_large_n_stay_finite():
    n = np.array([4, 8, 1000])
    c = np.array([1, 8, 3])
    got = rel.pass_at_k(num_samples=n, num_correct=c, k=4)
    expected = (1.0 + 1.0 + (1 - float(Fraction(997 * 996 * 995 * 994, 1000 * 999 * 998 * 997)))) / 3
    assert got == pytest.approx(expected, rel=1e-12)
    assert rel.avg_at_n(num_samples=n, num_correct=c) == pytest.approx((0.25 + 1 + 0.003) / 3)


def test_stability_undefined_when_nothing_solved():
    assert rel.stability(np.zeros((3, 4), bool), k=2) is None
    assert rel.stability(np.ones((3, 4), bool), k=4) == 1.0


def test_bad_inputs_raise_with_names():
    with pytest.raises(ValueError, match="k=5"):
        rel.pass_at_k(np.ones((2, 4)), k=5)
    with pytest.raises(ValueError, match="k=0"):
        rel.pass_hat_k(np.ones((2, 4)), k=0)
    with pytest.raises(ValueError, match="num_correct"):
        rel.pass_at_k(num_samples=[4], num_correct=[5], k=1)
    with pytest.raises(ValueError, match="shape"):
        rel.avg_at_n(np.ones(4))
    with pytest.raises(ValueError, match="0/1"):
        rel.avg_at_n(np.full((2, 2), 0.5))
