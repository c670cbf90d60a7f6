"""The rest of Sequent-Prover's App. B.1/B.2 sample metrics: maj@k, AUC@k, g-pass@k_alpha, completeness, ECE.

The paper names these without printing their formulas; the definitions here (each the mean over problems of a
per-problem quantity, K attempts per problem, k <= K) are ours:

  maj@k           the expected correctness of a majority vote over k attempts drawn without replacement from
                  the K: attempts with no answer never vote; a tie among the top answers is broken uniformly at
                  random (so a tie between the gold answer and one other counts 1/2), no vote at all is wrong.
                  Exact: all C(K, k) subsets are enumerated (refused above `MAX_SUBSETS`).
  AUC@k           (1/k) * sum_{j=1..k} pass@j, the area under the pass@j curve normalised to [0, 1].
  g-pass@k_a      P(at least ceil(a * k) of k attempts drawn without replacement are correct): a hypergeometric
                  tail. a = 1 gives pass^k and a = 1/k gives pass@k, as the paper states.
  completeness    P(verified | correct): of the correct attempts, the fraction that committed to their answer
                  (ended by finish / an answer, not by the turn cap); soundness is the converse P(correct | verified).
  ECE             expected calibration error with the self-consistency confidence: an attempt's confidence is
                  the fraction of its problem's K attempts that gave the same answer (an attempt without an
                  answer has confidence 0); attempts are binned by confidence in K equal-width bins and
                  ECE = sum_b |b| / N * |accuracy_b - mean confidence_b|.
"""

from __future__ import annotations

import collections
import itertools
import math
from typing import Sequence

import numpy as np

from reasoner.metrics.reliability import pass_at_k_single

MAX_SUBSETS = 200_000
GPASS_ALPHAS = (0.25, 0.5, 0.75, 1.0)


def _vote(answers: Sequence[str | None], gold: str) -> float:
    """Correctness of the majority of `answers` with uniform tie-breaking (1/t for a t-way tie holding gold)."""
    counts = collections.Counter(a for a in answers if a is not None)
    if not counts:
        return 0.0
    top = max(counts.values())
    leaders = [a for a, n in counts.items() if n == top]
    return (gold in leaders) / len(leaders)


def maj_at_k_single(answers: Sequence[str | None], gold: str, k: int) -> float:
    """maj@k of one problem: the mean vote over every k-subset of its K attempts."""
    K = len(answers)
    if not 1 <= k <= K:
        raise ValueError(f"k={k}: expected 1 <= k <= attempts ({K})")
    if math.comb(K, k) > MAX_SUBSETS:
        raise ValueError(f"maj@{k} over {K} attempts has {math.comb(K, k)} subsets; at most {MAX_SUBSETS}")
    votes = [_vote(subset, gold) for subset in itertools.combinations(answers, k)]
    return float(np.mean(votes))


def maj_at_k(answers_by_problem: Sequence[Sequence[str | None]], gold: Sequence[str], *, k: int) -> float:
    if len(answers_by_problem) != len(gold):
        raise ValueError(f"{len(answers_by_problem)} answer lists for {len(gold)} gold answers")
    return float(np.mean([maj_at_k_single(a, g, k) for a, g in zip(answers_by_problem, gold)]))


def auc_at_k(num_samples: Sequence[int], num_correct: Sequence[int], *, k: int) -> float:
    """Mean over problems of (1/k) sum_{j<=k} pass@j."""
    return float(np.mean([np.mean([pass_at_k_single(int(n), int(c), j) for j in range(1, k + 1)])
                          for n, c in zip(num_samples, num_correct)]))


def g_pass_single(n: int, c: int, k: int, alpha: float) -> float:
    """P(X >= ceil(alpha k)) for X ~ Hypergeometric(population n, successes c, draws k)."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha={alpha}: expected 0 < alpha <= 1")
    if not 1 <= k <= n:
        raise ValueError(f"k={k}: expected 1 <= k <= attempts ({n})")
    need = max(1, math.ceil(alpha * k - 1e-9))  # alpha * k may be an integer up to rounding (0.75 * 4); >= 1 success
    total = math.comb(n, k)
    return sum(math.comb(c, j) * math.comb(n - c, k - j) for j in range(need, min(c, k) + 1)) / total


def g_pass_at_k(num_samples: Sequence[int], num_correct: Sequence[int], *, k: int, alpha: float) -> float:
    return float(np.mean([g_pass_single(int(n), int(c), k, alpha) for n, c in zip(num_samples, num_correct)]))


def completeness(correct: Sequence[bool], verified: Sequence[bool]) -> float | None:
    """P(verified | correct); None when no attempt is correct."""
    hits = [bool(v) for c, v in zip(correct, verified) if c]
    return float(np.mean(hits)) if hits else None


def consistency_ece(answers_by_problem: Sequence[Sequence[str | None]], gold: Sequence[str]) -> float | None:
    """ECE of the self-consistency confidence (module docstring); None when there are no attempts."""
    conf, acc, index = [], [], []
    bins = max((len(a) for a in answers_by_problem), default=0)
    for answers, g in zip(answers_by_problem, gold):
        counts = collections.Counter(a for a in answers if a is not None)
        for a in answers:
            same = counts[a] if a is not None else 0
            conf.append(same / len(answers))
            acc.append(float(a == g))
            # the bin floor(conf * bins) in integers: in floats (c / K) * K can fall just below c (1/49 * 49 < 1)
            # and put the attempt one bin too low; confidence 1.0 joins the top bin
            index.append(min(same * bins // len(answers), bins - 1))
    if not conf:
        return None
    conf_N, acc_N, index = np.asarray(conf), np.asarray(acc), np.asarray(index)
    ece = 0.0
    for b in range(bins):
        members = index == b
        if members.any():
            ece += members.mean() * abs(acc_N[members].mean() - conf_N[members].mean())
    return float(ece)
