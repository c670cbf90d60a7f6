"""The training benchmarks' baseline side (`reasoner.benchmarks.baseline_child`): TRL in a child process trains on
exactly the batch our side trains on, under the malloc environment asked for."""

import numpy as np
import pytest

from tests.models.tiny_checkpoints import make_hf_model, save_hf
from tests.tolerances import f32_sum_bound, logprob_atol

pytestmark = pytest.mark.slow


def test_sft_baseline_child_reports_trl_steps_and_the_loss_of_our_batch(tmp_path):
    import jax
    import jax.numpy as jnp

    from reasoner import allocator
    from reasoner.benchmarks import baseline_child
    from reasoner.benchmarks.sft import _batch
    from reasoner.models import load_model

    model_dir = save_hf(make_hf_model("llama", seed=3), str(tmp_path / "tiny"))
    # 4 distinct rows repeated 3 times: a shuffling sampler's first batch is these 4 rows with probability 0.16
    batch = _batch(rows=4, seq_len=64, vocab=96)
    request = {"benchmark": "sft", "model_dir": model_dir, "batch": 4, "seq_len": 64, "steps": 2, "remat": False}
    result = baseline_child.run(request, kind="default", arrays={k: batch[k][0] for k in ("tokens", "loss_mask")})
    assert len(result["step_s"]) == 2 and all(t > 0 for t in result["step_s"])
    assert result["malloc"] == ("glibc defaults" if allocator.supported() else result["malloc"])

    # Independent of TRL: the completion-only token mean of our model on the same rows (targets 32..63).
    model = load_model(model_dir)
    tokens = jnp.asarray(batch["tokens"][0])
    logits, _ = model(tokens, positions_BxT=jnp.asarray(batch["positions"][0]))
    logp = np.asarray(jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1))
    picked = np.take_along_axis(logp, np.asarray(tokens[:, 1:])[..., None], -1)[..., 0]
    mask = batch["loss_mask"][0][:, 1:].astype(bool)
    # PyTorch's forward vs ours over the same weights: each log-prob within the float32 error at this depth and
    # logit scale, and so their mean; plus the mean's own sum of n terms in either order
    n = int(mask.sum())
    tol = logprob_atol(np.asarray(logits), model.cfg, seq_len=64) + f32_sum_bound(picked[mask], n) / n
    assert abs(result["first_loss"] - float(-picked[mask].mean())) <= tol


def test_an_unknown_environment_kind_is_refused():
    from reasoner.benchmarks import baseline_child

    with pytest.raises(ValueError, match="baseline environment 'fast'"):
        baseline_child.environ("fast")
