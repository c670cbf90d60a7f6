"""Checkpoint integrity: every fault is detected on restore, the run falls back to the newest intact checkpoint
(saying which and why), an all-corrupt workdir is a clear error, and an existing step is never re-saved into a crash.

Faults: a process SIGKILLed during an async save (orbax's temporary directory is left), a truncated array file, a
zeroed array file, every checkpoint damaged, and `best/N` committed while `checkpoints/N` never was.
"""

import os
import pathlib
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reasoner.checkpoint import TMP_MARK, CheckpointError, RunCheckpoints

META = {"trainer": "test", "fingerprint": "f0"}
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _state(scale: float):
    return {"w": jnp.arange(4096.0, dtype=jnp.float32).reshape(64, 64) * scale,
            "b": jnp.full((7,), scale, jnp.float32), "step": jnp.asarray(int(scale), jnp.int32)}


def _write(workdir, steps=(1, 2, 3)):
    ckpt = RunCheckpoints(workdir, keep=len(steps), async_save=True)
    for s in steps:
        ckpt.save(s, _state(s), data_state={"step": s}, meta={**META, "step": s})
    ckpt.wait()
    ckpt.close()


def _largest_array_file(workdir, step) -> pathlib.Path:
    files = [p for p in (workdir / "checkpoints" / str(step) / "state").rglob("*") if p.is_file()
             and "/d/" in str(p)]
    return max(files, key=lambda p: p.stat().st_size)


def _restore(workdir, lines):
    ckpt = RunCheckpoints(workdir, keep=3, log=lines.append)
    try:
        return ckpt.restore(_state(0), expected_meta=META), ckpt.skipped
    finally:
        ckpt.close()


def _assert_is_step(restored, step):
    state, data, meta = restored
    assert meta["step"] == step and data == {"step": step}
    np.testing.assert_array_equal(np.asarray(state["w"]), np.asarray(_state(step)["w"]))


def test_intact_workdir_restores_the_newest_and_says_nothing(tmp_path):
    _write(tmp_path)
    lines = []
    restored, skipped = _restore(tmp_path, lines)
    _assert_is_step(restored, 3)
    assert skipped == [] and lines == []


@pytest.mark.parametrize("damage", ["truncate", "zero"])
def test_damaged_newest_falls_back_to_the_older_one(tmp_path, damage):
    _write(tmp_path)
    target = _largest_array_file(tmp_path, 3)
    size = target.stat().st_size
    if damage == "truncate":
        with open(target, "r+b") as f:
            f.truncate(size // 2)
    else:
        target.write_bytes(bytes(size))
    lines = []
    restored, skipped = _restore(tmp_path, lines)
    _assert_is_step(restored, 2)
    assert [s.path.name for s in skipped] == ["3"]
    assert skipped[0].moved_to == tmp_path / "corrupt" / "checkpoints-3" and skipped[0].moved_to.is_dir()
    assert not (tmp_path / "checkpoints" / "3").exists()
    assert len(lines) == 1 and "resuming from" in lines[0] and lines[0].rstrip().endswith("checkpoints-3)") \
        and str(tmp_path / "checkpoints" / "2") in lines[0]


def test_checksum_catches_bits_that_still_decode(tmp_path):
    """Damage the reader cannot see (a chunk rewritten with other valid values) is caught by the saved checksums."""
    _write(tmp_path, steps=(1, 2))
    ckpt = RunCheckpoints(tmp_path, keep=3)
    # overwrite checkpoint 2's meta checksum of "w" as if the array's bits had changed after saving
    meta_file = tmp_path / "checkpoints" / "2" / "meta" / "metadata"
    import json

    meta = json.loads(meta_file.read_text())
    meta["checksums"]["w"][0] ^= 1
    meta_file.write_text(json.dumps(meta))
    ckpt.close()
    lines = []
    restored, skipped = _restore(tmp_path, lines)
    _assert_is_step(restored, 1)
    assert "checksum mismatch in 1 array(s), first 'w'" in skipped[0].reason


def test_every_checkpoint_corrupt_is_a_clear_error(tmp_path):
    _write(tmp_path, steps=(1, 2))
    for step in (1, 2):
        target = _largest_array_file(tmp_path, step)
        target.write_bytes(bytes(target.stat().st_size))
    with pytest.raises(CheckpointError, match=r"no intact checkpoint in .*checkpoints: 2: .*; 1: .*refusing to start "
                                              r"afresh"):
        _restore(tmp_path, [])
    assert sorted(p.name for p in (tmp_path / "corrupt").iterdir()) == ["checkpoints-1", "checkpoints-2"]


def test_incompatible_checkpoint_is_an_error_not_a_fallback(tmp_path):
    _write(tmp_path, steps=(1,))
    ckpt = RunCheckpoints(tmp_path, keep=3)
    with pytest.raises(CheckpointError, match="is incompatible: fingerprint='f0'"):
        ckpt.restore(_state(0), expected_meta={**META, "fingerprint": "other"})
    ckpt.close()
    assert (tmp_path / "checkpoints" / "1").is_dir() and not (tmp_path / "corrupt").exists()


KILL_DURING_SAVE = r"""
import os, signal, sys
import jax.numpy as jnp
from reasoner.checkpoint import RunCheckpoints
ckpt = RunCheckpoints(sys.argv[1], keep=3, async_save=True)
small = {"w": jnp.arange(4096.0, dtype=jnp.float32).reshape(64, 64), "b": jnp.full((7,), 1.0), "step": jnp.asarray(1)}
ckpt.save(1, small, data_state={"step": 1}, meta={"trainer": "test", "fingerprint": "f0", "step": 1})
ckpt.wait()
big = {"w": jnp.ones((64, 64)), "b": jnp.ones(7), "step": jnp.asarray(2), "big": jnp.ones((4096, 8192), jnp.float32)}
ckpt.save(2, big, data_state={"step": 2}, meta={"trainer": "test", "fingerprint": "f0", "step": 2})
# the async write of 128 MB is under way: die once its temporary directory exists (orbax may create it from a
# background thread, later than save() returns on a loaded machine), as a preempted or OOM-killed trainer would
import time
root, deadline = os.path.join(sys.argv[1], "checkpoints"), time.monotonic() + 60
while not any(n.startswith("2.") for n in os.listdir(root)) and time.monotonic() < deadline:
    time.sleep(0.001)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_sigkill_during_a_save_resumes_from_the_previous_checkpoint(tmp_path):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    proc = subprocess.run([sys.executable, "-c", KILL_DURING_SAVE, str(tmp_path)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    left = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert left[0] == "1" and len(left) == 2 and TMP_MARK in left[1] and left[1].startswith("2.")
    lines = []
    ckpt = RunCheckpoints(tmp_path, keep=3, log=lines.append)
    state, data, meta = ckpt.restore({"w": jnp.zeros((64, 64)), "b": jnp.zeros(7), "step": jnp.asarray(0)},
                                     expected_meta=META)
    assert meta["step"] == 1 and data == {"step": 1}
    np.testing.assert_array_equal(np.asarray(state["w"]), np.arange(4096.0).reshape(64, 64))
    assert [s.reason for s in ckpt.skipped] == ["unfinished save, cut mid-write"]
    assert len(lines) == 1 and "(unfinished save, cut mid-write, moved to" in lines[0]
    # the run goes on: step 2 saves cleanly where the cut one was
    ckpt.save(2, {"w": jnp.ones((64, 64)), "b": jnp.ones(7), "step": jnp.asarray(2)}, data_state={"step": 2},
              meta={**META, "step": 2})
    ckpt.wait()
    assert ckpt.latest_step() == 2 and sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["1", "2"]
    ckpt.close()


def test_best_step_committed_before_the_latest_one_does_not_crash_the_resume(tmp_path):
    """SIGKILL after best/4 committed but before checkpoints/4: the resumed run reaches step 4 again."""
    ckpt = RunCheckpoints(tmp_path, keep=3, best_metric="loss")
    ckpt.save(2, _state(2), data_state={"step": 2}, meta={**META, "step": 2})
    ckpt.save_best(4, _state(4), data_state={"step": 4}, meta={**META, "step": 4}, metrics={"loss": 0.5})
    ckpt.wait()
    ckpt.close()
    resumed = RunCheckpoints(tmp_path, keep=3, best_metric="loss")
    _, data, meta = resumed.restore(_state(0), expected_meta=META)
    assert meta["step"] == 2
    # steps 3 and 4 run again; offering best/4 and saving checkpoints/4 must both work
    resumed.save_best(4, _state(4), data_state={"step": 4}, meta={**META, "step": 4}, metrics={"loss": 0.5})
    resumed.save(4, _state(4), data_state={"step": 4}, meta={**META, "step": 4})
    resumed.wait()
    assert resumed.latest_step() == 4 and resumed.best_step() == 4
    restored = resumed.restore(_state(0), expected_meta=META)
    _assert_is_step(restored, 4)
    resumed.close()


# Two processes save `best/` and `checkpoints/` at the same steps, asynchronously. orbax marks a save as started
# with a barrier (its save tracker's `set_value_start`); process 0 reaches that barrier of every main-thread save 3 s
# late (as a process descheduled under load does), so process 1 waits inside it while its background threads,
# slowed by 0.3 s a barrier, finalize the other manager's save and reach the tracker's barrier too: the two
# managers are inside a barrier at the same time, at every step after the first.
_OVERLAP_SCRIPT = r"""
import sys, threading, time
from reasoner import distributed
distributed.maybe_initialize()
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from orbax.checkpoint._src.multihost import multihost

make = multihost.get_barrier_sync_fn
def slowed(*args, **kwargs):
    fn = make(*args, **kwargs)
    def wait(*, key, timeout_ms):
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.3)
        elif jax.process_index() == 0 and "set_value_start" in key:
            time.sleep(3)
        return fn(key=key, timeout_ms=timeout_ms)
    return wait
multihost.get_barrier_sync_fn = slowed

from reasoner.checkpoint import RunCheckpoints
mesh = jax.make_mesh((jax.device_count(),), ("data",), devices=jax.devices())
value = np.arange(64, dtype=np.float32).reshape(8, 8)
w = jax.make_array_from_callback(value.shape, NamedSharding(mesh, P("data")), lambda index: value[index])
ckpt = RunCheckpoints(sys.argv[1], keep=2, best_metric="loss", async_save=True)
meta = {"trainer": "test", "fingerprint": "f0"}
for step in (1, 2, 3):
    state = {"w": w * step}
    ckpt.save_best(step, state, data_state={"step": step}, meta={**meta, "step": step}, metrics={"loss": -step})
    ckpt.save(step, state, data_state={"step": step}, meta={**meta, "step": step})
ckpt.wait()
ckpt.close()
print("SAVED", jax.process_index(), ckpt.latest_step(), ckpt.best_step(), flush=True)
"""


def test_two_processes_save_best_and_latest_concurrently(tmp_path):
    """`best/` and `checkpoints/` save the same step at once in a two-process job (every SFT evaluation step): their
    orbax barriers must not share names. With one name (orbax's default) this job fails every time here with
    "Barrier ThreadSaveMultiHostValueHolder:set_value_start is already ongoing" (the CI failure of the two-process
    resume, where it happened by chance under load)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REASONER_", "JAX_COMPILATION_CACHE"))}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "launch" / "local_processes.py"), "--processes", "2", "--devices-per-process",
         "2", "--timeout", "240", "--", sys.executable, "-c", _OVERLAP_SCRIPT, str(tmp_path / "run")],
        env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    saved = sorted(line.split("SAVED ", 1)[1] for line in proc.stdout.splitlines() if "SAVED " in line)
    assert saved == ["0 3 3", "1 3 3"], proc.stdout[-2000:]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["2", "3"]
