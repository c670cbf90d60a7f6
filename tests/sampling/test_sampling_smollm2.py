"""The static sampler and the rollout engine on the real SmolLM2-135M-Instruct (f32): greedy tokens
equal transformers' greedy `generate` for every prompt (the engine with fewer slots than prompts, so rows refill
slots mid-run, and a block size that splits the prompts' last blocks); each one's log-probs equal the
teacher-forced forward's within the float32 error at SmolLM2's depth (`tests.tolerances.logprob_atol`). The engine
with prompt-lookup speculation (`speculate=6`) too, keeping draft tokens (in the `full` tier: `make test-all`)."""

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


def _check_against_transformers(smollm2, smollm2_torch, tokenizer, prompts, runs: dict) -> None:
    """Each of `runs` (name -> results for `prompts`, greedy, NEW_TOKENS) equals transformers' greedy `generate`
    token for token, with its finish reason, and its log-probs equal the teacher-forced forward's."""
    import torch

    eos = stop_token_ids(tokenizer)
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = smollm2_torch.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                     eos_token_id=list(eos), pad_token_id=tokenizer.pad_token_id)
    compared = 0
    for i, prompt in enumerate(prompts):
        theirs = out[i, width:].tolist()
        stop = next((j + 1 for j, t in enumerate(theirs) if t in eos), len(theirs))
        want = theirs[:stop]
        finish = "eos" if want and want[-1] in eos else "length"
        full = prompt + want
        logits = teacher_forced_logits(smollm2, full)[len(prompt) - 1: len(full) - 1]
        forward = log_softmax(logits)[np.arange(len(want)), want]
        atol = logprob_atol(logits, smollm2.cfg, seq_len=len(full))
        for name, results in runs.items():
            r = results[i]
            assert list(r.tokens) == want, f"prompt {i}: {name} {r.text!r} vs {tokenizer.decode(want)!r}"
            assert r.finish_reason == finish, f"prompt {i}: {name}"
            np.testing.assert_allclose(r.model_logprobs, forward, atol=atol, err_msg=f"{name}, prompt {i}")
        compared += len(want)
    assert compared >= 6 * 16  # the chat answers are not all trivially short


def _chat_prompts(tokenizer):
    return [chat_ids(tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS]


@pytest.mark.slow
def test_sampler_and_engine_greedy_match_transformers_and_logprobs_match_forward(smollm2, smollm2_torch, tokenizer):
    prompts = _chat_prompts(tokenizer)
    params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0)
    static = Sampler(smollm2, tokenizer).generate(prompts, params)
    engine = RolloutEngine(smollm2, tokenizer, slots=4, block_size=16, chunk_steps=8)
    paged = engine.generate(prompts, params)
    assert engine.stats["prefill_calls"] >= 2  # 6 prompts through 4 slots
    _check_against_transformers(smollm2, smollm2_torch, tokenizer, prompts, {"sampler": static, "engine": paged})


@pytest.mark.slow
def test_speculating_engine_greedy_matches_transformers_and_logprobs_match_forward(smollm2, smollm2_torch, tokenizer):
    """The same with prompt-lookup speculation (`speculate=6`), keeping draft tokens."""
    prompts = _chat_prompts(tokenizer)
    speculating = RolloutEngine(smollm2, tokenizer, slots=4, block_size=16, chunk_steps=8, speculate=6)
    drafted = speculating.generate(prompts, SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0))
    _check_against_transformers(smollm2, smollm2_torch, tokenizer, prompts, {"speculating engine": drafted})
    assert int(speculating.state.accepted) >= 5  # drafts were kept (9 on chat answers that rarely repeat)


@pytest.mark.slow
def test_engine_greedy_on_the_rollout_benchmarks_workload_equals_transformers(smollm2, smollm2_torch, tokenizer):
    """Every request of `reasoner bench rollout`'s workload (its 64 chat prompts, EOS off, each request stopping at
    its own budget from the benchmark's seeded geometric draws, capped at 24 here), greedy through the engine with
    fewer slots than requests, equals transformers' greedy `generate` cut at that budget."""
    import torch

    from reasoner.benchmarks.rollout import budgets, workload

    prompts = workload(tokenizer, prompts=64)
    plan = [b[0] for b in budgets(prompts=64, samples=1, mean=8.0, cap=24)]
    engine = RolloutEngine(smollm2, tokenizer, slots=16, chunk_steps=4)
    params = SamplingParams(max_new_tokens=24, temperature=0.0, eos_ids=())
    ids = [engine.submit(p, params, prompt_index=i, budgets=(b,)) for i, (p, b) in enumerate(zip(prompts, plan))]
    done = engine.collect()
    assert engine.stats["prefill_calls"] >= 4  # 64 requests through 16 slots
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    eos = smollm2_torch.generation_config.eos_token_id
    smollm2_torch.generation_config.eos_token_id = None  # EOS off, as the benchmark runs both sides
    try:
        with torch.no_grad():
            out = smollm2_torch.generate(
                input_ids=torch.tensor([[pad] * (width - len(p)) + p for p in prompts]),
                attention_mask=torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts]),
                max_new_tokens=24, do_sample=False, pad_token_id=pad)
    finally:
        smollm2_torch.generation_config.eos_token_id = eos
    assert out.shape == (64, width + 24)
    for i, (rid, b) in enumerate(zip(ids, plan)):
        (c,) = done[rid]
        want = out[i, width:width + b].tolist()
        assert list(c.tokens) == want, f"request {i}: engine {c.text!r} vs {tokenizer.decode(want)!r}"
        assert c.finish_reason == "length" and c.num_tokens == b
    assert len(set(plan)) > 5  # the budgets are long-tailed, not one length
