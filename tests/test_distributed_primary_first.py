"""`primary_first` when process 0's work fails: the other processes raise, naming its error, instead of running the
work themselves (before, they passed the barrier and each redid at once, in the shared place, what process 0 could
not do: building a TFDS dataset, downloading a HF dataset). A fake coordinator and, once, two real processes."""

import os
import pathlib
import subprocess
import sys

import pytest

from reasoner import distributed

ROOT = pathlib.Path(__file__).resolve().parents[1]


class _FakeCoordinator:
    """The key-value store and barrier of the coordination service, in one process."""

    def __init__(self):
        self.store: dict[str, str] = {}

    def key_value_set(self, key, value, allow_overwrite=False):
        if key in self.store and not allow_overwrite:
            raise RuntimeError(f"{key} exists")
        self.store[key] = value

    def blocking_key_value_get(self, key, timeout_in_ms):
        return self.store[key]

    def wait_at_barrier(self, barrier_id, timeout_in_ms, process_ids=None):
        pass


@pytest.fixture
def job(monkeypatch):
    """A two-process job played in turn by this process: set `job.pid` to act as that process."""
    coordinator = _FakeCoordinator()

    class Job:
        pid = 0

    monkeypatch.setattr(distributed, "_coordinator", lambda: coordinator)
    monkeypatch.setattr(distributed, "process_index", lambda: Job.pid)
    Job.store = coordinator.store
    return Job


def test_a_failure_on_process_0_stops_the_others_before_they_run_it(job):
    ran = []

    def build():
        ran.append(job.pid)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        distributed.primary_first("tfds:x", build)
    job.pid = 1
    with pytest.raises(RuntimeError, match=r"tfds:x: process 0 failed: OSError: disk full; process 1 does not run"):
        distributed.primary_first("tfds:x", build)
    assert ran == [0]


def test_success_on_process_0_lets_the_others_read(job):
    assert distributed.primary_first("tfds:y", lambda: "built") == "built"
    job.pid = 1
    assert distributed.primary_first("tfds:y", lambda: "read") == "read"
    # the same name again in the job (a second load): process 0's newer outcome is what the others read
    job.pid = 0
    with pytest.raises(ValueError):
        distributed.primary_first("tfds:y", lambda: (_ for _ in ()).throw(ValueError("bad")))
    job.pid = 1
    with pytest.raises(RuntimeError, match="failed: ValueError: bad"):
        distributed.primary_first("tfds:y", lambda: "read")


def test_one_process_runs_it_without_a_coordinator():
    assert distributed._coordinator() is None
    assert distributed.primary_first("local", lambda: 3) == 3


_SCRIPT = r"""
from reasoner import distributed
spec = distributed.maybe_initialize()
def build():
    if spec.process_id == 0:
        raise OSError("disk full")
    print("RAN", spec.process_id, flush=True)
try:
    distributed.primary_first("tfds:demo", build, timeout_s=60)
except Exception as err:
    print("RAISED", spec.process_id, type(err).__name__, err, flush=True)
distributed.barrier("end", timeout_s=60)
"""


def test_two_processes():
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONER_")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "launch" / "local_processes.py"), "--processes", "2", "--devices-per-process",
         "1", "--timeout", "90", "--", sys.executable, "-c", _SCRIPT],
        env=env, capture_output=True, text=True, timeout=150, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = sorted(line.split("] ", 1)[1] for line in proc.stdout.splitlines() if "RAISED" in line or "RAN" in line)
    assert lines == ["RAISED 0 OSError disk full",
                     "RAISED 1 RuntimeError tfds:demo: process 0 failed: OSError: disk full; process 1 does not run "
                     "it in its place"], proc.stdout[-3000:]
