"""Multi-turn chat examples (scratchpad trajectories, TRL's conversational formats): the loss mask covers exactly
the assistant turns as the chat template lays them out, tool turns and generation prompts masked."""

import json

import pytest

from reasoner.agents.policies import TOOLS
from reasoner.data.chat_jsonl import build_chat_dataset, parse_line
from reasoner.tokenization import encode_prompt_completion, render_chat

PROMPT = [{"role": "system", "content": "You are a logician."}, {"role": "user", "content": "Is Max sour?"}]
TURNS = [
    {"role": "assistant", "content": 'Check.\n<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "(check-sat)"}}'
                                     "</tool_call>"},
    {"role": "tool", "name": "z3_solve", "content": '{"success": true, "sat_result": "unsat"}'},
    {"role": "assistant", "content": '<tool_call>{"name": "finish", "arguments": {"answer": "B"}}</tool_call>'},
]


def _template_mask(tokenizer, messages, tools):
    """The independent reference: render the whole conversation once, locate each assistant turn's span in the
    text (its content through the end-of-turn marker), and mark the tokens whose characters fall inside one."""
    text = render_chat(tokenizer, messages, add_generation_prompt=False, tools=tools)
    spans, pos = [], 0
    for m in messages:
        if m["role"] != "assistant":
            continue
        start = text.index(m["content"], pos)
        end = text.index("<|im_end|>", start) + len("<|im_end|>")
        spans.append((start, end))
        pos = end
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(s <= a and b <= e for s, e in spans)) for a, b in enc["offset_mapping"]]
    # the newline after an assistant's <|im_end|> belongs to the template's turn separator, not the turn:
    # ours renders each assistant turn through its end-of-turn marker and the trailing newline
    return enc["input_ids"], mask, text


def test_assistant_only_mask_matches_the_templates_spans(tokenizer):
    pc = encode_prompt_completion(tokenizer, prompt=PROMPT, completion=TURNS, tools=TOOLS)
    ids, mask, text = _template_mask(tokenizer, PROMPT + TURNS, TOOLS)
    assert list(pc.ids) == ids  # ChatML: per-turn pieces tokenize exactly as the whole text
    ours = list(pc.completion_mask)
    trained = [i for i, m in enumerate(ours) if m]
    reference = [i for i, m in enumerate(mask) if m]
    # ours also trains the newline the template writes right after each assistant <|im_end|>: nothing else differs
    extra = sorted(set(trained) - set(reference))
    assert set(reference) <= set(trained) and all(tokenizer.decode([ids[i]]) == "\n" for i in extra), extra
    assert len(extra) <= 2
    assert tokenizer.decode([ids[i] for i in reference]).count("<|im_end|>") == 2
    # the tool response and the generation prompts are never trained
    tool_text = TURNS[1]["content"]
    assert tool_text not in tokenizer.decode([ids[i] for i in trained])
    assert pc.prompt_len == len(tokenizer(render_chat(tokenizer, PROMPT, tools=TOOLS), add_special_tokens=False)
                                ["input_ids"])


def test_single_turn_completion_is_unchanged(tokenizer):
    text = encode_prompt_completion(tokenizer, prompt=PROMPT, completion="B")
    listed = encode_prompt_completion(tokenizer, prompt=PROMPT, completion=[{"role": "assistant", "content": "B"}])
    assert text == listed


def test_trl_formats_and_errors(tmp_path):
    messages = PROMPT + TURNS
    sft = parse_line(json.dumps({"messages": messages, "tools": TOOLS}), kind="sft", where="t.jsonl:1")
    assert json.loads(sft["prompt"]) == PROMPT and json.loads(sft["completion"]) == TURNS
    assert json.loads(sft["tools"]) == TOOLS
    wrong = PROMPT + [{"role": "assistant", "content": "A"}]
    dpo = parse_line(json.dumps({"chosen": messages, "rejected": wrong}), kind="dpo", where="t.jsonl:2")
    assert json.loads(dpo["prompt"]) == PROMPT and json.loads(dpo["rejected"]) == wrong[2:]
    for record, message in [({"messages": PROMPT}, "needs prompt messages followed by an assistant turn"),
                            ({"prompt": PROMPT, "completion": [TURNS[1]]}, "completion messages hold no assistant"),
                            ({"prompt": PROMPT, "completion": "x", "tools": "z3"}, "tools must be a list"),
                            ({"chosen": [TURNS[0]], "rejected": [TURNS[2]]}, "share no prompt messages")]:
        kind = "dpo" if "chosen" in record else "sft"
        with pytest.raises(ValueError, match=message):
            parse_line(json.dumps(record), kind=kind, where="t.jsonl:9")
    root = tmp_path / "data"
    root.mkdir()
    (root / "train.jsonl").write_text(json.dumps({"messages": messages, "tools": TOOLS}) + "\n")
    source = build_chat_dataset(root, kind="sft", data_dir=tmp_path / "tfds")["train"]
    got = source[0]
    assert len(source) == 1 and got == {"prompt": PROMPT, "completion": TURNS, "tools": TOOLS}


def test_empty_split_is_a_clear_error_and_builds_leave_no_empty_dirs(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    (root / "train.jsonl").write_text("\n  \n")
    with pytest.raises(ValueError, match=r"train.jsonl is empty: expected one sft record per line"):
        build_chat_dataset(root, kind="sft", data_dir=tmp_path / "tfds")
    assert not (tmp_path / "tfds").exists()
    (root / "train.jsonl").write_text(json.dumps({"prompt": "q", "completion": "a"}) + "\n")
    build_chat_dataset(root, kind="sft", data_dir=tmp_path / "tfds")
    empty = [p for p in (tmp_path / "tfds").rglob("*") if p.is_dir() and not any(p.iterdir())]
    assert empty == []  # TFDS's empty downloads/ tree is removed


def test_a_template_that_raises_is_named_with_its_row(tokenizer):
    # a chat template's raise_exception (Mistral's "roles must alternate") escaped as a jinja2 TemplateError with no
    # row, and a DPO pair's encoding errors named no row at all
    import copy

    from reasoner.data.pipeline import prepare_dpo, prepare_sft
    from reasoner.data.unpaired import prepare_kto

    strict = copy.deepcopy(tokenizer)
    strict.chat_template = (
        "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
        "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    ok = [{"role": "user", "content": "Q?"}]
    twice = ok + [{"role": "user", "content": "again"}]
    with pytest.raises(ValueError, match=r"train split, row 1: Conversation roles must alternate"):
        prepare_sft([{"prompt": ok, "completion": "A"}, {"prompt": twice, "completion": "B"}], strict, seq_len=64)
    with pytest.raises(ValueError, match=r"train split, row 1 \(chosen\): Conversation roles must alternate"):
        prepare_dpo([{"prompt": ok, "chosen": "A", "rejected": "B"}, {"prompt": twice, "chosen": "B", "rejected": "C"}],
                    strict, seq_len=64)
    with pytest.raises(ValueError, match=r"train split, row 0: Conversation roles must alternate"):
        prepare_kto([{"prompt": twice, "completion": "A", "label": True}], strict, seq_len=64)


def test_consecutive_assistant_turns_train_no_header(tokenizer):
    # two assistant turns in a row: the second one's "<|im_start|>assistant\n" is the template's generation prompt,
    # not model output; it was trained (4 extra tokens: mask 1 on <|im_start|>, "ass", "istant", "\n"). Reference:
    # the whole conversation rendered once, each assistant turn's span from its content through "<|im_end|>\n"
    # located by hand in the text, tokens marked by their character offsets.
    from reasoner.data.chat_masks import encode_sft_example

    turns = [{"role": "assistant", "content": "Let me think."}, {"role": "assistant", "content": "B"},
             {"role": "tool", "content": "ok"}, {"role": "assistant", "content": "C"},
             {"role": "assistant", "content": "D"}]
    pc = encode_sft_example(tokenizer, {"prompt": PROMPT, "completion": turns}, where="t.jsonl:1")
    text = render_chat(tokenizer, PROMPT + turns, add_generation_prompt=False)
    pos, spans = len(render_chat(tokenizer, PROMPT, add_generation_prompt=False)), []
    for m in turns:
        head, turn = f"<|im_start|>{m['role']}\n", f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
        assert text[pos:pos + len(turn)] == turn
        if m["role"] == "assistant":
            spans.append((pos + len(head), pos + len(turn)))
        pos += len(turn)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    reference = [int(any(s <= a and b <= e for s, e in spans)) for a, b in enc["offset_mapping"]]
    assert list(pc.ids) == list(enc["input_ids"])
    assert list(pc.completion_mask) == reference
    assert sum(reference) == 4 + 3 + 4 * 2  # "Let me think." is 4 tokens, "B" "C" "D" 1 each; + <|im_end|>, "\n"
    trained = tokenizer.decode([i for i, m in zip(pc.ids, pc.completion_mask) if m])
    assert trained == "Let me think.<|im_end|>\nB<|im_end|>\nC<|im_end|>\nD<|im_end|>\n"


def test_a_completion_that_starts_with_a_user_turn_is_named_as_such(tokenizer):
    # it was reported as "chat template renders the earlier turns differently once turn 0 (user) is added", blaming
    # the template; a DPO pair whose conversations part at a user turn (TRL's implicit prompt) reached it too
    import copy

    from reasoner.data.chat_jsonl import normalize_record
    from reasoner.data.pipeline import prepare_dpo, prepare_sft

    expected = r"completion: starts with a 'user' turn; expected it to start with an assistant turn"
    late = [{"role": "user", "content": "And Anne?"}, {"role": "assistant", "content": "A"}]
    marked = copy.deepcopy(tokenizer)
    marked.chat_template = tokenizer.chat_template.replace(
        "'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'",
        "'<|im_start|>' + message['role'] + '\n' }}{% generation %}{{ message['content'] + '<|im_end|>' + '\n' }}"
        "{% endgeneration %}{{ ''")
    from reasoner.data.chat_masks import has_generation_markers

    assert has_generation_markers(marked)
    for tok in (tokenizer, marked):
        with pytest.raises(ValueError, match=rf"train split, row 1: {expected}"):
            prepare_sft([{"prompt": PROMPT, "completion": "A"}, {"prompt": PROMPT, "completion": late}], tok,
                        seq_len=96)
    pair = normalize_record({"chosen": PROMPT + late, "rejected": PROMPT + [{"role": "user", "content": "Bob?"},
                                                                           {"role": "assistant", "content": "B"}]},
                            kind="dpo", where="p.jsonl:3")
    with pytest.raises(ValueError, match=rf"train split, row 0 \(chosen\): {expected}"):
        prepare_dpo([pair], tokenizer, seq_len=96)


def test_a_token_merge_after_a_tool_turn_is_named_as_one(tokenizer):
    # "\n\nHello" after the generation prompt's "\n": the same text, but the whole conversation tokenizes "\n\n" +
    # "\n" where the pieces give "\n" "\n" "\n"; the error blamed the template ("not prefix-stable ... use a template
    # with {% generation %} markers", which would fail the same way) and showed two identical strings. (At the
    # completion's start the merge trains as TRL trains it: tests/data/test_chat_masks_trl.py.)
    from reasoner.data.chat_masks import encode_sft_example

    prompt = [{"role": "user", "content": "Hi"}]
    context = prompt + [{"role": "assistant", "content": "Check."}, {"role": "tool", "content": "ok"}]
    text = render_chat(tokenizer, context + [{"role": "assistant", "content": "\n\nHello"}],
                       add_generation_prompt=False)
    whole = tokenizer(text, add_special_tokens=False)["input_ids"]
    k = len(tokenizer(render_chat(tokenizer, context), add_special_tokens=False)["input_ids"]) - 1  # the "\n"
    assert tokenizer.decode(whole[k:k + 2]) == "\n\n\n" and len(whole[k:k + 2]) == 2  # merged: two tokens, not three
    with pytest.raises(ValueError, match=rf"x\.jsonl:3: tokens merge across a turn boundary: .* from token {k} on, "
                                         rf"the same text split apart \(whole \[{whole[k]}, {whole[k + 1]},"):
        encode_sft_example(tokenizer, {"prompt": prompt, "completion": context[1:] + [
            {"role": "assistant", "content": "\n\nHello"}]}, where="x.jsonl:3")
