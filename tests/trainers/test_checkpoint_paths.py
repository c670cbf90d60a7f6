"""A relative workdir (as `make demo` passes, `runs/demo`) saves and restores: orbax itself refuses
relative paths, so `reasoner.checkpoint` makes them absolute."""

import jax.numpy as jnp
import numpy as np

from reasoner.checkpoint import RunCheckpoints


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
