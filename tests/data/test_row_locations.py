"""Errors about one example name the file and line it came from, and the JSONL builder keeps the file's order.

TFDS shuffled the built records by a hash of their keys and `prepare_sft` named "train split, row <TFDS index>": a
template error on line 7 of train.jsonl was reported as "row 8". The rows of a JSONL file and of the same records
read through `hf_datasets` also packed differently (best fit keeps the input order among equal lengths)."""

import copy
import json

import datasets
import numpy as np
import pytest

from reasoner.data.chat_jsonl import build_chat_dataset
from reasoner.data.hf_datasets import examples_of
from reasoner.data.pipeline import prepare_dpo, prepare_sft
from reasoner.data.unpaired import prepare_kto, read_jsonl_splits


@pytest.fixture(scope="module")
def strict(tokenizer):
    """SmolLM2's ChatML layout, raising on a message whose content is "boom" (as Mistral's template raises)."""
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (
        "{% for m in messages %}{% if m['content'] == 'boom' %}{{ raise_exception('no boom, please') }}{% endif %}"
        "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tok


def _write(path, records_and_blanks):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\n" if r is None else json.dumps(r) + "\n" for r in records_and_blanks))


def test_jsonl_records_keep_file_order_and_name_their_line(strict, tokenizer, tmp_path):
    records = [{"prompt": f"question {i}", "completion": "yes " * (i % 3 + 1)} for i in range(12)]
    lines = records[:3] + [None] + records[3:]  # a blank line: record k sits on line k + 1 (k < 3) or k + 2
    _write(tmp_path / "sft" / "train.jsonl", lines)
    source = build_chat_dataset(tmp_path / "sft", kind="sft", data_dir=tmp_path / "tfds")["train"]
    assert [source[i]["prompt"][0]["content"] for i in range(12)] == [f"question {i}" for i in range(12)]
    # the same records through datasets pack into the same rows, field for field
    from_hf = examples_of(datasets.Dataset.from_list(records), kind="sft", name="same.jsonl")
    a, b = prepare_sft(source, tokenizer, seq_len=96)[0], prepare_sft(from_hf, tokenizer, seq_len=96)[0]
    assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)

    bad = [dict(r) for r in records]
    bad[7]["completion"] = "boom"  # record 7: line 9 of the file
    _write(tmp_path / "bad" / "train.jsonl", bad[:3] + [None] + bad[3:])
    source = build_chat_dataset(tmp_path / "bad", kind="sft", data_dir=tmp_path / "tfds")["train"]
    with pytest.raises(ValueError, match=r"bad/train\.jsonl:9: no boom, please"):
        prepare_sft(source, strict, seq_len=96)

    pairs = [{"prompt": f"q{i}", "chosen": "a", "rejected": "boom" if i == 4 else "b"} for i in range(6)]
    _write(tmp_path / "dpo" / "train.jsonl", [None, None] + pairs)  # pair 4: line 7
    source = build_chat_dataset(tmp_path / "dpo", kind="dpo", data_dir=tmp_path / "tfds")["train"]
    with pytest.raises(ValueError, match=r"dpo/train\.jsonl:7 \(rejected\): no boom, please"):
        prepare_dpo(source, strict, seq_len=96)


def test_kto_jsonl_errors_name_the_line(strict, tmp_path):
    unpaired = [{"prompt": f"q{i}", "completion": "boom" if i == 2 else "a", "label": i % 2 == 0} for i in range(4)]
    _write(tmp_path / "u" / "train.jsonl", [unpaired[0], None, *unpaired[1:]])  # record 2: line 4
    with pytest.raises(ValueError, match=r"u/train\.jsonl:4: no boom, please"):
        prepare_kto(read_jsonl_splits(tmp_path / "u")["train"], strict, seq_len=64)
    # paired records are unpaired (chosen ones, then rejected ones): the rejected side of pair 1 is row 4 of 6
    pairs = [{"prompt": f"q{i}", "chosen": "a", "rejected": "boom" if i == 1 else "b"} for i in range(3)]
    _write(tmp_path / "p" / "train.jsonl", [pairs[0], None, None, *pairs[1:]])  # pair 1: line 4
    rows = read_jsonl_splits(tmp_path / "p")["train"]
    assert [r["completion"] for r in rows] == ["a", "a", "a", "b", "boom", "b"]
    assert [rows.where(i) for i in range(6)] == [f"{tmp_path}/p/train.jsonl:{n}" for n in (1, 4, 5, 1, 4, 5)]
    with pytest.raises(ValueError, match=r"p/train\.jsonl:4: no boom, please"):
        prepare_kto(rows, strict, seq_len=64)


@pytest.mark.parametrize("task, bad, message", [
    ("chat", {"question": "2+2?"}, r"expected a 'prompt' field"),
    ("astar", {"id": "p7", "program": "{}"}, r"missing \['goal'\]"),
    ("smt", {"id": "p7", "question": "Is Max sour?"}, r"example lacks Logic-LLM fields"),  # a KeyError before
])
def test_grpo_rows_name_their_line(task, bad, message, tmp_path):
    # GRPO's JSONL rows went through `as_example` without their location: "row {'question': ...}: expected a
    # 'prompt' field", "record p7: missing ['goal']" or a bare KeyError, never the file and line
    from ml_collections import ConfigDict

    from trainers.data import load_examples

    good = {"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"}
    _write(tmp_path / "train.jsonl", [good, None, good, bad])  # the bad row: line 4
    cfg = ConfigDict(dict(source="jsonl", path=str(tmp_path), hf_path="", task=task, dataset="folio", limit=0))
    with pytest.raises(ValueError, match=rf"train\.jsonl:4: .*{message}"):
        load_examples(cfg, split="train")
