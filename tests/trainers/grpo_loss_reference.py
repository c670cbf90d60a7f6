"""The GRPO loss's independent references, shared by the GRPO test files: fixed random batches, a float64 NumPy
transcription of TRL 1.16's advantage and loss formulas with their float32 error bounds, and TRL's own
`GRPOTrainer._compute_loss` run on a stand-in `self` whose model forward returns our fixed log-probs (so loss,
gradient and logged metrics come from TRL's source line for line)."""

from __future__ import annotations

import itertools
import warnings
from collections import defaultdict
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.tolerances import formula_atol
from trainers import grpo_loss as gl

B, G, T = 8, 4, 12  # 2 prompts x 4 completions, 12 completion tokens
CASES = list(itertools.product(gl.LOSS_TYPES, [0.0, 0.04], [1, 3]))  # loss_type, beta, num_iterations
# Against TRL's own code: every loss type with the KL on- and off-policy, plus the no-KL path twice.
TRL_CASES = [c for c in CASES if c[1] > 0] + [("grpo", 0.0, 1), ("dapo", 0.0, 3)]


# --------------------------------------------------------------------------------------------- fixtures


def make_batch(seed: int, *, num_iterations: int = 2, truncated_rows=(), all_truncated=False):
    """Fixed random log-probs, masks (with a tool span) and rewards; old log-probs drift when iterating."""
    rng = np.random.default_rng(seed)
    logps = -rng.uniform(0.05, 3.0, size=(B, T)).astype(np.float32)
    old = logps.copy() if num_iterations == 1 else (logps + rng.normal(0, 0.3, size=(B, T))).astype(np.float32)
    ref = (logps + rng.normal(0, 0.25, size=(B, T))).astype(np.float32)
    lengths = rng.integers(3, T + 1, size=B)
    completion_mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
    tool_mask = np.ones((B, T), np.float32)
    tool_mask[1, 2:5] = 0.0  # a tool response inside completion 1
    tool_mask[6, 1:3] = 0.0
    is_truncated = np.zeros(B, bool)
    is_truncated[list(truncated_rows)] = True
    if all_truncated:
        is_truncated[:] = True
    rewards = rng.choice([0.0, 0.25, 0.5, 1.0], size=B).astype(np.float32)
    return dict(
        logps=logps, old=old, ref=ref, completion_mask=completion_mask, tool_mask=tool_mask,
        is_truncated=is_truncated, rewards=rewards,
    )


# --------------------------------------------------------------------------------------------- NumPy TRL


def np_nanstd(x, axis=None):
    """TRL's nanstd, independently: NumPy's nanstd with ddof=1 (NaN when fewer than two values)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanstd(x, axis=axis, ddof=1)


def np_advantages(rewards, *, num_generations, scale_rewards):
    rewards = np.asarray(rewards, np.float64)
    grouped = rewards.reshape(-1, num_generations)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.repeat(np.nanmean(grouped, axis=1), num_generations)
    if scale_rewards in ("group", "none"):
        std = np.repeat(np_nanstd(grouped, axis=1), num_generations) if num_generations > 1 else np.zeros_like(rewards)
    else:
        std = np.full_like(rewards, np_nanstd(rewards)) if rewards.size > 1 else np.zeros_like(rewards)
    adv = rewards - mean
    if scale_rewards != "none":
        adv = adv / (std + 1e-4)
    return np.nan_to_num(adv, nan=0.0)


def np_trl_loss(logps, old, ref, adv, mask, *, cfg, num_items, ga, spg):
    """TRL 1.16 `_compute_loss` (token level, no vLLM/entropy/off-policy options) in float64 NumPy."""
    logps, old, ref, mask = (np.asarray(a, np.float64) for a in (logps, old, ref, mask))
    adv = np.asarray(adv, np.float64)[:, None]
    coef_1 = np.exp(logps - old)
    coef_2 = np.clip(coef_1, 1 - cfg.epsilon_low, 1 + cfg.epsilon_high)
    c1 = coef_1 if cfg.delta is None else np.minimum(coef_1, cfg.delta)
    per_token = -np.minimum(c1 * adv, coef_2 * adv)
    kl = None
    if cfg.beta != 0.0:
        kl = np.exp(ref - logps) - (ref - logps) - 1
        if cfg.use_bias_correction_kl:
            kl = kl * coef_1
        per_token = per_token + cfg.beta * kl
    if cfg.loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / np.maximum(mask.sum(-1), 1.0)).mean() / ga
    elif cfg.loss_type == "bnpo":
        loss = (per_token * mask).sum() / max(mask.sum(), 1.0) / ga
    elif cfg.loss_type == "dr_grpo":
        loss = (per_token * mask).sum() / (per_token.shape[0] * cfg.max_completion_length) / ga
    else:
        loss = (per_token * mask).sum() / (max(num_items, 1.0) * ga / spg)
    gmean = lambda x: (x * mask).sum() / max(mask.sum(), 1.0)  # noqa: E731
    low = (coef_1 < 1 - cfg.epsilon_low) & (adv < 0)
    high = (coef_1 > 1 + cfg.epsilon_high) & (adv > 0)
    metrics = {
        "clip_ratio/low_mean": gmean(low), "clip_ratio/high_mean": gmean(high),
        "clip_ratio/region_mean": gmean(low | high),
    }
    if kl is not None:
        metrics["kl"] = gmean(kl)
    return loss, metrics


def token_weights(mask, *, cfg, num_items, ga, spg):
    """[B, T] weight of each token's loss in the reduction (TRL's normalisers, independently): non-negative, summing
    to at most 1 over a generation batch."""
    mask = np.asarray(mask, np.float64)
    rows = mask.shape[0]
    if cfg.loss_type == "grpo":
        return mask / (rows * np.maximum(mask.sum(-1, keepdims=True), 1.0) * ga)
    if cfg.loss_type == "bnpo":
        return mask / (max(mask.sum(), 1.0) * ga)
    if cfg.loss_type == "dr_grpo":
        return mask / (rows * cfg.max_completion_length * ga)
    return mask * spg / (max(num_items if num_items is not None else mask.sum(), 1.0) * ga)


def loss_bounds(batch, adv, mask, *, cfg, num_iterations, num_items=None, ga=1, spg=1):
    """(loss, [B, T] gradient, kl metric) |a - b| bounds of two float32 evaluations of TRL's GRPO loss formula
    (`tests.tolerances.formula_atol`). Per token, with r = exp(logp - old) (1 on-policy), d = ref - logp and
    r' = r under the KL's importance correction (else 1): the loss term is at most |A| r + beta r' (e^d + |d| + 1)
    in magnitude after about 8 roundings, its gradient at most |A| r + 2 beta r' (e^d + |d| + 1) after about 16; the
    loss sums the weighted terms of n tokens, the KL metric is their masked mean."""
    logps = np.asarray(batch["logps"], np.float64)
    old = logps if num_iterations == 1 else np.asarray(batch["old"], np.float64)
    d = np.asarray(batch["ref"], np.float64) - logps
    r = np.exp(logps - old)
    rb = r if cfg.use_bias_correction_kl else np.ones_like(r)
    kl_mag = rb * (np.exp(d) + np.abs(d) + 1.0)
    a = np.abs(np.asarray(adv, np.float64)).reshape(-1, 1)
    w = token_weights(mask, cfg=cfg, num_items=num_items, ga=ga, spg=spg)
    n = int((np.asarray(mask) > 0).sum())
    loss = formula_atol(float(np.sum(w * (a * r + cfg.beta * kl_mag))), ops=8, terms=n)
    grad = formula_atol(w * (a * r + 2 * cfg.beta * kl_mag), ops=16)
    on = np.asarray(mask) > 0
    kl = formula_atol(float(kl_mag[on].mean()) if n else 0.0, ops=8, terms=n)
    return float(loss), grad, float(kl)


def advantage_bounds(rewards, adv, *, num_generations, scale_rewards):
    """[B] |a - b| bound of two float32 evaluations of (r - mean) / (std + 1e-4): the mean (G terms) and the std
    (G squares, a square root) each within (G + 4) EPS32 of the group's reward scale; divided by std + 1e-4, and
    the relative error of the std carried into |A| (scale "batch": the whole batch is the group of the std)."""
    r = np.nan_to_num(np.asarray(rewards, np.float64), nan=0.0)
    n = r.size if scale_rewards == "batch" else num_generations
    scale = np.repeat(np.abs(r.reshape(-1, num_generations)).max(1), num_generations)
    if scale_rewards == "none":
        return formula_atol(scale, ops=4, terms=n)
    std = np.nan_to_num(np.repeat(np_nanstd(np.asarray(rewards, np.float64).reshape(-1, num_generations), axis=1),
                                  num_generations) if scale_rewards == "group" else
                        np.full(r.size, np_nanstd(np.asarray(rewards, np.float64))), nan=0.0)
    return formula_atol(scale / (std + 1e-4) * (1.0 + np.abs(np.asarray(adv, np.float64))), ops=4, terms=n)


def ours(batch, *, cfg, num_iterations, mask, advantages, num_items=None, ga=1, spg=1):
    logps = jnp.asarray(batch["logps"])
    old = jax.lax.stop_gradient(logps) if num_iterations == 1 else jnp.asarray(batch["old"])
    return gl.grpo_loss(
        logps, old_logps_BxT=old, ref_logps_BxT=jnp.asarray(batch["ref"]), advantages_B=advantages,
        mask_BxT=mask, config=cfg, num_items_in_batch=num_items, gradient_accumulation_steps=ga,
        steps_per_generation=spg,
    )


def make_config(loss_type, beta, **kw):
    return gl.GRPOLossConfig(loss_type=loss_type, beta=beta, epsilon_low=0.2, epsilon_high=0.28,
                             max_completion_length=16, **kw)


# --------------------------------------------------------------------------------------------- TRL's own code


class _Accelerator:
    num_processes = 1

    @staticmethod
    def gather(x):
        return x

    @staticmethod
    def reduce(x, reduction="sum"):
        return x


def trl_compute_loss(batch, *, cfg, num_iterations, mask_parts, advantages, num_items, ga, spg, num_processes=1):
    """Run TRL's `GRPOTrainer._compute_loss` with our log-probs; returns (loss, grad wrt log-probs, metrics)."""
    torch = pytest.importorskip("torch")
    trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    completion_mask, tool_mask = (torch.tensor(m) for m in mask_parts)
    logps = torch.tensor(batch["logps"], requires_grad=True)
    stub = SimpleNamespace(
        model=SimpleNamespace(training=True), top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level=cfg.importance_sampling_level, beta=cfg.beta, loss_type=cfg.loss_type,
        epsilon_low=cfg.epsilon_low, epsilon_high=cfg.epsilon_high, use_vllm=False,
        vllm_importance_sampling_correction=False,
        current_gradient_accumulation_steps=ga, max_completion_length=cfg.max_completion_length,
        accelerator=SimpleNamespace(num_processes=num_processes, gather=_Accelerator.gather,
                                    reduce=_Accelerator.reduce),
        _metrics={"train": defaultdict(list)}, _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        args=SimpleNamespace(delta=cfg.delta, use_bias_correction_kl=cfg.use_bias_correction_kl,
                             steps_per_generation=spg),
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None),
    )
    rows = completion_mask.shape[0]
    inputs = {
        "prompt_ids": torch.zeros((rows, 1), dtype=torch.long),
        "prompt_mask": torch.ones((rows, 1), dtype=torch.long),
        "completion_ids": torch.zeros((rows, T), dtype=torch.long), "completion_mask": completion_mask,
        "tool_mask": tool_mask, "advantages": torch.tensor(np.asarray(advantages)),
        "ref_per_token_logps": torch.tensor(batch["ref"]), "num_items_in_batch": torch.tensor(num_items),
    }
    if num_iterations > 1:
        inputs["old_per_token_logps"] = torch.tensor(batch["old"])
    loss = trl_grpo.GRPOTrainer._compute_loss(stub, None, inputs)
    loss.backward()
    return float(loss), logps.grad.numpy(), {k: v[-1] for k, v in stub._metrics["train"].items()}
