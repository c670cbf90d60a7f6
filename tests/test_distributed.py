"""The multi-host code path: two local CPU processes joined by jax.distributed run one sharded step."""

import os
import subprocess
import sys
import pathlib

import numpy as np
import pytest

from reasoner import distributed
from tests.tolerances import f32_sum_bound

ROOT = pathlib.Path(__file__).resolve().parents[1]

# One data-parallel SGD step of least squares over a mesh spanning both processes' devices.
STEP_SCRIPT = r"""
import numpy as np
from reasoner import distributed
spec = distributed.maybe_initialize()
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
assert jax.process_count() == spec.num_processes == 2, jax.process_count()
mesh = jax.make_mesh((jax.device_count(),), ("data",), devices=jax.devices())
rng = np.random.default_rng(0)
x_all = rng.normal(size=(16, 3)).astype(np.float32)
y_all = x_all @ np.array([1.0, -2.0, 0.5], np.float32)
rows = slice(8 * spec.process_id, 8 * (spec.process_id + 1))
batch_sharding = NamedSharding(mesh, P("data"))
x = jax.make_array_from_process_local_data(batch_sharding, x_all[rows])
y = jax.make_array_from_process_local_data(batch_sharding, y_all[rows])
w = jax.device_put(jnp.zeros(3), NamedSharding(mesh, P()))

@jax.jit
def step(w, x, y):
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return w - 0.1 * grad, loss

w, loss = step(w, x, y)
print("RESULT", spec.process_id, float(loss), " ".join(f"{v:.7f}" for v in np.asarray(jax.device_get(w))))
"""


def _reference():
    """(loss, new weights, their float32 error bounds). The job and this reference see the same float32 x and y; with
    w = 0 the job's float32 work is the 16 squares and their sum (loss), and the 16-term dots x_j . y (gradient),
    summed in any order across the two processes: by Higham's bound each is within (n + 2) EPS32 sum(|terms|) of
    exact (n = 16 terms, plus the rounding of each term and the final scaling), and we compare two such
    evaluations (x2)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    loss = float(np.mean(y64 ** 2))
    w = -0.1 * 2 * x64.T @ (-y64) / len(y)
    n = len(y)
    loss_tol = 2 * f32_sum_bound(y64 ** 2, n + 2) / n
    w_tol = np.array([2 * 0.1 * 2 / n * f32_sum_bound(x64[:, j] * y64, n + 2) for j in range(3)])
    return loss, w, loss_tol, w_tol


def test_two_processes_run_one_sharded_step():
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONER_")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "launch" / "local_processes.py"), "--processes", "2",
         "--devices-per-process", "2", "--timeout", "120", "--", sys.executable, "-c", STEP_SCRIPT],
        env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [line.split("RESULT ", 1)[1].split() for line in proc.stdout.splitlines() if "RESULT" in line]
    assert sorted(int(r[0]) for r in results) == [0, 1]
    loss_ref, w_ref, loss_tol, w_tol = _reference()
    for r in results:
        assert abs(float(r[1]) - loss_ref) <= loss_tol, (r[1], loss_ref, loss_tol)
        # the weights are printed with 7 decimals: half a unit of the 7th decimal is added to their bound
        assert np.all(np.abs(np.array(r[2:], float) - w_ref) <= w_tol + 5e-8), (r[2:], w_ref, w_tol)


def test_cluster_from_env():
    assert distributed.cluster_from_env({}) is None
    spec = distributed.cluster_from_env(
        {"REASONER_COORDINATOR": "10.0.0.1:1234", "REASONER_NUM_PROCESSES": "4", "REASONER_PROCESS_ID": "3"}
    )
    assert spec == distributed.ClusterSpec("10.0.0.1:1234", 4, 3) and spec.is_multi_process


@pytest.mark.parametrize(
    "env, match",
    [
        ({"REASONER_COORDINATOR": "h:1"}, "missing"),
        ({"REASONER_COORDINATOR": "h:1", "REASONER_NUM_PROCESSES": "2", "REASONER_PROCESS_ID": "2"}, r"\[0, "),
        ({"REASONER_COORDINATOR": "h:1", "REASONER_NUM_PROCESSES": "two", "REASONER_PROCESS_ID": "0"}, "integers"),
        ({"REASONER_COORDINATOR": "nohostport", "REASONER_NUM_PROCESSES": "2", "REASONER_PROCESS_ID": "0"}, "host:port"),
    ],
)
def test_bad_cluster_env(env, match):
    with pytest.raises(ValueError, match=match):
        distributed.cluster_from_env(env)


def _launch(command: list[str], *, processes: int = 2, devices: int = 4, timeout: int = 120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REASONER_")}
    return subprocess.run(
        [sys.executable, str(ROOT / "launch" / "local_processes.py"), "--processes", str(processes),
         "--devices-per-process", str(devices), "--timeout", str(timeout), "--", *command],
        env=env, capture_output=True, text=True, timeout=timeout + 60, cwd=ROOT)


def test_every_reasoner_command_joins_the_cluster():
    """`reasoner info --json` under the launcher: both processes see one job of 2 processes x 4 devices."""
    import json

    proc = _launch([str(ROOT / ".venv" / "bin" / "reasoner"), "info", "--json"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    infos = {}
    for line in proc.stdout.splitlines():
        tag, _, rest = line.partition(" ")
        if rest.startswith("{"):
            infos[int(tag.strip("[]"))] = json.loads(rest)
    assert sorted(infos) == [0, 1]
    for pid, info in infos.items():
        assert (info["process_count"], info["device_count"], info["local_device_count"]) == (2, 8, 4)
        assert info["process_index"] == pid
        assert info["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1}
    # each process names its place once on stderr (the launcher merges it into stdout with a [pid] tag)
    joined = sorted(line for line in proc.stdout.splitlines() if " joined " in line)
    assert [line.split(" joined")[0] for line in joined] == ["[0] [process 0/2]", "[1] [process 1/2]"]


def test_one_failing_process_stops_the_job_with_its_error():
    """Process 1 fails (a config that does not exist) while process 0 succeeds and waits for it at the command's
    last barrier: the failing process leaves at once (not after JAX's 300 s shutdown barrier), the launcher stops
    process 0 and returns process 1's exit code well before its own timeout (124), with the error line shown."""
    reasoner = ROOT / ".venv" / "bin" / "reasoner"
    script = (f'if [ "$REASONER_PROCESS_ID" = 1 ]; then exec {reasoner} train --config /nonexistent.py --workdir '
              f'/nonexistent; else exec {reasoner} info --json; fi')
    proc = _launch(["bash", "-c", script], timeout=200)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[1] reasoner train: /nonexistent.py" in proc.stdout or "[1] reasoner train:" in proc.stdout, proc.stdout
    assert "[launch] process 1 exited with 2" in proc.stderr


def test_exit_barrier_timeout_is_read_and_checked():
    assert distributed.exit_barrier_timeout_s({}) == 3600.0
    assert distributed.exit_barrier_timeout_s({"REASONER_EXIT_TIMEOUT_S": "90"}) == 90.0
    with pytest.raises(ValueError, match="REASONER_EXIT_TIMEOUT_S='-1'"):
        distributed.exit_barrier_timeout_s({"REASONER_EXIT_TIMEOUT_S": "-1"})


def test_is_primary_before_joining_reads_the_launch_environment(monkeypatch):
    monkeypatch.setattr(distributed, "_initialized", False)
    monkeypatch.setenv("REASONER_COORDINATOR", "127.0.0.1:1")
    monkeypatch.setenv("REASONER_NUM_PROCESSES", "2")
    monkeypatch.setenv("REASONER_PROCESS_ID", "1")
    assert distributed.process_index() == 1 and not distributed.is_primary()
    monkeypatch.setenv("REASONER_PROCESS_ID", "0")
    assert distributed.is_primary()
    for key in ("REASONER_COORDINATOR", "REASONER_NUM_PROCESSES", "REASONER_PROCESS_ID"):
        monkeypatch.delenv(key)
    assert distributed.is_primary()


@pytest.mark.parametrize("env, expected", [
    ({}, False),
    ({"SLURM_NTASKS": "4"}, False),  # the batch script itself, outside srun: joining would wait forever
    ({"SLURM_STEP_NUM_TASKS": "4"}, True),  # inside the launcher's srun step
    ({"SLURM_STEP_NUM_TASKS": "1"}, False),
    ({"TPU_WORKER_HOSTNAMES": "w0,w1"}, True),
    ({"TPU_WORKER_HOSTNAMES": "w0"}, False),
    ({"REASONER_DISTRIBUTED": "auto"}, True),
    ({"REASONER_DISTRIBUTED": "off", "SLURM_STEP_NUM_TASKS": "4"}, False),
])
def test_auto_detected_clusters(env, expected):
    assert distributed._auto_detectable(env) is expected


def test_bad_distributed_mode_is_named():
    with pytest.raises(ValueError, match="REASONER_DISTRIBUTED='yes'"):
        distributed._auto_detectable({"REASONER_DISTRIBUTED": "yes"})


@pytest.mark.parametrize("script", ["single_host.sh", "slurm.sbatch", "tpu_pod.sh"])
def test_launch_scripts_parse_and_start_one_job(script):
    """Syntax check, and each script starts the `reasoner` command exactly once (one srun / one ssh to all workers)."""
    path = ROOT / "launch" / script
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    body = [l for l in path.read_text().splitlines() if not l.lstrip().startswith("#")]
    text = "\n".join(body)
    assert text.count(".venv/bin/reasoner") == 1
    if script == "slurm.sbatch":
        assert text.count("srun ") == 1 and "--ntasks-per-node=1" in text
    if script == "tpu_pod.sh":
        assert "--worker=all" in text and "REASONER_DISTRIBUTED=auto" in text
