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
    monkeypatch.setattr(chat_masks, "_cut_warned", [False])
    with caplog.at_level(logging.WARNING, logger="reasoner.data.chat_masks"):
        for line in (3, 4):
            encode_sft_example(tokenizer, {"prompt": PROMPT, "completion": "  Hello"}, where=f"x.jsonl:{line}")
    assert len(caplog.records) == 1
    assert caplog.records[0].getMessage().startswith("x.jsonl:3: the tokenized prompt is not a prefix of the "
                                                     "tokenized prompt + completion")


def test_a_merge_after_a_tool_turn_is_still_named(tokenizer):
    # the generation prompt after a tool turn is context, the assistant's "  Sure" its output: a merged token there
    # would be half context, half output, and TRL has no per-turn mask to compare with, so it stays an error
    completion = [{"role": "assistant", "content": "Let me check."}, {"role": "tool", "content": "ok"},
                  {"role": "assistant", "content": "  Sure."}]
    with pytest.raises(ValueError, match=r"x\.jsonl:7: tokens merge across a turn boundary: .* expected each turn "
                                         r"after the first to start on a token boundary"):
        encode_sft_example(tokenizer, {"prompt": PROMPT, "completion": completion}, where="x.jsonl:7")


@pytest.mark.parametrize("markers", [False, True])
def test_a_template_that_renders_the_prompt_differently_trains_as_trl_does(tokenizer, marked, markers):
    # the prompt's text is not the start of the conversation's text (the template writes the message count first):
    # we refused the row on both paths; TRL trains the conversation's ids from where they part from the prompt's
    counted = copy.copy(marked if markers else tokenizer)
    counted.chat_template = "{{ messages | length }}" + counted.chat_template
    row = {"prompt": PROMPT, "completion": [{"role": "assistant", "content": "Hello"}]}
    pc = encode_sft_example(counted, row, where="x.jsonl:2")
    assert (list(pc.ids), list(pc.completion_mask)) == trl_labels(counted, row, assistant_only_loss=markers)
    assert pc.prompt_len == 0  # "1" vs "2": nothing is shared
    # several completion turns without markers: no mask would say which tokens are the model's, still an error
    turns = [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Again"},
             {"role": "assistant", "content": "Hello"}]
    if not markers:
        with pytest.raises(ValueError, match=r"^x\.jsonl:2: chat template renders the earlier turns differently"):
            encode_sft_example(counted, {"prompt": PROMPT, "completion": turns}, where="x.jsonl:2")


# SmolLM2's layout with tool calls rendered Qwen-style, once with TRL's {% generation %} markers and once without
TOOL_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}{% if message['role'] == 'assistant' %}"
    "[G]{% if message.content %}{{ message.content }}{% endif %}{% if message.tool_calls %}"
    "{% for call in message.tool_calls %}{{ '<tool_call>' + (call.function | tojson) + '</tool_call>' }}{% endfor %}"
    "{% endif %}{{ '<|im_end|>\\n' }}[/G]{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CALL = {"type": "function", "function": {"name": "z3_solve", "arguments": {"smt_code": "(check-sat)"}}}
TOOL_CONVERSATION = [{"role": "user", "content": "Is Max sour?"}, {"role": "assistant", "tool_calls": [CALL]},
                     {"role": "tool", "content": "unsat"}, {"role": "assistant", "content": "No."}]


def test_assistant_messages_that_only_call_tools_train_as_trl_does(tokenizer, tmp_path):
    # {"role": "assistant", "tool_calls": [...]} without content (OpenAI's and TRL's format): TRL trains it, we
    # refused every such row ("messages must be a non-empty list of {role, content} messages")
    import json

    from reasoner.data.chat_jsonl import build_chat_dataset
    from reasoner.data.hf_datasets import examples_of

    (tmp_path / "train.jsonl").write_text(json.dumps({"messages": TOOL_CONVERSATION}) + "\n")
    built = build_chat_dataset(tmp_path, kind="sft", data_dir=tmp_path / "tfds")["train"][0]
    marked, plain = copy.copy(tokenizer), copy.copy(tokenizer)
    marked.chat_template = TOOL_TEMPLATE.replace("[G]", "{% generation %}").replace("[/G]", "{% endgeneration %}")
    plain.chat_template = TOOL_TEMPLATE.replace("[G]", "").replace("[/G]", "")
    example = examples_of(datasets.Dataset.from_list([{"messages": TOOL_CONVERSATION}]), kind="sft", name="m")[0]
    assert example == built and example["completion"][0] == {**TOOL_CONVERSATION[1], "content": None}
    ref_ids, ref_trained = trl_labels(marked, {"messages": TOOL_CONVERSATION}, assistant_only_loss=True)
    assert '<tool_call>{"name": "z3_solve"' in marked.decode([i for i, t in zip(ref_ids, ref_trained) if t])
    for tok in (marked, plain):
        pc = encode_sft_example(tok, example, where="m, row 0")
        assert (list(pc.ids), list(pc.completion_mask)) == (ref_ids, ref_trained)
    # a template that renders no tool calls (SmolLM2's reads message['content']): an error naming the row
    with pytest.raises(ValueError, match=r"^m, row 0: 'dict object' has no attribute 'content'"):
        encode_sft_example(tokenizer, example, where="m, row 0")


def test_sharegpt_style_conversations_train_as_trl_does(marked, tmp_path):
    # TRL converts a `conversations` column of {"from", "value"} messages to `messages` (maybe_convert_to_chatml);
    # we refused it (JSONL: "missing ['prompt', 'completion']"; datasets: "match none of TRL's sft formats")
    import json

    from reasoner.data.chat_jsonl import build_chat_dataset
    from reasoner.data.hf_datasets import examples_of

    conversation = [{"from": "user", "value": "Is Max sour?"}, {"from": "assistant", "value": "No."},
                    {"from": "user", "value": "Sure?"}, {"from": "assistant", "value": "Yes."}]
    (tmp_path / "train.jsonl").write_text(json.dumps({"conversations": conversation}) + "\n")
    built = build_chat_dataset(tmp_path, kind="sft", data_dir=tmp_path / "tfds")["train"][0]
    example = examples_of(datasets.Dataset.from_list([{"conversations": conversation}]), kind="sft", name="m")[0]
    assert built == example
    pc = encode_sft_example(marked, example, where="m, row 0")
    ref_ids, ref_trained = trl_labels(marked, {"conversations": conversation}, assistant_only_loss=True)
    assert (list(pc.ids), list(pc.completion_mask)) == (ref_ids, ref_trained)
