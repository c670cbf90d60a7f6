"""Float32 error bounds for tests, derived from what a computation sums (never a constant tuned on one CPU).

The rule (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Lemma 3.1 and section 3.1): a float32
sum or dot product of n terms, evaluated in ANY order, is within gamma_n * sum(|terms|) of the exact value, with
gamma_n = n u / (1 - n u) and u = 2**-24 the unit roundoff. Two evaluations in different orders (XLA's AVX2 vs
AVX-512 kernels, PyTorch vs XLA, blocked vs plain attention, sharded vs single-device reductions) therefore differ
by at most 2 gamma_n sum(|terms|) ~= n * EPS32 * sum(|terms|), EPS32 = 2**-23 = 2u (float32 machine epsilon).

A chain of such reductions (a decoder's forward pass) adds the relative errors of its stages when each stage is
well conditioned (RMSNorm and residual streams keep activations O(1), so a stage does not amplify the error it
receives): `decoder_depth` counts the reduction lengths along the path from the embedding to the log-probs.
"""

from __future__ import annotations

import math

import numpy as np

EPS32 = 2.0 ** -23  # float32 machine epsilon (spacing of floats in [1, 2))


def f32_sum_bound(terms, factor: float) -> float:
    """factor * EPS32 * sum(|terms|), in float64: the float32 error bound of a sum/dot whose terms are `terms`.

    `factor` is the number of accumulation steps the float32 result went through (n for one sum of n terms;
    a depth from `decoder_depth` for a whole forward pass). With EPS32 = 2u this already bounds the difference
    between two evaluation orders (2 gamma_n ~= n EPS32).
    """
    return float(factor) * EPS32 * float(np.sum(np.abs(np.asarray(terms, np.float64))))


def ulps(x, n: float) -> float:
    """n units in the last place of float32 |x| (n * the spacing of float32 at |x|): a few roundings of one value."""
    return float(n) * float(np.spacing(np.float32(abs(float(x)))))


def decoder_depth(*, num_layers: int, hidden_size: int, intermediate_size: int, num_heads: int, head_dim: int,
                  seq_len: int, vocab_size: int) -> int:
    """Sum of the reduction lengths on a decoder's path from the embedding to a log-prob (the n of gamma_n).

    Per layer: two RMSNorm mean-squares (D each), the q/k/v projections (D), the attention scores (Dh), the softmax
    normaliser and the weighted sum of values over the keys (T), the output projection (H * Dh), the gate/up
    projections (D) and the down projection (I). Then the final norm (D), the LM head (D) and the logsumexp (V).
    """
    d, dh, h = hidden_size, head_dim, num_heads
    per_layer = 2 * d + d + dh + seq_len + h * dh + d + intermediate_size
    return num_layers * per_layer + d + d + vocab_size


PROB_LAMBDA = 8.0  # Higham-Mary confidence: each bound fails with probability <= 2 n exp(-lambda**2 / 2) ~ 3e-14 n


def prob_factor(n: float, lam: float = PROB_LAMBDA) -> float:
    """The `factor` (in EPS32 units) for n accumulation steps under probabilistic rounding-error analysis.

    Higham & Mary, "A new approach to probabilistic rounding error analysis" (SIAM J. Sci. Comput. 41, 2019),
    Thm 3.1: if the rounding errors are mean independent, a sum/dot of n terms is within lam * sqrt(n) * u *
    sum(|terms|) of exact with probability >= 1 - 2 n exp(-lam**2 (1 - u)**2 / 2). Two evaluation orders then
    differ by <= 2 lam sqrt(n) u = lam sqrt(n) EPS32. Use it where the worst case n * EPS32 is too loose to see
    the change a test must catch (long chains such as a training step); say so at the call site.
    """
    return float(lam) * math.sqrt(float(n))


def relative_bound(factor: float) -> float:
    """factor * EPS32: the relative error bound of a result that went through `factor` accumulation steps."""
    return float(factor) * EPS32


def sqrt_sum_sq_bound(values, factor: float) -> float:
    """Bound on the error of sqrt(sum(values**2)) when each value carries `factor * EPS32 * |value|` error
    plus the float32 sum of the n squares (n steps): (factor + n / 2) * EPS32 * norm (d sqrt(s) = ds / (2 sqrt s))."""
    v = np.asarray(values, np.float64).ravel()
    return (float(factor) + v.size / 2.0) * EPS32 * math.sqrt(float(np.sum(v * v)))


def model_depth(cfg, *, seq_len: int) -> int:
    """`decoder_depth` of a `reasoner.models.ModelConfig` (or any object with its field names) at `seq_len`."""
    return decoder_depth(num_layers=cfg.num_layers, hidden_size=cfg.hidden_size,
                         intermediate_size=cfg.intermediate_size, num_heads=cfg.num_heads, head_dim=cfg.head_dim,
                         seq_len=seq_len, vocab_size=cfg.vocab_size)


def logits_atol(logits, cfg, *, seq_len: int) -> float:
    """|a - b| bound for the float32 logits of one decoder computed two ways (another kernel, implementation,
    sharding, cache or batch layout): k(depth) * EPS32 * max|logits| with k = `prob_factor`.

    Every logit is the end of a chain of `model_depth` reductions whose stages are normalised (RMSNorm, residual
    stream), so its error is relative to the scale of the values flowing through the chain, for which the largest
    logit stands in. The bound holds on any CPU kernel (AVX2 or AVX-512): it depends on the depth and the values,
    not on which summation order a kernel picks.
    """
    return prob_factor(model_depth(cfg, seq_len=seq_len)) * EPS32 * float(np.max(np.abs(np.asarray(logits))))


def logprob_atol(logits, cfg, *, seq_len: int) -> float:
    """The same for log-probs z - logsumexp(z): |z| + |logsumexp| <= 2 max|z| + log V terms carry the error."""
    z = float(np.max(np.abs(np.asarray(logits))))
    return prob_factor(model_depth(cfg, seq_len=seq_len)) * EPS32 * (2.0 * z + math.log(cfg.vocab_size))
