"""Best-fit-decreasing packing: invariants, a worked example, and the row layout."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoner.data.packing import best_fit_decreasing, pack_documents, pad_documents


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 32), min_size=1, max_size=40))
def test_every_document_placed_once_within_capacity(lengths):
    bins = best_fit_decreasing(lengths, capacity=32)
    placed = sorted(i for b in bins for i in b)
    assert placed == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in b) <= 32 for b in bins)
    # never worse than the trivial lower bound by more than BFD's 11/9 OPT + 1 guarantee
    assert len(bins) <= 11 / 9 * max(1, -(-sum(lengths) // 32)) + 1 + 1e-9
    # no two bins could be merged (otherwise best fit would have used the room)
    loads = sorted(sum(lengths[i] for i in b) for b in bins)
    assert len(loads) < 2 or loads[0] + loads[1] > 32


def test_best_fit_decreasing_worked_example():
    # sorted: 7(0) 6(1) 5(2) 4(3) 3(4) 2(5); capacity 10 -> [7,3] [6,4] [5,2]
    # (4 goes to the 6-bin: room 4 is the tightest fit; 3 to the 7-bin; 2 to the 5-bin)
    assert best_fit_decreasing([7, 6, 5, 4, 3, 2], capacity=10) == [[0, 4], [1, 3], [2, 5]]


def test_rows_restart_positions_and_number_segments():
    docs = [([5, 6, 7], [0, 1, 1]), ([8, 9], [0, 1]), ([1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 1, 1])]
    rows = pack_documents(docs, seq_len=8, pad_id=0)
    assert rows["tokens"].shape == (2, 8) and rows["tokens"].dtype == np.int32
    # best fit: doc 2 (6) opens row 0, doc 0 (3) opens row 1, doc 1 (2) fits row 0 exactly
    np.testing.assert_array_equal(rows["tokens"][0], [8, 9, 1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(rows["positions"][0], [0, 1, 0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(rows["segment_ids"][0], [1, 1, 2, 2, 2, 2, 2, 2])
    np.testing.assert_array_equal(rows["loss_mask"][0], [0, 1, 0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(rows["segment_ids"][1], [1, 1, 1, 0, 0, 0, 0, 0])
    padded = pad_documents(docs, seq_len=8)
    assert padded["tokens"].shape == (3, 8) and padded["segment_ids"].max() == 1


def test_over_long_or_empty_documents_are_rejected():
    with pytest.raises(ValueError, match="document 1 has 9 tokens, more than the row length 8"):
        best_fit_decreasing([3, 9], capacity=8)
    with pytest.raises(ValueError, match="document 0 has 0 tokens"):
        best_fit_decreasing([0], capacity=8)
    with pytest.raises(ValueError, match="more than the row length"):
        pad_documents([([1] * 9, [1] * 9)], seq_len=8)


def _brute_force_best_fit(lengths, capacity):
    """The textbook loop: longest first (ties by index), each into the fullest bin it fits (lowest index on ties)."""
    bins, rooms = [], []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        fits = [(rooms[b], b) for b in range(len(bins)) if rooms[b] >= lengths[i]]
        if fits:
            _, b = min(fits)
            bins[b].append(i)
            rooms[b] -= lengths[i]
        else:
            bins.append([i])
            rooms.append(capacity - lengths[i])
    return bins


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 24).flatmap(lambda cap: st.tuples(st.just(cap), st.lists(st.integers(1, cap), max_size=30))))
def test_bins_and_rows_equal_a_brute_force_packer(cap_lengths):
    capacity, lengths = cap_lengths
    assert best_fit_decreasing(lengths, capacity=capacity) == _brute_force_best_fit(lengths, capacity)
    if not lengths:
        return
    docs = [([100 * i + k for k in range(n)], [(i + k) % 2 for k in range(n)]) for i, n in enumerate(lengths)]
    rows = pack_documents(docs, seq_len=capacity, pad_id=-1)
    for r, members in enumerate(sorted(b) for b in _brute_force_best_fit(lengths, capacity)):
        tokens = [t for i in members for t in docs[i][0]]
        n = len(tokens)
        assert rows["tokens"][r].tolist() == tokens + [-1] * (capacity - n)
        assert rows["loss_mask"][r].tolist() == [m for i in members for m in docs[i][1]] + [0] * (capacity - n)
        assert rows["positions"][r].tolist() == [k for i in members for k in range(lengths[i])] + [0] * (capacity - n)
        assert rows["segment_ids"][r].tolist() == [s for s, i in enumerate(members, 1) for _ in range(lengths[i])] + \
            [0] * (capacity - n)
