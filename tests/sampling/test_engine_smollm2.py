"""The rollout engine on the real SmolLM2-135M-Instruct (f32): greedy tokens equal transformers' greedy
`generate` and the static sampler's for every prompt, with fewer slots than prompts (rows refill slots
mid-run) and a block size that splits the prompts' last blocks; log-probs equal the teacher-forced forward's."""

import numpy as np
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.sampling.rollout_engine import RolloutEngine
from reasoner.tokenization import chat_ids, stop_token_ids
from tests.sampling.conftest import teacher_forced_logits
from tests.sampling.test_sampling_smollm2 import QUESTIONS
from tests.sampling.tests_sampling_refs import log_softmax
from tests.tolerances import logprob_atol

NEW_TOKENS = 48


@pytest.mark.slow
def test_engine_greedy_matches_transformers_and_the_static_sampler(smollm2, smollm2_torch, tokenizer):
    import torch

    prompts = [chat_ids(tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS[:6]]
    eos = stop_token_ids(tokenizer)
    params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0)
    engine = RolloutEngine(smollm2, tokenizer, slots=4, block_size=16, chunk_steps=8)
    ours = engine.generate(prompts, params)
    static = Sampler(smollm2, tokenizer).generate(prompts, params)
    assert engine.stats["prefill_calls"] >= 2  # 6 prompts through 4 slots
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = smollm2_torch.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                     eos_token_id=list(eos), pad_token_id=tokenizer.pad_token_id)
    for i, (prompt, c, s) in enumerate(zip(prompts, ours, static)):
        theirs = out[i, width:].tolist()
        stop = next((j + 1 for j, t in enumerate(theirs) if t in eos), len(theirs))
        assert list(c.tokens) == theirs[:stop], f"prompt {i}: ours {c.text!r} vs {tokenizer.decode(theirs[:stop])!r}"
        assert list(c.tokens) == list(s.tokens) and c.finish_reason == s.finish_reason
        full = prompt + [int(t) for t in c.tokens]
        logits = teacher_forced_logits(smollm2, full)[len(prompt) - 1: len(full) - 1]
        # paged decode vs the plain forward: the float32 error at SmolLM2's depth relative to its logits
        np.testing.assert_allclose(c.model_logprobs, log_softmax(logits)[np.arange(len(c.tokens)), c.tokens],
                                   atol=logprob_atol(logits, smollm2.cfg, seq_len=len(full)))
