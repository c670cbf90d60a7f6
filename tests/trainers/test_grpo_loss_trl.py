"""GRPO loss, gradient, metrics and advantages against TRL's own code (`GRPOTrainer._compute_loss` on a stand-in
`self`, TRL's `nanstd`, `selective_log_softmax` and `entropy_from_logits`), within the float32 error bounds of
`tests.trainers.grpo_loss_reference`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reasoner.models.scoring import logps_and_entropy
from tests.tolerances import EPS32, formula_atol
from tests.trainers.grpo_loss_reference import (B, G, TRL_CASES, advantage_bounds, loss_bounds, make_batch,
                                                make_config, trl_compute_loss)
from trainers import grpo_loss as gl


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
