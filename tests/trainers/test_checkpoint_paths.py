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


def test_checkpoint_every_zero_saves_only_at_the_end(tmp_path):
    # it raised ZeroDivisionError after the first step; 0 now means no periodic checkpoints (as eval_every=0)
    import types

    import ml_collections
    import pytest

    from trainers.loop import run_loop

    class Steps:
        def __init__(self, n):
            self.step, self.total_steps = 0, n

        def __iter__(self):
            return self

        def __next__(self):
            if self.step >= self.total_steps:
                raise StopIteration
            self.step += 1
            return self.step

        def get_state(self):
            return {"step": self.step}

        def set_state(self, state):
            self.step = state["step"]

    def run(every, workdir):
        cfg = ml_collections.ConfigDict(dict(train=dict(checkpoint_every=every, keep_checkpoints=3,
                                                        async_checkpoint=False, max_nonfinite_steps=5)))
        return run_loop(types.SimpleNamespace(config=cfg, state={"w": jnp.zeros(2)}, mesh=None), source=Steps(3),
                        update=lambda s, item: (s, {"loss": 0.0, "skipped": 0}), workdir=workdir, trainer="t",
                        meta={"trainer": "t"}, progress=False)

    run(0, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir() if p.name.isdigit()) == ["3"]
    with pytest.raises(ValueError, match="checkpoint_every=-1"):
        run(-1, tmp_path / "b")
