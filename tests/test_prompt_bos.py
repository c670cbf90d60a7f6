"""Plain-string prompts on a BOS-adding tokenizer: `reasoner.tokenization.encode_prompt` is the one rule of GRPO's
string prompts (`trainers.data.prompt_token_ids`), the Sampler's and RolloutEngine's str prompts and `reasoner
generate`'s {"text"} lines. Their ids must be transformers' `tokenizer(text)` and TRL 1.16's GRPOTrainer's (its own
`_tokenize_prompts` on a stand-in self), BOS first: they were tokenized without special tokens, so a Llama 3 prompt
had no BOS. A rendered chat that already starts with the BOS keeps exactly one. SmolLM2, whose tokenizer adds no
special token, gets the ids it always got.

The BOS-adding tokenizers are built offline from SmolLM2's: `add_bos_token=True` (its BOS is `<|im_start|>`, id 1),
and Llama 3's arrangement, a post-processor that puts `<|endoftext|>` (id 0) first with a chat template that opens
with `{{ bos_token }}`.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest

from reasoner.cli.generate import _read_prompts
from reasoner.sampling import Sampler, SamplingParams
from reasoner.sampling.rollout_engine import RolloutEngine
from reasoner.tokenization import chat_ids, encode, encode_prompt, render_chat
from trainers.data import prompt_token_ids

TEXTS = ["hi", "All cats are grey.", " What is 2 + 3?\n", "Step 1: x = 2 ки"]
MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


def _add_bos_token(tokenizer):
    out = copy.deepcopy(tokenizer)
    out.add_bos_token = True
    return out


def _llama3_style(tokenizer):
    from tokenizers import processors

    out = copy.deepcopy(tokenizer)
    out.bos_token = "<|endoftext|>"
    out._tokenizer.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A",
                                                                  special_tokens=[("<|endoftext|>", 0)])
    out.chat_template = "{{ bos_token }}" + tokenizer.chat_template
    return out


@pytest.fixture(scope="module", params=[_add_bos_token, _llama3_style], ids=["add_bos_token", "llama3_style"])
def bos_tokenizer(request, tokenizer):
    out = request.param(tokenizer)
    assert out("hi")["input_ids"][0] == out.bos_token_id != tokenizer("hi")["input_ids"][0]  # it adds a BOS
    return out


def _trl_ids(tokenizer, prompts):
    """TRL 1.16's GRPOTrainer tokenizing a batch of prompts, its own code on a stand-in self."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    ids, _, _ = GRPOTrainer._tokenize_prompts(SimpleNamespace(processing_class=tokenizer), list(prompts))
    return [list(r) for r in ids]


def _template_ids(tokenizer, messages):
    out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def test_a_plain_prompt_gets_the_tokenizers_bos_as_transformers_and_trl_give_it(bos_tokenizer):
    want = [list(bos_tokenizer(t)["input_ids"]) for t in TEXTS]
    assert _trl_ids(bos_tokenizer, TEXTS) == want
    assert [encode_prompt(bos_tokenizer, t) for t in TEXTS] == want
    assert [prompt_token_ids(bos_tokenizer, t) for t in TEXTS] == want  # GRPO's string prompts
    assert all(ids[0] == bos_tokenizer.bos_token_id and ids[1] != bos_tokenizer.bos_token_id for ids in want)


def test_a_rendered_chat_string_keeps_one_bos(bos_tokenizer):
    text = render_chat(bos_tokenizer, MESSAGES)
    assert text.startswith(bos_tokenizer.bos_token)
    want = _template_ids(bos_tokenizer, MESSAGES)  # transformers: the template's BOS, no special tokens added
    bos = bos_tokenizer.bos_token_id
    assert want[0] == bos != want[1]
    assert encode_prompt(bos_tokenizer, text) == want == chat_ids(bos_tokenizer, MESSAGES)
    assert prompt_token_ids(bos_tokenizer, text) == want == prompt_token_ids(bos_tokenizer, MESSAGES)
    # TRL's plain-text path (as vLLM's /v1/completions) adds a second BOS to such a string; we do not
    assert _trl_ids(bos_tokenizer, [text]) == [[bos, *want]]


def test_smollm2_prompts_are_unchanged(tokenizer):
    """SmolLM2's tokenizer adds nothing: every string tokenizes as it did before (`encode`, no special tokens)."""
    chat = render_chat(tokenizer, MESSAGES)
    for text in [*TEXTS, chat]:
        assert encode_prompt(tokenizer, text) == encode(tokenizer, text) == list(tokenizer(text)["input_ids"])
        assert prompt_token_ids(tokenizer, text) == encode(tokenizer, text)
    assert encode_prompt(tokenizer, "hello") == [28120]
    assert encode_prompt(tokenizer, "All cats are grey.") == [4518, 7680, 359, 13917, 30]
    assert encode_prompt(tokenizer, chat) == chat_ids(tokenizer, MESSAGES)


def test_a_non_string_prompt_is_a_clear_error(tokenizer):
    with pytest.raises(TypeError, match="prompt: expected a str, got list"):
        encode_prompt(tokenizer, [1, 2])


def test_sampler_and_engine_str_prompts_follow_the_rule(bos_tokenizer):
    from tests.models_shared import TINY, random_decoder

    model = random_decoder(TINY, seed=0, scale=1.0)
    chat = render_chat(bos_tokenizer, MESSAGES)
    want = [list(bos_tokenizer("hi")["input_ids"]), _template_ids(bos_tokenizer, MESSAGES)]
    params = SamplingParams(max_new_tokens=1, temperature=0.0)
    session = Sampler(model, bos_tokenizer).start(["hi", chat], params)
    assert [h[:len(w)] for h, w in zip(session.history, want)] == want
    engine = RolloutEngine(model, bos_tokenizer, slots=2, max_len=64)
    for text, ids in zip(["hi", chat], want):
        engine.submit(text, params)
        assert list(engine.sched.queue[-1].prompt) == ids


def test_generate_reads_text_lines_with_the_rule(tmp_path, bos_tokenizer):
    path = tmp_path / "in.jsonl"
    chat = render_chat(bos_tokenizer, MESSAGES)
    path.write_text("".join(json.dumps(line) + "\n" for line in [{"text": "hi"}, {"text": chat}, {"prompt": "hi"}]))
    assert _read_prompts(str(path), bos_tokenizer) == [
        list(bos_tokenizer("hi")["input_ids"]), _template_ids(bos_tokenizer, MESSAGES),
        chat_ids(bos_tokenizer, [{"role": "user", "content": "hi"}])]


def test_served_chat_prompts_keep_one_bos(bos_tokenizer):
    """`reasoner serve` has only the chat route (no /v1/completions, so no plain-string prompt): its prompt is the
    rendered chat without added special tokens, so the template's BOS is there once, as transformers gives it."""
    from reasoner.serve.service import ChatService

    service = ChatService(SimpleNamespace(max_len=4096, vocab_size=49152), bos_tokenizer,
                          SimpleNamespace(max_rows=8), model_name="m", default_max_tokens=16)
    ids = list(service.prepare({"model": "m", "messages": MESSAGES}).prompt_ids)
    assert ids == _template_ids(bos_tokenizer, MESSAGES) and ids[0] == bos_tokenizer.bos_token_id != ids[1]
