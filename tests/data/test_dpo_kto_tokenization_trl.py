"""DPO and KTO rows against TRL 1.16's own preprocessing on the same rows and tokenizers: `DPOTrainer._prepare_dataset`
and `KTOTrainer._prepare_dataset` (their `tokenize_fn`, EOS appending and implicit-prompt handling, unchanged) run on
a stand-in `self` (all they read of it is `_tokenizer`, and KTO's `calculate_KL`), so the reference is TRL's code,
not a copy of its rule. Each of our rows (tokens, loss mask) must equal TRL's prompt_ids + chosen_ids (or
completion_ids) with its completion mask [0] * len(prompt_ids) + [1] * len(completion ids), exactly.

We tokenized prompt and completion apart (`reasoner.tokenization.encode_prompt_completion`, which is still the
sampler's rule and which `old_rule` below applies) and took no `chat_template_kwargs`: a completion merging with the
prompt's end (" Paris" after "...is", "  Hello" after "...assistant\\n"), plain text, and a template whose prompt
alone ends differently gave other tokens than TRL's. Rows: hand-written plain-text and conversational edge cases,
rows with tools (list and JSON string) and chat_template_kwargs, and real rows made from ../shared/data (MMLU-STEM
questions as plain-text pairs, e-CARE questions as conversational pairs: the correct answer chosen, a wrong one
rejected). Tokenizers: SmolLM2's, and two BOS-adding ones built from it as tests/test_prompt_bos.py builds them.
"""

from __future__ import annotations

import copy
import json
import logging
from types import SimpleNamespace

import datasets
import numpy as np
import pytest

from reasoner.data import chat_masks
from reasoner.data.pipeline import prepare_dpo
from reasoner.data.unpaired import prepare_kto
from reasoner.tokenization import encode_prompt_completion
from tests.test_prompt_bos import _add_bos_token, _llama3_style

SEQ = 1024
USER = [{"role": "user", "content": "Hi"}]
# ChatML as SmolLM2 writes it, reading a tools list and two template variables: `shout` upper-cases the messages,
# `style` is written after the generation prompt only (so the prompt alone ends differently: Gemma 4's case)
TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{{ tools | tojson }}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if shout %}{{ m['content'] | upper }}{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if style %}({{ style }}) {% endif %}{% endif %}")
TOOLS = [{"type": "function", "function": {"name": "z3_solve", "description": "Run Z3 on an SMT-LIB script.",
                                           "parameters": {"type": "object", "properties": {
                                               "smt_code": {"type": "string"}}}}}]

PLAIN = [  # (prompt, chosen, rejected)
    ("The capital of France is", " Paris", " London"),
    ("The capital of France is ", "Paris", "London"),
    ("2 + 3 =", " 5", "5"),
    ("Hello", "world", " world"),
    ("Answer:\n", "\n\nYes.", "No."),
    ("Say it twice:", " ok ok<|im_end|>", " ok"),  # the first already ends with the EOS text
    ("Question: is 7 prime?\nAnswer:", " yes, 7 is prime.", " no, 7 = 1 * 7."),
]
CHAT = [  # (prompt, chosen, rejected): messages, or text for the assistant's turn
    (USER, "  Hello there.", "Hello there."),
    (USER, "\n\nHello", " Hello"),
    (USER, [{"role": "assistant", "content": " Sure."}], [{"role": "assistant", "content": "No."}]),
    ([{"role": "system", "content": "Be brief."}, *USER], "Hi!", " \tHi!"),
    ([*USER, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"}], "4", "  5"),
]


def trl_rows(trainer: str, tokenizer, rows: list[dict]) -> list[list[tuple[list[int], list[int]]]]:
    """Per row, per completion: (ids, completion mask) of TRL's preprocessing, its collator's sequence."""
    from trl.trainer.dpo_trainer import DPOTrainer
    from trl.trainer.kto_trainer import KTOTrainer

    args = SimpleNamespace(dataset_num_proc=None, max_length=None, truncation_mode="keep_start",
                           per_device_train_batch_size=1)
    cls, keys = (DPOTrainer, ("chosen", "rejected")) if trainer == "dpo" else (KTOTrainer, ("completion",))
    stub = SimpleNamespace(_tokenizer=tokenizer, calculate_KL=False)
    out = cls._prepare_dataset(stub, datasets.Dataset.from_list(rows), tokenizer, args, "t")
    return [[(list(r["prompt_ids"]) + list(r[f"{k}_ids"]), [0] * len(r["prompt_ids"]) + [1] * len(r[f"{k}_ids"]))
             for k in keys] for r in out]


def our_rows(trainer: str, tokenizer, rows: list[dict]) -> list[list[tuple[list[int], list[int]]]]:
    """The same of our `prepare_dpo` / `prepare_kto` rows (every row kept: SEQ holds them all)."""
    if trainer == "dpo":
        out, stats = prepare_dpo(rows, tokenizer, seq_len=SEQ)
        sides = ("chosen_", "rejected_")
    else:
        out, stats = prepare_kto(rows, tokenizer, seq_len=SEQ)
        sides = ("",)
    assert stats.kept == len(rows)
    result = []
    for r in range(len(rows)):
        result.append([])
        for s in sides:
            n = int(out[f"{s}segment_ids"][r].sum())
            result[-1].append((out[f"{s}tokens"][r, :n].tolist(), out[f"{s}loss_mask"][r, :n].tolist()))
    return result


def old_rule(trainer: str, tokenizer, rows: list[dict]) -> list[list[tuple[list[int], list[int]]]]:
    """What we did before: prompt and completion tokenized apart and concatenated (`encode_prompt_completion`, with
    the tools and no template variables), a plain-string prompt read as one user message (our readers' rule)."""
    keys = ("chosen", "rejected") if trainer == "dpo" else ("completion",)
    out = []
    for row in rows:
        prompt = [{"role": "user", "content": row["prompt"]}] if isinstance(row["prompt"], str) else row["prompt"]
        tools = json.loads(row["tools"]) if isinstance(row.get("tools"), str) else row.get("tools")
        sides = [encode_prompt_completion(tokenizer, prompt=prompt, completion=row[k], tools=tools) for k in keys]
        out.append([(list(pc.ids), list(pc.completion_mask)) for pc in sides])
    return out


def as_trl(row: dict) -> dict:
    """`row` in TRL's own conversational form: a text completion after a message prompt is the assistant's turn."""
    if isinstance(row["prompt"], str):
        return row
    return {k: [{"role": "assistant", "content": v}] if k in ("chosen", "rejected", "completion") and isinstance(
        v, str) else v for k, v in row.items()}


def unpaired(pairs: list[dict]) -> list[dict]:
    return [{**{k: v for k, v in p.items() if k not in ("chosen", "rejected")}, "completion": p[key], "label": label}
            for key, label in (("chosen", True), ("rejected", False)) for p in pairs]


def compare(trainer: str, tokenizer, rows: list[dict], rule=our_rows) -> int:
    """How many rows differ from TRL's (ids or mask of any side)."""
    ours, ref = rule(trainer, tokenizer, rows), trl_rows(trainer, tokenizer, [as_trl(r) for r in rows])
    assert len(ref) == len(rows)  # TRL dropped none
    return sum(a != b for a, b in zip(ours, ref))


@pytest.fixture(scope="module")
def templated(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = TEMPLATE
    return tok


@pytest.fixture(scope="module", params=["smollm2", "add_bos_token", "llama3_style"])
def tok(request, tokenizer):
    return {"smollm2": lambda t: t, "add_bos_token": _add_bos_token, "llama3_style": _llama3_style}[request.param](
        tokenizer)


def real_pairs(shared_data, n: int = 120) -> tuple[list[dict], list[dict]]:
    """(plain-text pairs from MMLU-STEM, conversational pairs from e-CARE): the correct answer chosen."""
    plain = []
    with open(shared_data / "mmlu_stem" / "test.jsonl", encoding="utf-8") as f:
        for line in list(f)[:n]:
            q = json.loads(line)
            options = "".join(f"\n{'ABCD'[j]}. {c}" for j, c in enumerate(q["choices"]))
            wrong = q["choices"][(q["answer"] + 1) % len(q["choices"])]
            plain.append({"prompt": f"Question: {q['question']}{options}\nAnswer:",
                          "chosen": f" {q['choices'][q['answer']]}", "rejected": f" {wrong}"})
    chat = []
    with open(shared_data / "ecare" / "dev.jsonl", encoding="utf-8") as f:
        for line in list(f)[:n]:
            q = json.loads(line)
            hyps = [q["hypothesis1"], q["hypothesis2"]]
            ask = f"{q['premise']} What is the more plausible {q['ask-for']}?\n1. {hyps[0]}\n2. {hyps[1]}"
            chat.append({"prompt": [{"role": "user", "content": ask}], "chosen": hyps[q["label"]],
                         "rejected": hyps[1 - q["label"]]})
    return plain, chat


def hand_rows() -> tuple[list[dict], list[dict]]:
    plain = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PLAIN]
    chat = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in CHAT]
    return plain, chat


def test_dpo_and_kto_rows_equal_trls_on_edge_cases_and_real_rows(tok, shared_data):
    plain, chat = hand_rows()
    real_plain, real_chat = real_pairs(shared_data)
    groups = [plain, chat, real_plain, real_chat]
    assert sum(map(len, groups[2:])) >= 200
    for rows in groups:  # TRL decides plain vs conversational (EOS appending) on a dataset's first row
        assert compare("dpo", tok, rows) == 0
        assert compare("kto", tok, unpaired(rows)) == 0


def test_the_old_rule_differed_from_trl(tokenizer):
    # the count recorded in the commit: hand-written edge cases and real rows on SmolLM2's tokenizer, DPO pairs
    # (each plain row differs: it was rendered as a chat; conversational rows differ where tokens merge)
    plain, chat = hand_rows()
    assert [compare("dpo", tokenizer, rows, rule=old_rule) for rows in (plain, chat)] == [len(plain), 4]


def test_real_rows_old_rule_count(tokenizer, shared_data):
    real_plain, real_chat = real_pairs(shared_data)
    assert [compare("dpo", tokenizer, rows, rule=old_rule) for rows in (real_plain, real_chat)] == [len(real_plain), 0]


def test_tools_and_chat_template_kwargs_reach_the_template_as_trls(templated):
    base = {"prompt": USER, "chosen": "Hello.", "rejected": "  Bye."}
    rows = [
        [{**base, "tools": TOOLS}], [{**base, "tools": json.dumps(TOOLS)}],  # TRL's tools: a list or JSON text
        [{**base, "chat_template_kwargs": {"shout": True}}, {**base, "chat_template_kwargs": {"shout": False}}],
        [{**base, "tools": json.dumps(TOOLS), "chat_template_kwargs": {"style": "terse"}}],
    ]
    for group in rows:
        assert compare("dpo", templated, group) == 0
        assert compare("kto", templated, unpaired(group)) == 0
    # the template reads them: the ids change (tools in a system turn, upper case, the style's tail cut off)
    a, b = (prepare_dpo([row], templated, seq_len=SEQ)[0]["chosen_tokens"][0] for row in rows[2])
    assert not np.array_equal(a, b)
    assert templated.decode(prepare_dpo(rows[0][:1], templated, seq_len=SEQ)[0]["chosen_tokens"][0]).startswith(
        '<|im_start|>system\n<tools>[{"type": "function"')
    # the old rule ignored the template variables
    assert [compare("dpo", templated, group, rule=old_rule) for group in rows] == [1, 1, 2, 1]


def test_a_cut_prompt_is_warned_once_and_counted(templated, caplog, monkeypatch):
    monkeypatch.setattr(chat_masks, "_cut_warned", [False])
    rows = [{"prompt": USER, "chosen": "A", "rejected": "B", "chat_template_kwargs": {"style": "terse"}},
            {"prompt": USER, "chosen": "A", "rejected": "B"},
            {"prompt": USER, "chosen": "  A", "rejected": "B"}]
    with caplog.at_level(logging.WARNING, logger="reasoner.data.chat_masks"):
        _, stats = prepare_dpo(rows, templated, seq_len=SEQ)
        _, kto_stats = prepare_kto(unpaired(rows), templated, seq_len=SEQ)
    assert (stats.prompt_cut, kto_stats.prompt_cut) == (2, 3)  # KTO: per example, "B" after row 2's prompt is whole
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert message.startswith("train split, row 0: the tokenized prompt is not a prefix") and "'(terse) '" in message


def test_bad_rows_are_named(templated):
    with pytest.raises(ValueError, match=r"train split, row 1: the prompt is plain text but \['rejected'\] is not"):
        prepare_dpo([{"prompt": "a", "chosen": "b", "rejected": "c"},
                     {"prompt": "a", "chosen": "b", "rejected": [{"role": "assistant", "content": "c"}]}],
                    templated, seq_len=SEQ)
    with pytest.raises(ValueError, match=r"train split, row 0: chat_template_kwargs must be an object"):
        prepare_kto([{"prompt": USER, "completion": "b", "label": True, "chat_template_kwargs": "shout"}],
                    templated, seq_len=SEQ)
    with pytest.raises(ValueError, match=r"train split, row 0: chat_template_kwargs sets \['add_generation_prompt'\]"):
        prepare_dpo([{"prompt": USER, "chosen": "b", "rejected": "c",
                      "chat_template_kwargs": {"add_generation_prompt": False}}], templated, seq_len=SEQ)
    with pytest.raises(ValueError, match=r"train split, row 0: tools must be a list of tool schemas"):
        prepare_dpo([{"prompt": USER, "chosen": "b", "rejected": "c", "tools": "{not json"}], templated, seq_len=SEQ)


def test_overflow_still_truncates_or_drops_as_documented(tokenizer):
    # " Paris" merges with nothing here, but the prompt ids TRL keeps are what truncation counts against
    row = {"prompt": "The capital of France is", "chosen": " Paris and a very long tail of words" * 3,
           "rejected": " London"}
    (full,) = trl_rows("dpo", tokenizer, [row])
    n_chosen, n_prompt = len(full[0][0]), full[0][1].index(1)
    rows, stats = prepare_dpo([row], tokenizer, seq_len=n_chosen - 1, overflow="truncate")
    assert (stats.truncated, stats.kept) == (1, 1)
    assert rows["chosen_tokens"][0].tolist() == full[0][0][:n_chosen - 1]
    with pytest.raises(Exception, match="no preference pair"):
        prepare_dpo([row], tokenizer, seq_len=n_chosen - 1, overflow="drop")
    # a prompt that fills seq_len leaves no completion token: dropped, as TRL's filter drops it
    with pytest.raises(Exception, match="no example with completion tokens"):
        prepare_kto(unpaired([row]), tokenizer, seq_len=n_prompt, overflow="truncate")


@pytest.mark.parametrize("shout", [False, True])
def test_a_multi_turn_completion_has_trls_ids_and_masks_its_tool_turn(tokenizer, templated, shout):
    # TRL trains every completion id; we keep its ids and mask the tool turn and the generation prompt after it
    # (context, not the model's output), as our SFT path masks them, with the row's template variables applied
    tok = templated if shout else tokenizer
    chosen = [{"role": "assistant", "content": "Let me check."}, {"role": "tool", "content": "ok"},
              {"role": "assistant", "content": "Sure."}]
    row = {"prompt": USER, "chosen": chosen, "rejected": "  No.", **({"chat_template_kwargs": {"shout": True}}
                                                                     if shout else {})}
    (ref,) = trl_rows("dpo", tok, [as_trl(row)])
    (ours,) = our_rows("dpo", tok, [row])
    assert [ids for ids, _ in ours] == [ids for ids, _ in ref]
    assert ours[1] == ref[1]  # the one-turn side: TRL's mask too
    (ids, mask), (_, ref_mask) = ours[0], ref[0]
    untrained = [i for i, m, r in zip(ids, mask, ref_mask) if r and not m]
    tool = "<|im_start|>tool\nOK<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(untrained) == (tool if shout else tool.replace("OK", "ok"))
    # the rejected side's "  No." merges with the prompt's last "\n", so both sides train it (TRL's shared prompt)
    trained = "\nLet me check.<|im_end|>\nSure.<|im_end|>\n"
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == (trained.upper().replace("<|IM_END|>", "<|im_end|>")
                                                               if shout else trained)


def test_kto_jsonl_records_keep_their_template_variables(templated, tmp_path):
    # normalize_unpaired kept prompt, completion, tools and label only: a row's chat_template_kwargs never reached
    # the template; unpaired and paired records (both halves of a pair) now keep it
    from reasoner.data.unpaired import read_jsonl_splits

    kwargs = {"shout": True}
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "train.jsonl").write_text(json.dumps(
        {"prompt": USER, "completion": "Hello.", "label": True, "chat_template_kwargs": kwargs}) + "\n")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "train.jsonl").write_text(json.dumps(
        {"prompt": USER, "chosen": "Hello.", "rejected": "Bye.", "chat_template_kwargs": kwargs}) + "\n")
    for name, n in (("u", 1), ("p", 2)):
        rows = read_jsonl_splits(tmp_path / name)["train"]
        assert [rows[i]["chat_template_kwargs"] for i in range(n)] == [kwargs] * n
        reference = [{"prompt": USER, "completion": rows[i]["completion"], "label": rows[i]["label"],
                      "chat_template_kwargs": kwargs} for i in range(n)]
        assert our_rows("kto", templated, rows) == trl_rows("kto", templated, [as_trl(r) for r in reference])
        assert "HELLO." in templated.decode(prepare_kto(rows, templated, seq_len=SEQ)[0]["tokens"][0])
