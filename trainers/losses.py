"""Loss formulas of the SFT and DPO trainers, as pure functions of log-probs and masks.

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
