"""Loss formulas against independent references: NumPy transcriptions of TRL's DPO and PyTorch SFT."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reasoner.models.scoring import picked_logps, target_mask
from trainers.losses import DPO_LOSS_TYPES, dpo_per_pair_loss, dpo_reward_sums


def _np_logsigmoid(x):
    return -np.logaddexp(0.0, -x)


def _np_dpo(pc, pr, rc, rr, *, beta, loss_type, ls, lc, lr):
    """NumPy transcription of trl/trainer/dpo_trainer.py `_compute_loss` (reverse KL)."""
    delta = (pc - rc) - (pr - rr)
    if loss_type == "sigmoid":
        return -(1 - ls) * _np_logsigmoid(beta * delta) - ls * _np_logsigmoid(-beta * delta)
    if loss_type == "robust":
        return (-(1 - ls) * _np_logsigmoid(beta * delta) + ls * _np_logsigmoid(-beta * delta)) / (1 - 2 * ls)
    if loss_type == "hinge":
        return np.maximum(0.0, 1 - beta * delta)
    ipo = (pc - rc) / np.maximum(lc, 1) - (pr - rr) / np.maximum(lr, 1)
    return (ipo - 1 / (2 * beta)) ** 2


@pytest.mark.parametrize("loss_type", DPO_LOSS_TYPES)
@pytest.mark.parametrize("ls", [0.0, 0.2])
def test_dpo_losses_and_rewards_match_numpy(loss_type, ls):
    rng = np.random.default_rng(0)
    pc, pr, rc, rr = (rng.normal(-40, 8, size=16).astype(np.float32) for _ in range(4))
    lc, lr = (rng.integers(1, 60, size=16).astype(np.float32) for _ in range(2))
    beta = 0.1
    ours = dpo_per_pair_loss(chosen_logps=pc, rejected_logps=pr, ref_chosen_logps=rc, ref_rejected_logps=rr,
                             beta=beta, loss_type=loss_type, label_smoothing=ls, chosen_lengths=lc, rejected_lengths=lr)
    ref = _np_dpo(pc.astype(np.float64), pr.astype(np.float64), rc.astype(np.float64), rr.astype(np.float64),
                  beta=beta, loss_type=loss_type, ls=ls, lc=lc, lr=lr)
    np.testing.assert_allclose(np.asarray(ours), ref, rtol=1e-5, atol=1e-6)
    sums = dpo_reward_sums(chosen_logps=pc, rejected_logps=pr, ref_chosen_logps=rc, ref_rejected_logps=rr, beta=beta)
    chosen, rejected = beta * (pc - rc).astype(np.float64), beta * (pr - rr).astype(np.float64)
    np.testing.assert_allclose(float(sums["rewards/chosen"]) / 16, chosen.mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(sums["rewards/rejected"]) / 16, rejected.mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(sums["rewards/margins"]) / 16, (chosen - rejected).mean(), rtol=1e-5, atol=1e-6)
    assert float(sums["rewards/accuracies"]) / 16 == pytest.approx((chosen > rejected).mean())
    assert 0 < float(sums["rewards/accuracies"]) < 16  # both outcomes occur, so the comparison could fail


def test_dpo_rejects_bad_settings():
    x = jnp.zeros(2)
    with pytest.raises(ValueError, match="loss_type"):
        dpo_per_pair_loss(chosen_logps=x, rejected_logps=x, ref_chosen_logps=x, ref_rejected_logps=x, beta=0.1,
                          loss_type="kto")
    with pytest.raises(ValueError, match=r"\[0, 0.5\)"):
        dpo_per_pair_loss(chosen_logps=x, rejected_logps=x, ref_chosen_logps=x, ref_rejected_logps=x, beta=0.1,
                          loss_type="robust", label_smoothing=0.5)


def test_picked_logps_and_target_mask():
    logits = jax.random.normal(jax.random.key(0), (2, 5, 7))
    tokens = jnp.array([[1, 2, 3, 4, 5], [6, 5, 4, 3, 2]])
    logp = picked_logps(logits[:, :-1], tokens[:, 1:])
    ref = jax.nn.log_softmax(np.asarray(logits)[:, :-1], axis=-1)
    np.testing.assert_allclose(np.asarray(logp), np.take_along_axis(np.asarray(ref), np.asarray(tokens)[:, 1:, None],
                                                                     -1)[..., 0], rtol=1e-6)
    loss_mask = jnp.array([[0, 1, 1, 1, 1], [0, 0, 1, 1, 0]])
    segments = jnp.array([[1, 1, 1, 2, 2], [1, 1, 1, 1, 0]])
    # token 3 of row 0 starts segment 2: never predicted from segment 1's last token
    np.testing.assert_array_equal(np.asarray(target_mask(loss_mask, segments)), [[1, 1, 0, 1], [0, 1, 1, 0]])

