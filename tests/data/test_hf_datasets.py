"""Hugging Face `datasets` input in TRL's formats (reasoner.data.hf_datasets) and the assistant-only SFT loss mask
(reasoner.data.chat_masks): every loader path, masks against the chat template's own spans, the same rows as our
JSONL path, bad rows named, and the first SFT step's loss recomputed by hand."""

import copy
import json

import datasets
import numpy as np
import pytest

from reasoner.data.chat_jsonl import build_chat_dataset
from reasoner.data.hf_datasets import examples_of, load_chat_splits
from reasoner.data.pipeline import prepare_dpo, prepare_sft

SYSTEM = {"role": "system", "content": "You check proofs."}
CONVERSATIONS = [
    [SYSTEM, {"role": "user", "content": "Is Max sour?"},
     {"role": "assistant", "content": "Let me check with the solver."},
     {"role": "tool", "name": "z3_solve", "content": "unsat"},
     {"role": "assistant", "content": "Max is not sour."}],
    [{"role": "user", "content": "Two plus two?"}, {"role": "assistant", "content": "Four."},
     {"role": "user", "content": "And three plus three?"}, {"role": "assistant", "content": "Six."}],
    [SYSTEM, {"role": "user", "content": "Say yes."}, {"role": "assistant", "content": "Yes."}],
]
# SmolLM2's template with TRL-style generation markers around exactly what it writes for an assistant message
# after the header: the reference for "the assistant spans of the chat template" rendered by transformers itself
MARKED_SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|im_end|>' + '\\n' }}{% endgeneration %}{% else %}"
    "{{ message['content'] + '<|im_end|>' + '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def span_mask(tokenizer, messages, *, through="<|im_start|>"):
    """Independent reference by the tokenizer's own offsets: render the conversation once with the template, and
    mark each token lying inside an assistant message's rendering (its content up to `through`, the next turn's
    header, or the end of the text). Returns (ids, mask, text, per-token owner role)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    spans, owners, pos = [], [], 0
    for m in messages:
        start = text.index(f"{m['role']}\n{m['content']}", pos) + len(m["role"]) + 1
        end = text.find(through, start + len(m["content"]))
        end = len(text) if end < 0 else end + (0 if through == "<|im_start|>" else len(through))
        (spans if m["role"] == "assistant" else owners).append((start, end, m["role"]))
        pos = start
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    inside = lambda a, b, ranges: any(s <= a and b <= e for s, e, _ in ranges)  # noqa: E731
    mask = [int(inside(a, b, spans)) for a, b in enc["offset_mapping"]]
    roles = [next((r for s, e, r in owners if s <= a and b <= e), None) for a, b in enc["offset_mapping"]]
    return list(enc["input_ids"]), mask, text, roles


def _unpadded(rows, r):
    n = int(np.count_nonzero(rows["segment_ids"][r]))
    return list(rows["tokens"][r, :n]), list(rows["loss_mask"][r, :n])


def test_messages_dataset_from_every_loader_masks_exactly_the_assistant_spans(tokenizer, tmp_path):
    ds = datasets.Dataset.from_list([{"messages": c} for c in CONVERSATIONS])
    ds.to_json(str(tmp_path / "train.jsonl"))
    ds.save_to_disk(str(tmp_path / "saved"))
    ds.to_parquet(str(tmp_path / "train.parquet"))
    loaded = [load_chat_splits(tmp_path / name, kind="sft", cache_dir=tmp_path / "cache")["train"]
              for name in ("train.jsonl", "saved", "train.parquet")]
    assert all(list(source.rows) == list(loaded[0].rows) for source in loaded)
    # Arrow's `name: None` on messages without a name is dropped again: the rows are the conversations written
    assert [ex["prompt"] + ex["completion"] for ex in loaded[0].rows] == CONVERSATIONS

    rows, stats = prepare_sft(loaded[1], tokenizer, seq_len=128, packing=False)
    assert stats.rows == len(CONVERSATIONS)
    marked = copy.copy(tokenizer)
    marked.chat_template = MARKED_SMOLLM2
    for r, conversation in enumerate(CONVERSATIONS):
        ids, mask = _unpadded(rows, r)
        ref_ids, ref_mask, text, roles = span_mask(tokenizer, conversation)
        assert (ids, mask) == (ref_ids, ref_mask)  # token for token
        # transformers' own generation-marker mask on the same template (the marked copy renders identical text)
        assert marked.apply_chat_template(conversation, tokenize=False) == text
        hf = marked.apply_chat_template(conversation, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
        assert list(hf["input_ids"]) == ids and list(hf["assistant_masks"]) == mask
        # every token of a system, user or tool message is masked out; each assistant turn ends trained at <|im_end|>
        assert {roles[i] for i, m in enumerate(mask) if m} == {None} and any(m for m in mask)
        assert {role for role in roles if role} == {m["role"] for m in conversation if m["role"] != "assistant"}
        trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
        assert trained.count("<|im_end|>") == sum(m["role"] == "assistant" for m in conversation)


def test_generation_markers_are_used_when_the_template_has_them(tokenizer):
    from reasoner.data.chat_masks import encode_sft_example, has_generation_markers

    # a template whose markers stop at <|im_end|> (not the newline after it): the incremental path would train
    # that newline, so an exact match with the offsets reference shows the markers decided
    tight = copy.copy(tokenizer)
    tight.chat_template = MARKED_SMOLLM2.replace(
        "{% generation %}{{ message['content'] + '<|im_end|>' + '\\n' }}{% endgeneration %}",
        "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}")
    assert has_generation_markers(tight) and not has_generation_markers(tokenizer)
    conversation = CONVERSATIONS[0]
    pc = encode_sft_example(tight, {"prompt": conversation[:2], "completion": conversation[2:]}, where="t")
    ref_ids, ref_mask, _, _ = span_mask(tight, conversation, through="<|im_end|>")
    assert (list(pc.ids), list(pc.completion_mask)) == (ref_ids, ref_mask)
    prompt_text = tokenizer.apply_chat_template(conversation[:2], add_generation_prompt=True, tokenize=False)
    assert pc.prompt_len == len(tokenizer(prompt_text, add_special_tokens=False)["input_ids"])


def test_trl_formats_give_the_rows_of_the_equivalent_jsonl(tokenizer, tmp_path):
    c0, c1 = CONVERSATIONS[0], CONVERSATIONS[1]
    wrong = [{"role": "assistant", "content": "Max is sour."}]
    sft_hf = {  # TRL format -> the JSONL record of the same conversations
        "messages": [{"messages": c} for c in CONVERSATIONS[:2]],
        "prompt/completion": [{"prompt": c0[:2], "completion": c0[2:]}],
        "plain prompt/completion": [{"prompt": "Say yes.", "completion": "Yes."}],
    }
    sft_jsonl = [{"messages": c} for c in CONVERSATIONS[:2]] + [
        {"prompt": c0[:2], "completion": c0[2:]}, {"prompt": "Say yes.", "completion": "Yes."}]
    dpo_hf = {
        "prompt/chosen/rejected": [{"prompt": c0[:2], "chosen": c0[2:], "rejected": wrong}],
        "implicit prompt": [{"chosen": c1, "rejected": c1[:3] + [{"role": "assistant", "content": "Five."}]}],
        "plain": [{"prompt": "Say yes.", "chosen": "Yes.", "rejected": "No."}],
    }
    dpo_jsonl = [row for rows in dpo_hf.values() for row in rows]
    for kind, hf, jsonl in (("sft", sft_hf, sft_jsonl), ("dpo", dpo_hf, dpo_jsonl)):
        ours = [ex for name, rows in hf.items()
                for ex in examples_of(datasets.Dataset.from_list(rows), kind=kind, name=name).rows]
        root = tmp_path / kind
        root.mkdir()
        (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in jsonl))
        theirs = build_chat_dataset(root, kind=kind, data_dir=tmp_path / "tfds")["train"]
        prepare = prepare_sft if kind == "sft" else prepare_dpo
        extra = {"packing": False} if kind == "sft" else {}
        a, b = (prepare(src, tokenizer, seq_len=160, **extra)[0] for src in (ours, theirs))
        # one example per row; TFDS stores examples in its own order, so compare the rows as sorted lists (of
        # every field but DPO's row `index`, which is that order)
        key = lambda rows: sorted(tuple(tuple(rows[k][r].tolist()) for k in sorted(rows) if k != "index")  # noqa: E731
                                  for r in range(len(rows["tokens" if kind == "sft" else "chosen_tokens"])))
        assert key(a) == key(b) and len(key(a)) == len(jsonl)


def test_text_rows_train_every_token(tokenizer):
    source = examples_of(datasets.Dataset.from_list([{"text": "All cats are grey."}]), kind="sft", name="lm")
    rows, _ = prepare_sft(source, tokenizer, seq_len=32, packing=False)
    ids, mask = _unpadded(rows, 0)
    assert ids == tokenizer("All cats are grey.")["input_ids"] + [tokenizer.eos_token_id] and mask == [1] * len(ids)


def test_text_rows_keep_the_tokenizers_bos_as_trl_does(tokenizer):
    # a tokenizer that adds BOS (Llama's, Mistral's, Gemma's): TRL appends the EOS text and calls tokenizer(text), so
    # the row starts with BOS; ours tokenized without special tokens and dropped it ([6004, 2] vs TRL's [1, 6004, 2])
    import copy

    with_bos = copy.deepcopy(tokenizer)
    with_bos.add_bos_token = True
    for text in ("hi", "All cats are grey."):
        source = examples_of(datasets.Dataset.from_list([{"text": text}]), kind="sft", name="lm")
        ids, mask = _unpadded(prepare_sft(source, with_bos, seq_len=32, packing=False)[0], 0)
        reference = with_bos(text + with_bos.eos_token)["input_ids"]  # TRL's add_eos, then its _tokenize
        assert ids == reference and reference[0] == with_bos.bos_token_id and mask == [1] * len(ids)


@pytest.mark.parametrize("kind, rows, message", [
    ("sft", [{"question": "q", "answer": "a"}], r"lm.jsonl: the columns \['answer', 'question'\] match none of "
     r"TRL's sft formats; expected the columns \['messages'\] or \['conversations'\] or \['prompt', 'completion'\] "
     r"or \['text'\]"),
    ("dpo", [{"prompt": "q", "chosen": "a"}], r"columns \['chosen', 'prompt'\] match none of TRL's dpo formats"),
    ("sft", [{"messages": CONVERSATIONS[2]}, {"messages": []}], r"lm.jsonl, row 1: messages must be a non-empty list"),
    ("sft", [{"messages": "hello"}], r"row 0: messages must be .* list of \{role, content\} messages"),
    ("sft", [{"messages": CONVERSATIONS[2] + [{"role": "user", "content": "More?"}]}],
     r"row 0: the conversation ends with a 'user' turn; expected an SFT conversation to end with an assistant"),
    ("sft", [{"prompt": [SYSTEM], "completion": 3}], r"row 0: completion must be a string or a non-empty list"),
    ("dpo", [{"chosen": CONVERSATIONS[2][2:], "rejected": CONVERSATIONS[1][1:2]}], r"row 0: .*share no prompt"),
    ("sft", [{"text": ""}], r"row 0: text must be a non-empty string"),
])
def test_bad_rows_name_the_file_row_and_what_was_expected(kind, rows, message):
    with pytest.raises(ValueError, match=message):
        examples_of(datasets.Dataset.from_list(rows), kind=kind, name="lm.jsonl")


def test_templates_that_are_not_prefix_stable_are_named_errors(tokenizer):
    counted = copy.copy(tokenizer)  # rewrites the start once more turns come: the text check
    counted.chat_template = "{{ messages | length }}" + tokenizer.chat_template
    glued = copy.copy(tokenizer)  # no separators: "hel" + "lo" tokenizes apart but "hello" as one token
    glued.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert len(tokenizer("hello")["input_ids"]) < len(tokenizer("hel")["input_ids"] + tokenizer("lo")["input_ids"])
    ok = {"prompt": [{"role": "user", "content": "Hi"}], "completion": [{"role": "assistant", "content": " there."}]}
    # "hel" + "lo" at the prompt's end trains as TRL does (tests/data/test_chat_masks_trl.py); after a user turn
    # inside the completion the merged token would be half context, half output: an error
    bad = {"prompt": [{"role": "user", "content": "Hi"}], "completion": [
        {"role": "assistant", "content": " there."}, {"role": "user", "content": "hel"},
        {"role": "assistant", "content": "lo"}]}
    # a single turn after a prompt the template renders differently alone trains as TRL does (the prompt cut,
    # counted; tests/data/test_chat_masks_trl.py); several turns have no mask: an error
    again = {**ok, "completion": [*ok["completion"], {"role": "user", "content": "Again?"},
                                  {"role": "assistant", "content": "Yes."}]}
    assert prepare_sft(examples_of(datasets.Dataset.from_list([ok]), kind="sft", name="d.parquet"), counted,
                       seq_len=64)[1].prompt_cut == 1
    for tok, examples, message in ((counted, [ok, again], "renders the earlier turns differently"),
                                   (glued, [ok, bad], "tokens merge across a turn boundary: the whole conversation tokenizes")):
        source = examples_of(datasets.Dataset.from_list(examples), kind="sft", name="d.parquet")
        with pytest.raises(ValueError, match=rf"d.parquet, row {len(examples) - 1}: .*{message}"):
            prepare_sft(source, tok, seq_len=64)


def test_grpo_prompts_from_a_saved_dataset(tmp_path):
    from ml_collections import ConfigDict

    from trainers.data import load_examples

    rows = [{"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"},
            {"prompt": [{"role": "user", "content": "3+3?"}], "answer": "6"}]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows),
                          "validation": datasets.Dataset.from_list(rows[:1])}).save_to_disk(str(tmp_path / "d"))
    cfg = ConfigDict(dict(source="jsonl", path="", hf_path=str(tmp_path / "d"), hf_split="train", task="chat",
                          dataset="", limit=0))
    assert load_examples(cfg, split="train") == rows and load_examples(cfg, split="validation") == rows[:1]
    cfg.hf_split = "test"
    with pytest.raises(ValueError, match=r"data.hf_split='test': .* has the splits \['train', 'validation'\]"):
        load_examples(cfg, split="train")


def _messages_run(tmp_path):
    """A tiny SFT run (`sft_astar.py:tiny`, one layer, word-level tokenizer so the LM head is small) on a saved
    `messages` dataset given as `--config.data.hf_path`: (built run, its conversations)."""
    import jax
    from transformers import PreTrainedTokenizerFast

    from reasoner.config import load_config
    from tests.trainers.conftest import CONFIGS
    from tests.trainers.traces import word_tokenizer
    from trainers.sft import build_sft

    conversations = CONVERSATIONS + [CONVERSATIONS[1][:2]]  # 4 unpacked rows: one batch of 4
    tok_dir = word_tokenizer(tmp_path / "tok", texts=[m["content"] for c in conversations for m in c])
    datasets.Dataset.from_list([{"messages": c} for c in conversations]).save_to_disk(str(tmp_path / "data"))
    vocab = (len(PreTrainedTokenizerFast.from_pretrained(str(tok_dir))) + 7) // 8 * 8
    config = load_config(f"{CONFIGS / 'sft_astar.py'}:tiny", [
        f"--config.data.hf_path={tmp_path / 'data'}", f"--config.model.tokenizer={tok_dir}",
        f"--config.model.random.vocab_size={vocab}", "--config.model.random.num_layers=1", "--config.mesh=fsdp=-1",
        "--config.data.seq_len=48", "--config.data.packing=false", "--config.train.batch_size=4"])
    return build_sft(config, workdir=tmp_path / "run", devices=jax.devices()[:1]), conversations


def _hand_loss(logits_BxTxV, batch, *, tokenizer, conversations) -> tuple[float, int]:
    """(mean NLL, count) over the reference mask: each row is matched to its conversation, whose assistant spans
    come from `span_mask` (offsets), and position t's float64 log-softmax is scored on token t+1 where trained."""
    logits = np.asarray(logits_BxTxV, np.float64)
    top = logits.max(-1, keepdims=True)
    log_z = top[..., 0] + np.log(np.exp(logits - top).sum(-1))  # [B, T] logsumexp in float64
    references = {tuple(ids): mask for ids, mask, _, _ in (span_mask(tokenizer, c) for c in conversations)}
    nll = []
    for r, row in enumerate(batch["tokens"][0]):
        ids = tuple(row[:np.count_nonzero(batch["segment_ids"][0][r])].tolist())
        mask = references[ids]  # KeyError: the row is not exactly one conversation as the template renders it
        nll += [log_z[r, t - 1] - logits[r, t - 1, ids[t]] for t in range(1, len(ids)) if mask[t]]
    return float(np.mean(nll)), len(nll)


def _loss_atol(logits, cfg, *, expected: float, count: int) -> float:
    # each float32 log-prob is within logprob_atol of the float64 one computed here from the same float32 logits
    # (the model's reductions), and the float32 token mean adds `count` roundings of the sum
    from tests.tolerances import EPS32, logprob_atol

    return logprob_atol(logits, cfg, seq_len=48) + count * EPS32 * abs(expected)


def _logits_and_loss(s, batch):
    """Jitted forward of the run's model on the first micro-batch: (logits [B, T, V], SFT loss, trained tokens) by
    `trainers.sft.sft_loss_fn` with the step's global-token denominator."""
    import jax
    from flax import nnx

    from trainers.sft import sft_denominator, sft_loss_fn

    @jax.jit
    def forward(params, frozen, batch):
        model = nnx.merge(s.run.graphdef, params, frozen.base)
        mb = jax.tree.map(lambda x: x[0], batch)
        hidden, _ = model.hidden_states(mb["tokens"], positions_BxT=mb["positions"], segment_ids_BxT=mb["segment_ids"])
        loss, aux = sft_loss_fn(s.run.graphdef)(params, frozen, mb, sft_denominator(batch))
        return model.logits(hidden), loss, aux["tokens"]

    logits, loss, tokens = forward(s.run.state.params, s.run.frozen, batch)
    return np.asarray(logits), float(loss), int(tokens)


def test_sft_loss_on_a_messages_dataset_is_the_nll_of_the_assistant_tokens(tmp_path):
    """A tiny run read from `--config.data.hf_path`: the SFT loss of its first batch is the mean NLL recomputed by
    hand on the reference assistant mask, over exactly as many tokens (forward only: the compiled train step is
    the `full`-tier twin below)."""
    s, conversations = _messages_run(tmp_path)
    assert s.stats.completion_tokens == sum(sum(span_mask(s.run.tokenizer, c)[1]) for c in conversations)
    batch = next(s.iterator)
    logits, loss, tokens = _logits_and_loss(s, batch)
    expected, count = _hand_loss(logits, batch, tokenizer=s.run.tokenizer, conversations=conversations)
    assert tokens == count == s.stats.completion_tokens
    np.testing.assert_allclose(loss, expected, rtol=0,
                               atol=_loss_atol(logits, s.run.model_cfg, expected=expected, count=count))


def test_first_sft_step_on_a_messages_dataset_has_the_hand_loss(tmp_path):
    """`full` tier (compiling the train step costs 7-20 s on 2 shared cores): the run's real first step reports
    the hand-computed loss and token count of the suite's twin above, and takes the update."""
    import jax

    from reasoner.data.pipeline import to_global_batch

    s, conversations = _messages_run(tmp_path)
    batch = next(s.iterator)
    logits, _, _ = _logits_and_loss(s, batch)
    expected, count = _hand_loss(logits, batch, tokenizer=s.run.tokenizer, conversations=conversations)
    state, metrics = s.step(s.run.state, s.run.frozen, to_global_batch(batch, s.run.mesh))
    assert int(metrics["tokens"]) == count == s.stats.completion_tokens and int(metrics["skipped"]) == 0
    assert int(jax.device_get(state.step)) == 1
    np.testing.assert_allclose(float(metrics["loss"]), expected, rtol=0,
                               atol=_loss_atol(logits, s.run.model_cfg, expected=expected, count=count))


def test_a_malformed_jsonl_line_under_hf_path_names_file_and_line(tmp_path):
    # Arrow said "Expected object or value at position 28" and named neither
    from reasoner.data.hf_datasets import load_chat_splits

    (tmp_path / "train.jsonl").write_text('{"prompt": "hi", "completion": "x"}\n{"prompt": "hi", "completion":\n')
    with pytest.raises(ValueError, match=r"train\.jsonl:2: not valid JSON"):
        load_chat_splits(str(tmp_path), kind="sft")


def test_a_malformed_line_of_a_json_lines_json_file_names_file_and_line(tmp_path):
    # a .json file holding JSON Lines (as many TRL datasets are) failed with "DatasetGenerationError: An error
    # occurred while generating the dataset", naming no line; a broken pretty-printed document is not read by lines
    from reasoner.data.hf_datasets import load_chat_splits

    good = '{"prompt": "hi", "completion": "x"}\n'
    (tmp_path / "lines.json").write_text(good + "\n" + good + '{"prompt": "hi", "completion": }\n')
    with pytest.raises(ValueError, match=r"lines\.json:4: not valid JSON"):
        load_chat_splits(str(tmp_path / "lines.json"), kind="sft", cache_dir=tmp_path / "cache")
    (tmp_path / "doc.json").write_text('{\n  "data": [\n    {"prompt": "hi", "completion": }\n  ]\n}\n')
    with pytest.raises(ValueError, match=r"doc\.json: the datasets library could not read \['doc\.json'\]"):
        load_chat_splits(str(tmp_path / "doc.json"), kind="sft", cache_dir=tmp_path / "cache")
