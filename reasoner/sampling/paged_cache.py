"""A paged KV cache: a pool of fixed-size blocks per layer and a block table per decode slot.

Layout (per layer, keys and values alike): `[KV, NB, bs, Dh]`: kv heads, then blocks, then the
`bs` token positions of a block, then the head dim. A slot's table row `[J]` lists the blocks that
hold its positions `0 .. J*bs - 1`: position p lives in block `table[p // bs]` at offset `p % bs`.
Why heads first: `pool[head]` is then a `[NB, bs, Dh]` array whose leading axis the block table indexes,
so a slot's blocks of one head gather as whole contiguous blocks into `[S, J * bs, Dh]`, the operand of a
contraction batched over slots alone (`head_blocks`).

Block 0 is the null block: never handed out, it absorbs the writes of idle slots (whose table rows
are all 0) and holds finite garbage that no live position ever reads (reads are masked by length).

Sharing (the G samples of one prompt): the prompt's FULL blocks (positions `< (len // bs) * bs`)
are written once and listed in all G tables; they are reference-counted on the host and return
to the free list when the last sample finishes. The last, partially filled prompt block is
copied per sample at prefill (copy-on-write done eagerly: each sample gets its own copy of those
`len % bs` prompt positions, at most `bs - 1` tokens, and writes its own tokens after them), so no
sample ever writes into a shared block.

Allocation is by reservation: a request is admitted only when the pool has the blocks for its
prompt plus its whole `max_new_tokens` budget, so a running row never runs out of blocks and
nothing is ever preempted. Memory is `NB * bs` token slots, set by the caller, not `slots x
max_len` (it follows the lengths actually requested).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

NULL_BLOCK = 0


@struct.dataclass
class PagedPools:
    """Per-layer block pools, keys and values, each `[KV, NB, bs, Dh]` (compute dtype)."""

    k: tuple
    v: tuple

    @property
    def num_blocks(self) -> int:
        return self.k[0].shape[1]

    @property
    def block_size(self) -> int:
        return self.k[0].shape[2]


def empty_pools(cfg, *, num_blocks: int, block_size: int) -> PagedPools:
    shape = (cfg.num_kv_heads, num_blocks, block_size, cfg.head_dim)
    return PagedPools(k=tuple(jnp.zeros(shape, cfg.dtype) for _ in range(cfg.num_layers)),
                      v=tuple(jnp.zeros(shape, cfg.dtype) for _ in range(cfg.num_layers)))


def pool_bytes(cfg, *, num_blocks: int, block_size: int) -> int:
    """Bytes of the keys and values of every layer."""
    return 2 * cfg.num_layers * cfg.num_kv_heads * num_blocks * block_size * cfg.head_dim * np.dtype(cfg.dtype).itemsize


def write_tokens(pool_KVxNBxbsxDh: jax.Array, new_KVxMxDh: jax.Array, block_M: jax.Array, offset_M: jax.Array):
    """Scatters M token vectors to (block, offset) pairs; padding entries target the null block."""
    return pool_KVxNBxbsxDh.at[:, block_M, offset_M, :].set(new_KVxMxDh.astype(pool_KVxNBxbsxDh.dtype))


def head_blocks(pool_KVxNBxbsxDh: jax.Array, head: int, table_SxJ: jax.Array) -> jax.Array:
    """[S, J * bs, Dh]: kv head `head`'s keys (or values) at each slot's first J blocks (J static: the bucket of
    live lengths). Gathering one head at a time indexes the pool's leading block axis of `pool[head]`, so XLA
    copies whole contiguous [bs, Dh] blocks; a single gather over `[KV, NB, ...]` with the table on axis 1, and
    `jnp.take`'s bounds-checked default mode, took 2.3x as long (SmolLM2 shapes, 256 slots x 8 blocks)."""
    S, J = table_SxJ.shape
    blocks = pool_KVxNBxbsxDh[head].at[table_SxJ].get(mode="promise_in_bounds")  # table entries < NB always
    return blocks.reshape(S, J * blocks.shape[-2], blocks.shape[-1])


class BlockAllocator:
    """Host-side free list and reference counts over blocks 1 .. NB-1 (block 0 is the null block)."""

    def __init__(self, num_blocks: int):
        if num_blocks < 2:
            raise ValueError(f"num_blocks={num_blocks}: expected >= 2 (block 0 is reserved)")
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, 0, -1))  # pop() hands out low ids first
        self.refs = np.zeros(num_blocks, np.int64)

    @property
    def free(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[int]:
        if count > len(self._free):
            raise MemoryError(f"block pool: {count} blocks requested, {len(self._free)} free")
        out = [self._free.pop() for _ in range(count)]
        self.refs[out] = 1
        return out

    def share(self, blocks) -> None:
        """One more holder of each block (a sample that reads a shared prompt block)."""
        self.refs[list(blocks)] += 1

    def release(self, blocks) -> None:
        for b in blocks:
            if b == NULL_BLOCK:
                continue
            if self.refs[b] <= 0:
                raise RuntimeError(f"block {b} released more often than it was allocated")
            self.refs[b] -= 1
            if self.refs[b] == 0:
                self._free.append(int(b))


@dataclasses.dataclass(frozen=True)
class PromptLayout:
    """Where one prompt of `length` tokens and its `n` samples live in the pool.

    shared: the prompt's full blocks, listed first in every sample's table.
    own: per sample, its private blocks (the copied partial prompt block, then room for its tokens).
    """

    length: int
    shared: tuple[int, ...]
    own: tuple[tuple[int, ...], ...]

    def table(self, sample: int) -> list[int]:
        return list(self.shared) + list(self.own[sample])

    def all_blocks(self) -> list[int]:
        return list(self.shared) + [b for own in self.own for b in own]


def blocks_needed(*, length: int, capacities, block_size: int) -> int:
    """Blocks to reserve for a prompt of `length` tokens whose samples may grow to `capacities[j]` positions."""
    full = length // block_size
    return full + sum(-(-c // block_size) - full for c in capacities)


def reserve_prompt(alloc: BlockAllocator, *, length: int, capacities, block_size: int) -> PromptLayout:
    """Allocates the shared full prompt blocks once and each sample's private blocks up to its capacity
    (prompt + the row's token budget)."""
    full = length // block_size
    shared = alloc.allocate(full)
    if shared:
        for _ in range(len(capacities) - 1):
            alloc.share(shared)
    own = tuple(tuple(alloc.allocate(-(-c // block_size) - full)) for c in capacities)
    return PromptLayout(length=length, shared=tuple(shared), own=own)


def prompt_writes(layouts: list[PromptLayout], *, bucket: int, block_size: int, entries: int):
    """Host-built scatter plan of a prefill: (src_M, block_M, offset_M) int32, padded to `entries`.

    src indexes the flattened [P * bucket] prompt tokens; full-block tokens appear once (written into
    the shared block), tokens of the partial last block once per sample (into each sample's own copy).
    Padding entries write token 0 into the null block.
    """
    src, blk, off = [], [], []
    for p, lay in enumerate(layouts):
        full = (lay.length // block_size) * block_size
        for t in range(full):
            src.append(p * bucket + t)
            blk.append(lay.shared[t // block_size])
            off.append(t % block_size)
        for own in lay.own:
            for t in range(full, lay.length):
                src.append(p * bucket + t)
                blk.append(own[0])
                off.append(t % block_size)
    if len(src) > entries:
        raise AssertionError(f"prefill scatter plan of {len(src)} entries exceeds its bucket {entries}")
    pad = entries - len(src)
    as_i32 = lambda xs: np.asarray(xs + [0] * pad, np.int32)  # noqa: E731
    return as_i32(src), as_i32(blk), as_i32(off)
