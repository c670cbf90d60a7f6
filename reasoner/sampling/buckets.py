"""Shape buckets: a run compiles a handful of prefill shapes, not one per prompt length.

Prompts are right-padded (real tokens first, padding after, segment id 0 on padding) to the
smallest power of two >= the longest prompt of the batch (at least `MIN_BUCKET`, at most the
cache length). Row b's real tokens sit at cache slots [0, len_b) with RoPE positions equal to
their slots, so a row's next write offset, its next position and its length are one number.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

MIN_BUCKET = 16


def bucket_length(n: int, *, cap: int | None = None, minimum: int = MIN_BUCKET) -> int:
    """Smallest power of two >= max(n, minimum), clipped to `cap`."""
    if n < 1:
        raise ValueError(f"bucket_length: n={n}, expected >= 1")
    b = max(minimum, 1 << (int(n) - 1).bit_length())
    return min(b, cap) if cap is not None else b


def batch_bucket(n: int, *, cap: int) -> int:
    """Smallest size >= n among 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (powers of two and 1.5x powers of two),
    clipped to `cap`: the rollout engine's decode batch. Padding rows compute like real ones, so a bucket
    wastes at most a third of a step (powers of two alone waste up to half) for twice the compiles."""
    if n < 1:
        raise ValueError(f"batch_bucket: n={n}, expected >= 1")
    p = 1 << (int(n) - 1).bit_length()  # smallest power of two >= n
    b = p * 3 // 4 if p >= 4 and p * 3 // 4 >= n else p
    return min(b, cap)


def right_pad(rows: Sequence[Sequence[int]], *, length: int, pad_id: int = 0):
    """(tokens_BxT int32, segment_ids_BxT int32 with 1 on real tokens, lengths_B int32)."""
    tokens = np.full((len(rows), length), pad_id, np.int32)
    segments = np.zeros((len(rows), length), np.int32)
    lengths = np.zeros((len(rows),), np.int32)
    for i, r in enumerate(rows):
        if len(r) > length:
            raise ValueError(f"row {i}: {len(r)} tokens do not fit the bucket of {length}")
        tokens[i, : len(r)] = r
        segments[i, : len(r)] = 1
        lengths[i] = len(r)
    return tokens, segments, lengths
