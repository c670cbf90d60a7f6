"""SFT loss masks against TRL 1.16's own SFTTrainer preprocessing on the same conversations: TRL's `_prepare_dataset`
(its tokenization, completion mask and labels) is the reference. Covers completions whose first tokens merge with
the prompt's last (leading whitespace), which TRL trains with a warning and which we refused."""

import copy
import logging
from types import SimpleNamespace

import datasets
import pytest

from reasoner.data import chat_masks
from reasoner.data.chat_masks import encode_sft_example
from tests.data.test_hf_datasets import MARKED_SMOLLM2

PROMPT = [{"role": "user", "content": "Hi"}]


def trl_labels(tokenizer, row, *, assistant_only_loss: bool):
    """(input_ids, trained [0/1]) of one prompt/completion row as TRL's SFTTrainer prepares it."""
    from trl.trainer.sft_trainer import SFTTrainer

    args = SimpleNamespace(dataset_num_proc=None, dataset_text_field="text", assistant_only_loss=assistant_only_loss,
                           max_length=None, padding_free=False, shuffle_dataset=False)
    stub = SimpleNamespace(_tokenizer=tokenizer, completion_only_loss=True, chat_template=None)
    out = SFTTrainer._prepare_dataset(stub, datasets.Dataset.from_list([row]), tokenizer, args, False, None, "t")[0]
    return list(out["input_ids"]), [int(label != -100) for label in out["labels"]]


@pytest.fixture
def marked(tokenizer):
    tok = copy.copy(tokenizer)
    tok.chat_template = MARKED_SMOLLM2
    return tok


@pytest.mark.parametrize("start", ["  Hello", "\n\nHello", " \tHello", "Hello", " Hello"])
@pytest.mark.parametrize("markers", [False, True])
def test_a_completion_with_leading_whitespace_trains_as_trl_does(tokenizer, marked, start, markers):
    # SmolLM2 tokenizes the generation prompt's "\n" with the first of two whitespace characters as one token: we
    # refused the row ("tokens merge across a turn boundary"); TRL trains the whole conversation's ids from where
    # they part from the tokenized prompt, the merged token included
    tok = marked if markers else tokenizer
    completion = [{"role": "assistant", "content": start + " there."}]
    pc = encode_sft_example(tok, {"prompt": PROMPT, "completion": completion}, where="x.jsonl:3")
    ref_ids, ref_trained = trl_labels(tok, {"prompt": PROMPT, "completion": completion}, assistant_only_loss=markers)
    assert (list(pc.ids), list(pc.completion_mask)) == (ref_ids, ref_trained)
    assert tok.decode([i for i, m in zip(pc.ids, pc.completion_mask) if m]).endswith(start + " there.<|im_end|>\n")


def test_the_merge_is_warned_once_naming_the_row(tokenizer, caplog, monkeypatch):
    monkeypatch.setattr(chat_masks, "_merge_warned", [False])
    with caplog.at_level(logging.WARNING, logger="reasoner.data.chat_masks"):
        for line in (3, 4):
            encode_sft_example(tokenizer, {"prompt": PROMPT, "completion": "  Hello"}, where=f"x.jsonl:{line}")
    assert len(caplog.records) == 1
    assert caplog.records[0].getMessage().startswith("x.jsonl:3: tokens merge where the prompt meets the completion")


def test_a_merge_after_a_tool_turn_is_still_named(tokenizer):
    # the generation prompt after a tool turn is context, the assistant's "  Sure" its output: a merged token there
    # would be half context, half output, and TRL has no per-turn mask to compare with, so it stays an error
    completion = [{"role": "assistant", "content": "Let me check."}, {"role": "tool", "content": "ok"},
                  {"role": "assistant", "content": "  Sure."}]
    with pytest.raises(ValueError, match=r"x\.jsonl:7: tokens merge across a turn boundary: .* expected each turn "
                                         r"after the first to start on a token boundary"):
        encode_sft_example(tokenizer, {"prompt": PROMPT, "completion": completion}, where="x.jsonl:7")


def test_a_template_that_renders_the_prompt_differently_is_still_refused_on_the_marker_path(marked):
    # the prompt's text is not the start of the conversation's text: no mask can say which tokens are the model's
    counted = copy.copy(marked)
    counted.chat_template = "{{ messages | length }}" + MARKED_SMOLLM2
    with pytest.raises(ValueError, match=r"x\.jsonl:2: chat template is not prefix-stable"):
        encode_sft_example(counted, {"prompt": PROMPT, "completion": "Hello"}, where="x.jsonl:2")
