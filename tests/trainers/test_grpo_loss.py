"""GRPO loss and advantages against (a) a NumPy transcription of TRL 1.16's formulas and (b) TRL's own code.

(a) runs everywhere. (b) calls `GRPOTrainer._compute_loss` itself on a stand-in `self` whose model forward
returns our fixed log-probs, so loss, gradient and logged metrics come from TRL's source line for line.
"""

from __future__ import annotations

import itertools
import warnings
from collections import defaultdict
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reasoner.models.scoring import logps_and_entropy
from tests.tolerances import EPS32, formula_atol
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


# --------------------------------------------------------------------------------------------- advantages


@pytest.mark.parametrize("scale_rewards", gl.SCALE_REWARDS)
@pytest.mark.parametrize("num_generations", [1, 4, 8])
def test_advantages_match_numpy_trl(scale_rewards, num_generations):
    rewards = np.random.default_rng(3).normal(size=16).astype(np.float32)
    rewards[5] = np.nan  # an unscorable completion: excluded from mean/std, advantage 0
    adv, std, _ = gl.group_advantages(rewards, num_generations=num_generations, scale_rewards=scale_rewards)
    expected = np_advantages(rewards, num_generations=num_generations, scale_rewards=scale_rewards)
    tol = advantage_bounds(rewards, expected, num_generations=num_generations, scale_rewards=scale_rewards)
    assert np.all(np.abs(np.asarray(adv) - expected) <= tol), (np.asarray(adv) - expected, tol)
    assert np.asarray(adv)[5] == 0.0
    assert np.all(np.isfinite(np.asarray(adv)))


@pytest.mark.parametrize("scale_rewards", gl.SCALE_REWARDS)
def test_all_equal_group_gives_exact_zero_advantage(scale_rewards):
    # 0.1 is not representable: TRL's float32 mean differs from 0.1 by rounding, which /1e-4 would amplify.
    rewards = np.array([0.1] * 16 + [0.0, 1.0, 1.0, 0.0] + [np.nan, 0.3, 0.3, 0.3], np.float32)
    adv, _, is_zero = gl.group_advantages(rewards, num_generations=4, scale_rewards=scale_rewards)
    adv = np.asarray(adv)
    assert np.all(adv[:16] == 0.0) and np.all(adv[20:] == 0.0)
    assert np.all(np.abs(adv[16:20]) > 0.5 if scale_rewards != "none" else np.abs(adv[16:20]) == 0.5)
    if scale_rewards == "group":
        assert np.asarray(is_zero).tolist() == [True] * 16 + [False] * 4 + [True] * 4


def test_boolean_scale_rewards_as_trl_config():
    rewards = np.array([0.0, 1.0, 0.5, 0.5, 1.0, 1.0, 0.0, 0.25], np.float32)
    for flag, name in ((True, "group"), (False, "none")):
        got = gl.group_advantages(rewards, num_generations=4, scale_rewards=flag)[0]
        np.testing.assert_array_equal(np.asarray(got), np.asarray(gl.group_advantages(rewards, num_generations=4,
                                                                                      scale_rewards=name)[0]))


def test_combine_rewards_nan_aware_weighted_sum():
    per_func = np.array([[1.0, 0.5], [np.nan, 0.5], [np.nan, np.nan], [0.0, 1.0]], np.float32)
    combined = np.asarray(gl.combine_rewards(per_func, [2.0, 0.5]))
    np.testing.assert_allclose(combined[[0, 1, 3]], [2.25, 0.25, 0.5])
    assert np.isnan(combined[2])


def test_bad_advantage_inputs_raise():
    with pytest.raises(ValueError, match="scale_rewards='std'"):
        gl.group_advantages(np.zeros(4), num_generations=2, scale_rewards="std")
    with pytest.raises(ValueError, match="num_generations=3"):
        gl.group_advantages(np.zeros(4), num_generations=3)
    with pytest.raises(ValueError, match="loss_type='ppo'"):
        gl.GRPOLossConfig(loss_type="ppo")
    with pytest.raises(ValueError, match="max_completion_length=None"):
        gl.GRPOLossConfig(loss_type="dr_grpo")
    with pytest.raises(ValueError, match="ref_logps_BxT is None"):
        gl.grpo_loss(jnp.zeros((2, 3)), old_logps_BxT=jnp.zeros((2, 3)), advantages_B=jnp.zeros(2),
                     mask_BxT=jnp.ones((2, 3)), config=gl.GRPOLossConfig(beta=0.1))


# --------------------------------------------------------------------------------------------- loss vs NumPy


@pytest.mark.parametrize("loss_type,beta,num_iterations", CASES)
def test_loss_matches_numpy_trl(loss_type, beta, num_iterations):
    batch = make_batch(7, num_iterations=num_iterations, truncated_rows=[2])
    cfg = make_config(loss_type, beta)
    mask = gl.loss_mask(batch["completion_mask"], tool_mask_BxT=batch["tool_mask"],
                        is_truncated_B=batch["is_truncated"])
    for scale_rewards in gl.SCALE_REWARDS:
        adv, _, _ = gl.group_advantages(batch["rewards"], num_generations=G, scale_rewards=scale_rewards)
        # One generation batch of 3 micro-batches' worth of tokens, 2 accumulation steps per optimizer step.
        num_items, ga, spg = float(np.asarray(mask).sum()) * 3, 2, 3
        loss, metrics = ours(batch, cfg=cfg, num_iterations=num_iterations, mask=mask, advantages=adv,
                             num_items=num_items, ga=ga, spg=spg)
        old = batch["logps"] if num_iterations == 1 else batch["old"]
        ref_loss, ref_metrics = np_trl_loss(batch["logps"], old, batch["ref"], np.asarray(adv), np.asarray(mask),
                                            cfg=cfg, num_items=num_items, ga=ga, spg=spg)
        loss_tol, _, kl_tol = loss_bounds(batch, adv, mask, cfg=cfg, num_iterations=num_iterations,
                                          num_items=num_items, ga=ga, spg=spg)
        np.testing.assert_allclose(float(loss), ref_loss, rtol=0, atol=loss_tol)
        assert set(ref_metrics) <= set(metrics)
        for name, value in ref_metrics.items():  # clip fractions: counts over counts, one rounding each
            tol = kl_tol if name == "kl" else 2 * EPS32 * abs(value)
            np.testing.assert_allclose(float(metrics[name]), value, rtol=0, atol=tol, err_msg=name)
        if num_iterations == 1:
            assert float(metrics["clip_ratio/region_mean"]) == 0.0


def test_masks_exclude_tool_and_truncated_tokens():
    batch = make_batch(11)
    cfg = make_config("bnpo", 0.0)
    adv, _, _ = gl.group_advantages(batch["rewards"], num_generations=G)
    full = gl.loss_mask(batch["completion_mask"], tool_mask_BxT=batch["tool_mask"], is_truncated_B=np.eye(B)[1] > 0)
    assert np.asarray(full)[1].sum() == 0 and np.asarray(full)[6, 1:3].sum() == 0
    # Perturbing log-probs of masked tokens (tool span, truncated row) leaves the loss unchanged.
    loss_a, _ = ours(batch, cfg=cfg, num_iterations=2, mask=full, advantages=adv)
    batch["logps"][1] += 5.0
    batch["logps"][6, 1:3] -= 5.0
    loss_b, _ = ours(batch, cfg=cfg, num_iterations=2, mask=full, advantages=adv)
    assert float(loss_a) == float(loss_b)


@pytest.mark.parametrize("loss_type", gl.LOSS_TYPES)
def test_all_truncated_batch_gives_zero_loss_and_finite_grads(loss_type):
    batch = make_batch(5, all_truncated=True)
    cfg = make_config(loss_type, 0.04)
    mask = gl.loss_mask(batch["completion_mask"], is_truncated_B=batch["is_truncated"])
    adv, _, _ = gl.group_advantages(batch["rewards"], num_generations=G)

    def f(logps):
        return gl.grpo_loss(logps, old_logps_BxT=jnp.asarray(batch["old"]), ref_logps_BxT=jnp.asarray(batch["ref"]),
                            advantages_B=adv, mask_BxT=mask, config=cfg)

    (loss, metrics), grads = jax.value_and_grad(f, has_aux=True)(jnp.asarray(batch["logps"]))
    assert float(loss) == 0.0 and float(metrics["kl"]) == 0.0
    assert np.all(np.asarray(grads) == 0.0)


def test_truncated_completions_from_ids():
    ids = np.array([[5, 6, 2, 0], [5, 6, 7, 8], [5, 0, 0, 0], [9, 9, 9, 0]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])
    got = gl.truncated_completions(ids, mask, eos_token_ids=[2], pad_token_id=0)
    assert np.asarray(got).tolist() == [False, True, False, True]


def test_sharded_equals_unsharded():
    """The loss jitted with the batch split over 8 devices equals the single-device value: the same formula with
    its sums split across devices (`loss_bounds`; the token count is an exact integer sum)."""
    devices = np.array(jax.devices()[:8])
    if devices.size < 8:
        pytest.skip("needs 8 (simulated) devices")
    mesh = jax.sharding.Mesh(devices, ("data",))
    row = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    batch = make_batch(13)
    cfg = make_config("dapo", 0.04)
    mask = gl.loss_mask(batch["completion_mask"], tool_mask_BxT=batch["tool_mask"])
    adv, _, _ = gl.group_advantages(batch["rewards"], num_generations=G)
    args = [jnp.asarray(batch[k]) for k in ("logps", "old", "ref")] + [adv, mask]

    def f(logps, old, ref, adv, mask):
        return gl.grpo_loss(logps, old_logps_BxT=old, ref_logps_BxT=ref, advantages_B=adv, mask_BxT=mask, config=cfg)

    plain = jax.jit(jax.value_and_grad(f, has_aux=True))(*args)
    sharded_args = [jax.device_put(a, row) for a in args]
    sharded = jax.jit(jax.value_and_grad(f, has_aux=True), in_shardings=(row,) * 5)(*sharded_args)
    loss_tol, grad_tol, _ = loss_bounds(batch, adv, mask, cfg=cfg, num_iterations=2)
    np.testing.assert_allclose(float(sharded[0][0]), float(plain[0][0]), rtol=0, atol=loss_tol)
    assert np.all(np.abs(np.asarray(sharded[1]) - np.asarray(plain[1])) <= grad_tol)


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


@pytest.mark.baseline
@pytest.mark.parametrize("loss_type,beta,num_iterations", TRL_CASES)
def test_loss_and_grad_match_trl_compute_loss(loss_type, beta, num_iterations):
    batch = make_batch(21, num_iterations=num_iterations, truncated_rows=[4])
    cfg = make_config(loss_type, beta)
    # TRL zeroes both masks of a truncated row (mask_truncated_completions) before _compute_loss.
    keep = (~batch["is_truncated"])[:, None].astype(np.float32)
    completion_mask, tool_mask = batch["completion_mask"] * keep, batch["tool_mask"] * keep
    mask = gl.loss_mask(batch["completion_mask"], tool_mask_BxT=batch["tool_mask"],
                        is_truncated_B=batch["is_truncated"])
    adv, _, _ = gl.group_advantages(batch["rewards"], num_generations=G, scale_rewards="group")
    num_items, ga, spg = float(np.asarray(mask).sum()) * 2, 2, 2

    def f(logps):
        old = jax.lax.stop_gradient(logps) if num_iterations == 1 else jnp.asarray(batch["old"])
        return gl.grpo_loss(logps, old_logps_BxT=old, ref_logps_BxT=jnp.asarray(batch["ref"]), advantages_B=adv,
                            mask_BxT=mask, config=cfg, num_items_in_batch=num_items,
                            gradient_accumulation_steps=ga, steps_per_generation=spg)

    (loss, metrics), grads = jax.value_and_grad(f, has_aux=True)(jnp.asarray(batch["logps"]))
    trl_loss, trl_grad, trl_metrics = trl_compute_loss(
        batch, cfg=cfg, num_iterations=num_iterations, mask_parts=(completion_mask, tool_mask), advantages=adv,
        num_items=num_items, ga=ga, spg=spg)
    loss_tol, grad_tol, kl_tol = loss_bounds(batch, adv, mask, cfg=cfg, num_iterations=num_iterations,
                                             num_items=num_items, ga=ga, spg=spg)
    np.testing.assert_allclose(float(loss), trl_loss, rtol=0, atol=loss_tol)
    assert np.all(np.abs(np.asarray(grads) - trl_grad) <= grad_tol), np.abs(np.asarray(grads) - trl_grad).max()
    for name in ("kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                 "clip_ratio/low_min", "clip_ratio/high_max"):
        if name in trl_metrics:  # clip fractions: counts over counts, one rounding each
            tol = kl_tol if name == "kl" else 2 * EPS32 * abs(trl_metrics[name])
            np.testing.assert_allclose(float(metrics[name]), trl_metrics[name], rtol=0, atol=tol, err_msg=name)
        else:
            assert name not in metrics


@pytest.mark.baseline
@pytest.mark.parametrize("scale_rewards", gl.SCALE_REWARDS)
def test_advantages_match_trl_nanstd(scale_rewards):
    """TRL's advantage lines (transcribed in torch, with TRL's own `nanstd`)."""
    torch = pytest.importorskip("torch")
    trl_utils = pytest.importorskip("trl.trainer.utils")
    rewards = np.random.default_rng(9).uniform(size=12).astype(np.float32)
    rewards[[2, 7]] = np.nan
    r = torch.tensor(rewards)
    mean = torch.nanmean(r.view(-1, 4), dim=1).repeat_interleave(4)
    if scale_rewards == "batch":
        std = trl_utils.nanstd(r).expand_as(r)
    else:
        std = trl_utils.nanstd(r.view(-1, 4), dim=1).repeat_interleave(4)
    expected = r - mean
    if scale_rewards != "none":
        expected = expected / (std + 1e-4)
    expected = torch.nan_to_num(expected, nan=0.0).numpy()
    adv, ours_std, _ = gl.group_advantages(rewards, num_generations=4, scale_rewards=scale_rewards)
    tol = advantage_bounds(rewards, expected, num_generations=4, scale_rewards=scale_rewards)
    assert np.all(np.abs(np.asarray(adv) - expected) <= tol), (np.asarray(adv) - expected, tol)
    # the std: a mean, n squares and a square root, relative to the rewards' scale (<= 1 here)
    n = rewards.size if scale_rewards == "batch" else 4
    assert np.all(np.abs(np.asarray(ours_std) - std.numpy()) <= formula_atol(1.0, ops=4, terms=n))




@pytest.mark.baseline
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logps_and_entropy_match_trl_helpers(temperature):
    torch = pytest.importorskip("torch")
    trl_utils = pytest.importorskip("trl.trainer.utils")
    rng = np.random.default_rng(4)
    logits = rng.normal(0, 3, size=(3, 5, 50)).astype(np.float32)
    ids = rng.integers(0, 50, size=(3, 5))
    logps, entropy = logps_and_entropy(jnp.asarray(logits, jnp.bfloat16).astype(jnp.float32),
                                                jnp.asarray(ids), temperature=temperature)
    t_logits = torch.tensor(np.asarray(jnp.asarray(logits, jnp.bfloat16).astype(jnp.float32)))
    ref = trl_utils.selective_log_softmax(t_logits, torch.tensor(ids), temperature=temperature).numpy()
    ref_entropy = trl_utils.entropy_from_logits(t_logits / temperature).numpy()
    # log-softmax over V = 50: z / T - logsumexp(z / T), each within a few roundings of 2 max|z| / T + log V plus
    # the sum of V exponentials; the entropy -sum p log p carries that error in each log p and in each p
    # (relative), so within it times (1 + H), plus its own sum of V terms
    scale = 2 * float(np.abs(np.asarray(t_logits)).max()) / temperature + np.log(50)
    np.testing.assert_allclose(np.asarray(logps), ref, rtol=0, atol=float(formula_atol(scale, ops=4, terms=50)))
    ent_tol = formula_atol(scale * (1.0 + ref_entropy), ops=4, terms=50)
    assert np.all(np.abs(np.asarray(entropy) - ref_entropy) <= ent_tol)
    masked = jnp.asarray(logits).at[:, :, 10:].set(-jnp.inf)  # a processor masked most of the vocabulary
    m_logps, m_entropy = logps_and_entropy(masked, jnp.asarray(ids) % 10, temperature=temperature)
    assert np.all(np.isfinite(np.asarray(m_logps))) and np.all(np.isfinite(np.asarray(m_entropy)))
    with pytest.raises(ValueError, match="temperature=0"):
        logps_and_entropy(jnp.asarray(logits), jnp.asarray(ids), temperature=0)


@pytest.mark.baseline
@pytest.mark.parametrize("extra", [{"delta": 1.5}, {"use_bias_correction_kl": False}])
def test_options_match_trl_compute_loss(extra):
    """Two-sided clipping (delta) and the KL without importance correction, against TRL's code."""
    batch = make_batch(23, num_iterations=3)
    cfg = make_config("dapo", 0.04, **extra)
    adv, _, _ = gl.group_advantages(batch["rewards"], num_generations=G, scale_rewards="batch")
    mask = gl.loss_mask(batch["completion_mask"], tool_mask_BxT=batch["tool_mask"])

    def f(logps):
        return gl.grpo_loss(logps, old_logps_BxT=jnp.asarray(batch["old"]), ref_logps_BxT=jnp.asarray(batch["ref"]),
                            advantages_B=adv, mask_BxT=mask, config=cfg)

    (loss, _), grads = jax.value_and_grad(f, has_aux=True)(jnp.asarray(batch["logps"]))
    trl_loss, trl_grad, _ = trl_compute_loss(
        batch, cfg=cfg, num_iterations=3, mask_parts=(batch["completion_mask"], batch["tool_mask"]), advantages=adv,
        num_items=float(np.asarray(mask).sum()), ga=1, spg=1)
    loss_tol, grad_tol, _ = loss_bounds(batch, adv, mask, cfg=cfg, num_iterations=3)
    np.testing.assert_allclose(float(loss), trl_loss, rtol=0, atol=loss_tol)
    assert np.all(np.abs(np.asarray(grads) - trl_grad) <= grad_tol)


def test_dapo_micro_batches_sum_to_the_generation_batch_loss():
    """Split one generation batch into micro-batches (steps_per_generation = accumulation = 4): the summed
    micro-batch losses equal the full-batch token mean, whatever the micro-batches' token counts."""
    batch = make_batch(29, num_iterations=2)
    cfg = make_config("dapo", 0.04)
    mask = np.asarray(gl.loss_mask(batch["completion_mask"], tool_mask_BxT=batch["tool_mask"]))
    adv = np.asarray(gl.group_advantages(batch["rewards"], num_generations=G)[0])
    full, _ = ours(batch, cfg=cfg, num_iterations=2, mask=mask, advantages=adv)
    total = 0.0
    for rows in np.split(np.arange(B), 4):
        micro = {k: (v[rows] if isinstance(v, np.ndarray) and v.shape[:1] == (B,) else v) for k, v in batch.items()}
        loss, _ = ours(micro, cfg=cfg, num_iterations=2, mask=mask[rows], advantages=adv[rows],
                       num_items=mask.sum(), ga=4, spg=4)
        total += float(loss)
    # both are sums of the same weighted token terms, in another grouping: each within `loss_bounds` of exact
    loss_tol, _, _ = loss_bounds(batch, adv, mask, cfg=cfg, num_iterations=2)
    np.testing.assert_allclose(total, float(full), rtol=0, atol=2 * loss_tol)


@pytest.mark.baseline
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_global_batch_equals_trl_on_two_processes(loss_type):
    """Our loss over the global batch equals TRL run as 2 data-parallel processes (each on half the rows,
    gradients averaged as DDP does) for the loss types whose normaliser is global or per-sequence."""
    batch = make_batch(31, num_iterations=3)
    cfg = make_config(loss_type, 0.04)
    mask = np.asarray(gl.loss_mask(batch["completion_mask"], tool_mask_BxT=batch["tool_mask"]))
    adv = np.asarray(gl.group_advantages(batch["rewards"], num_generations=G)[0])

    def f(logps):
        return gl.grpo_loss(logps, old_logps_BxT=jnp.asarray(batch["old"]), ref_logps_BxT=jnp.asarray(batch["ref"]),
                            advantages_B=adv, mask_BxT=mask, config=cfg)

    (loss, _), grads = jax.value_and_grad(f, has_aux=True)(jnp.asarray(batch["logps"]))
    losses, grad_parts = [], []
    for rows in np.split(np.arange(B), 2):
        part = {k: (v[rows] if isinstance(v, np.ndarray) and v.shape[:1] == (B,) else v) for k, v in batch.items()}
        part_loss, part_grad, _ = trl_compute_loss(
            part, cfg=cfg, num_iterations=3, mask_parts=(batch["completion_mask"][rows], batch["tool_mask"][rows]),
            advantages=adv[rows], num_items=float(mask.sum()), ga=1, spg=1, num_processes=2)
        losses.append(part_loss)
        grad_parts.append(part_grad)
    loss_tol, grad_tol, _ = loss_bounds(batch, adv, mask, cfg=cfg, num_iterations=3)
    np.testing.assert_allclose(float(loss), np.mean(losses), rtol=0, atol=loss_tol)
    assert np.all(np.abs(np.asarray(grads) - np.concatenate(grad_parts) / 2) <= grad_tol)
