"""Orbax checkpoints of a training run: state, data-iterator state and run metadata.

Layout under a run's workdir:

  checkpoints/<step>/   latest `keep` checkpoints (async saves); training resumes from the newest
  best/<step>/          the single checkpoint with the best `best_metric` (SFT: lowest validation loss)

Each checkpoint holds three items: `state` (every array of the `TrainState`, flattened to
{"path": array} so the on-disk layout does not depend on pytree node classes), `data` (the
iterator's JSON state) and `meta` (JSON: the trainer, a fingerprint of the trainable tree's
paths/shapes/dtypes, and the step). A restore checks the fingerprint and raises
`CheckpointError` naming the directory on any mismatch or unreadable file: a workdir holding
a foreign or corrupt checkpoint is never silently overwritten.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Any

import jax
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
    """The workdir holds a checkpoint that cannot be restored into this run."""


def flatten_state(tree: Any) -> dict[str, Any]:
    """{"path.to.leaf": leaf} for every leaf of a pytree."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(path, simple=True, separator="/"): leaf for path, leaf in flat}


def unflatten_state(template: Any, flat: dict[str, Any]) -> Any:
    """Inverse of `flatten_state` given a `template` with the target structure."""
    paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    keys = [jax.tree_util.keystr(p, simple=True, separator="/") for p, _ in paths]
    return jax.tree_util.tree_unflatten(treedef, [flat[k] for k in keys])


def fingerprint(tree: Any) -> str:
    """Hash of every leaf's path, shape and dtype: equal fingerprints mean restorable into each other."""
    items = sorted((k, tuple(getattr(v, "shape", ())), str(getattr(v, "dtype", type(v).__name__)))
                   for k, v in flatten_state(tree).items())
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


class RunCheckpoints:
    """The `checkpoints/` (latest N) and `best/` managers of one workdir."""

    def __init__(self, workdir, *, keep: int = 3, best_metric: str | None = None, best_mode: str = "min",
                 async_save: bool = True):
        self.workdir = pathlib.Path(workdir).absolute()  # orbax refuses relative paths
        self.best_metric = best_metric
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=async_save, create=True)
        self.latest = ocp.CheckpointManager(self.workdir / "checkpoints", options=options,
                                            item_names=("state", "data", "meta"))
        self.best = None
        if best_metric:
            best_options = ocp.CheckpointManagerOptions(
                max_to_keep=1, best_fn=lambda m: float(m[best_metric]), best_mode=best_mode,
                keep_checkpoints_without_metrics=False, enable_async_checkpointing=async_save, create=True)
            self.best = ocp.CheckpointManager(self.workdir / "best", options=best_options,
                                              item_names=("state", "data", "meta"))

    @staticmethod
    def _args(state, data_state: dict, meta: dict):
        return ocp.args.Composite(state=ocp.args.StandardSave(flatten_state(state)),
                                  data=ocp.args.JsonSave(data_state), meta=ocp.args.JsonSave(meta))

    def save(self, step: int, state, *, data_state: dict, meta: dict, force: bool = False) -> None:
        """Starts an async save of the latest checkpoint at `step`."""
        self.latest.save(step, args=self._args(state, data_state, meta), force=force)

    def save_best(self, step: int, state, *, data_state: dict, meta: dict, metrics: dict[str, float]) -> None:
        """Offers `state` to `best/`; orbax keeps it only if its metric beats the stored one."""
        if self.best is None:
            raise ValueError("save_best needs best_metric set")
        self.best.save(step, args=self._args(state, data_state, meta), metrics=metrics, force=True)

    def latest_step(self) -> int | None:
        return self.latest.latest_step()

    def best_step(self) -> int | None:
        return None if self.best is None else self.best.best_step()

    def restore(self, template_state, *, expected_meta: dict, step: int | None = None, which: str = "latest"):
        """(state, data_state, meta) of `step` (default: newest) restored into `template_state`'s shapes and
        shardings. Raises CheckpointError when the checkpoint is unreadable or from a different model/trainer."""
        manager = self.latest if which == "latest" else self.best
        step = step if step is not None else (manager.latest_step() if which == "latest" else manager.best_step())
        where = manager.directory / str(step)
        try:
            meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        except Exception as err:  # noqa: BLE001 - any read failure means the directory is unusable
            raise CheckpointError(
                f"checkpoint {where} is unreadable ({type(err).__name__}: {str(err)[:200]}); it was left in place. "
                f"Move it away or pick another --workdir") from err
        for key in ("trainer", "fingerprint"):
            if meta.get(key) != expected_meta.get(key):
                raise CheckpointError(
                    f"checkpoint {where} is incompatible: {key}={meta.get(key)!r}, this run expects "
                    f"{expected_meta.get(key)!r} (different trainer, model or LoRA setting). It was left in place; "
                    f"use another --workdir")
        abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=getattr(v, "sharding", None))
                    for k, v in flatten_state(template_state).items()}
        try:
            restored = manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()))
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(
                f"checkpoint {where} could not be restored ({type(err).__name__}: {str(err)[:200]}); "
                f"it was left in place. Move it away or pick another --workdir") from err
        return unflatten_state(template_state, restored["state"]), restored["data"], meta

    def wait(self) -> None:
        self.latest.wait_until_finished()
        if self.best is not None:
            self.best.wait_until_finished()

    def close(self) -> None:
        self.latest.close()
        if self.best is not None:
            self.best.close()


def check_workdir(workdir) -> None:
    """Raises CheckpointError when `workdir/checkpoints` exists but holds entries that are not step directories."""
    root = pathlib.Path(workdir) / "checkpoints"
    if not root.exists():
        return
    if not root.is_dir():
        raise CheckpointError(f"{root} exists and is not a directory; expected orbax step directories. Not touching it")
    foreign = [p.name for p in root.iterdir()
               if not (p.is_dir() and (p.name.isdigit() or ".orbax-checkpoint-tmp" in p.name))]
    if foreign:
        raise CheckpointError(
            f"{root} holds entries that are not checkpoints ({foreign[:5]}); refusing to write there. "
            f"Move them away or pick another --workdir")
