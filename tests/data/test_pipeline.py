"""Tokenization with completion masks, over-long handling, batching determinism and iterator state, JSONL builder."""

import json
import pathlib
import sys

import numpy as np
import pytest

from tests.trainers import traces

from reasoner.data.pipeline import (  # noqa: E402
    BatchIterator, NoCompletionTokensError, eval_batches, prepare_dpo, prepare_sft)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    texts = ["alpha beta gamma delta", "one two three four five six seven eight nine ten", "yes no"]
    return AutoTokenizer.from_pretrained(str(traces.word_tokenizer(tmp_path_factory.mktemp("tok"), texts=texts)))


def _ex(prompt, completion):
    return {"prompt": [{"role": "user", "content": prompt}], "completion": completion}


def test_completion_mask_marks_only_the_assistant_turn(tokenizer):
    rows, stats = prepare_sft([_ex("alpha beta", "gamma delta")], tokenizer, seq_len=32, packing=False)
    ids = rows["tokens"][0][rows["segment_ids"][0] == 1]
    trained = tokenizer.convert_ids_to_tokens(ids[rows["loss_mask"][0][: len(ids)] == 1])
    assert trained == ["gamma", "delta", "<|im_end|>"]
    assert stats.completion_tokens == 3 and stats.kept == 1


def test_overflow_truncate_and_drop_are_counted(tokenizer):
    long = _ex("one two three", "four five six seven eight nine ten " * 3)
    short = _ex("alpha", "beta")
    rows, stats = prepare_sft([long, short], tokenizer, seq_len=16, overflow="truncate")
    assert (stats.truncated, stats.dropped, stats.kept) == (1, 0, 2)
    assert rows["tokens"].shape[1] == 16
    rows, stats = prepare_sft([long, short], tokenizer, seq_len=16, overflow="drop")
    assert (stats.truncated, stats.dropped, stats.kept) == (0, 1, 1)
    # a truncation that cuts away the whole completion drops the example (nothing to train on)
    prompt_heavy = _ex("one two three four five six seven eight nine ten " * 2, "yes")
    _, stats = prepare_sft([prompt_heavy, short], tokenizer, seq_len=16, overflow="truncate")
    assert (stats.truncated, stats.dropped) == (1, 1)
    with pytest.raises(ValueError, match="data.overflow='cut'"):
        prepare_sft([short], tokenizer, seq_len=16, overflow="cut")


def test_dataset_without_completion_tokens_raises(tokenizer):
    prompt_heavy = _ex("one two three four five six seven eight nine ten " * 2, "yes")
    with pytest.raises(NoCompletionTokensError, match="train split: no completion tokens"):
        prepare_sft([prompt_heavy], tokenizer, seq_len=16, overflow="truncate")
    with pytest.raises(NoCompletionTokensError, match="no preference pair"):
        prepare_dpo([{"prompt": prompt_heavy["prompt"], "chosen": "yes", "rejected": "no"}], tokenizer, seq_len=16)


def test_dpo_rows_keep_pairs_aligned(tokenizer):
    pairs = [{"prompt": [{"role": "user", "content": "alpha"}], "chosen": "yes yes", "rejected": "no"}] * 3
    rows, stats = prepare_dpo(pairs, tokenizer, seq_len=24)
    assert stats.kept == 3 and rows["chosen_loss_mask"].sum() == 3 * 3 and rows["rejected_loss_mask"].sum() == 3 * 2
    np.testing.assert_array_equal(rows["index"], [0, 1, 2])


def test_batch_iterator_is_deterministic_reshuffles_epochs_and_restores():
    rows = {"tokens": np.arange(24 * 4).reshape(24, 4).astype(np.int32)}
    it = BatchIterator(rows, batch_size=4, grad_accum=2, seed=7, num_epochs=3)
    assert (it.steps_per_epoch, it.total_steps) == (3, 9)
    batches = [b["tokens"] for b in it]
    assert batches[0].shape == (2, 4, 4)
    epoch0 = np.sort(np.concatenate([b.reshape(-1, 4)[:, 0] for b in batches[:3]]))
    np.testing.assert_array_equal(epoch0, np.arange(24) * 4)  # each row once per epoch
    assert not np.array_equal(batches[0], batches[3])  # a new order next epoch
    again = BatchIterator(rows, batch_size=4, grad_accum=2, seed=7, num_epochs=3)
    for _ in range(4):
        next(again)
    state = again.get_state()
    resumed = BatchIterator(rows, batch_size=4, grad_accum=2, seed=7, num_epochs=3)
    resumed.set_state(json.loads(json.dumps(state)))
    np.testing.assert_array_equal(next(resumed)["tokens"], batches[4])
    with pytest.raises(ValueError, match="different seed or batch layout"):
        BatchIterator(rows, batch_size=4, grad_accum=2, seed=8, num_epochs=3).set_state(state)
    with pytest.raises(ValueError, match="cannot fill one step"):
        BatchIterator(rows, batch_size=16, grad_accum=2, seed=7, num_epochs=1)


def test_eval_batches_pad_with_empty_rows():
    rows = {"segment_ids": np.ones((5, 3), np.int32)}
    batches = eval_batches(rows, batch_size=4)
    assert [b["segment_ids"].shape for b in batches] == [(1, 4, 3), (1, 4, 3)]
    assert batches[1]["segment_ids"][0, 1:].sum() == 0


def test_chat_jsonl_builder_round_trip_and_errors(tmp_path):
    from reasoner.data.chat_jsonl import build_chat_dataset, parse_line

    root = tmp_path / "jsonl"
    root.mkdir()
    records = [{"prompt": "alpha", "chosen": "yes", "rejected": "no"},
               {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                "chosen": "c", "rejected": "r"}]
    (root / "train.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    splits = build_chat_dataset(root, kind="dpo", data_dir=tmp_path / "tfds")
    got = sorted((splits["train"][i] for i in range(len(splits["train"]))), key=lambda r: r["chosen"])
    assert got[0] == {"prompt": records[1]["prompt"], "chosen": "c", "rejected": "r", "tools": None}
    assert got[1]["prompt"] == [{"role": "user", "content": "alpha"}]
    with pytest.raises(ValueError, match=r"f\.jsonl:3: missing \['completion'\]"):
        parse_line('{"prompt": "x"}', kind="sft", where="f.jsonl:3")
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_line("{", kind="sft", where="f.jsonl:1")
    with pytest.raises(ValueError, match="prompt must be"):
        parse_line('{"prompt": [], "completion": "x"}', kind="sft", where="f.jsonl:1")
    with pytest.raises(FileNotFoundError, match="expected train.jsonl"):
        empty = tmp_path / "empty"
        empty.mkdir()
        build_chat_dataset(empty, kind="sft", data_dir=tmp_path / "tfds2")


def test_global_batch_rows_split_over_data_axes_or_clear_error():
    import jax

    from reasoner.data.pipeline import to_global_batch
    from reasoner.sharding import make_mesh

    mesh = make_mesh("data=2,fsdp=2,tensor=2")
    out = to_global_batch({"tokens": np.arange(32, dtype=np.int32).reshape(1, 8, 4)}, mesh)["tokens"]
    assert out.sharding.spec[1] == ("data", "fsdp") and len(out.sharding.device_set) == jax.device_count()
    np.testing.assert_array_equal(np.asarray(out), np.arange(32).reshape(1, 8, 4))
    with pytest.raises(ValueError, match="multiple of 4"):
        to_global_batch({"tokens": np.zeros((1, 6, 4), np.int32)}, mesh)
