"""The GRPO variants users ask for by name (issue 22, item 4), against TRL 1.16's own code where TRL has them:
GSPO's sequence-level ratio (TRL's `GRPOTrainer._compute_loss` with importance_sampling_level="sequence", on the
stand-in `self` of grpo_loss_reference.py), RLOO's leave-one-out advantages (TRL's RLOOTrainer lines with TRL's
`nanstd`), REINFORCE++ (verl's formula written out in float64), DAPO's soft overlong punishment (the paper's
Eq. 13 by hand and TRL's `get_soft_overlong_punishment`), and one tiny trainer step through every option.

Float32 bounds (tests/tolerances.py: a float32 sum of n terms is within n EPS32 sum|terms| of exact, two
evaluation orders included): see each test.
"""

from __future__ import annotations

import numpy as np
import pytest
import jax
import jax.numpy as jnp

from tests.tolerances import EPS32, f32_sum_bound
from tests.trainers.test_grpo import tok_dir  # noqa: F401  (the word-level tokenizer fixture)
from tests.trainers.grpo_loss_reference import B, G, T, make_batch, make_config, trl_compute_loss
from trainers import grpo_loss as gl

# --------------------------------------------------------------------------------------------- GSPO


def _ours_with_grad(batch, cfg, adv, mask):
    def f(logps):
        return gl.grpo_loss(logps, old_logps_BxT=jnp.asarray(batch["old"]), ref_logps_BxT=jnp.asarray(batch["ref"]),
                            advantages_B=adv, mask_BxT=mask, config=cfg)

    (loss, metrics), grads = jax.value_and_grad(f, has_aux=True)(jnp.asarray(batch["logps"]))
    return float(loss), np.asarray(grads), metrics


@pytest.mark.baseline
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_sequence_level_ratio_matches_trl(loss_type):
    """GSPO: loss, gradient and clip metrics equal TRL's `_compute_loss` with importance_sampling_level="sequence"
    (off-policy log-probs, KL with bias correction, tool spans in the mask)."""
    batch = make_batch(41, num_iterations=3)
    cfg = make_config(loss_type, 0.04, importance_sampling_level="sequence")
    adv = np.asarray(gl.group_advantages(batch["rewards"], num_generations=G)[0])
    mask = np.asarray(gl.loss_mask(batch["completion_mask"], tool_mask_BxT=batch["tool_mask"]))
    loss, grads, metrics = _ours_with_grad(batch, cfg, adv, mask)
    trl_loss, trl_grad, trl_metrics = trl_compute_loss(
        batch, cfg=cfg, num_iterations=3, mask_parts=(batch["completion_mask"], batch["tool_mask"]), advantages=adv,
        num_items=float(mask.sum()), ga=1, spg=1)

    # Float32 error of both sides: the sequence mean of T log-ratios is off by <= T EPS32 max|log ratio| in the
    # exponent, i.e. relatively in the ratio; the KL adds an exp and 3 subtractions, the clip/min and products ~4
    # roundings; then the loss sums B T terms. So |ours - TRL| <= (B T + T (1 + max|lr|) + 8) EPS32 sum|terms|.
    log_ratio = np.abs(batch["logps"] - batch["old"]).max()
    seq_lr = (((batch["logps"] - batch["old"]) * mask).sum(1) / np.maximum(mask.sum(1), 1))[:, None]
    kl = np.exp(batch["ref"] - batch["logps"]) - (batch["ref"] - batch["logps"]) - 1
    ratio = np.exp(seq_lr)
    terms = (np.abs(adv)[:, None] * np.maximum(ratio, 1 + cfg.epsilon_high) + cfg.beta * kl * ratio) * mask
    norm = mask.sum() if loss_type == "dapo" else mask.sum(1, keepdims=True) * B
    factor = B * T + T * (1 + log_ratio) + 8
    bound = f32_sum_bound(terms / norm, factor)
    assert abs(loss - trl_loss) <= bound, (loss, trl_loss, bound)
    # d loss / d logp_t: the same chain without the outer sum (each entry a product of the factors above).
    grad_bound = (T * (1 + log_ratio) + 16) * EPS32 * np.abs(trl_grad) + EPS32 * np.abs(trl_grad).max()
    assert np.all(np.abs(grads - trl_grad) <= grad_bound)
    for name in ("kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                 "clip_ratio/low_min", "clip_ratio/high_max"):
        assert abs(float(metrics[name]) - trl_metrics[name]) <= factor * EPS32 * max(1.0, abs(trl_metrics[name])), name
    # The comparison has power: the token-level ratio misses TRL's sequence-level loss by far more than the bound.
    token_loss, _, _ = _ours_with_grad(batch, make_config(loss_type, 0.04), adv, mask)
    assert abs(token_loss - trl_loss) > 100 * bound
    assert float(metrics["clip_ratio/region_mean"]) > 0  # some sequences are clipped: the clip branch is exercised


# --------------------------------------------------------------------------------------------- RLOO, REINFORCE++


def _trl_rloo(rewards, *, num_generations, normalize):
    """TRL 1.16 `RLOOTrainer._generate_and_score_completions`, its advantage lines (inline there, so not callable
    alone), in torch with TRL's own `nanstd`."""
    import torch
    from trl.trainer.utils import nanstd

    r = torch.tensor(rewards)
    grouped = r.view(-1, num_generations)
    counts = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    baselines = ((torch.nansum(grouped, dim=1, keepdim=True) - grouped) / (counts - 1)).view(-1)
    adv = r - baselines
    if normalize:
        adv = (adv - torch.nanmean(adv)) / (nanstd(adv) + 1e-4)
    return torch.nan_to_num(adv, nan=0.0).numpy()


@pytest.mark.baseline
@pytest.mark.parametrize("normalize", [False, True])
def test_rloo_advantages_match_trl(normalize):
    rng = np.random.default_rng(3)
    rewards = rng.uniform(-1, 2, size=4 * G).astype(np.float32)
    rewards[1] = np.nan  # an unscorable completion: out of its group's baseline, advantage 0
    rewards[2 * G:3 * G] = 0.5  # an all-equal group: exactly 0 (both sides: 0.5 sums and divides exactly)
    rewards[3 * G + 1:] = np.nan  # a group with one scorable completion: 0 / 0 -> 0
    # jitted (as `host_advantages` is not): one compile instead of one per eager op; the same arithmetic
    ours = np.asarray(jax.jit(gl.rloo_advantages, static_argnames=("num_generations", "normalize"))(
        rewards, num_generations=G, normalize=normalize))
    want = _trl_rloo(rewards, num_generations=G, normalize=normalize)
    # Leave-one-out baseline: a sum of G terms, a subtraction and a division: (G + 2) EPS32 (|r| + sum|group|)
    # per entry; normalising divides by std + 1e-4 after a batch mean and std of 4G terms, adding (4G + 4) EPS32
    # relative to the normalised magnitudes (1 + |z|) and carrying the unnormalised error over the std.
    scale = np.nan_to_num(np.abs(rewards)) + np.repeat(np.nansum(np.abs(rewards).reshape(-1, G), 1), G)
    bound = (G + 2) * EPS32 * scale
    if normalize:
        scorable = ~np.isnan(rewards)
        scorable[3 * G] = False  # the lone scorable completion has no baseline (NaN in TRL), so no advantage
        std = float(np.std(_trl_rloo(rewards, num_generations=G, normalize=False)[scorable], ddof=1))
        bound = 2 * bound / (std + 1e-4) + (4 * G + 4) * EPS32 * (1 + np.abs(want))
    np.testing.assert_array_less(np.abs(ours - want), bound + 1e-30)
    assert ours[1] == 0.0 and np.all(ours[3 * G:] == 0.0)
    assert np.all(ours[2 * G:3 * G] == ours[2 * G]) and (normalize or ours[2 * G] == 0.0)
    # By hand: with n scorable completions the leave-one-out advantage is n / (n - 1) (r_i - group mean).
    if not normalize:
        g1, rows = rewards[G:2 * G].astype(np.float64), slice(G, 2 * G)  # the fully scorable group
        np.testing.assert_allclose(ours[rows], G / (G - 1) * (g1 - g1.mean()), rtol=0, atol=float(bound[rows].max()))
        # and it is not GRPO's advantage (the comparison can tell the estimators apart)
        assert np.abs((g1 - g1.mean()) - want[rows]).max() > 1e3 * bound.max()  # GRPO's unscaled r - mean


def test_reinforce_pp_matches_the_written_formula():
    """verl's REINFORCE++-baseline in float64: c = r - group mean; whitened over the loss tokens (each completion
    weighted by its length, Bessel-corrected variance over N tokens, + 1e-8)."""
    rng = np.random.default_rng(5)
    rewards = rng.choice([0.0, 0.25, 1.0], size=3 * G).astype(np.float32)
    rewards[G:2 * G] = 1.0  # all equal: c = 0 exactly
    rewards[2] = np.nan
    lengths = rng.integers(1, T + 1, size=3 * G)
    mask = (np.arange(T)[None] < lengths[:, None]).astype(np.float32)
    ours = np.asarray(jax.jit(gl.reinforce_pp_advantages, static_argnames="num_generations")(
        rewards, num_generations=G, mask_BxT=mask))

    r = rewards.astype(np.float64).reshape(-1, G)
    c = (r - np.nanmean(r, axis=1, keepdims=True)).reshape(-1)
    c[G:2 * G] = 0.0
    n = np.where(np.isnan(c), 0, lengths)
    c = np.nan_to_num(c)
    mu = (n * c).sum() / n.sum()
    var = (n * (c - mu) ** 2).sum() / (n.sum() - 1)
    want = np.where(np.isnan(rewards), 0.0, (c - mu) / np.sqrt(var + 1e-8))
    # float32: group means (G terms) and the two token-weighted sums (N terms): (G + 2 N + 8) EPS32, relative to the
    # whitened magnitudes (1 + |A|) since every quantity is divided by the std.
    bound = (G + 2 * n.sum() + 8) * EPS32 * (1 + np.abs(want))
    np.testing.assert_array_less(np.abs(ours - want), bound)
    assert ours[2] == 0.0
    # whitened: token-weighted mean 0 and unbiased variance var / (var + 1e-8) over the loss tokens
    # (the float64 `want` has both exactly, so `ours` is off by at most its elementwise bound, weighted by n)
    mean_tol = (n * bound).sum() / n.sum()
    var_tol = (n * (2 * np.abs(want) + bound) * bound).sum() / (n.sum() - 1)
    assert abs((n * ours).sum() / n.sum()) <= mean_tol
    assert abs((n * ours ** 2).sum() / (n.sum() - 1) - var / (var + 1e-8)) <= var_tol


# --------------------------------------------------------------------------------------------- DAPO


@pytest.mark.baseline
@pytest.mark.parametrize("max_len,cache", [(100, 20), (16, 0), (16, 16)])
def test_soft_overlong_punishment_is_eq13_and_trls(max_len, cache):
    from trl.rewards import get_soft_overlong_punishment

    lengths = np.array([0, 1, max_len - cache, max_len - cache + 1, (2 * max_len - cache) // 2, max_len - 1,
                        max_len, max_len + 1, 3 * max_len])
    ours = gl.soft_overlong_punishment(lengths, max_len=max_len, cache=cache)
    trl = get_soft_overlong_punishment(max_len, cache)([[7] * int(n) for n in lengths])
    # Eq. 13 by hand: 0 up to L_max - L_cache, then ((L_max - L_cache) - |y|) / L_cache, -1 beyond L_max.
    by_hand = [0.0 if n <= max_len - cache else (max_len - cache - n) / cache if n <= max_len else -1.0
               for n in lengths]
    # one float32 rounding of a float64 quotient: half a float32 spacing
    np.testing.assert_allclose(ours, by_hand, rtol=EPS32, atol=0)
    np.testing.assert_allclose(ours, trl, rtol=EPS32, atol=0)
    if cache == 20:  # the paper's shape at L_max 100, L_cache 20: 81 tokens -> -1/20, 90 -> -1/2, 100 -> -1
        assert ours.tolist()[2:7] == [0.0, np.float32(-0.05), np.float32(-0.5), np.float32(-0.95), -1.0]


def test_dynamic_sampling_keeps_only_groups_with_different_rewards_and_options_are_checked():
    rewards = np.array([1, 0, 1, 1, 1, 1, 1, 1, np.nan, 0.5, np.nan, 0.5, 0.2, np.nan, 0.7, 0.7], np.float32)
    h = gl.host_advantages(rewards, num_generations=G, config=gl.AdvantageConfig(dynamic_sampling=True))
    assert h.keep_B.tolist() == [True] * G + [False] * G + [False] * G + [True] * G
    assert gl.reward_stats(h, num_generations=G, dynamic_sampling=True)["groups_kept"] == 2
    for bad, match in [(dict(estimator="ppo"), "advantage_estimator='ppo'"),
                       (dict(normalize_advantages=True), "normalize_advantages=True"),
                       (dict(overlong_max_len=8, overlong_cache=9), "overlong_cache=9")]:
        with pytest.raises(ValueError, match=match):
            gl.AdvantageConfig(**bad)
    with pytest.raises(ValueError, match="importance_sampling_level='seq'"):
        make_config("grpo", 0.0, importance_sampling_level="seq")
    with pytest.raises(ValueError, match="lengths_B is None"):
        gl.host_advantages(rewards, num_generations=G, config=gl.AdvantageConfig(overlong_max_len=8))


# --------------------------------------------------------------------------------------------- the trainer


def test_tiny_step_with_every_variant(tok_dir, monkeypatch):
    """One compiled GRPO step (GSPO ratio) driven through `generation_step` with the sampler replaced by a fixed
    rollout: RLOO with dynamic sampling when every group's reward is equal (all dropped: loss 0, the step counted,
    groups_kept 0), then with overlong shaping making the same constant reward length-dependent (groups kept,
    reward = 1 + Eq. 13 of each length), then REINFORCE++ on the same compiled step."""
    import dataclasses
    from types import SimpleNamespace

    from reasoner.rewards import CompositeReward, WeightedReward
    from tests.trainers.test_grpo import fixed_rollout, one_device_mesh, tiny
    from trainers import grpo

    opts = ["--config.grpo.max_new_tokens=12", "--config.grpo.importance_sampling_level=sequence",
            "--config.grpo.beta=0.0",  # no reference model: one compiled program (the update), not two
            "--config.grpo.advantage_estimator=rloo", "--config.grpo.dynamic_sampling=True"]
    cfg = tiny(tok_dir, *opts)
    steps = grpo.build_grpo(cfg, mesh=one_device_mesh())
    assert steps.loss_cfg.importance_sampling_level == "sequence"
    r = fixed_rollout(truncated=())
    monkeypatch.setattr(grpo, "rollout", lambda *a, **k: r)
    reward = CompositeReward([WeightedReward("one", lambda cs, *, examples: [1.0] * len(cs))])
    examples = [{"prompt": "say something"}, {"prompt": "one two three"}]

    def step(steps, state):
        return grpo.generation_step(steps, SimpleNamespace(), state, examples=examples, reward=reward, tool=None,
                                    seed=0)

    try:
        state, m = step(steps, steps.run.state)
        assert m["groups_kept"] == 0 and m["loss"] == 0.0 and m["grad_norm"] == 0.0 and m["skipped"] == 0
        assert int(state.step) == 1
        shaped = tiny(tok_dir, *opts, "--config.grpo.overlong_max_len=12", "--config.grpo.overlong_cache=8")
        steps = dataclasses.replace(steps, run=steps.run.replace(config=shaped))
        state, m = step(steps, state)
        lengths = np.array([len(c) for c in r.completion_ids])
        want = 1.0 + np.where(lengths <= 4, 0.0, (4.0 - lengths) / 8.0)
        assert m["groups_kept"] == 2 and np.isfinite(m["loss"]) and m["loss"] != 0.0
        assert abs(m["reward"] - want.mean()) <= 4 * len(want) * EPS32  # a float32 mean of 8 shaped rewards
        assert int(state.step) == 2
        rpp = tiny(tok_dir, *opts[:3], "--config.grpo.advantage_estimator=reinforce_pp",
                   "--config.grpo.overlong_max_len=12", "--config.grpo.overlong_cache=8")
        state, m = step(dataclasses.replace(steps, run=steps.run.replace(config=rpp)), state)
        assert np.isfinite(m["loss"]) and m["loss"] != 0.0 and "groups_kept" not in m and int(state.step) == 3
    finally:
        reward.close()
