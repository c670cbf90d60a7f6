"""Loss formulas of the SFT and preference trainers (DPO family, ORPO, SimPO, KTO), as pure functions of log-probs.

Conventions: token arrays are [B, T]; `loss_mask_BxT[t] = 1` marks token t as a trained target
(a completion token). The log-prob of token t comes from the logits at t-1, so the targets are
tokens[:, 1:] and the per-token log-probs have shape [B, T-1]. A target whose segment differs
from the previous token's (the first token of the next packed document) is never trained.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from reasoner.models.scoring import target_mask  # noqa: F401  (the trainers' loss masks; log-probs live there)

DPO_LOSS_TYPES = ("sigmoid", "robust", "ipo", "hinge")
REFERENCE_FREE_LOSS_TYPES = ("orpo", "simpo")  # pair losses of policy log-probs alone (no reference model)
PAIR_LOSS_TYPES = DPO_LOSS_TYPES + REFERENCE_FREE_LOSS_TYPES  # the values of `dpo.loss_type`


def sft_loss_sum(logp_BxTm1: jax.Array, mask_BxTm1: jax.Array) -> jax.Array:
    """Sum of negative log-likelihood over trained targets (divide by the global target count for TRL's token mean)."""
    return -jnp.sum(logp_BxTm1 * mask_BxTm1)


def dpo_per_pair_loss(
    *,
    chosen_logps: jax.Array,
    rejected_logps: jax.Array,
    ref_chosen_logps: jax.Array,
    ref_rejected_logps: jax.Array,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    chosen_lengths: jax.Array | None = None,
    rejected_lengths: jax.Array | None = None,
) -> jax.Array:
    """[P] DPO loss of each pair, TRL 1.16's formulas (reverse-KL scores).

    delta = (pi_c - ref_c) - (pi_r - ref_r) with sequence log-probs summed over completion tokens.
      sigmoid: -(1-ls) log s(beta delta) - ls log s(-beta delta)        (ls = 0: TRL's "sigmoid"; ls > 0: cDPO)
      robust:  (-(1-ls) log s(beta delta) + ls log s(-beta delta)) / (1 - 2 ls)   (Chowdhury et al., TRL "robust")
      ipo:     (delta_avg - 1/(2 beta))^2, scores divided by completion lengths (TRL's normalisation)
      hinge:   relu(1 - beta delta)
    """
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(f"dpo loss_type={loss_type!r}; expected one of {DPO_LOSS_TYPES}")
    chosen_scores = chosen_logps - ref_chosen_logps
    rejected_scores = rejected_logps - ref_rejected_logps
    delta = chosen_scores - rejected_scores
    if loss_type == "sigmoid":
        return -(1.0 - label_smoothing) * jax.nn.log_sigmoid(beta * delta) - label_smoothing * jax.nn.log_sigmoid(
            -beta * delta)
    if loss_type == "robust":
        if not 0.0 <= label_smoothing < 0.5:
            raise ValueError(f"robust DPO needs label_smoothing in [0, 0.5), got {label_smoothing}")
        clean = -(1.0 - label_smoothing) * jax.nn.log_sigmoid(beta * delta)
        flipped = -label_smoothing * jax.nn.log_sigmoid(-beta * delta)
        return (clean - flipped) / (1.0 - 2.0 * label_smoothing)
    if loss_type == "hinge":
        return jax.nn.relu(1.0 - beta * delta)
    if chosen_lengths is None or rejected_lengths is None:
        raise ValueError("ipo needs chosen_lengths and rejected_lengths (completion token counts)")
    ipo_delta = chosen_scores / jnp.maximum(chosen_lengths, 1.0) - rejected_scores / jnp.maximum(rejected_lengths, 1.0)
    return (ipo_delta - 1.0 / (2.0 * beta)) ** 2


def dpo_reward_sums(
    *, chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta: float
) -> dict[str, jax.Array]:
    """Sums over pairs of TRL's four reward metrics (divide by the pair count for the logged means).

    rewards/chosen = beta (pi_c - ref_c); rewards/rejected = beta (pi_r - ref_r);
    rewards/accuracies = [chosen > rejected]; rewards/margins = chosen - rejected.
    """
    chosen = beta * jax.lax.stop_gradient(chosen_logps - ref_chosen_logps)
    rejected = beta * jax.lax.stop_gradient(rejected_logps - ref_rejected_logps)
    return {
        "rewards/chosen": jnp.sum(chosen),
        "rewards/rejected": jnp.sum(rejected),
        "rewards/accuracies": jnp.sum((chosen > rejected).astype(jnp.float32)),
        "rewards/margins": jnp.sum(chosen - rejected),
    }


# ----------------------------------------------------------------------------------------------- reference-free


def log1mexp(x: jax.Array) -> jax.Array:
    """log(1 - exp(x)) for x < 0, stable on both sides of -ln 2 (TRL's ORPO `log1mexp`). Each branch sees only
    inputs in its own range, so the branch not taken has a finite gradient (no NaN leaks through `where`); x is
    capped just below 0 (log-probs of probability 1 would give -inf)."""
    x = jnp.minimum(x, -1e-30)
    cut = -0.6931471805599453
    far = jnp.where(x < cut, x, cut)  # x < -ln 2: log1p(-exp(x)) is accurate
    near = jnp.where(x < cut, cut, x)  # -ln 2 <= x < 0: log(-expm1(x)) is accurate
    return jnp.where(x < cut, jnp.log1p(-jnp.exp(far)), jnp.log(-jnp.expm1(near)))


def orpo_per_pair_loss(*, chosen_avg_logps: jax.Array, rejected_avg_logps: jax.Array, beta: float):
    """([P] odds-ratio term, [P] log odds) of ORPO (Hong et al. 2024, Eqs. 4-7; TRL's `ORPOTrainer.odds_ratio_loss`).

    With per-token AVERAGE completion log-probs a = log P(y|x) / |y|:
      log_odds = (a_c - a_r) - (log(1 - e^a_c) - log(1 - e^a_r));   term = -beta log sigmoid(log_odds)
    The ORPO loss is `orpo_nll` of the chosen tokens + mean(term) (TRL: nll - mean(beta log sigmoid(log_odds))).
    """
    log_odds = (chosen_avg_logps - rejected_avg_logps) - (log1mexp(chosen_avg_logps) - log1mexp(rejected_avg_logps))
    return -beta * jax.nn.log_sigmoid(log_odds), log_odds


def orpo_nll(chosen_logps_sum: jax.Array, chosen_tokens: jax.Array) -> jax.Array:
    """ORPO's supervised term: -sum of chosen-token log-probs / number of those tokens (a token mean over the batch,
    TRL's CrossEntropyLoss); 0 when there are no tokens."""
    return -jnp.sum(chosen_logps_sum) / jnp.maximum(jnp.sum(chosen_tokens), 1.0)


def simpo_per_pair_loss(*, chosen_avg_logps: jax.Array, rejected_avg_logps: jax.Array, beta: float, gamma: float,
                        label_smoothing: float = 0.0) -> jax.Array:
    """[P] SimPO (Meng et al. 2024, Eq. 6; TRL's `CPOTrainer.cpo_loss` with loss_type="simpo"), reference-free:
      z = beta (a_c - a_r) - gamma,  a = average completion log-prob;
      loss = -(1 - ls) log sigmoid(z) - ls log sigmoid(-z)            (TRL's label smoothing; ls = 0: the paper)
    """
    z = beta * (chosen_avg_logps - rejected_avg_logps) - gamma
    return -(1.0 - label_smoothing) * jax.nn.log_sigmoid(z) - label_smoothing * jax.nn.log_sigmoid(-z)


# ----------------------------------------------------------------------------------------------- KTO


def kto_losses(*, logps: jax.Array, ref_logps: jax.Array, kl_logps: jax.Array, ref_kl_logps: jax.Array,
               labels: jax.Array, beta: float, desirable_weight: float = 1.0, undesirable_weight: float = 1.0,
               valid: jax.Array | None = None):
    """([B] weighted per-example losses, the KL estimate) of KTO (Ethayarajh et al. 2024, Eq. 7), as TRL 1.16's
    `KTOTrainer._compute_loss` (loss_type "kto"); the loss is the mean over the B examples.

    logps / ref_logps [B]: summed completion log-probs of (x, y) under policy and reference; labels [B]: 1 =
    desirable. kl_logps / ref_kl_logps [B]: the same for mismatched pairs (x, y') (TRL cycles completions within
    the batch), giving z0 = max(0, mean(kl_logps - ref_kl_logps)), held constant (no gradient):
      desirable:   w_d (1 - sigmoid(beta (r - z0)))       r = logps - ref_logps
      undesirable: w_u (1 - sigmoid(beta (z0 - r)))
    valid [B] (optional, 1/0): the rows that count in z0's mean (an evaluation batch's filler rows do not).
    """
    diff = kl_logps - ref_kl_logps
    mean = jnp.mean(diff) if valid is None else jnp.sum(diff * valid) / jnp.maximum(jnp.sum(valid), 1.0)
    z0 = jnp.maximum(jax.lax.stop_gradient(mean), 0.0)
    r = logps - ref_logps
    desirable = jnp.asarray(labels).astype(bool)
    loss = jnp.where(desirable, desirable_weight * (1.0 - jax.nn.sigmoid(beta * (r - z0))),
                     undesirable_weight * (1.0 - jax.nn.sigmoid(beta * (z0 - r))))
    return loss, z0
