"""One rule for every SFT input: a JSONL file (TFDS builder), a Hugging Face `datasets` file and in-memory rows
refuse the same conversations, each naming where the bad record is."""

import json

import datasets
import pytest

from reasoner.data.chat_jsonl import build_chat_dataset
from reasoner.data.hf_datasets import examples_of, load_chat_splits

GOOD = [{"role": "user", "content": "Is Max sour?"}, {"role": "assistant", "content": "Let me check."},
        {"role": "tool", "content": "unsat"}, {"role": "assistant", "content": "No."}]


@pytest.mark.parametrize("bad, role", [
    ({"messages": GOOD + [{"role": "user", "content": "Sure?"}]}, "user"),
    ({"messages": GOOD[:3]}, "tool"),
    ({"prompt": GOOD[:1], "completion": GOOD[1:3]}, "tool"),
])
def test_a_conversation_ending_in_a_user_or_tool_turn_is_refused_by_every_input(tmp_path, bad, role):
    # HF rows were refused ("ends with a 'user' turn") while the same JSONL line was built and trained
    from trainers.data import normalized

    good = {"messages": GOOD} if "messages" in bad else {"prompt": GOOD[:1], "completion": GOOD[1:]}
    root = tmp_path / "jsonl"
    root.mkdir()
    (root / "train.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    expected = rf": the conversation ends with a '{role}' turn; expected an SFT conversation to end with an assistant"
    with pytest.raises(ValueError, match=rf"{root / 'train.jsonl'}:2{expected}"):
        build_chat_dataset(root, kind="sft", data_dir=tmp_path / "tfds")
    with pytest.raises(ValueError, match=rf"{root / 'train.jsonl'} \[train\], row 1{expected}"):
        load_chat_splits(root / "train.jsonl", kind="sft", cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match=rf"mem, row 1{expected}"):
        examples_of(datasets.Dataset.from_list([good, bad]), kind="sft", name="mem")
    with pytest.raises(ValueError, match=rf"train split, row 1{expected}"):
        normalized([good, bad], kind="sft", split="train")
    # the good record alone reads the same through every input
    (root / "train.jsonl").write_text(json.dumps(good) + "\n")
    built = build_chat_dataset(root, kind="sft", data_dir=tmp_path / "tfds")["train"]
    hf = load_chat_splits(root / "train.jsonl", kind="sft", cache_dir=tmp_path / "cache2")["train"]
    assert built[0] == hf[0] == normalized([good], kind="sft", split="train")[0]


TOOLS = [{"type": "function", "function": {"name": "z3_solve", "description": "Run Z3.",
                                           "parameters": {"type": "object", "properties": {}}}}]


def test_tools_as_one_json_string_read_alike_from_every_input(tmp_path):
    # TRL's `tools` column may be one JSON string of the schemas (TRL's SFTTrainer json.loads it): `datasets` rows
    # parsed it, while the same JSONL line was refused ("tools must be a list of tool schemas (objects), got str")
    from trainers.data import normalized

    root = tmp_path / "jsonl"
    root.mkdir()
    rows = [{"prompt": GOOD[:1], "completion": GOOD[1:], "tools": json.dumps(TOOLS)}]
    (root / "train.jsonl").write_text(json.dumps(rows[0]) + "\n")
    built = build_chat_dataset(root, kind="sft", data_dir=tmp_path / "tfds")["train"][0]
    hf = load_chat_splits(root / "train.jsonl", kind="sft", cache_dir=tmp_path / "cache")["train"][0]
    assert built == hf == normalized(rows, kind="sft", split="train")[0] and built["tools"] == TOOLS
    bad = {**rows[0], "tools": "[{"}
    (root / "train.jsonl").write_text(json.dumps(rows[0]) + "\n" + json.dumps(bad) + "\n")
    expected = r": tools must be a list of tool schemas \(objects\) or that list as one JSON string; got a string"
    with pytest.raises(ValueError, match=rf"train\.jsonl:2{expected}"):
        build_chat_dataset(root, kind="sft", data_dir=tmp_path / "tfds")
    with pytest.raises(ValueError, match=rf"mem, row 1{expected}"):
        examples_of(datasets.Dataset.from_list([rows[0], bad]), kind="sft", name="mem")


def test_text_records_train_alike_from_jsonl_and_datasets(tokenizer, tmp_path):
    # TRL's language-modelling format {"text"}: `datasets` rows trained every token, the same JSONL line was refused
    # ("missing ['prompt', 'completion']")
    from reasoner.data.pipeline import prepare_sft

    root = tmp_path / "jsonl"
    root.mkdir()
    rows = [{"text": "All cats are grey."}, {"text": "Max is sour."}]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    built = build_chat_dataset(root, kind="sft", data_dir=tmp_path / "tfds")["train"]
    hf = load_chat_splits(root / "train.jsonl", kind="sft", cache_dir=tmp_path / "cache")["train"]
    assert [built[i] for i in range(2)] == list(hf.rows) == rows
    a, b = (prepare_sft(source, tokenizer, seq_len=32, packing=False)[0] for source in (built, hf))
    assert all((a[k] == b[k]).all() for k in a) and a["loss_mask"].sum() == sum(
        len(tokenizer(r["text"])["input_ids"]) + 1 for r in rows)
    (root / "train.jsonl").write_text(json.dumps(rows[0]) + "\n" + json.dumps({"text": " "}) + "\n")
    expected = r": text must be a non-empty string, got ' '"
    with pytest.raises(ValueError, match=rf"train\.jsonl:2{expected}"):
        build_chat_dataset(root, kind="sft", data_dir=tmp_path / "tfds")
    with pytest.raises(ValueError, match=rf"row 1{expected}"):
        load_chat_splits(root / "train.jsonl", kind="sft", cache_dir=tmp_path / "cache2")


@pytest.mark.parametrize("chosen, rejected", [
    (GOOD[:2], GOOD[:1] + [{"role": "assistant", "content": "Yes."}]),  # they part at the answer
    (GOOD[:2], GOOD),                                                   # rejected goes on after chosen's answer
    (GOOD, GOOD[:2]),
])
def test_the_implicit_dpo_prompt_is_trls(chosen, rejected):
    # a pair where one conversation extends the other: TRL's extract_prompt keeps the last shared message (the
    # answer) in both completions; we took it into the prompt and refused the empty chosen ("chosen must be a
    # string or a non-empty list")
    from trl.data_utils import extract_prompt

    from reasoner.data.chat_jsonl import normalize_record

    ours = normalize_record({"chosen": chosen, "rejected": rejected}, kind="dpo", where="p.jsonl:1")
    reference = extract_prompt({"chosen": chosen, "rejected": rejected})
    assert {k: ours[k] for k in reference} == reference
    with pytest.raises(ValueError, match=r"p\.jsonl:2: chosen and rejected share no prompt messages"):
        normalize_record({"chosen": [], "rejected": []}, kind="dpo", where="p.jsonl:2")  # TRL: a NameError


@pytest.mark.parametrize("prompt", [[{"role": "user"}], [{"content": "Is Max sour?"}], [{"role": "user", "content": 3}]])
def test_grpo_prompt_rows_obey_the_message_rule_naming_the_row(tmp_path, prompt):
    # a GRPO prompt row with a malformed message was accepted and failed later in the chat template's rendering
    # ("messages[0]: expected a dict with 'role' and 'content'"), naming no file or row
    from reasoner.data.hf_datasets import load_rows

    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"prompt": GOOD[:1]}) + "\n" + json.dumps({"prompt": prompt}) + "\n")
    with pytest.raises(ValueError, match=rf"{path} \[train\], row 1: prompt must be a string or a non-empty list of "
                                         r"\{role, content\} messages"):
        load_rows(path, split="train", prompts=True, cache_dir=tmp_path / "cache")
