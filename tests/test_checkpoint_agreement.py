"""A multi-host restore decides as one job: a checkpoint that one process cannot read is damaged for every process.

Before, the process whose read failed fell back alone: it set the checkpoint aside (a barrier the others never
reached: "sync_global_devices name mismatch") while the others went on with the newer step into the next collective
and waited there until the job was killed. Now every read is followed by `agree` (an all-gather of one ok flag), so
all processes skip the same checkpoints and resume from the same step, or all raise the same CheckpointError.
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from reasoner import checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Two processes save steps 1 and 2 of an array sharded over both, then restore three times:
#   1. process 1 cannot read step 2's arrays (an I/O error raised inside orbax's read, on its host only);
#   2. process 1 is slow to start the restore while an unfinished save (orbax's tmp directory) waits to be set aside:
#      every process must list it before process 0 moves it;
#   3. process 1 cannot read any meta: no intact checkpoint, the same CheckpointError on both.
_SCRIPT = r"""
import sys, time
from reasoner import distributed
distributed.maybe_initialize()
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from orbax.checkpoint._src.checkpointers import checkpointer
from reasoner.checkpoint import TMP_MARK, CheckpointError, RunCheckpoints, _sync

workdir, pid = sys.argv[1], jax.process_index()
mesh = jax.make_mesh((jax.device_count(),), ("data",), devices=jax.devices())
sharding = NamedSharding(mesh, P("data"))
value = np.arange(64, dtype=np.float32).reshape(8, 8)
w = jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])
meta = {"trainer": "test", "fingerprint": "f0"}
ckpt = RunCheckpoints(workdir, keep=3, async_save=False)
for step in (1, 2):
    ckpt.save(step, {"w": w * step}, data_state={"step": step}, meta={**meta, "step": step})
ckpt.wait()
ckpt.close()

unreadable = set()  # (step directory, item) pairs process 1 cannot read
read = checkpointer.Checkpointer._restore
def flaky(self, directory, args):
    if pid == 1 and any(directory.name == d and item in args.keys() for d, item in unreadable):
        raise OSError(f"simulated: {directory.name} unreadable on this host")
    return read(self, directory, args)
checkpointer.Checkpointer._restore = flaky
template = {"w": jax.device_put(np.zeros((8, 8), np.float32), sharding)}

def restore(tag):
    ckpt = RunCheckpoints(workdir, keep=3, log=lambda line: print(tag, "LOG", line, flush=True))
    try:
        state, _, got = ckpt.restore(template, expected_meta=meta)
        total = float(jax.jit(lambda x: x.sum())(state["w"]))  # the next collective, as a training step's
        print(tag, "RESTORED", pid, got["step"], total, [s.path.name for s in ckpt.skipped], flush=True)
    except CheckpointError as err:
        print(tag, "ERROR", pid, str(err).split(" in ")[0], flush=True)
        print(tag, "WHY", str(err), flush=True)
    finally:
        ckpt.close()

unreadable = {("2", "state")}
restore("A")
unreadable = set()
if pid == 0:
    (__import__("pathlib").Path(workdir) / "checkpoints" / f"3{TMP_MARK}-123").mkdir()
_sync("tmp-made")
if pid == 1:
    slow = RunCheckpoints._set_aside_unfinished
    def late(self, manager):
        time.sleep(2)
        return slow(self, manager)
    RunCheckpoints._set_aside_unfinished = late
restore("B")
unreadable = {("1", "meta")}
restore("C")
"""


def test_a_checkpoint_one_process_cannot_read_is_skipped_by_all():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REASONER_", "JAX_COMPILATION_CACHE"))}
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "launch" / "local_processes.py"), "--processes", "2", "--devices-per-process",
             "2", "--timeout", "90", "--", sys.executable, "-c", _SCRIPT, str(pathlib.Path(tmp) / "run")],
            env=env, capture_output=True, text=True, timeout=150, cwd=ROOT)
        moved = sorted(p.name for p in (pathlib.Path(tmp) / "run" / "corrupt").iterdir())
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    lines = sorted(line.split("] ", 1)[1] for line in out.splitlines() if any(
        f"] {tag} {what}" in line for tag in "ABC" for what in ("RESTORED", "ERROR")))
    assert lines == ["A RESTORED 0 1 2016.0 ['2']", "A RESTORED 1 1 2016.0 ['2']",
                     f"B RESTORED 0 1 2016.0 ['3{checkpoint.TMP_MARK}-123']",
                     f"B RESTORED 1 1 2016.0 ['3{checkpoint.TMP_MARK}-123']",
                     "C ERROR 0 no intact checkpoint", "C ERROR 1 no intact checkpoint"], out[-4000:]
    # each process says why step 2 was skipped: its own error, or which process could not read it
    assert "[0] A LOG checkpoint: resuming from" in out and "arrays unreadable on process(es) 1" in out
    assert "arrays unreadable: OSError: simulated: 2 unreadable on this host" in out
    assert "meta unreadable on process(es) 1" in out
    assert moved == ["checkpoints-1", "checkpoints-2", f"checkpoints-3{checkpoint.TMP_MARK}-123"]


def test_agree_names_the_failing_processes(monkeypatch):
    """`agree` with a fake three-process all-gather, and in this one process."""
    from jax.experimental import multihost_utils

    assert checkpoint.agree(True) == [] and checkpoint.agree(False) == [0]
    sent = []

    def allgather(flags):
        sent.append(np.asarray(flags).tolist())
        return np.array([[1], [0], [0]], np.int32)  # this process ok, processes 1 and 2 not

    monkeypatch.setattr(checkpoint.jax, "process_count", lambda: 3)
    monkeypatch.setattr(multihost_utils, "process_allgather", allgather)
    assert checkpoint.agree(True) == [1, 2] and sent == [[1]]
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda flags: np.ones((3, 1), np.int32))
    assert checkpoint.agree(True) == []


def test_a_damaged_explicit_step_is_a_checkpoint_error(tmp_path):
    """`restore(step=N)` of a damaged checkpoint raised the module's internal `_Damaged`, not CheckpointError."""
    import jax.numpy as jnp

    step = 1
    ckpt = checkpoint.RunCheckpoints(tmp_path, keep=2, async_save=False)
    ckpt.save(step, {"w": jnp.ones((4, 4))}, data_state={"step": step}, meta={"trainer": "t", "fingerprint": "f"})
    ckpt.wait()
    (tmp_path / "checkpoints" / str(step) / "meta" / "metadata").write_text("{not json")
    with pytest.raises(checkpoint.CheckpointError, match=f"checkpoint .*/checkpoints/{step} is damaged: meta "
                                                         "unreadable"):
        ckpt.restore({"w": jnp.zeros((4, 4))}, expected_meta={"trainer": "t", "fingerprint": "f"}, step=step)
    ckpt.close()
    assert (tmp_path / "checkpoints" / str(step)).is_dir()  # an explicit step is reported, not moved
