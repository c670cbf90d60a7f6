"""GRPO math: reward aggregation, group advantages and the clipped policy loss, exactly as TRL 1.16.

Pure JAX functions (jit-friendly, no host syncs) that `trainers/grpo.py` wires into its step. Every formula
transcribes `trl/trainer/grpo_trainer.py` (TRL 1.16: `_generate_and_score_completions` for rewards and
advantages, `_compute_loss` for the loss and its logged metrics); the tests compare against TRL's own code.
The host-side pieces of a generation batch (`host_advantages`, `soft_overlong_punishment`, `reward_stats`) are
NumPy around the same functions.

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

Other estimators (`AdvantageConfig.estimator`, host side in `host_advantages`): "rloo" (TRL 1.16 RLOOTrainer's
leave-one-out baseline, optional batch normalisation; `rloo_advantages`) and "reinforce_pp" (REINFORCE++ with the
group-mean baseline and batch whitening over loss tokens, as verl; `reinforce_pp_advantages`). DAPO's pieces:
`soft_overlong_punishment` (Eq. 13, added to the rewards) and dynamic sampling (`keep_B`: groups whose rewards are
all equal leave the loss; we drop them instead of over-sampling to refill the batch as the paper does; under
the "dapo" and "bnpo" normalisers the loss then averages the kept tokens, under "grpo" and "dr_grpo" the dropped rows
still count in the divisor (rows, or rows x max length), so the update shrinks by the fraction of groups kept).

Loss (`grpo_loss`), per token, with ratio = exp(logp - old_logp) (= 1 in value when num_iterations = 1 and
old_logp = stop_gradient(logp)):
  loss_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)  [+ beta * kl_t]
  kl_t   = exp(ref - logp) - (ref - logp) - 1                            (k3 estimator)
  kl_t  *= ratio                                        when use_bias_correction_kl (TRL 1.16 default: True)
  If `delta` is set the unclipped ratio is also capped at delta (two-sided clipping, TRL's `delta`).
  importance_sampling_level="sequence" (GSPO, as TRL 1.16):
  ratio_i = exp(sum_t (logp - old_logp) M / max(sum_t M, 1)) for all tokens of sequence i ([B, 1], not detached); the KL correction uses it too, and the clip metrics are
  means over the B sequences.
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
import numpy as np

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ScaleRewards = Literal["group", "batch", "none"]

LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")
IMPORTANCE_SAMPLING_LEVELS: tuple[str, ...] = ("token", "sequence")
ADVANTAGE_ESTIMATORS: tuple[str, ...] = ("grpo", "rloo", "reinforce_pp")
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
    importance_sampling_level: str = "token"  # "sequence": GSPO's length-normalised sequence ratio

    def __post_init__(self):
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type={self.loss_type!r}: expected one of {LOSS_TYPES}")
        if self.importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
            raise ValueError(f"importance_sampling_level={self.importance_sampling_level!r}: expected one of "
                             f"{IMPORTANCE_SAMPLING_LEVELS}")
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


def all_equal_groups(rewards_PxG):
    """[P] True where a group's finite rewards are all equal (or it has none): no signal to compare."""
    finite_PxG = jnp.isfinite(rewards_PxG)
    group_max = jnp.max(jnp.where(finite_PxG, rewards_PxG, -jnp.inf), axis=1)
    group_min = jnp.min(jnp.where(finite_PxG, rewards_PxG, jnp.inf), axis=1)
    return group_max <= group_min


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
    all_equal_B = jnp.repeat(all_equal_groups(rewards_PxG), num_generations)
    centred_B = jnp.where(all_equal_B, 0.0, rewards_B - mean_B)

    advantages_B = centred_B / (std_B + ADVANTAGE_STD_EPSILON) if scale_rewards != "none" else centred_B
    advantages_B = jnp.nan_to_num(advantages_B, nan=0.0)
    is_std_zero_B = jnp.isclose(std_B, 0.0)  # torch.isclose defaults: rtol 1e-5, atol 1e-8 (same in jnp)
    return advantages_B, std_B, is_std_zero_B


def rloo_advantages(rewards_B, *, num_generations: int, normalize: bool = False):
    """RLOO's leave-one-out advantages as TRL 1.16's RLOOTrainer computes them (`_generate_and_score_completions`).

    A_i = r_i - (sum_group(r) - r_i) / (n - 1), n = scorable (non-NaN) completions of the group; NaN rewards
    and groups with a single scorable completion get 0. normalize (TRL's `normalize_advantages`): then
    (A - mean(A)) / (nanstd(A) + 1e-4) over the whole batch. All-equal groups get exactly 0 (module docstring).
    """
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    rewards_PxG = _grouped(rewards_B, num_generations)
    count_Px1 = jnp.sum(~jnp.isnan(rewards_PxG), axis=1, keepdims=True)
    baseline_PxG = (jnp.nansum(rewards_PxG, axis=1, keepdims=True) - rewards_PxG) / (count_Px1 - 1)
    # exact 0 for all-equal groups of >= 2 scorable rewards (a lone scorable one stays NaN -> 0, out of the norm)
    all_equal_B = jnp.repeat(all_equal_groups(rewards_PxG) & (count_Px1[:, 0] > 1), num_generations)
    advantages_B = jnp.where(all_equal_B & ~jnp.isnan(rewards_B), 0.0, rewards_B - baseline_PxG.reshape(-1))
    if normalize:
        advantages_B = (advantages_B - jnp.nanmean(advantages_B)) / (nanstd(advantages_B) + ADVANTAGE_STD_EPSILON)
    return jnp.nan_to_num(advantages_B, nan=0.0, posinf=0.0, neginf=0.0)


def reinforce_pp_advantages(rewards_B, *, num_generations: int, mask_BxT):
    """REINFORCE++ with the group baseline (Hu et al. 2025, arXiv:2501.03262), as verl's
    `compute_reinforce_plus_plus_baseline_outcome_advantage` (core_algos.py) computes it for outcome rewards:

      c_i = r_i - mean_group(r)                  (the group mean as baseline; 0 for all-equal groups)
      A_i = (c_i - mu) / sqrt(var + 1e-8)        mu, var: mean and Bessel-corrected variance of c over every
                                                 loss token of the batch (verl's `masked_whiten`), i.e. each
                                                 completion weighted by its n_i tokens, N = sum n_i:
      mu = sum n_i c_i / N,   var = sum n_i (c_i - mu)^2 / (N - 1)

    verl writes A_i on every token of completion i; here A_i is one value per row ([B]; the loss applies the mask).
    NaN rewards carry no tokens and get 0; with fewer than 2 loss tokens in the batch every advantage is 0.
    """
    rewards_B = jnp.asarray(rewards_B, jnp.float32)
    rewards_PxG = _grouped(rewards_B, num_generations)
    mean_B = jnp.repeat(jnp.nanmean(rewards_PxG, axis=1), num_generations)
    all_equal_B = jnp.repeat(all_equal_groups(rewards_PxG), num_generations)
    scorable_B = ~jnp.isnan(rewards_B)
    centred_B = jnp.where(all_equal_B | ~scorable_B, 0.0, rewards_B - mean_B)
    tokens_B = jnp.sum(jnp.asarray(mask_BxT, jnp.float32), axis=1) * scorable_B
    n = jnp.sum(tokens_B)
    mu = jnp.sum(tokens_B * centred_B) / jnp.maximum(n, 1.0)
    var = jnp.sum(tokens_B * (centred_B - mu) ** 2) / jnp.maximum(n - 1.0, 1.0)
    advantages_B = (centred_B - mu) * jax.lax.rsqrt(var + 1e-8)
    return jnp.where(scorable_B & (n > 1), advantages_B, 0.0)


def _grouped(rewards_B, num_generations: int):
    (batch,) = rewards_B.shape
    if num_generations < 2 or batch % num_generations:
        raise ValueError(f"num_generations={num_generations}: expected a divisor >= 2 of the batch size {batch}")
    return rewards_B.reshape(-1, num_generations)


# ----------------------------------------------------------------------------------------------- DAPO (host side)


def soft_overlong_punishment(lengths_B, *, max_len: int, cache: int) -> np.ndarray:
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv:2503.14476, Eq. 13), added to the task reward:

      R_length(|y|) = 0                               |y| <= L_max - L_cache
                    = ((L_max - L_cache) - |y|) / L_cache   L_max - L_cache < |y| <= L_max
                    = -1                              L_max < |y|

    with L_max = `max_len`, L_cache = `cache` (0 = a hard -1 beyond L_max). Same as TRL's
    `trl.rewards.get_soft_overlong_punishment(max_len, cache)`. lengths_B: completion tokens per row.
    """
    lengths_B = np.asarray(lengths_B, np.float64)
    start = max_len - cache
    ramp = (start - lengths_B) / max(cache, 1)  # used only where start < |y| <= max_len, which implies cache > 0
    return np.where(lengths_B <= start, 0.0, np.where(lengths_B <= max_len, ramp, -1.0)).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class AdvantageConfig:
    """Host-side settings: rewards -> advantages (config keys `grpo.advantage_estimator`, `scale_rewards`,
    `normalize_advantages`, `dynamic_sampling`, `overlong_max_len`, `overlong_cache`). Defaults: plain GRPO."""

    estimator: str = "grpo"
    scale_rewards: str | bool = "group"  # grpo only
    normalize_advantages: bool = False  # rloo only (TRL RLOOConfig.normalize_advantages)
    dynamic_sampling: bool = False  # DAPO: groups whose rewards are all equal leave the loss
    overlong_max_len: int = 0  # DAPO L_max; 0 = no overlong shaping
    overlong_cache: int = 0  # DAPO L_cache

    def __post_init__(self):
        if self.estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage_estimator={self.estimator!r}: expected one of {ADVANTAGE_ESTIMATORS}")
        if self.normalize_advantages and self.estimator != "rloo":
            raise ValueError(f"normalize_advantages=True with advantage_estimator={self.estimator!r}: it is RLOO's "
                             "option; grpo scales with scale_rewards, reinforce_pp always whitens")
        if self.overlong_max_len < 0 or not 0 <= self.overlong_cache <= max(self.overlong_max_len, 0):
            raise ValueError(f"overlong_max_len={self.overlong_max_len}, overlong_cache={self.overlong_cache}: "
                             "expected overlong_max_len >= 0 (0 = off) and 0 <= overlong_cache <= overlong_max_len")


@dataclasses.dataclass(frozen=True)
class HostAdvantages:
    """What one generation batch's rewards become ([B] NumPy arrays): the shaped rewards, the advantages, the group
    std and TRL's zero-std indicator (for logging), and keep_B (rows whose group stays in the loss)."""

    rewards_B: np.ndarray
    advantages_B: np.ndarray
    std_B: np.ndarray
    is_std_zero_B: np.ndarray
    keep_B: np.ndarray


def host_advantages(total_B, *, num_generations: int, config: AdvantageConfig, lengths_B=None,
                    mask_BxT=None) -> HostAdvantages:
    """Rewards [B] (NaN = unscorable) -> `HostAdvantages`: overlong shaping (added to scorable rows; an unscorable
    row stays unscorable), dynamic sampling (keep_B False for all-equal groups), then the estimator. mask_BxT: the
    loss mask (reinforce_pp whitens over its tokens, of the kept rows only); lengths_B: for overlong shaping."""
    total_B = np.asarray(total_B, np.float32)
    if config.overlong_max_len:
        if lengths_B is None:
            raise ValueError("lengths_B is None: overlong shaping (overlong_max_len > 0) needs completion lengths")
        total_B = total_B + soft_overlong_punishment(lengths_B, max_len=config.overlong_max_len,
                                                     cache=config.overlong_cache)
    keep_B = np.ones(total_B.shape, bool)
    if config.dynamic_sampling:
        keep_B = ~np.repeat(np.asarray(all_equal_groups(_grouped(jnp.asarray(total_B), num_generations))),
                            num_generations)
    adv, std, zero_std = group_advantages(total_B, num_generations=num_generations, scale_rewards=config.scale_rewards)
    if config.estimator == "rloo":
        adv = rloo_advantages(total_B, num_generations=num_generations, normalize=config.normalize_advantages)
    elif config.estimator == "reinforce_pp":
        if mask_BxT is None:
            raise ValueError("mask_BxT is None: advantage_estimator='reinforce_pp' whitens over the loss tokens")
        adv = reinforce_pp_advantages(total_B, num_generations=num_generations,
                                      mask_BxT=np.asarray(mask_BxT, np.float32) * keep_B[:, None])
    return HostAdvantages(rewards_B=total_B, advantages_B=np.asarray(adv, np.float32), std_B=np.asarray(std),
                          is_std_zero_B=np.asarray(zero_std), keep_B=keep_B)


def reward_stats(h: HostAdvantages, *, num_generations: int, dynamic_sampling: bool) -> dict:
    """Logged reward statistics of a batch (`groups_kept` with DAPO's dynamic sampling)."""
    total_B, std, zero_std = h.rewards_B, h.std_B, h.is_std_zero_B
    finite = np.isfinite(total_B)
    grouped = np.where(finite, total_B, np.nan).reshape(-1, num_generations)
    stats = {"reward": float(np.nanmean(total_B)) if finite.any() else float("nan"),
             "reward_std": float(np.nanmean(np.asarray(std))) if finite.any() else float("nan"),
             "frac_reward_zero_std": float(np.mean(np.asarray(zero_std))),
             "unscorable": int((~finite).sum()),
             "group_best": float(np.nanmean(np.nanmax(grouped, axis=1))) if finite.any() else float("nan")}
    if dynamic_sampling:
        stats["groups_kept"] = int(h.keep_B.sum()) // num_generations
    return stats


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

    log_ratio_BxT = logps_BxT - old_logps_BxT
    if config.importance_sampling_level == "sequence":
        # GSPO as TRL 1.16: one ratio per sequence, exp of the masked mean log-ratio, kept [B, 1] so it broadcasts
        # over the tokens; not detached (the gradient flows through the mean to every token of the sequence).
        log_ratio_Bx1 = jnp.sum(log_ratio_BxT * mask_BxT, -1, keepdims=True) / jnp.maximum(
            jnp.sum(mask_BxT, -1, keepdims=True), 1.0)
        ratio_BxT = jnp.exp(log_ratio_Bx1)  # [B, 1]
    else:
        ratio_BxT = jnp.exp(log_ratio_BxT)
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
    if is_low_BxT.shape[1] == 1:  # sequence level: one indicator per sequence, averaged over the B rows (TRL)
        ones_Bx1 = jnp.ones_like(is_low_BxT)
        metrics["clip_ratio/low_mean"] = _masked_mean(is_low_BxT, ones_Bx1)
        metrics["clip_ratio/high_mean"] = _masked_mean(is_high_BxT, ones_Bx1)
        metrics["clip_ratio/region_mean"] = _masked_mean(is_region_BxT, ones_Bx1)
        metrics["clip_ratio/low_min"] = jnp.nanmin(is_low_BxT[:, 0])
        metrics["clip_ratio/high_max"] = jnp.nanmax(is_high_BxT[:, 0])
    else:
        metrics["clip_ratio/low_mean"] = _masked_mean(is_low_BxT, mask_BxT)
        metrics["clip_ratio/high_mean"] = _masked_mean(is_high_BxT, mask_BxT)
        metrics["clip_ratio/region_mean"] = _masked_mean(is_region_BxT, mask_BxT)
        metrics["clip_ratio/low_min"] = jnp.nanmin(_masked_seq_mean(is_low_BxT, mask_BxT))
        metrics["clip_ratio/high_max"] = jnp.nanmax(_masked_seq_mean(is_high_BxT, mask_BxT))
    metrics = {name: jax.lax.stop_gradient(value) for name, value in metrics.items()}
    return loss, metrics
