"""maj@k, AUC@k, g-pass@k_alpha, completeness and ECE against hand derivations and scipy's hypergeometric law."""

import math

import numpy as np
import pytest
import scipy.stats

from reasoner.metrics.reliability import pass_at_k_single, pass_hat_k_single
from reasoner.metrics.sample_metrics import (auc_at_k, completeness, consistency_ece, g_pass_single, maj_at_k,
                                             maj_at_k_single)


def test_maj_at_k_by_hand():
    answers = ["A", "A", "B", None]
    assert maj_at_k_single(answers, "A", 4) == 1.0  # A 2, B 1
    # k = 2, six pairs: AA 1, AB 1/2 (twice, a tie), A- 1 (twice), B- 0  -> 4 / 6
    assert maj_at_k_single(answers, "A", 2) == pytest.approx(4 / 6, abs=1e-15)
    assert maj_at_k_single(answers, "B", 4) == 0.0
    assert maj_at_k_single(["A", "B"], "B", 2) == 0.5  # a two-way tie
    assert maj_at_k_single([None, None], "A", 2) == 0.0
    assert maj_at_k([["A", "A", "B", None], ["C", "C", "C", "D"]], ["A", "D"], k=4) == 0.5


def test_auc_by_hand():
    # n = 4, c = 1: pass@1..4 = 1/4, 1 - 3/6, 1 - 1/4, 1 -> mean 0.625
    assert auc_at_k([4], [1], k=4) == pytest.approx(0.625, abs=1e-15)
    assert auc_at_k([4, 4], [0, 4], k=4) == 0.5


@pytest.mark.parametrize("n, c", [(4, 0), (4, 1), (4, 3), (8, 5), (16, 7)])
def test_g_pass_is_a_hypergeometric_tail_with_the_papers_endpoints(n, c):
    for k in range(1, n + 1):
        for alpha in (0.25, 0.5, 0.75, 1.0, 1 / k):
            need = math.ceil(round(alpha * k, 9))
            want = scipy.stats.hypergeom(n, c, k).sf(need - 1)  # P(X >= need)
            assert g_pass_single(n, c, k, alpha) == pytest.approx(want, abs=1e-12)
        assert g_pass_single(n, c, k, 1.0) == pytest.approx(pass_hat_k_single(n, c, k), abs=1e-12)
        assert g_pass_single(n, c, k, 1 / k) == pytest.approx(pass_at_k_single(n, c, k), abs=1e-12)


def test_completeness_and_ece_by_hand():
    assert completeness([True, True, False, True], [True, False, True, True]) == pytest.approx(2 / 3)
    assert completeness([False], [True]) is None
    # one problem, K = 4: answers A A A B, gold A. Confidences 3/4 (x3, correct) and 1/4 (wrong); bins of width 1/4:
    # bin 3: accuracy 1 vs 0.75, weight 3/4; bin 1: accuracy 0 vs 0.25, weight 1/4 -> 0.1875 + 0.0625 = 0.25
    assert consistency_ece([["A", "A", "A", "B"]], ["A"]) == pytest.approx(0.25, abs=1e-15)
    # perfectly consistent and right: confidence 1, accuracy 1
    assert consistency_ece([["A"] * 4], ["A"]) == 0.0
    assert np.isclose(consistency_ece([["A"] * 4], ["B"]), 1.0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="k=5: expected 1 <= k <= attempts"):
        maj_at_k_single(["A"] * 4, "A", 5)
    with pytest.raises(ValueError, match="alpha=0: expected"):
        g_pass_single(4, 1, 2, 0)
    # k beyond the attempts: the formulas have no meaning (pass@3 of 2 attempts never solved answered 1.0)
    with pytest.raises(ValueError, match=r"n=2 attempts, c=0 correct, k=3: expected 1 <= k <= n"):
        pass_at_k_single(2, 0, 3)
    with pytest.raises(ValueError, match=r"k=3: expected 1 <= k <= n"):
        auc_at_k([2], [0], k=3)
    with pytest.raises(ValueError, match=r"k=0"):
        pass_hat_k_single(4, 1, 0)
    assert g_pass_single(4, 0, 2, 1e-12) == 0.0  # a tiny alpha still needs one success


def test_empty_or_fractional_counts_are_refused():
    from reasoner.metrics.reliability import avg_at_n, pass_at_k

    with pytest.raises(ValueError, match="num_samples is empty"):
        avg_at_n(num_samples=[], num_correct=[])
    with pytest.raises(ValueError, match="correct has no problems"):
        pass_at_k(np.zeros((0, 4), bool), k=1)
    with pytest.raises(ValueError, match=r"num_correct: expected whole counts, got \[4.9\]"):
        pass_at_k(num_samples=[8], num_correct=[4.9], k=2)
    assert avg_at_n(num_samples=[4.0], num_correct=[2.0]) == 0.5  # whole floats are counts


def test_ece_bins_attempts_by_exact_confidence():
    """K = 47 attempts: gold A given 3 times (confidence 3/47, right), B twice (2/47, wrong), E 42 times (wrong).
    Equal-width bins [b/K, (b+1)/K) put each answer in bin c of its count c, so no two answers share a bin and
    ECE = (3 |1 - 3/47| + 2 |0 - 2/47| + 42 |0 - 42/47|) / 47. In floats 3/47 * 47 = 2.9999999999999996: a float
    floor put A's attempts into B's bin, where their gaps partly cancelled (0.8565 instead of 0.8601)."""
    assert int(3 / 47 * 47) == 2 and int(2 / 47 * 47) == 2  # the float trap
    answers = [["A"] * 3 + ["B"] * 2 + ["E"] * 42]
    expected = (3 * 44 / 47 + 2 * 2 / 47 + 42 * 42 / 47) / 47
    assert consistency_ece(answers, ["A"]) == pytest.approx(expected, abs=1e-15)
