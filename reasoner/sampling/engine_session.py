"""Multi-turn sessions on the rollout engine: KV continuation over the paged cache.

    session = engine.start(prompts, params, max_len=1024, reserve=64)   # RolloutEngine.start
    first = session.run()                                  # e.g. stops on "</tool_call>"
    session.extend({row: tool_response_ids})               # written after the row's history
    second = session.run()                                 # resumes from the existing cache
    session.close()                                        # frees the rows' slots and blocks

The interface and semantics are the static `session.Session`'s: row b = sample b % n of prompt b // n; `run`
returns this turn's completions of the active rows in row order; `extend` writes each row's last drawn token
(never in the cache) and its appended ids after its history, and the row's first new token is drawn from the last
appended token's logits with `fold_in(row key, position)`, the static path's key scheme, so greedy tokens and
sampled draws agree with the static Session's up to float32 rounding of the logits (tested); the same errors.

How it runs on the engine: `start` admits every row at once (a session needs B = P x n slots; the engine's
slots grow to B when it has fewer), each row reserving blocks for its whole `max_len` (the prompt's full blocks
shared by its n samples, as for `generate`), so a continuation never runs out of blocks. A row that finishes a
turn is parked (done on the device; its slot, blocks and cache kept; see `scheduler`) instead of freed; decode
chunks run the active rows only. `extend` is one jitted multi-token paged forward over the continuing slots
(`paged_device.extend_slots`): the history is never prefilled again. A row stopped by a stop string keeps the
tokens after it in its blocks, past its length: the next `extend` overwrites them, and attention never reads a
position past the query's. `reserve` has no memory to size here (the blocks are reserved at `start`); as for
Session, reserve >= 1 is what allows `extend`.

While a session is open the engine refuses `generate`, `submit` and a second `start` (RuntimeError); `close()`
(or the session's garbage collection, or leaving a `with` block) frees its slots and blocks.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import jax
import numpy as np

from reasoner.sampling import paged_device as dev
from reasoner.sampling.buckets import bucket_length
from reasoner.sampling.params import SamplingParams, check_request
from reasoner.sampling.results import Completion
from reasoner.sampling.scheduler import Distribution, RolloutRequest
from reasoner.sampling.stops import RowText, decode


class EngineSession:
    """A batch of rows generated turn by turn on a `RolloutEngine`, each row in its own slot (module docstring)."""

    def __init__(self, engine, prompts, params: SamplingParams, *, max_len: int | None, reserve: int):
        engine._refuse_during_session("start")
        if engine.sched.rows or engine.sched.queue:
            raise RuntimeError("start: the engine is running submitted requests; collect() them first")
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params: expected SamplingParams, got {type(params).__name__}")
        if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
            raise ValueError(f"reserve={reserve!r}: expected an int >= 0")
        if not isinstance(prompts, (list, tuple)):
            raise ValueError(f"prompts: expected a list of token-id lists or strings, got {type(prompts).__name__}")
        prompts = [engine._encode(p) if isinstance(p, str) else p for p in prompts]
        if max_len is None:
            max_len = bucket_length(max((len(p) for p in prompts), default=1) + params.max_new_tokens)
        rows = check_request(prompts, params, vocab_size=engine.cfg.vocab_size, max_len=max_len,
                             tokenizer=engine.tokenizer, owner="RolloutEngine")
        n = params.n
        B = len(rows) * n
        if B > engine.slots:
            engine._grow_slots(B)
        dist = Distribution.of(params, engine._eos(params))
        reqs = [RolloutRequest(request_id=next(engine._ids), prompt=list(p), params=params, distribution=dist,
                               capacities=(max_len,) * n, budgets=(params.max_new_tokens,) * n, prompt_index=i,
                               holds_slots=True, results=[None] * n) for i, p in enumerate(rows)]
        if engine.fixed_blocks is not None:
            need = sum(engine.sched.blocks_for(r) for r in reqs)
            if need > engine.fixed_blocks - 1:
                raise ValueError(f"session of {B} rows up to max_len={max_len} needs {need} blocks; the pool has "
                                 f"{engine.fixed_blocks - 1}")
        engine.sched.queue.extend(reqs)
        try:
            engine._admit()
            if engine.sched.queue:  # cannot happen: the slots and the pool were sized for every row
                raise RuntimeError(f"start: {len(engine.sched.queue)} of {len(reqs)} prompts found no room")
        except BaseException:  # leave the engine idle, not holding rows that no session owns
            engine.sched.queue.clear()
            for slot in list(engine.sched.rows):
                engine.sched.finish_row(slot)
            engine.state = None
            raise
        self.engine, self.params, self.n, self.reserve, self.max_len = engine, params, n, reserve, max_len
        self.requests = reqs
        self.slot_of = np.zeros(B, np.int64)
        for slot, row in engine.sched.rows.items():
            self.slot_of[row.request.prompt_index * n + row.sample] = slot
        self.history: list[list[int]] = [list(r) for r in rows for _ in range(n)]
        self.active = np.ones(B, bool)  # rows taking part in the current turn
        self.last_turn: list[Completion | None] = [None] * B
        self.closed = False

    @property
    def batch(self) -> int:
        return len(self.history)

    def run(self, *, on_text: Callable[[int, str], None] | None = None, chunk_steps: int | None = None,
            on_chunk: Callable[[int], None] | None = None) -> list[Completion]:
        """Decodes until every active row finishes; returns this turn's completions of the active rows.

        on_text(row, delta): newly stable text (streaming). on_chunk(new_tokens): progress. chunk_steps: decode
        steps between host checks (default: the engine's)."""
        self._check_open("run")
        eng, params, tok = self.engine, self.params, self.engine.tokenizer
        watch = bool(params.stop) or on_text is not None
        if watch and tok is None:
            raise ValueError("streaming text or stop strings need a tokenizer")
        rows = [int(b) for b in np.flatnonzero(self.active)]
        for b in rows:
            row = eng.sched.rows[int(self.slot_of[b])]
            row.text, row.seen = (RowText(tok, params.stop) if watch else None), 0
            row.request.results[row.sample] = None
        if on_text is not None:
            n = self.n
            for req in self.requests:  # the engine streams (sample, delta) per request; the session, (row, delta)
                req.on_text = (lambda i: lambda j, delta: on_text(i * n + j, delta))(req.prompt_index)
        seen = {b: 0 for b in rows}
        try:
            eng._harvest()  # rows may finish on their first token
            self._progress(rows, seen, on_chunk)
            while any(int(self.slot_of[b]) not in eng.sched.parked for b in rows):
                eng._decode_chunk(chunk_steps)
                eng._harvest()
                self._progress(rows, seen, on_chunk)
        finally:
            for req in self.requests:
                req.on_text = None
        out = []
        for b in rows:
            comp = self.requests[b // self.n].results[b % self.n]
            self.history[b].extend(int(t) for t in comp.tokens)
            self.last_turn[b] = comp
            out.append(comp)
        self.active[:] = False
        return out

    def _progress(self, rows, seen: dict[int, int], on_chunk) -> None:
        if on_chunk is None:
            return
        count = np.asarray(jax.device_get(self.engine.state.count_S))
        for b in rows:
            c = int(count[int(self.slot_of[b])])
            if c > seen[b]:
                on_chunk(c - seen[b])
                seen[b] = c

    def extend(self, appends: Mapping[int, Sequence[int]], *, max_new_tokens: int | None = None) -> None:
        """Appends token ids to finished rows and starts their next turn (run() decodes it): the ids are written
        after each row's history in one paged forward; the rows' first new tokens are drawn from the last appended
        token's logits."""
        from reasoner.sampling.session import checked_appends

        index = [len(h) - 1 for h in self.history]  # the cache holds the history but its last drawn token
        N, pieces = checked_appends(self, appends, max_new_tokens, vocab_size=self.engine.cfg.vocab_size, index=index,
                                    max_len=self.max_len)
        slot = {b: int(self.slot_of[b]) for b in pieces}
        self.engine._continue({slot[b]: p for b, p in pieces.items()},
                              {slot[b]: len(self.history[b]) - 1 for b in pieces}, N)
        for b, p in pieces.items():
            self.history[b].extend(p[1:])
            self.active[b] = True
        self.params = self.params.replace(max_new_tokens=N)

    def row_text(self, b: int) -> str:
        """Decoded full history of row b (prompt and every turn), for debugging and tools."""
        return decode(self.engine.tokenizer, self.history[b])

    def close(self) -> None:
        """Frees the rows' slots and blocks (idempotent); the engine then takes other work."""
        if getattr(self, "closed", True):
            return
        self.closed = True
        eng = self.engine
        slots = [int(s) for s in self.slot_of]
        decoding = [s for s in slots if s in eng.sched.rows and s not in eng.sched.parked]  # a run() that raised
        for s in slots:
            if s in eng.sched.rows:
                eng.sched.finish_row(s)
        if decoding and eng.state is not None:
            mask = np.zeros(eng.slots, bool)
            mask[decoding] = True
            eng.state = dev.retire(eng.state, mask)
        eng._session_ref = None

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise RuntimeError(f"{what}: this session is closed")

    def __enter__(self) -> "EngineSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer (e.g. at interpreter exit)
            pass
