"""The verifier pool: every outcome (ok, error, timeout, memory, crash), kill escalation, recycling,
backpressure, futures, counters, no JAX in workers and no process left behind."""

import queue
import time

import pytest

from reasoner.verifiers.pool import VerifierPool, descendant_pids

PROBE = "reasoner.verifiers.probe_tasks:"


def _wait_until(predicate, timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(workers=2, deadline_s=2.0, memory_mb=128, max_tasks_per_worker=1000) as p:
        yield p


def test_ok_and_error_results(pool):
    result = pool.submit(PROBE + "echo", {"a": [1, 2]}).result()
    assert result.ok and result.value == {"a": [1, 2]}
    bad = pool.submit(PROBE + "fail", "boom").result()
    assert bad.outcome == "error" and "ValueError: boom" in bad.error
    missing = pool.submit("reasoner.verifiers.probe_tasks:no_such_function").result()
    assert missing.outcome == "error" and "no_such_function" in missing.error
    malformed = pool.submit("not-a-target").result()
    assert malformed.outcome == "error" and "package.module:function" in malformed.error


def test_worker_never_imports_jax():
    import jax  # noqa: F401  - the parent has JAX loaded; the worker must not inherit it

    with VerifierPool(workers=1) as p:
        modules = p.submit(PROBE + "loaded_modules").result().value
        z3_modules = p.submit("reasoner.verifiers.z3_runner:run_script", "(check-sat)").result()
        after = p.submit(PROBE + "loaded_modules").result().value
    assert z3_modules.ok and z3_modules.value.sat_result == "sat"
    for forbidden in ("jax", "jaxlib", "flax", "transformers", "torch", "numpy"):
        assert forbidden not in modules and forbidden not in after, forbidden
    assert "z3" in after


@pytest.mark.parametrize("task,args,outcome", [
    ("sleep", (30,), "timeout"),
    ("ignore_sigterm_and_sleep", (30,), "timeout"),
    ("allocate", (600,), "memory"),
    ("segfault", (), "crash"),
    ("exit_with", (101,), "memory"),  # Z3's exit status when it exceeds memory_max_size
    ("exit_with", (3,), "crash"),
    ("fork_sleeper", (30,), "timeout"),
])
def test_hostile_tasks_fail_alone_within_deadline_and_leave_no_process(pool, task, args, outcome):
    before = descendant_pids()
    start = time.monotonic()
    result = pool.submit(PROBE + task, *args).result()
    elapsed = time.monotonic() - start
    assert result.outcome == outcome, result
    assert elapsed < pool.config.deadline_s + 1.0, elapsed
    _wait_until(lambda: result.worker_pid not in pool.worker_pids()  # replacement registered
                and len(pool.worker_pids()) == pool.config.workers)
    after = descendant_pids()
    assert result.worker_pid not in after
    assert not (after - before - set(pool.worker_pids())), "a process was left behind"
    assert pool.submit(PROBE + "echo", 7).result().value == 7


def test_crash_fails_only_its_own_call(pool):
    futures = [pool.submit(PROBE + "echo", i) for i in range(3)]
    futures.append(pool.submit(PROBE + "segfault"))
    futures += [pool.submit(PROBE + "echo", i) for i in range(3, 6)]
    outcomes = [f.result().outcome for f in futures]
    assert outcomes == ["ok"] * 3 + ["crash"] + ["ok"] * 3


def test_recycling_after_n_tasks():
    with VerifierPool(workers=1, max_tasks_per_worker=3) as p:
        pids = [p.submit(PROBE + "pid").result().value for _ in range(7)]
        assert p.stats()["recycled"] == 2
    assert pids[0] == pids[1] == pids[2] != pids[3]
    assert pids[3] == pids[4] == pids[5] != pids[6]


def test_bounded_queue_backpressure():
    with VerifierPool(workers=1, queue_size=2, deadline_s=5.0) as p:
        first = p.submit(PROBE + "sleep", 0.8)
        _wait_until(first.running)  # the worker has taken `first`; the queue is empty again
        p.submit(PROBE + "echo", 1)
        p.submit(PROBE + "echo", 2)
        with pytest.raises(queue.Full):
            p.submit(PROBE + "echo", 3, block=False)
        start = time.monotonic()
        late = p.submit(PROBE + "echo", 4)  # blocks until the worker frees a slot
        assert time.monotonic() - start > 0.3
        assert first.result().ok and late.result().value == 4


def test_async_batch_returns_futures_at_once_and_uses_every_worker():
    with VerifierPool(workers=2, deadline_s=10.0) as p:
        futures = p.submit_batch(PROBE + "sleep_then_pid", [(1.0,), (1.0,)])
        assert not any(f.done() for f in futures)  # submit does not wait: the caller keeps working
        pids = {f.result().value for f in futures}
        assert pids == set(p.worker_pids())  # the two calls ran side by side on both workers


def test_counters_and_latency():
    with VerifierPool(workers=1, deadline_s=1.0, memory_mb=64) as p:
        p.map(PROBE + "echo", [(i,) for i in range(5)])
        p.submit(PROBE + "fail", "x").result()
        p.submit(PROBE + "sleep", 5).result()
        p.submit(PROBE + "allocate", 400).result()
        p.submit(PROBE + "segfault").result()
        stats = p.stats()
    assert {k: stats[k] for k in ("calls", "ok", "errors", "timeouts", "memory_kills", "crashes")} == {
        "calls": 9, "ok": 5, "errors": 1, "timeouts": 1, "memory_kills": 1, "crashes": 1}
    assert stats["restarts"] == 3
    assert 0 < stats["latency_p50_ms"] <= stats["latency_p95_ms"]
    assert stats["latency_p95_ms"] >= 900  # the timed-out call is in the tail


def test_close_leaves_no_worker():
    before = descendant_pids()
    p = VerifierPool(workers=2)
    pids = set(p.worker_pids())
    assert pids <= descendant_pids()
    p.close()
    assert not (pids & descendant_pids())
    assert descendant_pids() <= before
    with pytest.raises(RuntimeError, match="closed"):
        p.submit(PROBE + "echo", 1)


def test_a_worker_that_cannot_be_restarted_fails_calls_cleanly(monkeypatch):
    from reasoner.verifiers import pool as pool_module

    with VerifierPool(workers=1, deadline_s=2.0) as p:
        real_worker = pool_module._Worker
        monkeypatch.setattr(pool_module, "_Worker", lambda config, **kw: (_ for _ in ()).throw(OSError("fork failed")))
        crashed = p.submit(PROBE + "segfault").result()
        failed = p.submit(PROBE + "echo", 1).result()
        assert crashed.outcome == "crash"
        assert failed.outcome == "crash" and "could not start a verifier worker: fork failed" in failed.error
        monkeypatch.setattr(pool_module, "_Worker", real_worker)
        assert p.submit(PROBE + "echo", 2).result().value == 2  # recovers once workers start again
        assert p.stats()["crashes"] == 2


def test_bad_pool_inputs_are_named(pool):
    with pytest.raises(ValueError, match="PoolConfig.workers must be an int >= 1, got 0"):
        VerifierPool(workers=0)
    with pytest.raises(ValueError, match="PoolConfig.memory_mb must be an int >= 1, got 0"):
        VerifierPool(memory_mb=0)
    with pytest.raises(ValueError, match="PoolConfig.deadline_s must be a number > 0, got -5"):
        VerifierPool(deadline_s=-5)
    with pytest.raises(ValueError, match="PoolConfig.isolate must be one of"):
        VerifierPool(isolate="maybe")
    with pytest.raises(TypeError, match="arguments of reasoner.verifiers.probe_tasks:echo must be picklable"):
        pool.submit(PROBE + "echo", lambda: None)
    assert pool.submit(PROBE + "echo", 3).result().value == 3  # the pool is unaffected
    for bad in (float("nan"), float("inf"), 0, -1.0, True):  # a NaN deadline killed the thread serving the call
        with pytest.raises(ValueError, match=r"deadline_s=.*expected a finite number > 0"):
            pool.submit(PROBE + "echo", 1, deadline_s=bad)
    with pytest.raises(ValueError, match=r"memory_mb=nan"):
        pool.submit(PROBE + "echo", 1, memory_mb=float("nan"))


def test_an_error_inside_the_pool_fails_its_call_and_the_thread_goes_on(monkeypatch):
    """Whatever raises while a pool thread runs a call (here the worker's own call method) answers that call with
    a crash; the thread keeps serving, so no later call waits forever on a dead thread."""
    from reasoner.verifiers import pool as pool_module

    with VerifierPool(workers=1, deadline_s=2.0) as p:
        real_call = pool_module._Worker.call
        calls = []

        def flaky(self, payload, **limits):
            calls.append(1)
            if len(calls) == 1:
                raise ValueError("Invalid value NaN (select)")
            return real_call(self, payload, **limits)

        monkeypatch.setattr(pool_module._Worker, "call", flaky)
        first = p.submit(PROBE + "echo", 1).result(timeout=30)
        assert first.outcome == "crash" and "the pool failed to run the call: ValueError" in first.error
        assert p.submit(PROBE + "echo", 2).result(timeout=30).value == 2
