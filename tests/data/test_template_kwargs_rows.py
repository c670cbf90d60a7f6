"""Per-row `chat_template_kwargs` on every training data path, against TRL 1.16's own preparation.

TRL's SFTTrainer, DPOTrainer and KTOTrainer pass a row's `chat_template_kwargs` to `apply_chat_template`. Before:
`chat_jsonl.normalize_record` dropped the column (SFT and DPO rows from JSONL, `datasets` and in-memory rows),
`hf_datasets.example_from_row` kept only the format columns and the tools (KTO rows from `datasets` lost it too), and
the SFT encoder took no template variables; DPO/KTO reached the template through a wrapper around the tokenizer.
And an SFT row whose template renders the prompt alone differently from the prompt inside the conversation (Qwen3's
`enable_thinking=False` writes an empty think block after the generation prompt only) was refused, where TRL trains
it (and our DPO/KTO did): the sequence is the conversation's ids, the completion starts where they part from the
prompt's.

Each row goes through our readers (a JSONL directory through `trainers.data.load_splits`, a `datasets.Dataset`
through `hf_datasets.examples_of`, in-memory rows through `trainers.data.normalized`) and our `prepare_*`; TRL's
`_prepare_dataset` runs on the same row with a stand-in `self` (tests/data/test_dpo_kto_tokenization_trl.py,
tests/data/test_chat_masks_trl.py), on SmolLM2's tokenizer with a template written here.
"""

from __future__ import annotations

import copy
import json
import re

import datasets
import pytest
from ml_collections import ConfigDict

from reasoner.data.hf_datasets import examples_of
from reasoner.data.pipeline import prepare_dpo, prepare_sft
from reasoner.data.unpaired import prepare_kto
from reasoner.tokenization import encode_prompt_completion
from tests.data.test_chat_masks_trl import trl_labels
from tests.data.test_dpo_kto_tokenization_trl import as_trl, our_rows, real_pairs, trl_rows, unpaired
from trainers.data import load_splits, normalized

SEQ = 1024
# ChatML as SmolLM2 writes it, with two template variables: `concise` adds a system turn; `enable_thinking` false
# writes an empty think block after the generation prompt only (Qwen3's), so the prompt alone ends differently
TEMPLATE = (
    "{% if concise %}<|im_start|>system\nAnswer in one word.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
USER = [{"role": "user", "content": "What is the capital of France?"}]
TOOL_TURNS = [{"role": "assistant", "content": "Let me check."}, {"role": "tool", "content": "Paris"},
              {"role": "assistant", "content": "Paris."}]
KWARGS = [None, {"concise": True}, {"concise": False}, {"enable_thinking": False},
          {"concise": True, "enable_thinking": False}]


@pytest.fixture(scope="module")
def tok(tokenizer):
    out = copy.deepcopy(tokenizer)
    out.chat_template = TEMPLATE
    return out


def with_kwargs(row: dict, kwargs) -> dict:
    return row if kwargs is None else {**row, "chat_template_kwargs": kwargs}


def rows_of(kind: str) -> list[dict]:
    """Rows of `kind` (TRL's columns), one per template variable setting, and a multi-turn one with a tool turn."""
    if kind == "sft":
        base, multi = {"prompt": USER, "completion": "Paris."}, {"prompt": USER, "completion": TOOL_TURNS}
    else:
        base, multi = ({"prompt": USER, "chosen": "Paris.", "rejected": "Lyon."},
                       {"prompt": USER, "chosen": TOOL_TURNS, "rejected": "Lyon."})
    rows = [with_kwargs(base, kw) for kw in KWARGS] + [with_kwargs(multi, {"concise": True})]
    return unpaired(rows) if kind == "kto" else rows


def read(kind: str, rows: list[dict], path: str, tmp_path) -> object:
    """`rows` through one of our readers, as a trainer gets them."""
    if path == "jsonl":
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return load_splits(ConfigDict({"source": "jsonl", "path": str(tmp_path / "in")}), kind=kind,
                           workdir=tmp_path)["train"]
    if path == "datasets":  # TRL's form (Arrow takes no column of texts and message lists), a column every row has
        # (from_list reads the first row's keys), as a file's would; Arrow fills the variables a row does not set with
        # None: dropped again
        rows = [{"chat_template_kwargs": None, **as_trl(r)} for r in rows]
        return examples_of(datasets.Dataset.from_list(rows), kind=kind, name="mem")
    return normalized(rows, kind=kind, split="train")


def ours(kind: str, tok, source) -> list[list[tuple[list[int], list[int]]]]:
    """Per row, per completion: (ids, loss mask) of our prepared rows."""
    if kind != "sft":
        return our_rows(kind, tok, source)
    out, stats = prepare_sft(source, tok, seq_len=SEQ, packing=False)
    assert stats.kept == len(source)
    return [[(out["tokens"][r, :n].tolist(), out["loss_mask"][r, :n].tolist())]
            for r, n in enumerate(out["segment_ids"].sum(axis=1))]


def trl(kind: str, tok, row: dict) -> list[tuple[list[int], list[int]]]:
    """TRL's (ids, completion mask) of one row (one at a time: TRL reads `**example.get("chat_template_kwargs", {})`,
    which a None cell of a row without them would break)."""
    if kind == "sft":
        return [trl_labels(tok, as_trl(row), assistant_only_loss=False)]
    return trl_rows(kind, tok, [as_trl(row)])[0]


@pytest.mark.parametrize("path", ["jsonl", "datasets", "rows"])
@pytest.mark.parametrize("kind", ["sft", "dpo", "kto"])
def test_template_variables_reach_the_template_as_trls_on_every_path(tok, tmp_path, kind, path):
    rows = rows_of(kind)
    got, ref = ours(kind, tok, read(kind, rows, path, tmp_path)), [trl(kind, tok, row) for row in rows]
    keys = ("chosen", "rejected") if kind == "dpo" else ("completion",)
    for row, a, b in zip(rows, got, ref):
        assert [ids for ids, _ in a] == [ids for ids, _ in b], row
        for key, (_, mask), (_, ref_mask) in zip(keys, a, b):
            if isinstance(row[key], list):  # the tool turn is masked (ours), trained (TRL's); the rest is TRL's
                assert all(r >= m for m, r in zip(mask, ref_mask)) and sum(mask) < sum(ref_mask)
            else:
                assert mask == ref_mask, row
    # `concise` changes the ids (a system turn); `enable_thinking` false changes the prompt alone, whose think block
    # is then cut (TRL's rule), so the sequence is the one without it
    first = [sides[0][0] for sides in got]
    assert first[1] != first[0] and (first[2], first[3], first[4]) == (first[0], first[0], first[1])
    assert tok.decode(first[1]).startswith("<|im_start|>system\nAnswer in one word.")


@pytest.mark.parametrize("kind", ["sft", "dpo", "kto"])
def test_a_prompt_cut_by_the_template_is_counted_alike(tok, kind):
    # SFT, DPO and KTO cut the same rows' prompts (TRL's rule): those with enable_thinking false
    rows = normalized(rows_of(kind), kind=kind, split="train")
    prepare = {"sft": prepare_sft, "dpo": prepare_dpo, "kto": prepare_kto}[kind]
    assert prepare(rows, tok, seq_len=SEQ)[1].prompt_cut == (4 if kind == "kto" else 2)


def old_sft_refused(tok, row: dict) -> bool:
    """Whether our SFT path refused `row` before: it rendered prompt and completion turn by turn
    (`encode_prompt_completion`, still the multi-turn rule), which requires the prompt's text to start the
    conversation's."""
    try:
        encode_prompt_completion(tok, prompt=row["prompt"], completion=row["completion"],
                                 template_kwargs=row.get("chat_template_kwargs"))
    except ValueError as err:
        assert "renders the earlier turns differently once turn 0 (assistant) is added" in str(err)
        return True
    return False


def test_sft_rows_whose_prompt_renders_differently_alone_now_train_as_trl(tok, shared_data):
    # real e-CARE questions as SFT rows (the right hypothesis the completion), with and without enable_thinking
    # false: the old SFT path refused every row with it, none without; now every row equals TRL's ids and mask
    _, pairs = real_pairs(shared_data, n=60)
    plain = [{"prompt": p["prompt"], "completion": p["chosen"]} for p in pairs]
    thinking = [with_kwargs(r, {"enable_thinking": False}) for r in plain]
    for rows, refused in ((plain, 0), (thinking, len(thinking))):
        assert sum(old_sft_refused(tok, r) for r in rows) == refused
        got = ours("sft", tok, normalized(rows, kind="sft", split="train"))
        ref = [[trl_labels(tok, as_trl(r), assistant_only_loss=False)] for r in rows]
        assert sum(a != b for a, b in zip(got, ref)) == 0
    assert prepare_sft(normalized(thinking, kind="sft", split="train"), tok, seq_len=SEQ)[1].prompt_cut == 60


@pytest.mark.parametrize("kind", ["sft", "dpo", "kto"])
@pytest.mark.parametrize("path", ["jsonl", "datasets"])
def test_a_clashing_key_is_an_error_naming_the_file_and_row(tok, tmp_path, kind, path):
    rows = rows_of(kind)[:2]
    rows[1] = {**rows[1], "chat_template_kwargs": {"add_generation_prompt": False}}
    source = read(kind, rows, path, tmp_path)
    where = re.escape(f"{tmp_path / 'in' / 'train.jsonl'}:2") if path == "jsonl" else r"mem, row 1"
    prepare = {"sft": prepare_sft, "dpo": prepare_dpo, "kto": prepare_kto}[kind]
    with pytest.raises(ValueError, match=rf"^{where}: chat_template_kwargs sets \['add_generation_prompt'\], which "
                                         r"the chat template call sets itself"):
        prepare(source, tok, seq_len=SEQ)


@pytest.mark.parametrize("kind", ["sft", "dpo", "kto"])
def test_template_kwargs_that_are_not_an_object_are_named_on_reading(tmp_path, kind):
    rows = [with_kwargs(rows_of(kind)[0], "concise")]
    with pytest.raises(ValueError, match=r"train\.jsonl:1: chat_template_kwargs must be an object of template "
                                         r"variables .* got str"):
        read(kind, rows, "jsonl", tmp_path)
    with pytest.raises(ValueError, match=r"^train split, row 0: chat_template_kwargs must be an object"):
        normalized(rows, kind=kind, split="train")
