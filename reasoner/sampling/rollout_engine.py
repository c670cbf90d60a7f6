"""The rollout engine: continuous batching over a paged KV cache.

    engine = RolloutEngine(model, tokenizer, slots=64)
    completions = engine.generate(prompts, SamplingParams(max_new_tokens=64, temperature=0.7, n=4))

    # request level (e.g. a server, or rollouts with their own budgets):
    ids = [engine.submit(p, SamplingParams(max_new_tokens=m, n=4, seed=s)) for p, m, s in work]
    results = engine.collect()            # {request id: [Completion] * n}, runs until all finished
    # or engine.step() repeatedly: one iteration, returns the requests that finished in it

    # multi-turn (tool calls): the static Session's interface on the engine, see `engine_session`
    session = engine.start(prompts, params, max_len=1024, reserve=64)
    first = session.run(); session.extend({row: tool_response_ids}); second = session.run(); session.close()

`generate` is a drop-in for `Sampler.generate`: same arguments, same `Completion`s in the same row
order (prompt-major, then sample), the same PRNG keys per (prompt, sample, position), so greedy
tokens and sampled draws agree with the static sampler's up to float32 rounding of the logits.

How it runs: a fixed number of decode slots. Each iteration (1) admits queued requests into free
slots (`Scheduler.admit`: n slots and the blocks of their reservation) and prefills them in one
call, (2) runs a decode chunk of `chunk_steps` steps over the running slots only (padded to a
`buckets.batch_bucket`: when the queue is empty and rows finish, the batch shrinks, so the long tail
of a rollout decodes its few long rows, not every slot), attending over their live blocks only,
(3) reads which rows finished (EOS, budget, capacity on the device; stop strings on the host),
returns their slots and blocks. A finished row's slot is therefore refilled within one chunk,
while the other rows keep decoding: no row waits for the longest row of its batch, and the
prompt's cache is never copied per sample (see `paged_cache`). The block pool is sized from the queued work when `num_blocks` is None (enough
for the first `slots` rows' reservations) and grows only while no row runs.

Multi-turn sessions (`start`): KV continuation on the paged cache. A session's rows are admitted
together, each in its own slot with blocks reserved for its whole `max_len`; between turns a row is
parked (slot, blocks and cache kept) and `extend` writes the appended tokens through the block table in
one jitted multi-token forward, so the history is never prefilled again; draws agree with the static
`Session`'s (same keys per row and position). So every caller runs here on one device: `generate` and
`submit` (evaluation, the server, single-turn GRPO), sessions (multi-turn GRPO rollouts through
`agents.multiturn.rollout`, the SMT tool loop's `agents.sampler_policy.SamplerPolicy`).

Speculative decoding (`speculate=k`, off by default): a decode step may verify up to k prompt-lookup draft tokens per
row in one forward and keep those that equal what it draws (`speculative`): the same tokens, fewer steps where outputs
repeat their prompt or themselves.

On a CPU in float32 the device functions call two native kernels (`native`): the paged attention, and a small-row
matmul over a copy of the projections and head packed in column panels (`packed_weights.for_decode`, made when the
engine gets weights: at construction and at each assignment of `engine.params`, e.g. after a GRPO update).

Limits today: one device (the static `Sampler` shards params and cache over a mesh; the pool is not
sharded yet, so callers on a multi-device mesh keep the static Sampler); a request's n samples are
admitted together (n <= slots); blocks are reserved for a row's whole budget at admission (a session
row's: its whole max_len), so nothing is ever preempted; a session holds the engine (no other work until
it is closed) and needs a slot per row (`start` grows the slots when idle).
"""

from __future__ import annotations

import itertools
import weakref
from typing import Callable

import jax
import numpy as np
from flax import nnx

from reasoner.sampling import engine as static_engine
from reasoner.sampling import packed_weights
from reasoner.sampling import paged_device as dev
from reasoner.sampling.buckets import batch_bucket, bucket_length, right_pad
from reasoner.sampling.paged_cache import BlockAllocator, empty_pools, pool_bytes, prompt_writes
from reasoner.sampling.params import SamplingParams, check_request
from reasoner.sampling.processors import row_keys
from reasoner.sampling.results import Completion
from reasoner.sampling.scheduler import Distribution, RolloutRequest, Row, Scheduler
from reasoner.sampling.stops import RowText, decode

STOP = 3
_REASONS = {static_engine.EOS: "eos", static_engine.LENGTH: "length", STOP: "stop"}
DEFAULT_MAX_LEN = 2048


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def on_one_device(model) -> bool:
    """Whether every parameter of `model` lives on one device: where the engine can run it (its block pool is not
    sharded; a sharded model keeps the static `Sampler`)."""
    devices = set()
    for leaf in jax.tree.leaves(nnx.state(model)):
        devices |= set(getattr(leaf, "devices", lambda: set())())
    return len(devices) <= 1


class RolloutEngine:
    """Continuous-batching generation over one model (any `Decoder`, with or without LoRA).

    slots: rows decoded at once. block_size: positions per KV block. num_blocks: pool size
    (None: sized from the queued work). chunk_steps: decode steps between host checks (a finished
    row waits at most this many steps for its slot to be refilled). max_len: the longest row
    (prompt + tokens) of a request that does not name its own `max_len`. speculate: draft tokens a decode
    step may verify per row by prompt lookup (0: off; see `speculative`: the same tokens, fewer steps where
    outputs repeat their prompt or themselves). ngram: (smallest, largest) n-gram the lookup matches; the default
    (2, 3) leaves out single-token matches, which on chat answers that do not repeat drafted often and were mostly
    rejected (SmolLM2, batch 1, one such answer: 24.5 tok/s with (1, 3), 31.0 with (2, 3), 32.8 without speculation).
    draft_budget: tokens one verification pass may feed in all: a chunk of A slots drafts
    min(speculate, draft_budget // A - 1) tokens per row (none when that is 0), because a pass over many rows is
    compute-bound and a rejected draft costs real work there. 32 by default (SmolLM2, greedy, `bench generate`'s
    prompts, AMD EPYC 2 cores, tok/s with budgets 64 / 48 / 32 and without speculation, timed in alternation:
    4 slots 143 / 164 / 159 / 136 (8, 8, 7 drafts), 8 slots 151 / 207 / 204 / 198 (7, 5, 3), 16 slots
    165 / 194 / 223 / 236 (3, 2, 1)): a wide pass loses more than its accepted drafts gain.
    """

    def __init__(self, model, tokenizer=None, *, slots: int = 32, block_size: int = 16, num_blocks: int | None = None,
                 chunk_steps: int = 8, max_len: int = DEFAULT_MAX_LEN, speculate: int = 0,
                 ngram: tuple[int, int] = (2, 3), draft_budget: int = 32):
        for name, value, low in (("slots", slots, 1), ("block_size", block_size, 1), ("chunk_steps", chunk_steps, 1),
                                 ("max_len", max_len, 2), ("speculate", speculate, 0),
                                 ("draft_budget", draft_budget, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r}: expected an int >= {low}")
        if num_blocks is not None and (not isinstance(num_blocks, int) or num_blocks < 2):
            raise ValueError(f"num_blocks={num_blocks!r}: expected None or an int >= 2")
        if (not isinstance(ngram, tuple) or len(ngram) != 2 or not all(isinstance(g, int) for g in ngram)
                or not 1 <= ngram[0] <= ngram[1]):
            raise ValueError(f"ngram={ngram!r}: expected (smallest, largest) n-gram sizes, 1 <= smallest <= largest")
        self.speculate, self.ngram, self.draft_budget = speculate, ngram, draft_budget
        self._context = 1  # positions of each slot's tokens the device keeps (for speculation's lookup)
        self.cfg = model.cfg
        self.graphdef, self.params = nnx.split(model)  # `params` is a property: setting it drops the packed copy
        self.tokenizer = tokenizer
        self.slots, self.block_size, self.chunk_steps, self.max_len = slots, block_size, chunk_steps, max_len
        self.fixed_blocks = num_blocks
        self.sched = Scheduler(slots=slots, allocator=BlockAllocator(num_blocks or 2), block_size=block_size)
        self.state: dev.SlotState | None = None
        self._max_new = 0
        self._ids = itertools.count()
        self._finished: dict[int, RolloutRequest] = {}
        self.stats = {"prefill_calls": 0, "decode_chunks": 0, "extend_calls": 0}
        self._session_ref: weakref.ref | None = None  # the open multi-turn session, if any

    @property
    def params(self):
        """The model's weights (an `nnx.State` of the model passed in); assign new ones after a training update."""
        return self._params

    @params.setter
    def params(self, state) -> None:
        self._params = state
        self._weights = None

    def _device_weights(self):
        """(graphdef, state) the jitted functions run: `packed_weights.for_decode` of the weights, made once per
        assignment of `params` (the packed projections of the native CPU matmul, or the weights themselves)."""
        if self._weights is None:
            self._weights = packed_weights.for_decode(self.graphdef, self._params)
        return self._weights

    # ----------------------------------------------------------------------------------------- API
    def generate(self, prompts, params: SamplingParams, *, max_len: int | None = None) -> list[Completion]:
        """P prompts x n samples, in row order (see the module docstring); the engine must be idle."""
        self._refuse_during_session("generate")
        if self.sched.rows or self.sched.queue:
            raise RuntimeError("generate: the engine is running submitted requests; collect() them first")
        prompts = self._check_prompts(prompts, params, max_len=max_len)
        cap = max_len if max_len is not None else bucket_length(max(len(p) for p in prompts) + params.max_new_tokens)
        ids = [self.submit(p, params, prompt_index=i, max_len=cap) for i, p in enumerate(prompts)]
        done = self.collect()
        return [c for rid in ids for c in done[rid]]

    def submit(self, prompt, params: SamplingParams, *, prompt_index: int = 0, max_len: int | None = None,
               budgets=None, on_text: Callable[[int, str], None] | None = None) -> int:
        """Queues one prompt (token ids or a str); returns its request id. `prompt_index` enters the
        PRNG keys (sample j of a request draws with `row_keys(seed, prompt_index, j)`). `budgets`:
        optional per-sample token budgets (n ints in [1, params.max_new_tokens]) instead of
        `params.max_new_tokens` for every sample; each sample reserves blocks for its own budget.
        on_text(sample, delta): called from `step` with each sample's newly stable text (streaming; the
        deltas concatenate to a prefix of the final text, which may end in held-back characters)."""
        self._refuse_during_session("submit")
        if on_text is not None and self.tokenizer is None:
            raise ValueError("on_text: streaming text needs a tokenizer: pass one to RolloutEngine(model, tokenizer)")
        if isinstance(prompt, str):
            prompt = self._encode(prompt)
        limit = self.max_len if max_len is None else max_len
        (prompt,) = self._check_prompts([prompt], params, max_len=limit)
        if params.n > self.slots:
            raise ValueError(f"n={params.n}: a request's samples run together; expected at most slots={self.slots}")
        if budgets is None:
            budgets = (params.max_new_tokens,) * params.n
        budgets = tuple(budgets)
        if len(budgets) != params.n or any(isinstance(b, bool) or not isinstance(b, (int, np.integer)) or
                                           not 1 <= b <= params.max_new_tokens for b in budgets):
            raise ValueError(f"budgets={budgets!r}: expected n={params.n} ints in [1, {params.max_new_tokens}]")
        budgets = tuple(int(b) for b in budgets)
        req = RolloutRequest(request_id=next(self._ids), prompt=prompt, params=params,
                             distribution=Distribution.of(params, self._eos(params)),
                             capacities=tuple(min(len(prompt) + b, limit) for b in budgets), budgets=budgets,
                             prompt_index=prompt_index, on_text=on_text)
        req.results = [None] * params.n
        if self.fixed_blocks is not None and self.sched.blocks_for(req) > self.fixed_blocks - 1:
            raise ValueError(f"request of {len(prompt)} prompt tokens x n={params.n} up to {max(req.capacities)} "
                             f"positions "
                             f"needs {self.sched.blocks_for(req)} blocks; the pool has {self.fixed_blocks - 1}")
        self.sched.queue.append(req)
        return req.request_id

    def collect(self) -> dict[int, list[Completion]]:
        """Runs until every submitted request has finished; returns every request that finished since the last
        `collect` or `step` returned it (a request is returned once, then forgotten)."""
        out = self._take_finished()
        while self.sched.queue or self.sched.active:
            out.update(self.step())
        return out

    def step(self) -> dict[int, list[Completion]]:
        """One iteration (admit + prefill, one decode chunk, harvest); returns (and forgets) the requests that
        finished in it: a server that only calls `step` holds no finished request."""
        self._admit()
        if self.sched.active:
            self._harvest()  # rows may finish on their first token
        if self.sched.active:
            self._decode_chunk()
            self._harvest()
        return self._take_finished()

    def cancel(self, request_id: int) -> bool:
        """Drops a submitted request (a server's client went away): a queued one leaves the queue, a running
        one's rows stop and give their slots and blocks back before the next step; it is never returned. Returns
        whether the request was still pending or running. A session's rows are ended by `EngineSession.close`."""
        self._finished.pop(request_id, None)
        for req in list(self.sched.queue):
            if req.request_id == request_id:
                self.sched.queue.remove(req)
                return True
        slots = [slot for slot, row in self.sched.rows.items() if row.request.request_id == request_id]
        if not slots or self.sched.rows[slots[0]].request.holds_slots:
            return False
        mask = np.zeros(self.slots, bool)
        for slot in slots:
            mask[slot] = True
            self.sched.finish_row(slot)
        self.state = dev.retire(self.state, mask)  # done on the device: the next steps leave those rows alone
        return True

    def _take_finished(self) -> dict[int, list[Completion]]:
        out = {rid: req.results for rid, req in self._finished.items()}
        self._finished.clear()
        return out

    def start(self, prompts, params: SamplingParams, *, max_len: int | None = None, reserve: int = 0):
        """A multi-turn `EngineSession` (the static `Sampler.start`'s interface and draws; see
        `engine_session`): prefills the prompts into slots that the rows keep until `close()`. reserve >= 1
        allows `extend`; max_len (default: the bucket of longest prompt + max_new_tokens) bounds each row's
        prompt, turns and appended tokens, and is what each row reserves blocks for."""
        from reasoner.sampling.engine_session import EngineSession

        session = EngineSession(self, prompts, params, max_len=max_len, reserve=reserve)
        self._session_ref = weakref.ref(session)
        return session

    @property
    def kv_bytes(self) -> int:
        """Bytes of the block pool now allocated."""
        return pool_bytes(self.cfg, num_blocks=self.sched.alloc.num_blocks, block_size=self.block_size)

    # ------------------------------------------------------------------------------------ internals
    def _refuse_during_session(self, what: str) -> None:
        session = self._session_ref() if self._session_ref is not None else None
        if session is not None and not session.closed:
            raise RuntimeError(f"{what}: a session holds {session.batch} of the engine's slots (its rows keep their "
                               f"slots and KV cache between turns); close() it first")

    def _grow_slots(self, slots: int) -> None:
        """More decode slots (only while no row runs): a session's rows all hold one at once."""
        self.sched.table = np.pad(self.sched.table, ((0, slots - self.slots), (0, 0)))
        self.slots = self.sched.slots = slots
        self.state = None

    def _continue(self, pieces: dict[int, list[int]], starts: dict[int, int], limit: int) -> None:
        """Writes `pieces[slot]` at positions `starts[slot]...` of parked session slots and starts their next
        turn of up to `limit` tokens (`paged_device.extend_slots`, shapes bucketed: slots by `batch_bucket`,
        tokens by `bucket_length`, blocks by powers of two)."""
        if limit > self._max_new:
            self._max_new = _pow2(limit)
            self.state = dev.with_token_buffers(self.state, self._max_new)
        slots = sorted(pieces)
        A = batch_bucket(len(slots), cap=self.slots)
        C = bucket_length(max(len(p) for p in pieces.values()))
        end = max(starts[s] + len(pieces[s]) for s in slots)
        J = min(_pow2(-(-end // self.block_size)), self.sched.table.shape[1])
        pad = A - len(slots)
        tokens, _, lengths = right_pad([pieces[s] for s in slots] + [[]] * pad, length=C)
        table = np.zeros((A, J), np.int32)
        table[:len(slots)] = self.sched.table[slots, :J]
        self.state = dev.extend_slots(
            *self._device_weights(), self.state, np.asarray(slots + [self.slots] * pad, np.int32), table, tokens,
            np.asarray([starts[s] for s in slots] + [0] * pad, np.int32), lengths,
            np.asarray([limit] * len(slots) + [1] * pad, np.int32), spec=self.sched.distribution.spec)
        self.stats["extend_calls"] += 1
        self.sched.parked.difference_update(slots)

    def _check_prompts(self, prompts, params, *, max_len):
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params: expected SamplingParams, got {type(params).__name__}")
        if not isinstance(prompts, (list, tuple)):
            raise ValueError(f"prompts: expected a list of token-id lists or strings, got {type(prompts).__name__}")
        prompts = [self._encode(p) if isinstance(p, str) else p for p in prompts]
        limit = max_len if max_len is not None else max(len(p) for p in prompts) + params.max_new_tokens + 1
        return check_request(prompts, params, vocab_size=self.cfg.vocab_size, max_len=limit,
                             tokenizer=self.tokenizer, owner="RolloutEngine")

    def _encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ValueError("a str prompt needs a tokenizer: pass one to RolloutEngine(model, tokenizer)")
        from reasoner.tokenization import encode_prompt

        return encode_prompt(self.tokenizer, text)  # a plain string: the tokenizer's BOS where it adds one

    def _eos(self, params: SamplingParams) -> tuple[int, ...]:
        if params.eos_ids is not None:
            return tuple(params.eos_ids)
        if self.tokenizer is not None:
            from reasoner.tokenization import stop_token_ids

            return tuple(stop_token_ids(self.tokenizer))
        return tuple(int(i) for i in self.cfg.eos_token_ids)  # every EOS id of the config, as transformers stops

    def _prepare_idle(self) -> None:
        """With no row running: size the pool for the queued work and the token buffers for the
        longest budget; switch the sampling distribution to the queue head's."""
        q = self.sched.queue
        head = q[0]
        if self.fixed_blocks is None:
            want, slots = 1, 0
            for req in q:
                if slots + req.n > self.slots:
                    break
                want += self.sched.blocks_for(req)
                slots += req.n
            if want > self.sched.alloc.num_blocks:
                self.sched.alloc = BlockAllocator(want)
                self.state = None
        elif self.sched.alloc.num_blocks != self.fixed_blocks:
            self.sched.alloc = BlockAllocator(self.fixed_blocks)
            self.state = None
        longest = _pow2(max(max(r.budgets) for r in q))
        context = _pow2(max(max(r.capacities) for r in q)) if self.speculate else 1
        dist = head.distribution
        if (self.state is None or longest > self._max_new or dist != self.sched.distribution
                or context > self._context):
            pools = self.state.pools if self.state is not None else empty_pools(
                self.cfg, num_blocks=self.sched.alloc.num_blocks, block_size=self.block_size)
            self._max_new = max(longest, self._max_new if self.state is not None else 0)
            self._context = max(context, self._context if self.state is not None else 1)
            key_width = jax.random.key_data(jax.random.key(0)).shape[-1]
            self.state = dev.empty_state(pools, slots=self.slots, max_new=self._max_new,
                                         eos_ids_E=np.asarray(dist.eos_ids or (-1,), np.int32),
                                         temperature=dist.temperature, top_p=dist.top_p, key_width=key_width,
                                         context=self._context)
            self.sched.distribution = dist

    def _admit(self) -> None:
        if not self.sched.queue:
            return
        if not self.sched.rows:
            self._prepare_idle()
        admitted = self.sched.admit(max_budget=self._max_new)
        if not admitted:
            return
        bs, S = self.block_size, self.slots
        reqs = [r for r, _ in admitted]
        P = _pow2(len(reqs))
        T = bucket_length(max(len(r.prompt) for r in reqs))
        rows = [(i, j, s) for i, (r, slots) in enumerate(admitted) for j, s in enumerate(slots)]
        R = _pow2(len(rows))
        tokens, segments, lengths = right_pad([r.prompt for r in reqs] + [[0]] * (P - len(reqs)), length=T)
        src, blk, off = prompt_writes([r.layout for r in reqs], bucket=T, block_size=bs, entries=P * T + R * bs)
        pad = R - len(rows)
        row_prompt = np.asarray([i for i, _, _ in rows] + [0] * pad, np.int32)
        row_slot = np.asarray([s for _, _, s in rows] + [S] * pad, np.int32)  # slot S: dropped
        keys = self._row_keys(reqs, rows, R)
        limit = np.asarray([reqs[i].budgets[j] for i, j, _ in rows] + [1] * pad, np.int32)
        capacity = np.asarray([reqs[i].capacities[j] for i, j, _ in rows] + [2] * pad, np.int32)
        self.state = dev.prefill_into_slots(
            *self._device_weights(), self.state, tokens, segments, lengths, src, blk, off, row_prompt, row_slot,
            keys, limit, capacity, spec=self.sched.distribution.spec)
        self.stats["prefill_calls"] += 1
        for i, j, s in rows:
            r = reqs[i]
            text = RowText(self.tokenizer, r.params.stop) if r.params.stop or r.on_text else None
            self.sched.rows[s] = Row(request=r, sample=j, slot=s, text=text)

    @staticmethod
    def _row_keys(reqs, rows, R: int) -> np.ndarray:
        """Raw key data [R, width] of `row_keys(seed, prompt_index, sample)`, one device call per seed."""
        width = jax.random.key_data(jax.random.key(0)).shape[-1]
        keys = np.zeros((R, width), np.uint32)
        by_seed: dict[int, list[int]] = {}
        for k, (i, _, _) in enumerate(rows):
            by_seed.setdefault(reqs[i].params.seed, []).append(k)
        for seed, ks in by_seed.items():
            data = jax.random.key_data(row_keys(seed, [reqs[rows[k][0]].prompt_index for k in ks],
                                                [rows[k][1] for k in ks]))
            keys[ks] = np.asarray(data)
        return keys

    def _decode_chunk(self, steps: int | None = None) -> None:
        steps = steps or self.chunk_steps
        lengths = np.asarray(jax.device_get(self.state.length_S))
        slot_ids = self.sched.step_slots()
        draft = max(min(self.speculate, self.draft_budget // len(slot_ids) - 1), 0)
        J = self.sched.live_blocks(lengths, steps * (draft + 1))  # a step may advance 1 + draft positions
        table = self.sched.table[slot_ids, :J]
        self.state = dev.decode_chunk(*self._device_weights(), self.state, slot_ids, table, steps,
                                      spec=self.sched.distribution.spec, speculate=draft, ngram=self.ngram)
        self.stats["decode_chunks"] += 1

    def _harvest(self) -> None:
        s = self.state
        count, done, finish, tokens = jax.device_get((s.count_S, s.done_S, s.finish_S, s.tokens_SxN))
        ended: dict[int, tuple[int, int]] = {}  # slot -> (finish code, tokens kept)
        for slot in self.sched.active:
            row = self.sched.rows[slot]
            c = int(count[slot])
            if row.text is not None and c > row.seen:
                keep = row.text.append(tokens[slot, row.seen:c])
                row.seen = c
                if row.request.on_text is not None:
                    delta = row.text.stream_delta()
                    if delta:
                        row.request.on_text(row.sample, delta)
                if keep is not None:
                    ended[slot] = (STOP, keep)
                    continue
            if done[slot]:
                ended[slot] = (int(finish[slot]), c)
        if not ended:
            return
        slp, mlp = jax.device_get((s.sample_logp_SxN, s.model_logp_SxN))
        mask = np.zeros(self.slots, bool)
        for slot, (code, keep) in ended.items():
            mask[slot] = True
            row = self.sched.rows[slot]
            req = row.request
            if req.holds_slots:
                self.sched.parked.add(slot)  # a session's row: its slot and cache wait for the next turn
            else:
                self.sched.finish_row(slot)
            toks = np.asarray(tokens[slot, :keep]).copy()
            if row.text is not None:
                text = row.text.text
            else:
                text = decode(self.tokenizer, toks) if self.tokenizer is not None else ""
            req.results[row.sample] = Completion(
                tokens=toks, text=text, finish_reason=_REASONS[code], sample_logprobs=slp[slot, :keep].copy(),
                model_logprobs=mlp[slot, :keep].copy(), prompt_index=req.prompt_index, sample_index=row.sample)
            if not req.holds_slots and req.request_id not in self.sched.running:
                self._finished[req.request_id] = req
        if any(code == STOP for code, _ in ended.values()):
            self.state = dev.retire(self.state, mask)
