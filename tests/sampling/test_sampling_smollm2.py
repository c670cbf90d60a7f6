"""The sampler on the real SmolLM2-135M-Instruct (f32): greedy output token-identical to
transformers' greedy `generate`, and returned log-probs equal to the teacher-forced forward's."""

import numpy as np
import pytest

from tests.sampling.conftest import teacher_forced_logits
from reasoner.sampling import Sampler, SamplingParams
from reasoner.tokenization import chat_ids, stop_token_ids
from tests.sampling.tests_sampling_refs import log_softmax

QUESTIONS = [
    "What is the capital of France?",
    "Anne is red. If someone is red then they are kind. Is Anne kind?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Explain what a hash table is in one sentence.",
    "If all cats are animals and Tom is a cat, what is Tom?",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 7?",
]
NEW_TOKENS = 64


@pytest.mark.slow
def test_greedy_matches_transformers_and_logprobs_match_forward(smollm2, smollm2_torch, tokenizer):
    import torch

    prompts = [chat_ids(tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS]
    eos = stop_token_ids(tokenizer)
    ours = Sampler(smollm2, tokenizer).generate(prompts, SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0))
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = smollm2_torch.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                     eos_token_id=list(eos), pad_token_id=tokenizer.pad_token_id)
    compared = 0
    for i, (prompt, c) in enumerate(zip(prompts, ours)):
        theirs = out[i, width:].tolist()
        stop = next((j + 1 for j, t in enumerate(theirs) if t in eos), len(theirs))
        assert list(c.tokens) == theirs[:stop], f"prompt {i}: ours {c.text!r} vs {tokenizer.decode(theirs[:stop])!r}"
        assert c.finish_reason == ("eos" if stop < NEW_TOKENS or theirs[-1] in eos else "length")
        compared += len(c.tokens)
        full = prompt + [int(t) for t in c.tokens]
        logits = teacher_forced_logits(smollm2, full)[len(prompt) - 1: len(full) - 1]
        forward_logp = log_softmax(logits)[np.arange(len(c.tokens)), c.tokens]
        np.testing.assert_allclose(c.model_logprobs, forward_logp, atol=1e-4)
    assert compared >= 8 * 16  # the chat answers are not all trivially short
