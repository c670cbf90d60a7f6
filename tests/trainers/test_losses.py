"""Loss pieces against independent references (every DPO variant is checked against TRL's own code in
tests/trainers/test_dpo_trl.py; the NumPy transcription that stood here is gone)."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reasoner.models.scoring import picked_logps, target_mask
from trainers.losses import dpo_per_pair_loss


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
    z = np.asarray(logits, np.float64)[:, :-1]  # the reference in float64: z - logsumexp(z)
    lse = z.max(-1, keepdims=True) + np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
    ref = np.take_along_axis(z - lse, np.asarray(tokens)[:, 1:, None], -1)[..., 0]
    # float32: a V-term exp-sum (V + 2 roundings relative to |lse|), the log, and one subtraction of magnitude |z|
    bound = (z.shape[-1] + 4) * float(np.finfo(np.float32).eps) * (np.abs(z).max() + np.abs(lse).max())
    assert np.abs(np.asarray(logp, np.float64) - ref).max() <= bound
    loss_mask = jnp.array([[0, 1, 1, 1, 1], [0, 0, 1, 1, 0]])
    segments = jnp.array([[1, 1, 1, 2, 2], [1, 1, 1, 1, 0]])
    # token 3 of row 0 starts segment 2: never predicted from segment 1's last token
    np.testing.assert_array_equal(np.asarray(target_mask(loss_mask, segments)), [[1, 1, 0, 1], [0, 1, 1, 0]])

