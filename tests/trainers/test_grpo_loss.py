"""GRPO advantages and loss against a float64 NumPy transcription of TRL 1.16's formulas
(`tests.trainers.grpo_loss_reference`), within their float32 error bounds; masks, truncation, sharding and DAPO's
micro-batches. The same quantities against TRL's own code: test_grpo_loss_trl.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.tolerances import EPS32
from tests.trainers.grpo_loss_reference import (B, CASES, G, advantage_bounds, loss_bounds, make_batch, make_config,
                                                np_advantages, np_trl_loss, ours)
from trainers import grpo_loss as gl


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
