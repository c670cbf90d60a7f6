"""A persistent CPU-only process pool for host-side verifiers (Z3, sandboxed code, judges).

Why a pool of clean processes: verification runs beside the accelerator (the trainer submits a
batch, keeps the device busy, then collects futures), must survive hostile inputs (infinite loops,
unbounded allocation, segfaults) and must never drag JAX into a CPU helper. Each worker is a fresh
`python -m reasoner.verifiers.worker` (the "spawn" start method done by hand: multiprocessing's
spawn and forkserver both re-import the parent's `__main__`, which in a trainer imports JAX).

Per call the pool enforces
  * a wall-clock deadline: SIGTERM to the worker's process group, SIGKILL after `term_grace_s`;
  * an absolute memory cap: the worker's resident set may not exceed `memory_mb + rss_allowance_mb`
    (the allowance is a fixed share for the interpreter, never the worker's measured size, so a
    worker's history does not change a call's fate; polled every `poll_s`; RLIMIT_AS at
    `address_space_mb` is the hard backstop), and a worker whose resident set after a call grew
    more than `recycle_growth_mb` above its start is recycled, so every call starts near fresh;
  * crash isolation: a worker that dies fails only its own call and is replaced;
and it recycles a worker after `max_tasks_per_worker` calls. With `isolate` "strict" (or "auto"
where `unshare` works) each worker runs in the code sandbox's jail (`sandbox_child.lock_down`:
namespaces, host directories hidden, read-only `/`, private /tmp, uid nobody, seccomp), with the
interpreter, its packages and the repository exposed read-only; for tasks that never start
processes themselves (Z3), not for the code sandbox, which builds its own jail per test. The queue in front of the workers is
bounded: `submit` blocks (or raises `queue.Full` with `block=False`) when it is full.

Counters (`stats()`): calls, ok, errors, timeouts, memory_kills, crashes, recycled, restarts and
latency p50/p95 of the service time (send to reply) in milliseconds.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import dataclasses
import math
import os
import pickle
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from reasoner.verifiers import worker as wire

OUTCOMES = ("ok", "error", "timeout", "memory", "crash")
ISOLATION_MODES = ("off", "auto", "strict")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass(frozen=True)
class PoolConfig:
    """Limits of a `VerifierPool` (how they are enforced: the module docstring)."""

    workers: int = 2
    """Worker processes, each served by its own pool thread."""
    deadline_s: float = 30.0
    """Wall-clock seconds from sending a call to its reply (Sequent-Prover App. A.2); `submit(deadline_s=)` per call."""
    memory_mb: int = 256
    """MB a call may hold (App. A.2): its worker is killed past `memory_mb + rss_allowance_mb` resident;
    `submit(memory_mb=)` per call."""
    max_tasks_per_worker: int = 500
    """Calls after which a worker is replaced by a fresh one (counted as recycled)."""
    queue_size: int = 64
    """Calls waiting for a worker at most; `submit` blocks (or raises `queue.Full`) when that many wait."""
    term_grace_s: float = 0.5
    """Seconds from SIGTERM to SIGKILL when a worker's process group is killed."""
    poll_s: float = 0.01
    """Seconds between two checks of a busy worker's resident set."""
    address_space_mb: int = 8192
    """RLIMIT_AS of every worker in MB, the hard backstop behind the resident-set cap (0: none)."""
    start_timeout_s: float = 60.0
    """Seconds a new worker has to report ready before its start fails."""
    rss_allowance_mb: int = 128
    """Fixed MB for the interpreter on top of `memory_mb` (never the worker's measured size)."""
    recycle_growth_mb: int = 64
    """MB a worker's resident set may grow over its size at start before it is recycled after a call."""
    isolate: str = "off"
    """Jail the workers: "off", "auto" (where `unshare` works) or "strict" (or fail at construction)."""

    def __post_init__(self):
        for name in ("workers", "memory_mb", "max_tasks_per_worker", "queue_size", "rss_allowance_mb",
                     "recycle_growth_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PoolConfig.{name} must be an int >= 1, got {value!r}")
        for name in ("deadline_s", "term_grace_s", "poll_s", "start_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"PoolConfig.{name} must be a number > 0, got {value!r}")
        if self.isolate not in ISOLATION_MODES:
            raise ValueError(f"PoolConfig.isolate must be one of {ISOLATION_MODES}, got {self.isolate!r}")


@dataclasses.dataclass(frozen=True)
class CallResult:
    """What one pool call produced. `outcome` is one of OUTCOMES; `value` is set only for "ok"."""

    outcome: str
    value: Any = None
    error: str | None = None
    elapsed_s: float = 0.0
    queued_s: float = 0.0
    worker_pid: int | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def kill_process_group(proc: subprocess.Popen, *, grace_s: float) -> str:
    """SIGTERM the group led by `proc`, SIGKILL it after `grace_s`; returns the signal that ended it."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait_s)
            # Grandchildren left in the group (e.g. a forked payload) get the hard signal too.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return sig.name
        except subprocess.TimeoutExpired:
            continue
    return "unkillable"


def descendant_pids(root_pid: int | None = None) -> set[int]:
    """Live (non-zombie) descendants of `root_pid` (default: this process), read from /proc."""
    root_pid = os.getpid() if root_pid is None else root_pid
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children[int(fields[1])].append(int(entry))
    found, stack = set(), [root_pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _jailed_pid(unshare_pid: int) -> int:
    """The worker inside `unshare --fork`: the grandchild (its parent is the namespace's reaper)."""
    descendants = descendant_pids(unshare_pid)
    inner = []
    for pid in descendants:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != unshare_pid:
                    inner.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    return min(inner) if inner else unshare_pid


def resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


Z3_MEMOUT_EXIT = 101  # the status Z3 exits with when it runs out of memory


class _Worker:
    """One worker process and its pipes; used by exactly one pool thread."""

    def __init__(self, config: PoolConfig, *, jailed: bool = False):
        self.config = config
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO_ROOT, env.get("PYTHONPATH", "")) if p)
        env.pop("PYTHONSTARTUP", None)
        env.update(JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="-1", TPU_VISIBLE_DEVICES="")  # defence in depth
        command = [sys.executable, "-m", "reasoner.verifiers.worker", str(config.address_space_mb)]
        if jailed:
            from reasoner.verifiers.sandbox import NAMESPACE_PREFIX

            command = [*NAMESPACE_PREFIX, *command, "--jail"]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, start_new_session=True, close_fds=True,
        )
        self.tasks_done = 0
        hello = self._read(deadline=time.monotonic() + config.start_timeout_s)
        if not isinstance(hello, dict) or not hello.get("ok"):
            self.kill()
            raise RuntimeError(f"verifier worker failed to start (got {hello!r})")
        self.jailed = jailed
        self.layers = hello.get("layers") or {}
        self.pid = _jailed_pid(self.proc.pid) if jailed else self.proc.pid
        self.idle_rss = resident_bytes(self.pid)

    def _read(self, *, deadline: float, memory_limit: int | None = None):
        """The next reply frame, or "timeout" / "memory" / "crash" when it does not come."""
        fd = self.proc.stdout.fileno()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            ready, _, _ = select.select([fd], [], [], min(remaining, self.config.poll_s))
            if ready:
                frame = wire.read_frame(self.proc.stdout)
                return "crash" if frame is None else frame
            if memory_limit is not None and resident_bytes(self.pid) > memory_limit:
                return "memory"

    def call(self, request: bytes, *, deadline_s: float, memory_mb: int):
        self.tasks_done += 1
        try:
            wire.write_bytes(self.proc.stdin, request)
        except (BrokenPipeError, OSError):
            return "crash"
        limit = (memory_mb + self.config.rss_allowance_mb) * 1024 * 1024  # absolute, see the module docstring
        return self._read(deadline=time.monotonic() + deadline_s, memory_limit=limit)

    def bloated(self) -> bool:
        """Whether freed memory stayed resident (glibc, Z3's allocator) beyond `recycle_growth_mb`."""
        return resident_bytes(self.pid) > self.idle_rss + self.config.recycle_growth_mb * 1024 * 1024

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> str:
        return kill_process_group(self.proc, grace_s=self.config.term_grace_s)

    def retire(self) -> None:
        """Graceful stop: close stdin so the worker exits its loop, kill if it lingers."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=2.0)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class VerifierPool:
    """Persistent worker processes behind a bounded queue; `submit` returns futures of CallResult.

    Use as a context manager or call `close()`. `target` is "package.module:function"; its module
    must not import JAX (the worker would then carry it). Arguments and results must be picklable.
    """

    def __init__(self, config: PoolConfig | None = None, **overrides):
        self.config = dataclasses.replace(config or PoolConfig(), **overrides)
        self.jailed = self._resolve_isolation(self.config.isolate)
        self._queue: queue.Queue = queue.Queue(maxsize=self.config.queue_size)
        self._lock = threading.Lock()
        self._counts = collections.Counter()
        self._latency_s: collections.deque = collections.deque(maxlen=20000)
        self._pids: dict[int, int] = {}
        self._layers: dict = {}
        self._launchers: dict[int, int] = {}
        self._closed = False
        self._spawn_error = ""
        self._next_id = 0
        self._threads = []
        started = threading.Barrier(self.config.workers + 1)
        self._start_errors: list[BaseException] = []
        for index in range(self.config.workers):
            thread = threading.Thread(target=self._serve, args=(index, started), daemon=True,
                                      name=f"verifier-pool-{index}")
            thread.start()
            self._threads.append(thread)
        started.wait()
        if self._start_errors:
            self.close()
            raise self._start_errors[0]
        atexit.register(self.close)

    # -- public API -----------------------------------------------------------------------
    def submit(self, target: str, *args, task_kwargs: dict | None = None, deadline_s: float | None = None,
               memory_mb: int | None = None, block: bool = True,
               timeout: float | None = None) -> concurrent.futures.Future:
        """Queue `target(*args, **task_kwargs)`; blocks while the queue is full (backpressure).

        With `block=False` (or a `timeout`) a full queue raises `queue.Full` instead of waiting.
        `deadline_s` / `memory_mb` override the pool's limits for this call.
        """
        if self._closed:
            raise RuntimeError("VerifierPool is closed")
        for name, value in (("deadline_s", deadline_s), ("memory_mb", memory_mb)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise ValueError(f"{target}: {name}={value!r}; expected a finite number > 0 (None: the pool's)")
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._next_id += 1
            call_id = self._next_id
        request = {"id": call_id, "target": target, "args": args, "kwargs": dict(task_kwargs or {})}
        try:  # pickled here so that a bad argument fails in the caller, not in a pool thread
            payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            raise TypeError(f"arguments of {target} must be picklable: {err}") from err
        limits = (deadline_s or self.config.deadline_s, memory_mb or self.config.memory_mb)
        self._queue.put((future, (target, payload), limits, time.perf_counter()), block=block, timeout=timeout)
        return future

    def submit_batch(self, target: str, batch_args: list[tuple], **limits) -> list[concurrent.futures.Future]:
        """One future per argument tuple, in order; overlaps with whatever the caller does next."""
        return [self.submit(target, *args, **limits) for args in batch_args]

    def map(self, target: str, batch_args: list[tuple], **limits) -> list[CallResult]:
        return [f.result() for f in self.submit_batch(target, batch_args, **limits)]

    def worker_pids(self) -> list[int]:
        with self._lock:
            return sorted(self._pids.values())

    def worker_processes(self) -> set[int]:
        """Every process of the live workers: with a jail, its `unshare` and reaper as well."""
        with self._lock:
            launchers = set(self._launchers.values())
        return launchers.union(*(descendant_pids(pid) for pid in launchers))

    def stats(self) -> dict:
        with self._lock:
            counts = dict(self._counts)
            lat = sorted(self._latency_s)
        def pct(q):
            return round(1e3 * lat[min(len(lat) - 1, int(q * len(lat)))], 3) if lat else None
        out = {key: counts.get(key, 0) for key in
               ("calls", "ok", "errors", "timeouts", "memory_kills", "crashes", "recycled", "restarts")}
        out.update(latency_p50_ms=pct(0.5), latency_p95_ms=pct(0.95), queued=self._queue.qsize())
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=self.config.deadline_s + 10)
        atexit.unregister(self.close)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def _resolve_isolation(mode: str) -> bool:
        if mode == "off":
            return False
        from reasoner.verifiers.sandbox import unshare_works

        if unshare_works():
            return True
        if mode == "strict":
            raise RuntimeError("PoolConfig.isolate='strict' needs `unshare --net --pid --mount` (root or "
                               "CAP_SYS_ADMIN) and it failed here; use isolate='auto' to run unjailed")
        return False

    def isolation(self) -> dict:
        """{layer: active} of the workers' jail (all False when the workers are not jailed)."""
        with self._lock:
            layers = dict(self._layers)
        return layers or {name: False for name in ("netns+pidns+mountns", "uid", "rlimits", "seccomp")}

    # -- worker threads -------------------------------------------------------------------
    def _spawn(self, index: int) -> _Worker:
        worker = _Worker(self.config, jailed=self.jailed)
        with self._lock:
            self._layers = worker.layers
            self._launchers[index] = worker.proc.pid
        with self._lock:
            self._pids[index] = worker.pid
        return worker

    def _serve(self, index: int, started: threading.Barrier) -> None:
        try:
            worker = self._spawn(index)
        except BaseException as err:  # noqa: BLE001
            self._start_errors.append(err)
            worker = None
        started.wait()
        if worker is None:
            return
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                future, (target, payload), (deadline_s, memory_mb), submitted = item
                if not future.set_running_or_notify_cancel():
                    continue
                if worker is None or not worker.alive():
                    worker = self._replace(index, worker, "restarts")
                    if worker is None:  # could not start one: fail this call, try again on the next
                        self._count_failure()
                        future.set_result(CallResult("crash", error=f"{target}: {self._spawn_error}"))
                        continue
                begin = time.perf_counter()
                try:
                    reply = worker.call(payload, deadline_s=deadline_s, memory_mb=memory_mb)
                    elapsed = time.perf_counter() - begin
                    result = self._to_result(reply, worker, target, deadline_s, memory_mb,
                                             elapsed=elapsed, queued=begin - submitted)
                except Exception as err:  # noqa: BLE001 - whatever went wrong, this thread must keep serving
                    self._count_failure()
                    result = CallResult("crash", error=f"{target}: the pool failed to run the call: "
                                                       f"{type(err).__name__}: {err}")
                if result.outcome in ("timeout", "memory", "crash"):
                    worker.kill()  # before answering, so the caller never sees a straggler
                future.set_result(result)
                if result.outcome in ("timeout", "memory", "crash"):
                    worker = self._replace(index, worker, "restarts")
                elif worker.tasks_done >= self.config.max_tasks_per_worker or worker.bloated():
                    worker = self._replace(index, worker, "recycled", graceful=True)
        finally:
            if worker is not None:
                worker.retire()
            with self._lock:
                self._pids.pop(index, None)
                self._launchers.pop(index, None)

    def _replace(self, index: int, worker: _Worker | None, counter: str, graceful: bool = False) -> _Worker | None:
        """A fresh worker in slot `index`, or None when one cannot be started (reason in _spawn_error)."""
        if worker is not None:
            worker.retire() if graceful else worker.kill()
        with self._lock:
            self._counts[counter] += 1
            self._pids.pop(index, None)
            self._launchers.pop(index, None)
        try:
            return self._spawn(index)
        except Exception as err:  # noqa: BLE001 - e.g. fork failing under memory pressure
            self._spawn_error = f"could not start a verifier worker: {err}"
            return None

    def _count_failure(self) -> None:
        with self._lock:
            self._counts["calls"] += 1
            self._counts["crashes"] += 1

    def _to_result(self, reply, worker: _Worker, target: str, deadline_s: float, memory_mb: int,
                   *, elapsed: float, queued: float) -> CallResult:
        if reply == "timeout":
            outcome, error = "timeout", f"{target}: no result within the {deadline_s:g} s deadline"
        elif reply == "memory":
            outcome, error = "memory", f"{target}: exceeded the {memory_mb} MB memory cap"
        elif reply == "crash":
            code = worker.proc.wait(timeout=5.0) if worker.proc.poll() is None else worker.proc.returncode
            # A SIGKILL nobody in the pool sent is the kernel's OOM killer (137: through the jail's reaper); 101 is
            # Z3's own exit when its memory_max_size is exceeded (ERR_MEMOUT)
            outcome = "memory" if code in (-signal.SIGKILL, 128 + signal.SIGKILL, Z3_MEMOUT_EXIT) else "crash"
            error = f"{target}: worker died with exit status {code}" + (
                " (Z3 ran out of memory)" if code == Z3_MEMOUT_EXIT else "")
        elif reply.get("ok"):
            outcome, error = "ok", None
        else:
            outcome, error = reply.get("kind", "error"), reply.get("error")
        counter = {"ok": "ok", "error": "errors", "timeout": "timeouts", "memory": "memory_kills",
                   "crash": "crashes"}[outcome]
        with self._lock:
            self._counts["calls"] += 1
            self._counts[counter] += 1
            self._latency_s.append(elapsed)
        value = reply.get("value") if isinstance(reply, dict) and reply.get("ok") else None
        return CallResult(outcome=outcome, value=value, error=error, elapsed_s=elapsed,
                          queued_s=queued, worker_pid=worker.pid)
