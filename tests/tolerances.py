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


def dpo_first_step_bounds(*, factor: float, beta: float, logps_chosen: float, logps_rejected: float
                          ) -> tuple[float, float, float]:
    """(chosen reward, reward margin, loss) bounds of DPO's first step when the reference is the policy.

    Each sequence log-prob is a sum of per-token log-probs, all negative, each within `factor` * EPS32 * |logp_t|
    of exact (the decoder's reductions; `factor` from `prob_factor(model_depth(...))`), so the sum is within
    factor * EPS32 * |logps/<side>|. Policy and reference each carry that error: the chosen reward
    beta * (pi - ref) is within beta * 2 factor EPS32 |logps/chosen|, the margin adds the rejected side, and
    -log sigmoid(beta * margin) has slope 1/2 at 0, plus the rounding of log-sigmoid itself (4 ulps of ln 2).
    """
    chosen = beta * 2.0 * factor * EPS32 * abs(float(logps_chosen))
    margin = chosen + beta * 2.0 * factor * EPS32 * abs(float(logps_rejected))
    return chosen, margin, margin / 2.0 + ulps(math.log(2.0), 4)


def grpo_loss_atol(*, logps, old, ref, adv, mask, beta: float, bias_correction: bool, logp_atol: float
                   ) -> tuple[float, float]:
    """(loss, kl metric) |a - b| bounds of TRL's GRPO loss when its policy and reference log-probs ([B, T]) each
    carry up to `logp_atol` of error (another forward layout), plus the float32 rounding of the loss itself.

    Per token, with r = exp(logp - old), d = ref - logp and kl0 = e^d - d - 1 >= 0, the token loss is
    -min(r A, clip(r) A) + beta * kl0 * (r if bias_correction else 1), continuous in logp and ref (min and clip
    only switch branches where they agree), with slopes |d/dlogp| <= |A| r + beta r' (|1 - e^d| + kl0 [bias]) and
    |d/dref| <= beta r' |e^d - 1| (r' = r or 1). A shift of `logp_atol` in each input also scales r by up to
    e^logp_atol, taken into the slope. Every reduction (grpo, bnpo, dr_grpo, dapo, summed over the micro-batches
    of one generation batch) weights the masked tokens with non-negative weights that sum to at most 1, so the loss
    moves by at most logp_atol * max_t(slope_t), and its float32 evaluation (a sum of n weighted terms) adds
    n EPS32 max_t |loss_t|. The KL metric is a masked mean of beta-free kl_t: the same argument with
    slope r' (2 |e^d - 1| + kl0 [bias]).
    """
    logps, old, ref, mask = (np.asarray(a, np.float64) for a in (logps, old, ref, mask))
    adv = np.asarray(adv, np.float64).reshape(-1, 1)
    on = mask > 0
    grow = math.exp(logp_atol)
    r = np.exp(logps - old) * grow
    d = ref - logps
    kl0 = np.exp(d) - d - 1.0
    rb = r if bias_correction else np.ones_like(r)
    kl_slope = rb * (2.0 * np.abs(np.exp(d) * grow - 1.0) + (kl0 if bias_correction else 0.0))
    slope = np.abs(adv) * r + beta * kl_slope
    token_loss = np.abs(adv) * r + beta * kl0 * rb
    n = float(on.sum())
    loss = logp_atol * float(slope[on].max()) + n * EPS32 * float(token_loss[on].max())
    kl = logp_atol * float(kl_slope[on].max()) + n * EPS32 * float((kl0 * rb)[on].max())
    return loss, kl


def adam_loss_drift(*, lr: float, steps_before: int, grad_norm: float, num_params: int, factor: float) -> float:
    """First-order bound on how far a loss moves after `steps_before` Adam steps whose gradients carried a relative
    float32 error rho = factor * EPS32 (another sharding or kernel order of the same backward pass).

    Adam's update lr * m / (sqrt(v) + eps) is scale-free in the gradient: a relative error rho in g is one of about
    rho in m and in sqrt(v), so each component's update moves by at most 2 lr rho (|m / sqrt(v)| <= 1 for a fresh
    run); a component whose gradient cancels to within its error may flip sign, but then |g_i| <= rho |g| and its
    contribution g_i * d(theta_i) is of the same order. The loss at the next step moves by g . d(theta)
    <= 2 lr rho ||g||_1 <= 2 lr rho sqrt(P) ||g||_2 per earlier step (second-order terms are O(lr^2 rho), dropped).
    """
    rho = float(factor) * EPS32
    return float(steps_before) * 2.0 * float(lr) * rho * math.sqrt(float(num_params)) * float(grad_norm)


def formula_atol(magnitudes, *, ops: int, terms: int = 1):
    """|a - b| bound for two float32 evaluations (two libraries, two kernels) of the same closed-form expression.

    Each of the `ops` elementwise operations (exp, log, multiply, divide, ...) rounds once, to within EPS32 / 2 of
    the magnitude of what it produces, and a final sum of `terms` terms adds terms * EPS32 of the sum of their
    magnitudes (Higham's gamma_n); `magnitudes` is that sum (a scalar) or, for an elementwise result, one entry per
    element. Two evaluations each carry it, so the bound is (ops + terms) * EPS32 * magnitudes.
    """
    return (float(ops) + float(terms)) * EPS32 * np.asarray(magnitudes, np.float64)


def network_atol(magnitudes, *, depth: float):
    """|a - b| bound for two float32 evaluations of a small network (dense layers with ReLU or identity between
    them, then elementwise combinations): depth * EPS32 * S, elementwise.

    S is the same network run on |weights|, |biases| and |inputs| (ReLU is the identity on those): for every
    output it bounds the sum of the magnitudes of all terms that reach it, through any path. An error entering at
    layer l (a dot of n_l terms: n_l u times its terms' magnitudes, Higham's gamma_n) reaches the output scaled by
    at most the later layers' |weights| (ReLU is 1-Lipschitz), that is by at most n_l u S; summed over the layers,
    depth = sum of n_l (plus one per elementwise rounding). EPS32 = 2u covers two evaluation orders, as in
    `f32_sum_bound`. First-order: the products of two rounding errors (O(u^2)) are left out.
    """
    return float(depth) * EPS32 * np.asarray(magnitudes, np.float64)


def score_atol(value=1.0) -> float:
    """|device - host| bound for an A*-informed reward or efficiency (search/kernel_score.py vs search/rewards.py).

    Each is a ratio, a minimum or a power (0.5 ** x) of small-integer counts (pushes, pops, proof lengths), exact
    in both: the device computes it in float32 with at most four roundings (EPS32 / 2 relative each) plus a power's
    exp and log (about 2 ulps), the host in float64. So they agree within 8 ulps of float32 at the larger of |value|
    and 1 (rewards lie in [0, 1] except where a trace beats A*'s own, where they exceed 1).
    """
    return ulps(max(1.0, abs(float(value))), 8)
