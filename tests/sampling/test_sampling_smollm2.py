"""The static sampler and the rollout engine on the real SmolLM2-135M-Instruct (f32), in one pass: greedy tokens
equal transformers' greedy `generate` for every prompt (the engine with fewer slots than prompts, so rows refill
slots mid-run, and a block size that splits the prompts' last blocks); each one's log-probs equal the
teacher-forced forward's within the float32 error at SmolLM2's depth (`tests.tolerances.logprob_atol`)."""

import numpy as np
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.sampling.rollout_engine import RolloutEngine
from reasoner.tokenization import chat_ids, stop_token_ids
from tests.sampling.conftest import teacher_forced_logits
from tests.sampling.tests_sampling_refs import log_softmax
from tests.tolerances import logprob_atol

QUESTIONS = [
    "What is the capital of France?",
    "Anne is red. If someone is red then they are kind. Is Anne kind?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Explain what a hash table is in one sentence.",
    "If all cats are animals and Tom is a cat, what is Tom?",
]
NEW_TOKENS = 48


@pytest.mark.slow
def test_sampler_and_engine_greedy_match_transformers_and_logprobs_match_forward(smollm2, smollm2_torch, tokenizer):
    import torch

    prompts = [chat_ids(tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS]
    eos = stop_token_ids(tokenizer)
    params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0)
    static = Sampler(smollm2, tokenizer).generate(prompts, params)
    engine = RolloutEngine(smollm2, tokenizer, slots=4, block_size=16, chunk_steps=8)
    paged = engine.generate(prompts, params)
    assert engine.stats["prefill_calls"] >= 2  # 6 prompts through 4 slots
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = smollm2_torch.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                     eos_token_id=list(eos), pad_token_id=tokenizer.pad_token_id)
    compared = 0
    for i, (prompt, s, e) in enumerate(zip(prompts, static, paged)):
        theirs = out[i, width:].tolist()
        stop = next((j + 1 for j, t in enumerate(theirs) if t in eos), len(theirs))
        want = theirs[:stop]
        assert list(s.tokens) == want, f"prompt {i}: sampler {s.text!r} vs {tokenizer.decode(want)!r}"
        assert list(e.tokens) == want, f"prompt {i}: engine {e.text!r} vs {tokenizer.decode(want)!r}"
        finish = "eos" if want and want[-1] in eos else "length"
        assert s.finish_reason == e.finish_reason == finish
        compared += len(want)
        full = prompt + want
        logits = teacher_forced_logits(smollm2, full)[len(prompt) - 1: len(full) - 1]
        forward = log_softmax(logits)[np.arange(len(want)), want]
        atol = logprob_atol(logits, smollm2.cfg, seq_len=len(full))
        np.testing.assert_allclose(s.model_logprobs, forward, atol=atol, err_msg=f"sampler, prompt {i}")
        np.testing.assert_allclose(e.model_logprobs, forward, atol=atol, err_msg=f"engine, prompt {i}")
    assert compared >= 6 * 16  # the chat answers are not all trivially short
