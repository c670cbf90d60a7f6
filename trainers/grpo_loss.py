"""GRPO math: reward aggregation, group advantages and the clipped policy loss, exactly as TRL 1.16.

Pure JAX functions (jit-friendly, no host syncs) that `trainers/grpo.py` wires into its step. Every formula
transcribes `trl/trainer/grpo_trainer.py` (TRL 1.16: `_generate_and_score_completions` for rewards and
advantages, `_compute_loss` for the loss and its logged metrics); the tests compare against TRL's own code.

Shapes: B = completions in the batch (prompts x G), T = completion tokens, F = reward functions.

Advantages (`group_advantages`):
  A_i = (r_i - mean_group(r)) / (std + 1e-4)    scale_rewards="group": std of the group of G
                                                scale_rewards="batch": std of the whole batch
  A_i =  r_i - mean_group(r)                    scale_rewards="none"
  The std is TRL's `nanstd`: Bessel-corrected (ddof = 1) over the non-NaN entries, NaN when fewer than two;
  the epsilon 1e-4 is added to the std (not to the variance). NaN rewards (a completion no reward function
  could score) are left out of the mean and std and get advantage 0, as in TRL.
  One deliberate difference: a group whose finite rewards are all equal gets advantage exactly 0. TRL computes
  (r - mean) / (0 + 1e-4), which is 0 only when the float mean reproduces r exactly; for rewards such as 0.1 x 16
  the float32 rounding of the mean (~1e-9) is amplified 1e4-fold into a spurious nonzero advantage.

Loss (`grpo_loss`), per token, with ratio = exp(logp - old_logp) (= 1 in value when num_iterations = 1 and
old_logp = stop_gradient(logp)):
  loss_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)  [+ beta * kl_t]
  kl_t   = exp(ref - logp) - (ref - logp) - 1                            (k3 estimator)
  kl_t  *= ratio                                        when use_bias_correction_kl (TRL 1.16 default: True)
  If `delta` is set the unclipped ratio is also capped at delta (two-sided clipping, TRL's `delta`).
Reductions over the loss mask M (completion mask x tool mask, truncated rows zeroed when masking is on):
  grpo    mean_b( sum_t loss*M / max(sum_t M, 1) ) / gradient_accumulation_steps
  bnpo    sum(loss*M) / max(sum M, 1)               / gradient_accumulation_steps
  dr_grpo sum(loss*M) / (B * max_completion_length) / gradient_accumulation_steps
  dapo    sum(loss*M) / (max(N, 1) * gradient_accumulation_steps / steps_per_generation)
          with N = num_items_in_batch, the loss-token count of the whole generation batch (all micro-batches,
          all devices). Summed over the micro-batches of one generation batch this is sum(loss*M) / N.
Our arrays are global (every device's rows), so TRL's division of N by num_processes followed by the DDP
gradient average is already folded in: for grpo, dr_grpo and dapo this equals TRL on any number of processes
with equal local batches; bnpo normalises over the batch given, i.e. TRL with one process.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ScaleRewards = Literal["group", "batch", "none"]

LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")
ADVANTAGE_STD_EPSILON = 1e-4  # added to the reward std, as TRL does


@dataclasses.dataclass(frozen=True)
class GRPOLossConfig:
    """Static loss settings (hashable, so it can be a static jit argument). Defaults are TRL 1.16's."""

    loss_type: str = "dapo"
    beta: float = 0.0
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    delta: float | None = None
    use_bias_correction_kl: bool = True
    max_completion_length: int | None = None  # required by dr_grpo

    def __post_init__(self):
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type={self.loss_type!r}: expected one of {LOSS_TYPES}")
        if self.beta < 0:
            raise ValueError(f"beta={self.beta}: expected >= 0")
        if not 0 <= self.epsilon_low < 1:
            raise ValueError(f"epsilon_low={self.epsilon_low}: expected 0 <= epsilon_low < 1")
        if self.epsilon_high < 0:
            raise ValueError(f"epsilon_high={self.epsilon_high}: expected >= 0")
        if self.delta is not None and self.delta <= 1 + self.epsilon_high:
            raise ValueError(f"delta={self.delta}: expected > 1 + epsilon_high = {1 + self.epsilon_high}")
        if self.loss_type == "dr_grpo" and (self.max_completion_length is None or self.max_completion_length < 1):
            raise ValueError(
                f"max_completion_length={self.max_completion_length}: loss_type='dr_grpo' needs a positive int"
            )


# ----------------------------------------------------------------------------------------------- rewards


def nanstd(x, axis=None, keepdims=False):
    """TRL's `nanstd`: sqrt of the Bessel-corrected (ddof=1) variance over non-NaN entries; NaN if < 2 of them."""
    mean = jnp.nanmean(x, axis=axis, keepdims=True)
    variance = jnp.nanmean((x - mean) ** 2, axis=axis, keepdims=True)
    count = jnp.sum(~jnp.isnan(x), axis=axis, keepdims=True)
    correction = jnp.where(count > 1, count / jnp.maximum(count - 1, 1), jnp.nan)
    std = jnp.sqrt(variance * correction)
    return std if keepdims else jnp.squeeze(std, axis=axis)


def combine_rewards(rewards_BxF, weights_F):
    """Weighted sum of per-function rewards, NaN-aware like TRL's `sum_then_normalize`.

    A NaN entry means "this function does not apply to this completion" and is skipped (nansum); a row where
    every function is NaN is unscorable and stays NaN, so `group_advantages` leaves it out and gives it 0.
    """
    rewards_BxF = jnp.asarray(rewards_BxF, jnp.float32)
    weights_F = jnp.asarray(weights_F, jnp.float32)
    if rewards_BxF.ndim != 2 or weights_F.shape != rewards_BxF.shape[1:]:
        raise ValueError(f"rewards_BxF {rewards_BxF.shape} and weights_F {weights_F.shape}: expected [B, F] and [F]")
    unscorable_B = jnp.all(jnp.isnan(rewards_BxF), axis=1)
    rewards_B = jnp.nansum(rewards_BxF * weights_F[None, :], axis=1)
    return jnp.where(unscorable_B, jnp.nan, rewards_B)


def group_advantages(rewards_B, *, num_generations: int, scale_rewards: str | bool = "group"):
    """Group-relative advantages from rewards ordered prompt-major ([p0 g0..gG-1, p1 g0.., ...]).

    Returns (advantages_B, std_B, is_std_zero_B): the std used for scaling (for logging) and TRL's
    `frac_reward_zero_std` indicator (std close to 0, per completion).
    """
    if isinstance(scale_rewards, bool):  # TRL's config accepts True / False for "group" / "none"
        scale_rewards = "group" if scale_rewards else "none"
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards={scale_rewards!r}: expected one of {SCALE_REWARDS}")
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    (batch,) = rewards_B.shape
    if num_generations < 1 or batch % num_generations:
        raise ValueError(f"num_generations={num_generations}: expected a positive divisor of the batch size {batch}")
    rewards_PxG = rewards_B.reshape(-1, num_generations)
    mean_B = jnp.repeat(jnp.nanmean(rewards_PxG, axis=1), num_generations)
    if scale_rewards in ("group", "none"):
        if num_generations > 1:
            std_B = jnp.repeat(nanstd(rewards_PxG, axis=1), num_generations)
        else:
            std_B = jnp.zeros_like(rewards_B)
    else:
        std_B = jnp.broadcast_to(nanstd(rewards_B), rewards_B.shape) if batch > 1 else jnp.zeros_like(rewards_B)

    # Exact zero for all-equal groups (see module docstring); NaN entries do not break equality.
    finite_PxG = jnp.isfinite(rewards_PxG)
    group_max = jnp.max(jnp.where(finite_PxG, rewards_PxG, -jnp.inf), axis=1)
    group_min = jnp.min(jnp.where(finite_PxG, rewards_PxG, jnp.inf), axis=1)
    all_equal_B = jnp.repeat(group_max <= group_min, num_generations)
    centred_B = jnp.where(all_equal_B, 0.0, rewards_B - mean_B)

    advantages_B = centred_B / (std_B + ADVANTAGE_STD_EPSILON) if scale_rewards != "none" else centred_B
    advantages_B = jnp.nan_to_num(advantages_B, nan=0.0)
    is_std_zero_B = jnp.isclose(std_B, 0.0)  # torch.isclose defaults: rtol 1e-5, atol 1e-8 (same in jnp)
    return advantages_B, std_B, is_std_zero_B


# ----------------------------------------------------------------------------------------------- masks


def truncated_completions(completion_ids_BxT, completion_mask_BxT, *, eos_token_ids, pad_token_id=None):
    """TRL's `is_truncated`: the last kept token of a completion is neither an EOS nor the pad token.

    A completion with no kept tokens is reported as not truncated (there is nothing to mask).
    """
    completion_ids_BxT = jnp.asarray(completion_ids_BxT)
    lengths_B = jnp.sum(completion_mask_BxT, axis=1).astype(jnp.int32)
    last_B = jnp.take_along_axis(completion_ids_BxT, jnp.maximum(lengths_B - 1, 0)[:, None], axis=1)[:, 0]
    stop_ids = list(eos_token_ids) + ([] if pad_token_id is None else [pad_token_id])
    if not stop_ids:
        raise ValueError("eos_token_ids: expected at least one EOS token id")
    is_stop_B = jnp.isin(last_B, jnp.asarray(stop_ids, dtype=last_B.dtype))
    return (~is_stop_B) & (lengths_B > 0)


def loss_mask(completion_mask_BxT, *, tool_mask_BxT=None, is_truncated_B=None):
    """Tokens that enter the loss: completion tokens, minus tool-response tokens, minus truncated rows.

    Pass `is_truncated_B` only when masking truncated completions (TRL's `mask_truncated_completions`).
    Use the same mask for `num_items_in_batch` (dapo), as TRL counts it after masking.
    """
    mask_BxT = jnp.asarray(completion_mask_BxT, jnp.float32)
    if tool_mask_BxT is not None:
        if tool_mask_BxT.shape != mask_BxT.shape:
            raise ValueError(
                f"tool_mask_BxT {tool_mask_BxT.shape}: expected the completion mask shape {mask_BxT.shape}"
            )
        mask_BxT = mask_BxT * jnp.asarray(tool_mask_BxT, jnp.float32)
    if is_truncated_B is not None:
        mask_BxT = mask_BxT * (~jnp.asarray(is_truncated_B, bool))[:, None].astype(jnp.float32)
    return mask_BxT


# ----------------------------------------------------------------------------------------------- loss


def _masked_mean(x_BxT, mask_BxT):
    """Mean over mask tokens (TRL's `global_masked_mean` on one process); 0 when the mask is empty."""
    return jnp.sum(x_BxT * mask_BxT) / jnp.maximum(jnp.sum(mask_BxT), 1.0)


def _masked_seq_mean(x_BxT, mask_BxT):
    """Per-sequence masked mean; NaN for sequences without loss tokens (TRL's `masked_seq_mean`)."""
    return jnp.sum(x_BxT * mask_BxT, axis=-1) / jnp.sum(mask_BxT, axis=-1)


def grpo_loss(
    logps_BxT,
    *,
    old_logps_BxT,
    ref_logps_BxT=None,
    advantages_B,
    mask_BxT,
    config: GRPOLossConfig,
    num_items_in_batch=None,
    gradient_accumulation_steps: int = 1,
    steps_per_generation: int = 1,
    entropies_BxT=None,
):
    """The GRPO objective of one micro-batch and TRL's logged metrics.

    logps_BxT: policy log-probs of the completion tokens (differentiated). old_logps_BxT: log-probs of the
    policy that sampled them (pass `jax.lax.stop_gradient(logps_BxT)` when num_iterations = 1).
    ref_logps_BxT: frozen reference log-probs, needed when beta > 0. advantages_B: [B] or [B, T].
    mask_BxT: from `loss_mask`. num_items_in_batch: dapo only, loss-token count of the generation batch;
    defaults to this batch's mask sum. Returns (loss, metrics) with metrics as TRL names them.
    """
    if config.beta != 0.0 and ref_logps_BxT is None:
        raise ValueError(f"ref_logps_BxT is None: beta={config.beta} needs reference log-probs")
    if logps_BxT.shape != old_logps_BxT.shape or logps_BxT.shape != mask_BxT.shape:
        raise ValueError(
            f"logps_BxT {logps_BxT.shape}, old_logps_BxT {old_logps_BxT.shape}, mask_BxT {mask_BxT.shape}: "
            "expected equal [B, T] shapes"
        )
    if gradient_accumulation_steps < 1 or steps_per_generation < 1:
        raise ValueError(
            f"gradient_accumulation_steps={gradient_accumulation_steps}, steps_per_generation={steps_per_generation}:"
            " expected positive ints"
        )
    mask_BxT = jnp.asarray(mask_BxT, logps_BxT.dtype)
    advantages = jnp.asarray(advantages_B, logps_BxT.dtype)
    advantages_BxT = advantages[:, None] if advantages.ndim == 1 else advantages

    ratio_BxT = jnp.exp(logps_BxT - old_logps_BxT)
    clipped_ratio_BxT = jnp.clip(ratio_BxT, 1 - config.epsilon_low, 1 + config.epsilon_high)
    unclipped_ratio_BxT = ratio_BxT if config.delta is None else jnp.minimum(ratio_BxT, config.delta)
    per_token_loss_BxT = -jnp.minimum(unclipped_ratio_BxT * advantages_BxT, clipped_ratio_BxT * advantages_BxT)

    metrics = {}
    if config.beta != 0.0:
        ref_minus_policy_BxT = ref_logps_BxT - logps_BxT
        per_token_kl_BxT = jnp.exp(ref_minus_policy_BxT) - ref_minus_policy_BxT - 1
        if config.use_bias_correction_kl:
            # The ratio is differentiable, so this changes the KL gradient even when its value is 1.
            per_token_kl_BxT = per_token_kl_BxT * ratio_BxT
        per_token_loss_BxT = per_token_loss_BxT + config.beta * per_token_kl_BxT
        metrics["kl"] = _masked_mean(per_token_kl_BxT, mask_BxT)

    masked_loss_BxT = per_token_loss_BxT * mask_BxT
    if config.loss_type == "grpo":
        policy_loss = jnp.mean(jnp.sum(masked_loss_BxT, -1) / jnp.maximum(jnp.sum(mask_BxT, -1), 1.0))
        loss = policy_loss / gradient_accumulation_steps
    elif config.loss_type == "bnpo":
        policy_loss = jnp.sum(masked_loss_BxT) / jnp.maximum(jnp.sum(mask_BxT), 1.0)
        loss = policy_loss / gradient_accumulation_steps
    elif config.loss_type == "dr_grpo":
        policy_loss = jnp.sum(masked_loss_BxT) / (mask_BxT.shape[0] * config.max_completion_length)
        loss = policy_loss / gradient_accumulation_steps
    else:  # dapo
        num_items = jnp.sum(mask_BxT) if num_items_in_batch is None else jnp.asarray(num_items_in_batch)
        normalizer = jnp.maximum(num_items.astype(logps_BxT.dtype), 1.0)
        normalizer = normalizer * gradient_accumulation_steps / steps_per_generation
        policy_loss = jnp.sum(masked_loss_BxT) / normalizer
        loss = policy_loss
    metrics["policy_loss"] = jax.lax.stop_gradient(policy_loss)

    if entropies_BxT is not None:
        metrics["entropy"] = _masked_mean(entropies_BxT, mask_BxT)
    is_low_BxT = ((ratio_BxT < 1 - config.epsilon_low) & (advantages_BxT < 0)).astype(logps_BxT.dtype)
    is_high_BxT = ((ratio_BxT > 1 + config.epsilon_high) & (advantages_BxT > 0)).astype(logps_BxT.dtype)
    is_region_BxT = jnp.maximum(is_low_BxT, is_high_BxT)
    metrics["clip_ratio/low_mean"] = _masked_mean(is_low_BxT, mask_BxT)
    metrics["clip_ratio/high_mean"] = _masked_mean(is_high_BxT, mask_BxT)
    metrics["clip_ratio/region_mean"] = _masked_mean(is_region_BxT, mask_BxT)
    metrics["clip_ratio/low_min"] = jnp.nanmin(_masked_seq_mean(is_low_BxT, mask_BxT))
    metrics["clip_ratio/high_max"] = jnp.nanmax(_masked_seq_mean(is_high_BxT, mask_BxT))
    metrics = {name: jax.lax.stop_gradient(value) for name, value in metrics.items()}
    return loss, metrics
