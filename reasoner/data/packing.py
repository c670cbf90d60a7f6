"""Best-fit-decreasing packing of tokenized documents into fixed-length rows.

A document is a pair of int sequences (ids, loss_mask). `pack_documents` places documents
into rows of `seq_len` tokens: longest first, each into the open row with the least room that
still fits it (best fit), opening a new row when none does. A row is

  tokens_T      ids of its documents back to back, then `pad_id`
  positions_T   0, 1, ... restarting at each document (RoPE positions of the unpacked document)
  segment_ids_T 1, 2, ... per document in the row, 0 on padding (attention never crosses segments)
  loss_mask_T   the documents' loss masks, 0 on padding

The decoder's attention mask (same non-zero segment, causal) then makes every document's
logits identical to those it would get alone. Sorting ties keep the input order, so the
result is a deterministic function of the input list.
"""

from __future__ import annotations

import bisect
from typing import Sequence

import numpy as np

ROW_FIELDS = ("tokens", "positions", "segment_ids", "loss_mask")


def best_fit_decreasing(lengths: Sequence[int], *, capacity: int) -> list[list[int]]:
    """Document indices per bin; each bin's lengths sum to <= capacity. Raises on a document > capacity."""
    for i, n in enumerate(lengths):
        if n > capacity:
            raise ValueError(f"document {i} has {n} tokens, more than the row length {capacity}; truncate or drop it first")
        if n <= 0:
            raise ValueError(f"document {i} has {n} tokens; expected at least 1")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    # (room, bin index) kept sorted so the best fit is the first entry with room >= n
    rooms: list[tuple[int, int]] = []
    for i in order:
        n = lengths[i]
        at = bisect.bisect_left(rooms, (n, -1))
        if at < len(rooms):
            room, b = rooms.pop(at)
            bins[b].append(i)
            bisect.insort(rooms, (room - n, b))
        else:
            bins.append([i])
            bisect.insort(rooms, (capacity - n, len(bins) - 1))
    return bins


def pack_documents(
    docs: Sequence[tuple[Sequence[int], Sequence[int]]], *, seq_len: int, pad_id: int = 0
) -> dict[str, np.ndarray]:
    """Packs (ids, loss_mask) documents into rows; returns int32 arrays [R, seq_len] named as ROW_FIELDS."""
    bins = best_fit_decreasing([len(ids) for ids, _ in docs], capacity=seq_len)
    # within a row, documents keep their input order (the bin order only decides which row)
    return _fill_rows(docs, [sorted(members) for members in bins], seq_len=seq_len, pad_id=pad_id)


def pad_documents(
    docs: Sequence[tuple[Sequence[int], Sequence[int]]], *, seq_len: int, pad_id: int = 0
) -> dict[str, np.ndarray]:
    """One document per row, right-padded (the unpacked layout, used by DPO and as the packing reference)."""
    for r, (ids, _) in enumerate(docs):
        if len(ids) > seq_len:
            raise ValueError(f"document {r} has {len(ids)} tokens, more than the row length {seq_len}")
    return _fill_rows(docs, [[r] for r in range(len(docs))], seq_len=seq_len, pad_id=pad_id)


def _fill_rows(docs, rows: list[list[int]], *, seq_len: int, pad_id: int) -> dict[str, np.ndarray]:
    """ROW_FIELDS arrays [len(rows), seq_len]: row r holds the documents `rows[r]` (indices into `docs`, which
    fit) back to back, segments 1, 2, ... in that order, positions restarting at each; padding after them."""
    out = {
        "tokens": np.full((len(rows), seq_len), pad_id, np.int32),
        "positions": np.zeros((len(rows), seq_len), np.int32),
        "segment_ids": np.zeros((len(rows), seq_len), np.int32),
        "loss_mask": np.zeros((len(rows), seq_len), np.int32),
    }
    for r, members in enumerate(rows):
        start = 0
        for seg, i in enumerate(members, start=1):
            ids, mask = docs[i]
            n = len(ids)
            out["tokens"][r, start:start + n] = ids
            out["positions"][r, start:start + n] = np.arange(n)
            out["segment_ids"][r, start:start + n] = seg
            out["loss_mask"][r, start:start + n] = mask
            start += n
    return out
