"""Continuous batching for the server: one worker thread drives the rollout engine step by step (`--engine paged`).

HTTP handler threads `submit` a `GenRequest` and wait on the returned `Job` (the same `Job` as the static
`Batcher`'s). The worker hands every request that has arrived to the engine between two engine steps, so a
request starts decoding within one decode chunk of its arrival, beside the rows already running, and a finished
row's slot goes to the next row at once; nothing waits for a batch to fill or for the longest row of a batch to end
(the static `Batcher` collects for `batch_wait_ms`, then decodes the group to its end while newcomers queue).

Per-request settings are the engine's: budgets, stop strings, n and seeds differ freely between running rows; rows
running together share one sampling distribution (greedy, or one temperature / top-p / top-k), and a request with
another one is admitted when the running rows have drained (`reasoner.sampling.scheduler`). Each request is
submitted with prompt index 0, so its rows draw with the keys (seed, 0, sample): a seeded request returns the same
samples whatever runs beside it, as `Sampler.generate([prompt], params)` alone would. Streamed text comes from the
engine's `on_text` after each step.

The block pool is fixed at start: `slots x ceil(max_len / block_size)` blocks (plus the null block), so a request
that finds free slots always finds its blocks and memory never grows while serving.

A request whose client goes away (`Job.cancel`, from the HTTP handler) leaves the engine before the next step.

Errors: a request the engine refuses fails alone (the handler answers 500 with the reason); an exception inside a
step fails the requests then in the engine, which is rebuilt, and the worker goes on; if the rebuild fails too,
queued requests fail, new ones are refused (503) and `/health` says so, instead of every request waiting forever.
`close()` stops taking jobs, finishes the queued and running ones, and joins the worker. The log gets a line per
finished request (`request of R rows: T tokens in S s`, from its submission) and, every 10 s of work, one with the
running rows, queued requests and tokens per second since the last such line.
"""

from __future__ import annotations

import logging
import queue
import secrets
import time
from typing import Callable

from reasoner.serve.backend import GenRequest
from reasoner.serve.batcher import Job, JobQueue

log = logging.getLogger("reasoner.serve")
STATS_EVERY_S = 10.0


class EngineLoop(JobQueue):
    """The server's batcher and backend over a `RolloutEngine` (see module docstring).

    make_engine: builds a fresh engine (at start, and after a failed step). max_len: positions per row (prompt +
    completion), the limit `ChatService` checks requests against.
    """

    def __init__(self, make_engine: Callable[[], object], *, max_len: int):
        self._make_engine = make_engine
        self.engine = make_engine()
        if self.engine.tokenizer is None:
            raise ValueError("EngineLoop: the engine needs a tokenizer (text, stop strings)")
        self.max_len = int(max_len)
        self.vocab_size = int(self.engine.cfg.vocab_size)
        self.max_rows = int(self.engine.slots)
        self.steps = 0  # engine iterations so far (tests, logs)
        self.most_running = 0  # the most requests that were in the engine at once
        self._live: dict[int, tuple[Job, float]] = {}  # engine request id -> (job, submit time)
        self._start_worker("reasoner-serve-engine")

    # ---------------------------------------------------------------------------------------- the worker
    def _run(self) -> None:
        stopping = False
        window_start, window_tokens = time.monotonic(), 0
        while True:
            # Block only when nothing runs; otherwise take whatever has arrived and step.
            while True:
                try:
                    job = self._queue.get(block=not self._live and not stopping)
                except queue.Empty:
                    break
                if job is None:
                    stopping = True
                    continue
                self._start(job)
            self._drop_cancelled()
            if not self._live:
                if stopping:
                    return
                continue
            try:
                finished = self.engine.step()
            except Exception as err:  # noqa: BLE001 - one failed step must not take the server down
                log.exception("engine step failed with %d requests in it: %s", len(self._live), err)
                for job, _ in self._live.values():
                    job.finish(error=err)
                self._live.clear()
                try:
                    self.engine = self._make_engine()
                except Exception as rebuild:  # noqa: BLE001 - no engine: refuse work rather than hang it
                    log.exception("engine could not be rebuilt; the server refuses requests from now on")
                    self._give_up(rebuild)
                    return
                continue
            self.steps += 1
            for rid, completions in finished.items():
                job, began = self._live.pop(rid)
                tokens = sum(c.num_tokens for c in completions)
                window_tokens += tokens
                log.info("request of %d rows: %d tokens in %.2f s", len(completions), tokens,
                         time.monotonic() - began)
                job.finish(result=list(completions))
            now = time.monotonic()
            if now - window_start >= STATS_EVERY_S:
                log.info("engine: %d running rows, %d queued requests, %.1f tokens/s", len(self.engine.sched.rows),
                         len(self.engine.sched.queue), window_tokens / (now - window_start))
                window_start, window_tokens = now, 0

    def _drop_cancelled(self) -> None:
        """Requests whose clients went away leave the engine now: their slots and blocks serve the next ones."""
        for rid, (job, began) in list(self._live.items()):
            if job.cancelled:
                self.engine.cancel(rid)
                del self._live[rid]
                log.info("request dropped after %.2f s: its client went away", time.monotonic() - began)
                job.drop()

    def _start(self, job: Job) -> None:
        if job.cancelled:
            job.drop()
            return
        r = job.request
        params = r.params if r.seeded else r.params.replace(seed=secrets.randbelow(2**32))
        try:
            rid = self.engine.submit(list(r.prompt_ids), params, prompt_index=0, max_len=self.max_len,
                                     on_text=r.on_text)
        except Exception as err:  # noqa: BLE001 - a request the engine refuses fails alone
            job.finish(error=err)
            return
        self._live[rid] = (job, time.monotonic())
        self.most_running = max(self.most_running, len(self._live))


def server_engine(model, tokenizer, *, slots: int, max_len: int, block_size: int = 16, chunk_steps: int = 4,
                  speculate: int = 0):
    """A `RolloutEngine` for `EngineLoop`: `slots` decode slots and a fixed pool with room for every slot's whole
    row (see module docstring). chunk_steps 4 (the engine's default is 8): a server's rows end at many different
    budgets, and a row that ends inside a chunk idles to the chunk's end while its client waits."""
    from reasoner.sampling.rollout_engine import RolloutEngine

    blocks = slots * -(-int(max_len) // block_size) + 1
    return RolloutEngine(model, tokenizer, slots=slots, block_size=block_size, num_blocks=blocks, max_len=max_len,
                         chunk_steps=chunk_steps, speculate=speculate)
