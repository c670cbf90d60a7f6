"""Sharded steps equal the single-device step: first 3 losses on 8 simulated CPU devices.

Tolerance (tests/tolerances.py), per step k. The sharded and single-device programs differ only in the order of
their reductions. Forward: every per-token log-prob is within f EPS32 |logp_t| of exact, f = prob_factor of the
decoder's depth (random init: logits O(0.1), so |logsumexp| + |logit| ~ |logp|), and all logp_t < 0, so
  SFT  (mean token NLL): the loss within f EPS32 |loss|;
  DPO  (-log sigmoid(beta * margin), slope <= 1 in the margin): the margin within beta * 2 f EPS32 (|logps/chosen|
       + |logps/rejected|) (policy and reference each carry the error), hence the loss too.
Each run is within that of exact, so the two within twice that. Steps 2 and 3 also start from parameters that two
Adam updates moved apart: `adam_loss_drift` (first order, the gradient's relative error at the backward pass's
depth plus the sum over the batch's tokens, times the step's gradient norm).
"""

import jax
import numpy as np
import pytest

from tests.tolerances import EPS32, adam_loss_drift, model_depth, prob_factor
from tests.trainers.conftest import tiny_config

MESHES = ("fsdp=4,tensor=2", "data=2,fsdp=4")


def _first_steps(build, config, workdir, *, devices=None, steps=3):
    from reasoner.data.pipeline import to_global_batch

    s = build(config, workdir=workdir, devices=devices)
    state, records, shape = s.run.state, [], (0, 0)
    for _ in range(steps):
        batch = to_global_batch(next(s.iterator), s.run.mesh)
        seq_len = max(int(x.shape[-1]) for x in jax.tree.leaves(batch))
        shape = max(shape, (seq_len, max(int(np.size(x)) for x in jax.tree.leaves(batch))))
        state, metrics = s.step(state, s.run.frozen, batch)
        records.append({k: float(v) for k, v in metrics.items()})
    return records, s.run, shape


def _bounds(kind, records, run, config, *, shape: tuple[int, int]) -> np.ndarray:
    seq_len, tokens = shape
    depth = model_depth(run.model_cfg, seq_len=seq_len)
    f = prob_factor(depth)
    num_params = sum(int(np.size(x)) for x in jax.tree.leaves(run.state.params))
    out = []
    for k, m in enumerate(records):
        if kind == "sft":
            forward = f * EPS32 * abs(m["loss"])
        else:
            pairs = m["denom"]
            forward = float(config.dpo.beta) * 2 * f * EPS32 * (abs(m["logps/chosen"]) + abs(m["logps/rejected"]))
            forward /= pairs
        drift = adam_loss_drift(lr=float(config.optim.lr), steps_before=k, grad_norm=m["grad_norm"],
                                num_params=num_params, factor=prob_factor(2 * depth + tokens))
        out.append(2 * (forward + drift))
    return np.asarray(out)


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_sharded_losses_equal_single_device(kind, sft_data, dpo_data, tmp_path):
    from trainers.dpo import build_dpo
    from trainers.sft import build_sft

    assert jax.device_count() == 8
    build = build_sft if kind == "sft" else build_dpo
    data = sft_data if kind == "sft" else dpo_data
    extra = ["--config.optim.warmup_ratio=0.0", f"--config.data.tfds_dir={tmp_path / 'tfds'}"]
    config = tiny_config(kind, data, "--config.mesh=fsdp=1", *extra)
    records, run, shape = _first_steps(build, config, tmp_path, devices=jax.devices()[:1])
    single = np.asarray([m["loss"] for m in records])
    assert len(set(single.round(6))) == 3  # the optimizer really moved between steps
    tol = _bounds(kind, records, run, config, shape=shape)
    # the bound stays well below the losses it compares (DPO's is the loosest: 49,152-token log-softmaxes summed
    # over whole sequences, about 1.4% of ln 2 here), so a wrong shard or a missing cross-device sum still fails
    assert np.all(tol < 0.05 * np.abs(single)), tol
    for mesh in MESHES:
        sharded_records, run, _ = _first_steps(build, tiny_config(kind, data, f"--config.mesh={mesh}", *extra),
                                               tmp_path)
        sharded = np.asarray([m["loss"] for m in sharded_records])
        assert dict(run.mesh.shape) == {k: int(v) for k, v in (a.split("=") for a in
                                                                    f"data=1,fsdp=1,tensor=1,{mesh}".split(","))}
        embed = run.state.params["embed"]
        assert len(embed.sharding.device_set) == 8 and not embed.sharding.is_fully_replicated
        assert np.all(np.abs(sharded - single) <= tol), (f"{kind} on {mesh}", sharded - single, tol)
