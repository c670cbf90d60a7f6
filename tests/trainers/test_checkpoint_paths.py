"""A relative workdir (as `make demo` passes, `runs/demo`) saves and restores: orbax itself refuses
relative paths, so `reasoner.checkpoint` makes them absolute."""

import jax.numpy as jnp
import numpy as np

from reasoner.checkpoint import RunCheckpoints
from tests.loop_stubs import Steps


def test_relative_workdir_saves_and_restores(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    state = {"w": jnp.arange(6.0).reshape(2, 3), "step": jnp.asarray(4)}
    ckpt = RunCheckpoints("runs/demo/sft", keep=1, best_metric="loss")
    meta = {"trainer": "test"}
    ckpt.save(4, state, data_state={"epoch": 1}, meta=meta, force=True)
    ckpt.save_best(4, state, data_state={"epoch": 1}, meta=meta, metrics={"loss": 0.5})
    ckpt.wait()
    assert (tmp_path / "runs/demo/sft/checkpoints/4").is_dir() and ckpt.best_step() == 4
    restored = ckpt.restore(state, expected_meta=meta)
    ckpt.close()
    np.testing.assert_array_equal(np.asarray(restored[0]["w"]), np.asarray(state["w"]))


def _run(workdir, *, steps=3, every=1, **sections):
    import types

    import ml_collections

    from trainers.loop import run_loop

    cfg = ml_collections.ConfigDict(dict(train=dict(checkpoint_every=every, keep_checkpoints=3, async_checkpoint=False,
                                                    max_nonfinite_steps=5), **sections))
    return run_loop(types.SimpleNamespace(config=cfg, state={"w": jnp.zeros(2)}, mesh=None), source=Steps(steps),
                    update=lambda s, item: (s, {"loss": 0.0, "skipped": 0}), workdir=workdir, trainer="t",
                    meta={"trainer": "t"}, progress=False)


def test_checkpoint_every_zero_saves_only_at_the_end(tmp_path):
    # it raised ZeroDivisionError after the first step; 0 now means no periodic checkpoints (as eval_every=0)
    import pytest

    _run(tmp_path / "a", every=0)
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir() if p.name.isdigit()) == ["3"]
    with pytest.raises(ValueError, match="checkpoint_every=-1"):
        _run(tmp_path / "b", every=-1)


def test_resuming_with_other_settings_is_refused_and_longer_runs_resume(tmp_path):
    # a reused workdir with other data or lr resumed silently ("resumed from step 3") and hparams.json claimed the
    # new settings for the whole run
    import json

    import pytest

    from reasoner.checkpoint import CheckpointError

    _run(tmp_path, data=dict(path="/data/a"), optim=dict(lr=0.1))
    with pytest.raises(CheckpointError, match=r"data.path: '/data/a' then, '/data/b' now; optim.lr: 0.1 then, 0.5"):
        _run(tmp_path, steps=5, data=dict(path="/data/b"), optim=dict(lr=0.5))
    assert json.loads((tmp_path / "hparams.json").read_text())["data.path"] == "/data/a"
    longer = _run(tmp_path, steps=5, every=2, data=dict(path="/data/a"), optim=dict(lr=0.1))
    assert longer.resumed_from == 3
