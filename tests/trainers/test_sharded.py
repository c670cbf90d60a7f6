"""Sharded steps equal the single-device step: first 3 losses on 8 simulated CPU devices."""

import jax
import numpy as np
import pytest

from tests.trainers.conftest import tiny_config

MESHES = ("fsdp=4,tensor=2", "data=2,fsdp=4")


def _first_losses(build, config, workdir, *, devices=None, steps=3):
    from reasoner.data.pipeline import to_global_batch

    s = build(config, workdir=workdir, devices=devices)
    state, losses = s.run.state, []
    for _ in range(steps):
        batch = to_global_batch(next(s.iterator), s.run.mesh)
        state, metrics = s.step(state, s.run.frozen, batch)
        losses.append(float(metrics["loss"]))
    return np.asarray(losses), s.run


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_sharded_losses_equal_single_device(kind, sft_data, dpo_data, tmp_path):
    from trainers.dpo import build_dpo
    from trainers.sft import build_sft

    assert jax.device_count() == 8
    build = build_sft if kind == "sft" else build_dpo
    data = sft_data if kind == "sft" else dpo_data
    extra = ["--config.optim.warmup_ratio=0.0", f"--config.data.tfds_dir={tmp_path / 'tfds'}"]
    single, _ = _first_losses(build, tiny_config(kind, data, "--config.mesh=fsdp=1", *extra), tmp_path,
                              devices=jax.devices()[:1])
    assert len(set(single.round(6))) == 3  # the optimizer really moved between steps
    for mesh in MESHES:
        sharded, run = _first_losses(build, tiny_config(kind, data, f"--config.mesh={mesh}", *extra), tmp_path)
        assert dict(run.mesh.shape) == {k: int(v) for k, v in (a.split("=") for a in
                                                                    f"data=1,fsdp=1,tensor=1,{mesh}".split(","))}
        embed = run.state.params["embed"]
        assert len(embed.sharding.device_set) == 8 and not embed.sharding.is_fully_replicated
        np.testing.assert_allclose(sharded, single, rtol=0, atol=1e-5, err_msg=f"{kind} on {mesh}")
