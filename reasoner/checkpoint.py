"""Orbax checkpoints of a training run: state, data-iterator state and run metadata, with integrity checks.

Layout under a run's workdir:

  checkpoints/<step>/   latest `keep` checkpoints (async saves); training resumes from the newest intact one
  best/<step>/          the single checkpoint with the best `best_metric` (SFT: lowest validation loss)
  corrupt/<dir>-<step>/ checkpoints found damaged on restore, moved out of the way (never deleted)

Each checkpoint holds three items: `state` (every array of the `TrainState`, flattened to
{"path": array} so the on-disk layout does not depend on pytree node classes), `data` (the
iterator's JSON state) and `meta` (JSON: the trainer, a fingerprint of the trainable tree's
paths/shapes/dtypes, the step, and a checksum of every state array's bits).

Writing is collective: every process of a multi-host job calls `save` with the same step and orbax
writes each array's shards from the process that holds them (no process-0-only save).

Integrity on restore (`restore` without an explicit step), newest step first:
  * a save cut mid-write (SIGKILL) leaves only orbax's `<step>.orbax-checkpoint-tmp-*` directory, which is
    never a step; it is reported and moved to `corrupt/`;
  * a checkpoint whose files were truncated, zeroed or otherwise damaged fails to read, or reads back
    arrays whose checksum differs from the one saved in `meta`;
  such a checkpoint is moved to `corrupt/` and the next older one is tried; one line on stderr says which
  step was skipped, why, and which one the run resumes from. A workdir with checkpoints none of which is
  intact is a `CheckpointError` (never a silent fresh start). A checkpoint of a different trainer or
  model (fingerprint mismatch) is an error, not a fallback: that is a wrong --workdir, not damage.

Saving a step that already exists (after a fallback, or `best/N` committed before a kill cut `checkpoints/N`)
is skipped: resumption is exact, so the stored checkpoint holds the same state.

In a job of several processes every process takes each decision of a restore together (`agree`): a checkpoint
one process cannot read (an I/O error or a missing file on its host) is damaged for all of them, so they set the
same checkpoints aside, resume from the same step, or all raise the same CheckpointError. (A process that went on
alone would wait forever in the next collective for one that fell back or failed.)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

TMP_MARK = ".orbax-checkpoint-tmp"


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


_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}


def _bits_checksum(x) -> jax.Array:
    """uint32[2] over the raw bits of `x`: (sum of words, sum of words x position), both mod 2^32.

    Any zeroed, truncated or altered chunk changes the pair (unless it collides mod 2^32); positions make a
    moved chunk count too. Runs on device over the sharded array, so saving costs one pass, no host copy.
    """
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    words = jax.lax.bitcast_convert_type(x, _UINT[x.dtype.itemsize]).reshape(-1).astype(jnp.uint32)
    position = jnp.arange(words.size, dtype=jnp.uint32) * jnp.uint32(2654435761) + jnp.uint32(1)
    return jnp.stack([words.sum(dtype=jnp.uint32), (words * position).sum(dtype=jnp.uint32)])


@jax.jit
def _checksums(flat: dict[str, Any]) -> dict[str, jax.Array]:
    return {k: _bits_checksum(v) for k, v in flat.items()}


def state_checksums(flat: dict[str, Any]) -> dict[str, list[int]]:
    """{"path": [sum, weighted sum]} of a flattened state (what `meta["checksums"]` holds)."""
    arrays = {k: v for k, v in flat.items() if hasattr(v, "dtype")}
    return {k: [int(a) for a in np.asarray(v)] for k, v in jax.device_get(_checksums(arrays)).items()}


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A checkpoint the restore could not use: where it was, why, and where it was moved."""

    path: pathlib.Path
    reason: str
    moved_to: pathlib.Path | None


def _sync(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _barrier_prefix(manager) -> str:
    """The prefix of a manager's orbax barrier names: `reasoner-<its directory name>` (checkpoints, best)."""
    return f"reasoner-{pathlib.Path(manager.directory).name}"


def _barriers(name: str):
    """orbax multi-process options whose barrier names carry `name` (one per manager of a run)."""
    return ocp.options.MultiprocessingOptions(barrier_sync_key_prefix=f"reasoner-{name}")


def agree(ok: bool) -> list[int]:
    """The indices of the processes where `ok` is False, the same list on every process (`[]`: all succeeded).

    A collective (an all-gather of one flag per process): every process of the job calls it at the same point.
    """
    if jax.process_count() == 1:
        return [] if ok else [0]
    from jax.experimental import multihost_utils

    flags = np.asarray(multihost_utils.process_allgather(np.asarray([int(bool(ok))], np.int32))).reshape(-1)
    return [int(i) for i in np.flatnonzero(flags == 0)]


def _meet_restore_barrier(manager) -> None:
    """The barrier orbax's `Checkpointer.restore` ends with (orbax/_src/checkpointers/checkpointer.py), which a
    process whose read raised never reached: it meets the processes whose read succeeded there, so that the job's
    collectives stay in step and `agree` can follow. A no-op in one process."""
    if jax.process_count() == 1:
        return
    from orbax.checkpoint._src.multihost import multihost

    multihost.sync_global_processes(multihost.unique_barrier_key("Checkpointer:restore",
                                                                 prefix=_barrier_prefix(manager)))


class RunCheckpoints:
    """The `checkpoints/` (latest N) and `best/` managers of one workdir."""

    def __init__(self, workdir, *, keep: int = 3, best_metric: str | None = None, best_mode: str = "min",
                 async_save: bool = True, log=None):
        self.workdir = pathlib.Path(workdir).absolute()  # orbax refuses relative paths
        self.best_metric = best_metric
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.skipped: list[Skipped] = []  # what the last restore passed over, newest first
        # Each manager gets its own barrier names: at an evaluation step `best/` and `checkpoints/` save the same
        # step asynchronously, and orbax's save tracker waits at one fixed barrier name per manager; with a shared
        # name the two finalize threads of a multi-process job collide ("Barrier ... is already ongoing").
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=async_save, create=True,
                                               multiprocessing_options=_barriers("checkpoints"))
        self.latest = ocp.CheckpointManager(self.workdir / "checkpoints", options=options,
                                            item_names=("state", "data", "meta"))
        self.best = None
        if best_metric:
            best_options = ocp.CheckpointManagerOptions(
                max_to_keep=1, best_fn=lambda m: float(m[best_metric]), best_mode=best_mode,
                keep_checkpoints_without_metrics=False, enable_async_checkpointing=async_save, create=True,
                multiprocessing_options=_barriers("best"))
            self.best = ocp.CheckpointManager(self.workdir / "best", options=best_options,
                                              item_names=("state", "data", "meta"))

    @staticmethod
    def _args(state, data_state: dict, meta: dict):
        flat = flatten_state(state)
        meta = {**meta, "checksums": state_checksums(flat)}
        return ocp.args.Composite(state=ocp.args.StandardSave(flat),
                                  data=ocp.args.JsonSave(data_state), meta=ocp.args.JsonSave(meta))

    def save(self, step: int, state, *, data_state: dict, meta: dict, force: bool = False) -> None:
        """Starts an async save of the latest checkpoint at `step` (on every process: the save is collective).
        A step that already exists is kept as it is (exact resumption wrote the same state there)."""
        if step in self.latest.all_steps():
            return
        self.latest.save(step, args=self._args(state, data_state, meta), force=force)

    def save_best(self, step: int, state, *, data_state: dict, meta: dict, metrics: dict[str, float]) -> None:
        """Offers `state` to `best/`; orbax keeps it only if its metric beats the stored one. A `best/<step>`
        that exists already (committed before a kill cut `checkpoints/<step>`) is kept."""
        if self.best is None:
            raise ValueError("save_best needs best_metric set")
        if step in self.best.all_steps():
            return
        self.best.save(step, args=self._args(state, data_state, meta), metrics=metrics, force=True)

    def latest_step(self) -> int | None:
        """Newest committed step of `checkpoints/` (not yet checked for damage: `restore` does that)."""
        return self.latest.latest_step()

    def best_step(self) -> int | None:
        return None if self.best is None else self.best.best_step()

    def restore(self, template_state, *, expected_meta: dict, step: int | None = None, which: str = "latest"):
        """(state, data_state, meta) restored into `template_state`'s shapes and shardings; `meta["step"]` is
        the step restored. With `step` None: the newest intact checkpoint, damaged newer ones moved to
        `corrupt/` (see the module docstring; `self.skipped` lists them). Raises CheckpointError when none
        is intact, when an explicit `step` is damaged, or when a checkpoint is from another trainer/model."""
        manager = self.latest if which == "latest" else self.best
        if manager is None:
            raise ValueError("restore(which='best') needs best_metric set")
        self.skipped = []
        if step is not None:
            try:
                return self._restore_one(manager, step, template_state, expected_meta)
            except _Damaged as err:
                raise CheckpointError(f"checkpoint {err.where} is damaged: {err}") from err
        self._set_aside_unfinished(manager)
        steps = sorted(manager.all_steps(), reverse=True)
        if which == "best":
            steps = [s for s in [manager.best_step()] if s is not None]
        for candidate in steps:
            try:
                restored = self._restore_one(manager, candidate, template_state, expected_meta)
            except _Damaged as err:
                self._set_aside(manager, candidate, str(err))
                continue
            if self.skipped:
                self.log(f"checkpoint: resuming from {manager.directory / str(candidate)}; skipped "
                         + "; ".join(f"{s.path.name} ({s.reason}, moved to {s.moved_to})" for s in self.skipped))
            return restored
        if self.skipped:
            raise CheckpointError(
                f"no intact checkpoint in {manager.directory}: " + "; ".join(
                    f"{s.path.name}: {s.reason}" for s in self.skipped)
                + f". They were moved to {self.workdir / 'corrupt'}; refusing to start afresh over this run. "
                  f"Move the workdir away (or its checkpoints/ directory) to start a new run")
        raise CheckpointError(f"{manager.directory} holds no checkpoint to restore")

    def _read(self, manager, step: int, args, *, what: str):
        """`manager.restore(step, args=args)` once every process has read its part: raises `_Damaged` on every
        process when any one of them failed (its own error there, the failing processes' indices elsewhere)."""
        where = manager.directory / str(step)
        try:
            restored, error = manager.restore(step, args=args), None
        except Exception as err:  # noqa: BLE001 - any read failure means the checkpoint is damaged
            restored, error = None, err
            _meet_restore_barrier(manager)
        failed = agree(error is None)
        if error is not None:
            raise _Damaged(where, f"{what} unreadable: {type(error).__name__}: {_short(error)}") from error
        if failed:
            raise _Damaged(where, f"{what} unreadable on process(es) {', '.join(map(str, failed))}")
        return restored

    def _restore_one(self, manager, step: int, template_state, expected_meta: dict):
        where = manager.directory / str(step)
        meta = self._read(manager, step, ocp.args.Composite(meta=ocp.args.JsonRestore()), what="meta")["meta"]
        for key in ("trainer", "fingerprint"):
            if meta.get(key) != expected_meta.get(key):
                raise CheckpointError(
                    f"checkpoint {where} is incompatible: {key}={meta.get(key)!r}, this run expects "
                    f"{expected_meta.get(key)!r} (different trainer, model or LoRA setting). It was left in place; "
                    f"use another --workdir")
        saved, wanted = meta.get("config"), expected_meta.get("config")
        if saved is not None and wanted is not None and saved != wanted:
            keys = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
            raise CheckpointError(
                f"checkpoint {where} was written with other settings: " + "; ".join(
                    f"{k}: {saved.get(k)!r} then, {wanted.get(k)!r} now" for k in keys[:6])
                + (f" (and {len(keys) - 6} more)" if len(keys) > 6 else "")
                + ". Resuming would continue one run with another's settings; use another --workdir, or the run's "
                  "own settings (its hparams.json)")
        abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=getattr(v, "sharding", None))
                    for k, v in flatten_state(template_state).items()}
        restored = self._read(manager, step, ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()), what="arrays")
        saved = meta.get("checksums")  # the same on every process: the sums run over the global arrays
        if saved is not None:
            now = state_checksums(restored["state"])
            bad = sorted(k for k in saved if now.get(k) != saved[k])
            if bad:
                raise _Damaged(where, f"checksum mismatch in {len(bad)} array(s), first {bad[0]!r}")
        meta = {k: v for k, v in meta.items() if k != "checksums"}
        meta["step"] = int(meta.get("step", step))
        return unflatten_state(template_state, restored["state"]), restored["data"], meta

    def _set_aside(self, manager, step: int | str, reason: str) -> None:
        """Moves a damaged `<dir>/<step>` to `corrupt/` (process 0 moves, all wait) and forgets it."""
        source = manager.directory / str(step)
        target = self.workdir / "corrupt" / f"{manager.directory.name}-{step}"
        if jax.process_index() == 0 and source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            n = 1
            while target.exists():
                n += 1
                target = target.with_name(f"{manager.directory.name}-{step}.{n}")
            source.rename(target)
        _sync(f"reasoner-checkpoint-set-aside-{manager.directory.name}-{step}")
        manager.reload()
        self.skipped.append(Skipped(path=source, reason=reason, moved_to=target))

    def _set_aside_unfinished(self, manager) -> None:
        """orbax's temporary directories of saves that never committed (the process died mid-write)."""
        root = pathlib.Path(manager.directory)
        paths = sorted(p for p in root.iterdir() if TMP_MARK in p.name) if root.is_dir() else []
        # every process lists before process 0 moves the first away (a later lister would see fewer, skip their
        # barriers and leave the others waiting in them)
        _sync(f"reasoner-checkpoint-listed-unfinished-{root.name}")
        for path in paths:
            self._set_aside(manager, path.name, "unfinished save, cut mid-write")

    def wait(self) -> None:
        self.latest.wait_until_finished()
        if self.best is not None:
            self.best.wait_until_finished()

    def close(self) -> None:
        self.latest.close()
        if self.best is not None:
            self.best.close()


class _Damaged(Exception):
    """A checkpoint failed to read or verify (internal: `restore` falls back past it)."""

    def __init__(self, where, reason: str):
        super().__init__(reason)
        self.where = where


def _short(err: BaseException) -> str:
    return " ".join(str(err).split())[:160]


def check_workdir(workdir) -> None:
    """Raises CheckpointError when `workdir/checkpoints` exists but holds entries that are not step directories."""
    root = pathlib.Path(workdir) / "checkpoints"
    if not root.exists():
        return
    if not root.is_dir():
        raise CheckpointError(f"{root} exists and is not a directory; expected orbax step directories. Not touching it")
    foreign = [p.name for p in root.iterdir() if not (p.is_dir() and (p.name.isdigit() or TMP_MARK in p.name))]
    if foreign:
        raise CheckpointError(
            f"{root} holds entries that are not checkpoints ({foreign[:5]}); refusing to write there. "
            f"Move them away or pick another --workdir")
