"""The multi-host code path: two local CPU processes joined by jax.distributed run one sharded step."""

import os
import subprocess
import sys
import pathlib

import numpy as np
import pytest

from reasoner import distributed

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
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32)
    grad = 2 * x.T @ (x @ np.zeros(3, np.float32) - y) / len(y)
    return float(np.mean(y**2)), -0.1 * grad


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
    loss_ref, w_ref = _reference()
    for r in results:
        assert float(r[1]) == pytest.approx(loss_ref, rel=1e-5)
        np.testing.assert_allclose(np.array(r[2:], float), w_ref, rtol=1e-5)


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
