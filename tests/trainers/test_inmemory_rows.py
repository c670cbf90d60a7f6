"""Rows a pipeline hands a trainer in memory (`splits=`) pass the JSONL reader's checks (`trainers.data.normalized`):
before, a missing field was a KeyError and a number completion a TypeError deep in tokenization, and KTO read the
string label "false" as desirable."""

import pytest

from trainers.data import normalized

PROMPT = [{"role": "user", "content": "Is Bob big?"}]


@pytest.mark.parametrize("kind,row,message", [
    ("dpo", {"prompt": PROMPT, "chosen": "yes"}, "rejected"),
    ("sft", {"prompt": PROMPT, "completion": 5}, "completion"),
    ("kto", {"prompt": PROMPT, "completion": "yes", "label": "false"}, "label must be true or false"),
    ("sft", ["not", "a", "dict"], "expected a dict, got list"),
])
def test_a_bad_row_is_named_with_its_split_and_index(kind, row, message):
    good = {"sft": {"prompt": PROMPT, "completion": "yes"}, "dpo": {"prompt": PROMPT, "chosen": "a", "rejected": "b"},
            "kto": {"prompt": PROMPT, "completion": "yes", "label": True}}[kind]
    assert normalized([good], kind=kind, split="train")  # the good row passes
    with pytest.raises(ValueError, match=rf"train split, row 1: .*{message}"):
        normalized([good, row], kind=kind, split="train")
