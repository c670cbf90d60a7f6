"""Sample-based reliability metrics over K attempts per problem (Sequent-Prover §3 / App. B.1).

Input: per problem, n attempts of which c are correct (a [P, n] boolean matrix, or two count vectors when
problems have different n). Every metric is the mean over problems of a per-problem unbiased estimate:

  avg@N     c / n, per attempt accuracy (mean over problems of the per-problem accuracy)
  pass@k    1 - C(n-c, k) / C(n, k)    probability that at least one of k attempts drawn without
            replacement from the n is correct (Chen et al. 2021, unbiased for n >= k)
  pass^k    C(c, k) / C(n, k)          probability that all k drawn attempts are correct (Yao et al. 2024)
  stability pass^k / pass@k            of the dataset means (the paper's "pass^4 / pass@4"); None when
            pass@k is 0, i.e. no problem was ever solved
Both estimators use products of ratios instead of binomials, so large n does not overflow.
"""

from __future__ import annotations

import numpy as np


def _as_counts(correct=None, *, num_samples=None, num_correct=None):
    """Return (n_P, c_P) int arrays from a [P, n] matrix or from explicit counts; validates both."""
    if correct is not None:
        if num_samples is not None or num_correct is not None:
            raise ValueError("pass either correct (a [P, n] matrix) or num_samples/num_correct, not both")
        correct = np.asarray(correct)
        if correct.ndim != 2 or correct.shape[1] == 0:
            raise ValueError(f"correct has shape {correct.shape}: expected [problems, attempts] with attempts >= 1")
        if not np.all((correct == 0) | (correct == 1)):
            raise ValueError("correct: expected booleans or 0/1 entries")
        if correct.shape[0] == 0:
            raise ValueError("correct has no problems: expected at least one row (a mean over none is NaN)")
        return np.full(correct.shape[0], correct.shape[1], np.int64), correct.sum(axis=1).astype(np.int64)
    if num_samples is None or num_correct is None:
        raise ValueError("expected correct, or both num_samples and num_correct")
    raw_n, raw_c = np.atleast_1d(np.asarray(num_samples)), np.atleast_1d(np.asarray(num_correct))
    for name, raw in (("num_samples", raw_n), ("num_correct", raw_c)):
        if raw.size == 0:
            raise ValueError(f"{name} is empty: expected a count per problem (a mean over none is NaN)")
        if raw.dtype.kind not in "iub" and not np.all(np.mod(raw, 1) == 0):
            raise ValueError(f"{name}: expected whole counts, got {raw[np.mod(raw, 1) != 0][:3].tolist()}")
    n, c = raw_n.astype(np.int64), raw_c.astype(np.int64)
    if n.shape != c.shape:
        raise ValueError(f"num_samples {n.shape} and num_correct {c.shape}: expected equal shapes")
    if np.any(n < 1) or np.any(c < 0) or np.any(c > n):
        raise ValueError("num_correct/num_samples: expected 0 <= num_correct <= num_samples and num_samples >= 1")
    return n, c


def _check_k(k: int, n) -> None:
    if int(k) != k or k < 1:
        raise ValueError(f"k={k}: expected a positive int")
    if np.any(n < k):
        raise ValueError(f"k={k}: expected k <= attempts per problem, got as few as {int(n.min())}")


def pass_at_k_single(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: 1 - C(n-c, k) / C(n, k). Needs 1 <= k <= n and 0 <= c <= n (with k > n
    the formula has no meaning: it answered 1.0 for a problem never solved)."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k of n={n} attempts, c={c} correct, k={k}: expected 1 <= k <= n and 0 <= c <= n")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i)
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_hat_k_single(n: int, c: int, k: int) -> float:
    """Unbiased pass^k of one problem: C(c, k) / C(n, k) = prod_{i < k} (c - i) / (n - i) (1 <= k <= n)."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass^k of n={n} attempts, c={c} correct, k={k}: expected 1 <= k <= n and 0 <= c <= n")
    if c < k:
        return 0.0
    i = np.arange(k, dtype=np.float64)
    return float(np.prod((c - i) / (n - i)))


def per_problem_pass_at_k(correct=None, *, k: int, num_samples=None, num_correct=None) -> np.ndarray:
    n, c = _as_counts(correct, num_samples=num_samples, num_correct=num_correct)
    _check_k(k, n)
    return np.array([pass_at_k_single(int(a), int(b), k) for a, b in zip(n, c)])


def per_problem_pass_hat_k(correct=None, *, k: int, num_samples=None, num_correct=None) -> np.ndarray:
    n, c = _as_counts(correct, num_samples=num_samples, num_correct=num_correct)
    _check_k(k, n)
    return np.array([pass_hat_k_single(int(a), int(b), k) for a, b in zip(n, c)])


def avg_at_n(correct=None, *, num_samples=None, num_correct=None) -> float:
    """Mean over problems of the per-problem fraction of correct attempts."""
    n, c = _as_counts(correct, num_samples=num_samples, num_correct=num_correct)
    return float(np.mean(c / n))


def pass_at_k(correct=None, *, k: int, num_samples=None, num_correct=None) -> float:
    return float(np.mean(per_problem_pass_at_k(correct, k=k, num_samples=num_samples, num_correct=num_correct)))


def pass_hat_k(correct=None, *, k: int, num_samples=None, num_correct=None) -> float:
    return float(np.mean(per_problem_pass_hat_k(correct, k=k, num_samples=num_samples, num_correct=num_correct)))


def stability(correct=None, *, k: int, num_samples=None, num_correct=None) -> float | None:
    """pass^k / pass@k of the dataset means; None when pass@k is 0 (nothing solved, ratio undefined)."""
    at = pass_at_k(correct, k=k, num_samples=num_samples, num_correct=num_correct)
    hat = pass_hat_k(correct, k=k, num_samples=num_samples, num_correct=num_correct)
    return None if at == 0.0 else hat / at


def reliability_report(correct=None, *, ks=(1,), num_samples=None, num_correct=None) -> dict:
    """avg@N plus pass@k, pass^k and stability for each k, as one JSON-ready dict."""
    n, c = _as_counts(correct, num_samples=num_samples, num_correct=num_correct)
    report: dict = {"problems": int(n.size), "attempts": int(n.sum()), "avg@N": avg_at_n(num_samples=n, num_correct=c)}
    for k in ks:
        report[f"pass@{k}"] = pass_at_k(num_samples=n, num_correct=c, k=k)
        report[f"pass^{k}"] = pass_hat_k(num_samples=n, num_correct=c, k=k)
        report[f"stability@{k}"] = stability(num_samples=n, num_correct=c, k=k)
    return report
