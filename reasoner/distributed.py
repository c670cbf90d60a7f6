"""Multi-host start-up: one process per host, joined by `jax.distributed.initialize()`.

Every entry point that may run on several hosts calls `maybe_initialize()` before it
touches a device. It decides from the environment:

- `REASONER_COORDINATOR` (host:port), `REASONER_NUM_PROCESSES`, `REASONER_PROCESS_ID`
  set explicitly (what `launch/local_processes.py` and hand-written launchers do): join
  that cluster.
- `REASONER_DISTRIBUTED=auto` (set by `launch/tpu_pod.sh` and `launch/slurm.sbatch`), inside a
  multi-task SLURM step (`SLURM_STEP_NUM_TASKS` > 1, i.e. under `srun`), or on a TPU slice whose
  `TPU_WORKER_HOSTNAMES` lists several workers: `jax.distributed.initialize()` with no arguments,
  so JAX's own cluster detection (SLURM variables, TPU metadata) finds the coordinator.
- Otherwise: a single process, nothing to do.

`REASONER_DISTRIBUTED=off` (set by `launch/single_host.sh`) forces a single process and wins over every
other variable, the explicit `REASONER_*` cluster included: nothing is joined, the `REASONER_*` variables
are not read (not even checked), and `process_index()` is 0.

On CPU the cross-process collectives use gloo (XLA's CPU default has none), which is
what lets the tests run a sharded step over two local processes.

`reasoner.cli.main` calls `maybe_initialize()` for every sub-command, after the allocator re-exec
and before the handler runs (JAX has touched no device yet). When the job has more than one
process, each one says `[process i/n]` on stderr at start. Code that writes files meant once
per job (reports, exports, metrics, plots) asks `is_primary()` (process 0); orbax checkpoints are
the exception: every process takes part in writing them.
"""

from __future__ import annotations

import dataclasses
import os
import sys


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """Where this process sits in the job."""

    coordinator_address: str | None
    num_processes: int
    process_id: int

    @property
    def is_multi_process(self) -> bool:
        return self.num_processes > 1


def distributed_mode(env) -> str:
    """`REASONER_DISTRIBUTED`: "" (unset), "auto" or "off"; ValueError naming it for any other value."""
    mode = env.get("REASONER_DISTRIBUTED", "")
    if mode not in ("", "auto", "off"):
        raise ValueError(f"REASONER_DISTRIBUTED={mode!r}: expected 'auto' or 'off'")
    return mode


def cluster_from_env(env: dict[str, str] | None = None) -> ClusterSpec | None:
    """The explicit cluster from `REASONER_*` variables, or None when they are absent or when
    `REASONER_DISTRIBUTED=off` (a single process, whatever else is set).

    Raises ValueError naming the variable when one is malformed or out of range.
    """
    env = os.environ if env is None else env
    if distributed_mode(env) == "off":
        return None
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
    """True where JAX finds the cluster itself: asked for, a multi-task SLURM step, a multi-worker TPU slice.

    `SLURM_NTASKS` alone is not enough: it is also set in the batch script outside `srun`, where
    joining would wait forever for peers that never start.
    """
    mode = distributed_mode(env)
    if mode:
        return mode == "auto"
    try:
        if int(env.get("SLURM_STEP_NUM_TASKS", "1") or 1) > 1:
            return True
    except ValueError:
        raise ValueError(f"SLURM_STEP_NUM_TASKS={env['SLURM_STEP_NUM_TASKS']!r}: expected an integer") from None
    return bool(env.get("TPU_WORKER_HOSTNAMES", "").count(","))


_initialized = False


def _env_seconds(env, name: str) -> int | None:
    """The whole number of seconds >= 1 in the variable `name`, None when it is unset; ValueError naming it else."""
    value = env.get(name, "")
    if not value:
        return None
    try:
        seconds = int(value)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise ValueError(f"{name}={value!r}: expected a whole number of seconds >= 1")
    return seconds


def _timeouts(env) -> dict[str, int]:
    """`REASONER_HEARTBEAT_TIMEOUT_S` -> jax.distributed's heartbeat timeout (JAX's default, 100 s, otherwise).

    A peer that sends no heartbeat for that long is declared dead and the whole job stops; processes
    sharing an oversubscribed host (`launch/local_processes.py`) can miss that, so the launcher raises it.
    """
    seconds = _env_seconds(env, "REASONER_HEARTBEAT_TIMEOUT_S")
    return {} if seconds is None else {"heartbeat_timeout_seconds": seconds}


def maybe_initialize() -> ClusterSpec:
    """Joins the multi-process job if there is one; idempotent. Returns this process's place.

    JAX is imported only when there is a cluster to join (or already joined), so a single-process
    command that never touches a device (e.g. `reasoner data ...`) does not pay for it.
    """
    global _initialized
    spec = cluster_from_env()
    if _initialized:
        import jax

        return spec or ClusterSpec(None, jax.process_count(), jax.process_index())
    if spec is not None and spec.is_multi_process:
        import jax

        if os.environ.get("JAX_PLATFORMS", "").startswith("cpu"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=spec.coordinator_address,
            num_processes=spec.num_processes,
            process_id=spec.process_id,
            **_timeouts(os.environ),
        )
        _initialized = True
        jax.devices()  # every process brings its backend up now, together (lazily, a slow peer times the rest out)
        _announce(spec)
        return spec
    if spec is None and _auto_detectable(os.environ):  # REASONER_* explicit always wins
        import jax

        jax.distributed.initialize(**_timeouts(os.environ))
        _initialized = True
        jax.devices()
        spec = ClusterSpec(None, jax.process_count(), jax.process_index())
        _announce(spec)
        return spec
    return spec or ClusterSpec(None, 1, 0)


def _announce(spec: ClusterSpec) -> None:
    """One line on stderr naming this process's place, so interleaved logs of a job can be told apart."""
    if spec.is_multi_process:
        print(f"[process {spec.process_id}/{spec.num_processes}] joined"
              + (f" {spec.coordinator_address}" if spec.coordinator_address else ""), file=sys.stderr, flush=True)


def process_index() -> int:
    """This process's index in the job (0 when single-process).

    Never initializes a JAX backend itself (that would make a later `jax.distributed.initialize` fail):
    before the job is joined it answers from the `REASONER_*` variables (0 under `REASONER_DISTRIBUTED=off`).
    """
    jax = sys.modules.get("jax")
    if _initialized or (jax is not None and jax.distributed.is_initialized()):
        return jax.process_index()
    spec = cluster_from_env()
    return spec.process_id if spec is not None else 0


def barrier(name: str, *, timeout_s: float = 3600.0) -> None:
    """Waits until every process of the job reaches `barrier(name)`; a no-op in a single process.

    Uses the coordinator's key-value service, not a device collective, so it works before any device work
    and around host-only steps (building a dataset, writing a file that the others then read).
    """
    client = _coordinator()
    if client is not None:
        client.wait_at_barrier(f"reasoner:{name}", int(timeout_s * 1000))


def _coordinator():
    """The coordination service's client of a joined job of several processes (its barriers and key-value
    store), else None."""
    jax = sys.modules.get("jax")
    if jax is None or not jax.distributed.is_initialized() or jax.process_count() == 1:
        return None
    from jax._src import distributed as jax_distributed

    return jax_distributed.global_state.client


def exit_barrier_timeout_s(env=None) -> float:
    """How long a finished process waits for the job's others at the end of a command (`REASONER_EXIT_TIMEOUT_S`,
    whole seconds; default one hour: a large export by process 0 alone can take many minutes)."""
    seconds = _env_seconds(os.environ if env is None else env, "REASONER_EXIT_TIMEOUT_S")
    return 3600.0 if seconds is None else float(seconds)


def primary_first(name: str, fn, *, timeout_s: float = 3600.0):
    """Runs `fn()` on process 0, then (after a barrier) on every other process; returns its result.

    For host work that must happen once per job before the others use it, e.g. building a TFDS dataset
    in a shared directory: process 0 builds, the others then find it built and only read it. When `fn` raises
    on process 0, the others raise a RuntimeError naming that error instead of running `fn` themselves (they
    would each redo, at once and in the same shared place, the work process 0 could not do); process 0
    publishes its outcome in the coordinator's key-value store before the barrier.
    """
    key = f"reasoner:primary_first:{name}"
    if process_index() == 0:
        outcome = "ok"
        try:
            return fn()
        except BaseException as err:
            outcome = f"failed: {type(err).__name__}: {err}"
            raise
        finally:
            client = _coordinator()
            if client is not None:
                client.key_value_set(key, outcome, allow_overwrite=True)
            barrier(name, timeout_s=timeout_s)
    barrier(name, timeout_s=timeout_s)
    client = _coordinator()
    outcome = client.blocking_key_value_get(key, 60_000) if client is not None else "ok"
    if outcome != "ok":
        raise RuntimeError(f"{name}: process 0 {outcome}; process {process_index()} does not run it in its place")
    return fn()


def is_primary() -> bool:
    """True on process 0: the one process that writes reports, exports, metrics files and plots.

    Checkpoints are not guarded by this: orbax writes them collectively from every process.
    """
    return process_index() == 0


def host_get(tree):
    """`jax.device_get` for trees whose arrays may span processes: each leaf as one NumPy array on every process.

    A leaf sharded over devices of other processes (a decode state split over a mesh that spans hosts) cannot be
    read locally, so it is all-gathered (`multihost_utils.process_allgather`, tiled: the global array). That is a
    collective: every process must call `host_get` at the same point, which holds for the host loops of the
    sampler and the trainers (they run the same code on the same values everywhere). Fully addressable or
    replicated leaves are read locally, as `jax.device_get` does.
    """
    import jax
    import numpy as np

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return jax.device_get(x)

    return jax.tree.map(one, tree)
