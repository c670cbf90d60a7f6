"""Host-side bookkeeping of the rollout engine: requests, their rows, slots and admission.

A `RolloutRequest` is one prompt with its own `SamplingParams` (n samples, token budget, seed,
stop strings). Requests wait in a FIFO queue; a request is admitted when `n` slots are free and
the block pool holds its reservation (prompt blocks once, each sample's private blocks up to its
capacity). Admission is in order (no request overtakes an earlier one that does not fit yet), so
results cannot starve. All running rows share one sampling distribution (greedy or not, top-k,
top-p, temperature, EOS ids: what the compiled step and its traced scalars hold); a request whose
distribution differs waits until the running rows have drained, then the engine switches; so does
a request whose budget is longer than the token buffers the running rows were given (`max_budget`).

A session's rows (`RolloutEngine.start`, multi-turn) hold their slots and blocks between turns: a row that
finishes a turn is parked (`parked`: done on the device, its cache kept) instead of freed, and only
`EngineSession.close` frees it. Parked rows take no part in decode chunks.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable

import numpy as np

from reasoner.sampling.buckets import batch_bucket
from reasoner.sampling.paged_cache import BlockAllocator, PromptLayout, blocks_needed, reserve_prompt
from reasoner.sampling.params import SamplingParams
from reasoner.sampling.processors import DecodeSpec
from reasoner.sampling.stops import RowText


@dataclasses.dataclass(frozen=True)
class Distribution:
    """What all running rows must share (changing it needs idle slots)."""

    spec: DecodeSpec
    temperature: float
    top_p: float
    eos_ids: tuple[int, ...]

    @classmethod
    def of(cls, params: SamplingParams, eos_ids: tuple[int, ...]) -> "Distribution":
        return cls(spec=DecodeSpec.from_params(params), temperature=float(params.temperature or 1.0),
                   top_p=float(params.top_p), eos_ids=tuple(eos_ids))


@dataclasses.dataclass
class RolloutRequest:
    """One prompt and how to sample it. `prompt_index` enters the PRNG key (as the static sampler's
    row keys do), so a request's samples are the same whichever slots and neighbours it gets."""

    request_id: int
    prompt: list[int]
    params: SamplingParams
    distribution: Distribution
    capacities: tuple[int, ...]  # per sample, positions it may fill: min(prompt + its budget, max_len)
    budgets: tuple[int, ...]  # per sample, tokens it may draw (params.max_new_tokens unless given per sample)
    prompt_index: int = 0
    on_text: Callable[[int, str], None] | None = None  # streaming: (sample, newly stable text)
    holds_slots: bool = False  # a session's rows: parked, not freed, when a turn ends
    layout: PromptLayout | None = None
    results: list = dataclasses.field(default_factory=list)  # Completion per sample, None until finished

    @property
    def n(self) -> int:
        return self.params.n


@dataclasses.dataclass
class Row:
    """One running sample: which request, which of its n samples, in which slot."""

    request: RolloutRequest
    sample: int
    slot: int
    text: RowText | None
    seen: int = 0  # tokens already fed to `text`


class Scheduler:
    """Slots, block reservations and the pending queue (no device work here)."""

    def __init__(self, *, slots: int, allocator: BlockAllocator, block_size: int):
        self.slots = slots
        self.alloc = allocator
        self.block_size = block_size
        self.queue: collections.deque[RolloutRequest] = collections.deque()
        self.rows: dict[int, Row] = {}  # slot -> row
        self.table = np.zeros((slots, 1), np.int32)
        self.running: dict[int, int] = {}  # request id -> rows still running
        self.distribution: Distribution | None = None
        self.parked: set[int] = set()  # slots of session rows between turns (done, cache kept)

    @property
    def active(self) -> list[int]:
        """Slots of the rows decoding now (every row but the parked ones), in admission order."""
        return [s for s in self.rows if s not in self.parked]

    @property
    def free_slots(self) -> list[int]:
        return [s for s in range(self.slots) if s not in self.rows]

    def blocks_for(self, req: RolloutRequest) -> int:
        return blocks_needed(length=len(req.prompt), capacities=req.capacities, block_size=self.block_size)

    def admit(self, *, max_budget: int | None = None) -> list[tuple[RolloutRequest, list[int]]]:
        """Reserves slots and blocks for queued requests, in order, while they fit; returns them with their slots.
        max_budget: the longest budget the device's token buffers hold now; a longer request waits for idle slots
        (the engine then re-sizes the buffers)."""
        out = []
        free = self.free_slots
        while self.queue:
            req = self.queue[0]
            changes = self.distribution is not None and req.distribution != self.distribution
            if changes or (max_budget is not None and max(req.budgets) > max_budget):
                if self.rows or out:
                    break
            if req.n > len(free) or self.blocks_for(req) > self.alloc.free:
                break
            self.queue.popleft()
            self.distribution = req.distribution
            req.layout = reserve_prompt(self.alloc, length=len(req.prompt), capacities=req.capacities,
                                        block_size=self.block_size)
            slots, free = free[:req.n], free[req.n:]
            width = max(len(req.layout.table(j)) for j in range(req.n))
            if width > self.table.shape[1]:
                self.table = np.pad(self.table, ((0, 0), (0, width - self.table.shape[1])))
            for j, s in enumerate(slots):
                t = req.layout.table(j)
                self.table[s, :] = 0
                self.table[s, :len(t)] = t
            self.running[req.request_id] = req.n
            out.append((req, slots))
        return out

    def finish_row(self, slot: int) -> Row:
        """Frees a slot and the row's private blocks; the shared prompt blocks go back to the pool with
        the request's last row (their reference count is the number of samples)."""
        row = self.rows.pop(slot)
        self.parked.discard(slot)
        self.table[slot, :] = 0
        req = row.request
        self.alloc.release(list(req.layout.shared) + list(req.layout.own[row.sample]))
        self.running[req.request_id] -= 1
        if self.running[req.request_id] == 0:
            del self.running[req.request_id]
        return row

    def step_slots(self) -> np.ndarray:
        """The slots a decode chunk runs: every running one, padded with idle (done) slots to a batch bucket
        (`buckets.batch_bucket`, at most all slots), distinct so that writing the chunk's results back is
        unambiguous. Free slots pad first, then parked ones: done, so a step changes nothing of theirs but the
        key/value of their pending token at their length, a position at or past their history's end that the next
        `extend` overwrites or no query reads (attention never reads past the query's position)."""
        running = sorted(self.active)
        size = batch_bucket(max(len(running), 1), cap=self.slots)
        idle = [s for s in range(self.slots) if s not in self.rows] + sorted(self.parked)
        return np.asarray(running + idle[:size - len(running)], np.int32)

    def live_blocks(self, lengths_S: np.ndarray, steps: int) -> int:
        """Table columns a chunk of `steps` steps can touch: the longest active row's, bucketed to a
        power of two (one compile per bucket) and clipped to the table width."""
        running = self.active
        if not running:
            return 1
        longest = max(int(lengths_S[s]) for s in running) + steps
        need = -(-longest // self.block_size)
        return min(1 << (need - 1).bit_length(), self.table.shape[1])
