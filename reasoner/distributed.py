"""Multi-host start-up: one process per host, joined by `jax.distributed.initialize()`.

Every entry point that may run on several hosts calls `maybe_initialize()` before it
touches a device. It decides from the environment:

- `REASONER_COORDINATOR` (host:port), `REASONER_NUM_PROCESSES`, `REASONER_PROCESS_ID`
  set explicitly (what `launch/local_processes.py` and hand-written launchers do): join
  that cluster.
- On a TPU pod slice, or under SLURM with more than one task, JAX's own cluster
  detection finds the coordinator; `launch/tpu_pod.sh` and `launch/slurm.sbatch` rely on it.
- Otherwise: a single process, nothing to do.

On CPU the cross-process collectives use gloo (XLA's CPU default has none), which is
what lets the tests run a sharded step over two local processes.
"""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """Where this process sits in the job."""

    coordinator_address: str | None
    num_processes: int
    process_id: int

    @property
    def is_multi_process(self) -> bool:
        return self.num_processes > 1


def cluster_from_env(env: dict[str, str] | None = None) -> ClusterSpec | None:
    """The explicit cluster from `REASONER_*` variables, or None when they are absent.

    Raises ValueError naming the variable when one is malformed or out of range.
    """
    env = os.environ if env is None else env
    keys = ("REASONER_COORDINATOR", "REASONER_NUM_PROCESSES", "REASONER_PROCESS_ID")
    present = [k for k in keys if env.get(k)]
    if not present:
        return None
    missing = [k for k in keys if not env.get(k)]
    if missing:
        raise ValueError(f"multi-process launch: {', '.join(present)} set but {', '.join(missing)} missing")
    try:
        num, pid = int(env["REASONER_NUM_PROCESSES"]), int(env["REASONER_PROCESS_ID"])
    except ValueError as err:
        raise ValueError(f"REASONER_NUM_PROCESSES / REASONER_PROCESS_ID: expected integers ({err})") from None
    if num < 1 or not 0 <= pid < num:
        raise ValueError(f"REASONER_PROCESS_ID={pid} must lie in [0, REASONER_NUM_PROCESSES={num})")
    if ":" not in env["REASONER_COORDINATOR"]:
        raise ValueError(f"REASONER_COORDINATOR={env['REASONER_COORDINATOR']!r}: expected host:port")
    return ClusterSpec(env["REASONER_COORDINATOR"], num, pid)


def _auto_detectable(env) -> bool:
    """True on a TPU VM pod slice or in a multi-task SLURM step, where JAX finds the cluster itself."""
    if int(env.get("SLURM_NTASKS", "1") or 1) > 1:
        return True
    return bool(env.get("TPU_WORKER_HOSTNAMES", "").count(","))


_initialized = False


def maybe_initialize() -> ClusterSpec:
    """Joins the multi-process job if there is one; idempotent. Returns this process's place."""
    global _initialized
    import jax

    spec = cluster_from_env()
    if _initialized:
        return spec or ClusterSpec(None, jax.process_count(), jax.process_index())
    if spec is not None and spec.is_multi_process:
        if os.environ.get("JAX_PLATFORMS", "").startswith("cpu"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=spec.coordinator_address,
            num_processes=spec.num_processes,
            process_id=spec.process_id,
        )
        _initialized = True
        return spec
    if spec is None and _auto_detectable(os.environ):
        jax.distributed.initialize()
        _initialized = True
        return ClusterSpec(None, jax.process_count(), jax.process_index())
    return spec or ClusterSpec(None, 1, 0)
