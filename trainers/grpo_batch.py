"""The GRPO generation batch: `GRPOBatch` (a typed pytree of [A, B/A, ...] arrays), `pack` (a rollout -> host
batch) and its shardings. Prompts are left-padded to a bucketed length P, so a run compiles its step for a few
prompt lengths only; completions are right-padded to the token budget N."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from flax import struct

from reasoner.agents.multiturn import Rollout
from trainers import grpo_loss as gl


@struct.dataclass
class GRPOBatch:
    """One generation batch, every leaf [A, B/A, ...] (A micro-batches): prompts left-padded to P, completions
    right-padded to the budget N. tokens / positions / segment_ids [.., P + N]; completion_ids, completion_mask,
    tool_mask, loss_mask, old_logps (and ref_logps once the reference has run) [.., N]; advantages, truncated [..]."""

    tokens: Any
    positions: Any
    segment_ids: Any
    completion_ids: Any
    completion_mask: Any
    tool_mask: Any
    loss_mask: Any
    old_logps: Any
    advantages: Any
    truncated: Any
    ref_logps: Any = None

    def fields(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}

    def on_mesh(self, mesh) -> GRPOBatch:
        """Host arrays -> global arrays laid out over the mesh (rows over its data axes)."""
        from reasoner.data.pipeline import to_global_batch

        return GRPOBatch(**to_global_batch(self.fields(), mesh))


def pack(r: Rollout, adv_B: np.ndarray, *, prompt_len: int, budget: int, grad_accum: int, pad_id: int,
         mask_truncated: bool) -> GRPOBatch:
    """The host `GRPOBatch` of a rollout. Positions restart at 0 at each row's first prompt token."""
    B = len(r.completion_ids)
    P, N = prompt_len, budget
    tokens = np.full((B, P + N), pad_id, np.int32)
    segments = np.zeros((B, P + N), np.int32)
    comp = np.full((B, N), pad_id, np.int32)
    cmask = np.zeros((B, N), np.float32)
    tmask = np.zeros((B, N), np.float32)
    old = np.zeros((B, N), np.float32)
    for b in range(B):
        p, c = r.prompt_ids[b], r.completion_ids[b]
        if len(p) > P:
            raise ValueError(f"row {b}: prompt of {len(p)} tokens exceeds prompt_len={P}")
        tokens[b, P - len(p):P] = p
        tokens[b, P:P + len(c)] = c
        segments[b, P - len(p):P + len(c)] = 1
        comp[b, :len(c)] = c
        cmask[b, :len(c)] = 1.0
        tmask[b, :len(c)] = r.tool_mask[b]
        old[b, :len(c)] = r.old_logps[b]
    positions = np.maximum(np.cumsum(segments, axis=1) - 1, 0).astype(np.int32)
    lmask = np.asarray(gl.loss_mask(cmask, tool_mask_BxT=tmask,
                                    is_truncated_B=r.truncated if mask_truncated else None), np.float32)
    A = grad_accum
    out = dict(tokens=tokens, positions=positions, segment_ids=segments, completion_ids=comp, completion_mask=cmask,
               tool_mask=tmask, loss_mask=lmask, old_logps=old, advantages=np.asarray(adv_B, np.float32),
               truncated=r.truncated.astype(np.float32))
    return GRPOBatch(**{k: v.reshape(A, B // A, *v.shape[1:]) for k, v in out.items()})


def prompt_bucket(n: int) -> int:
    """Prompt length rounded up to a multiple of 64, so a run compiles its step for a few lengths only."""
    return max(64, -(-n // 64) * 64)


def batch_shardings(mesh, *, with_ref: bool) -> GRPOBatch:
    """The GRPOBatch of shardings: rows over the mesh's data axes."""
    from reasoner.data.pipeline import batch_sharding

    three, two = batch_sharding(mesh, ndim=3), batch_sharding(mesh, ndim=2)
    return GRPOBatch(tokens=three, positions=three, segment_ids=three, completion_ids=three, completion_mask=three,
                     tool_mask=three, loss_mask=three, old_logps=three, advantages=two, truncated=two,
                     ref_logps=three if with_ref else None)
