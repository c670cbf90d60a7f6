"""Collects requests that arrive together and decodes them as shared batches, on one worker thread.

HTTP handler threads `submit` a `GenRequest` and wait on the returned `Job`. The worker takes the first
pending job, then keeps collecting for `wait_s` (or until `max_rows` rows, counting each request's n);
a job that would overflow the batch waits for the next one. The collected jobs are split by
`backend.batch_key` and each group is one `backend.generate` call, logged as one line
`batch of K requests, R rows` (plus tokens and seconds), so a reader of the log sees what was shared.

An exception inside one group fails only that group's jobs (the handler answers 500) and the worker goes on.
`close()` stops taking jobs, finishes the queued ones, and joins the worker.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Sequence

from reasoner.sampling import Completion
from reasoner.serve.backend import Backend, GenRequest

log = logging.getLogger("reasoner.serve")


class ServerClosing(RuntimeError):
    """The server is shutting down and takes no new work."""


class Cancelled(RuntimeError):
    """The request's client went away: its job was dropped before it finished."""


class Job:
    """One submitted request: `wait()` returns its completions or raises the batch's error. `cancel()` (from the
    handler whose client went away) asks the worker to drop it: a queued job is never decoded, a job running on
    the engine gives its slots back at the next step (the static batcher finishes a batch already decoding)."""

    def __init__(self, request: GenRequest):
        self.request = request
        self._done = threading.Event()
        self._cancelled = threading.Event()
        self._result: list[Completion] | None = None
        self._error: BaseException | None = None

    def finish(self, result: list[Completion] | None = None, error: BaseException | None = None) -> None:
        self._result, self._error = result, error
        self._done.set()

    def cancel(self) -> None:
        self._cancelled.set()

    def drop(self) -> None:
        """Finishes a cancelled job (the worker's side of `cancel`): its waiter, if any, gets `Cancelled`."""
        self.finish(error=Cancelled("the client went away"))

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait_done(self, timeout: float) -> bool:
        """Whether the job finished within `timeout` seconds (its result is then `wait()`'s)."""
        return self._done.wait(timeout)

    def wait(self, timeout: float | None = None) -> list[Completion]:
        if not self._done.wait(timeout):
            raise TimeoutError("generation did not finish in time")
        if self._error is not None:
            raise self._error
        return self._result


class JobQueue:
    """What both workers share: handler threads `submit` jobs into a queue that one worker thread (`_run`) drains;
    `close()` queues a sentinel, after which submissions are refused, and joins the worker once it has finished
    the queued work. A subclass sets `max_rows` and calls `_start_worker`."""

    max_rows: int

    broken: BaseException | None = None  # set when the worker cannot go on: every job is then refused

    def _start_worker(self, name: str) -> None:
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        raise NotImplementedError

    def submit(self, request: GenRequest) -> Job:
        if request.rows > self.max_rows:
            raise ValueError(f"n={request.rows}: expected at most {self.max_rows} (the server's rows per batch)")
        job = Job(request)
        with self._lock:  # no job slips in after close() has queued its sentinel
            if self.broken is not None:
                raise ServerClosing(f"the server's generator is down ({type(self.broken).__name__}: {self.broken})")
            if self._closing.is_set():
                raise ServerClosing("the server is shutting down")
            self._queue.put(job)
        return job

    def _give_up(self, err: BaseException) -> None:
        """The worker stops for good: later submissions are refused, and every queued job fails with `err`."""
        with self._lock:
            self.broken = err
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.finish(error=err)

    def close(self, timeout: float | None = None) -> None:
        with self._lock:
            if not self._closing.is_set():
                self._closing.set()
                self._queue.put(None)
        self._thread.join(timeout)


class Batcher(JobQueue):
    """See module docstring. max_rows: rows (samples) per batch; wait_s: how long a batch stays open."""

    def __init__(self, backend: Backend, *, max_rows: int, wait_s: float):
        if max_rows < 1 or wait_s < 0:
            raise ValueError(f"Batcher: max_rows={max_rows} (expected >= 1), wait_s={wait_s} (expected >= 0)")
        self.backend, self.max_rows, self.wait_s = backend, int(max_rows), float(wait_s)
        self.batches = 0  # groups decoded so far (for tests and logs)
        self._start_worker("reasoner-serve-batcher")

    def _collect(self, first: Job, carry: list[Job]) -> tuple[list[Job], bool]:
        """(jobs of this batch, whether the sentinel was seen); overflow goes to `carry`."""
        jobs, rows = [first], first.request.rows
        deadline = time.monotonic() + self.wait_s
        while rows < self.max_rows:
            left = deadline - time.monotonic()
            try:
                job = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            if rows + job.request.rows > self.max_rows:
                carry.append(job)
                break
            jobs.append(job)
            rows += job.request.rows
        return jobs, False

    def _run(self) -> None:
        carry: list[Job] = []
        stopping = False
        while True:
            if carry:
                first = carry.pop(0)
            elif stopping:
                return
            else:
                first = self._queue.get()
                if first is None:
                    stopping = True
                    continue
            if stopping:
                jobs = [first]
            else:
                jobs, saw_end = self._collect(first, carry)
                stopping = stopping or saw_end
            self._decode(jobs)

    def _decode(self, jobs: Sequence[Job]) -> None:
        groups: dict = {}
        for job in jobs:
            if job.cancelled:  # its client went away while it queued
                job.drop()
                continue
            try:
                key = self.backend.batch_key(job.request)
            except Exception as err:  # noqa: BLE001 - a bad request fails alone
                job.finish(error=err)
                continue
            groups.setdefault(key, []).append(job)
        for group in groups.values():
            start = time.perf_counter()
            rows = sum(j.request.rows for j in group)
            try:
                results = self.backend.generate([j.request for j in group])
                if len(results) != len(group):
                    raise RuntimeError(f"backend returned {len(results)} results for {len(group)} requests")
            except Exception as err:  # noqa: BLE001 - one failed batch must not take the server down
                log.exception("batch of %d requests, %d rows failed: %s", len(group), rows, err)
                for job in group:
                    job.finish(error=err)
                continue
            finally:
                self.batches += 1
            tokens = sum(c.num_tokens for r in results for c in r)
            log.info("batch of %d requests, %d rows: %d tokens in %.2f s", len(group), rows, tokens,
                     time.perf_counter() - start)
            for job, result in zip(group, results):
                job.finish(result=result)
