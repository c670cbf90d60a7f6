"""The sampler on tiny random decoders: greedy and log-probs against the plain forward, seeds,
shared prefill, chunking, the cache limit, chi-square through the engine, sharding and LoRA."""

import jax
import numpy as np
import pytest
from scipy import stats

from tests.sampling.conftest import teacher_forced_logits
from reasoner.sampling import Sampler, SamplingParams
from tests.sampling.tests_sampling_refs import log_softmax, reference_distribution
from tests.tolerances import logprob_atol

PROMPTS = [[5, 17, 9, 23, 2, 11, 7], [12, 3], [8, 8, 20, 1, 19]]


def check_against_forward(model, prompt, completion, *, atol=None, params=None):
    """Greedy tokens are the argmax of the plain forward on prompt+completion; model log-probs equal
    its log-softmax; sampling log-probs equal the reference filtered distribution's.

    atol (default): the float32 error of the forward at the model's depth relative to the logits (cached decode
    and the plain forward reduce in other orders), at the sampling temperature for the sampling log-probs."""
    ids = list(prompt) + [int(t) for t in completion.tokens]
    logits = teacher_forced_logits(model, ids)[len(prompt) - 1: len(ids) - 1]
    tokens = np.asarray(completion.tokens)
    np.testing.assert_allclose(completion.model_logprobs, log_softmax(logits)[np.arange(len(tokens)), tokens],
                               atol=atol if atol is not None else logprob_atol(logits, model.cfg, seq_len=len(ids)))
    if params is None or params.greedy:
        np.testing.assert_array_equal(tokens, np.argmax(logits, -1))
        assert np.all(completion.sample_logprobs == 0)
    else:
        ref = np.stack([reference_distribution(lg, temperature=params.temperature, top_k=params.top_k,
                                               top_p=params.top_p) for lg in logits])
        scaled = logits / max(params.temperature, 1e-6)
        np.testing.assert_allclose(completion.sample_logprobs, np.log(ref[np.arange(len(tokens)), tokens]),
                                   atol=atol if atol is not None else logprob_atol(scaled, model.cfg, seq_len=len(ids)))


def test_greedy_and_logprobs_equal_plain_forward(small_vocab_model):
    out = Sampler(small_vocab_model).generate(PROMPTS, SamplingParams(max_new_tokens=12, temperature=0.0, eos_ids=()))
    assert [c.prompt_index for c in out] == [0, 1, 2]
    for prompt, c in zip(PROMPTS, out):
        assert c.finish_reason == "length" and c.num_tokens == 12
        check_against_forward(small_vocab_model, prompt, c)


def test_sampled_logprobs_seeds_and_shared_prefill(small_vocab_model):
    sampler = Sampler(small_vocab_model)
    params = SamplingParams(max_new_tokens=10, temperature=0.8, top_k=10, top_p=0.9, n=3, seed=11, eos_ids=())
    out = sampler.generate(PROMPTS, params)
    assert [(c.prompt_index, c.sample_index) for c in out] == [(p, s) for p in range(3) for s in range(3)]
    for c in out:
        check_against_forward(small_vocab_model, PROMPTS[c.prompt_index], c, params=params)
    again = sampler.generate(PROMPTS, params)
    assert all(np.array_equal(a.tokens, b.tokens) for a, b in zip(out, again))
    # Rows of prompt 0 do not depend on the other prompts in the batch (keys are per prompt/sample).
    alone = sampler.generate(PROMPTS[:1], params)
    assert all(np.array_equal(a.tokens, b.tokens) for a, b in zip(out[:3], alone))
    other = sampler.generate(PROMPTS, params.replace(seed=12))
    assert any(not np.array_equal(a.tokens, b.tokens) for a, b in zip(out, other))
    assert len({tuple(c.tokens) for c in out[:3]}) > 1  # the n samples differ


def test_chunked_decode_equals_one_call(small_vocab_model):
    sampler = Sampler(small_vocab_model)
    params = SamplingParams(max_new_tokens=11, temperature=1.0, seed=3, eos_ids=())
    whole = sampler.generate(PROMPTS, params)
    chunked = sampler.start(PROMPTS, params).run(chunk_steps=3)
    assert all(np.array_equal(a.tokens, b.tokens) for a, b in zip(whole, chunked))


def test_eos_and_cache_limit_end_rows_independently(small_vocab_model):
    sampler = Sampler(small_vocab_model)
    greedy = sampler.generate(PROMPTS, SamplingParams(max_new_tokens=6, temperature=0.0, eos_ids=()))
    eos = int(greedy[0].tokens[2])  # the third token of row 0 becomes its EOS
    out = sampler.generate(PROMPTS, SamplingParams(max_new_tokens=6, temperature=0.0, eos_ids=(eos,)))
    assert out[0].finish_reason == "eos" and list(out[0].tokens) == list(greedy[0].tokens[:3])
    # A cache of 10 slots: the 7-token prompt fills it after 4 draws, the others run to max_new_tokens.
    out = sampler.generate(PROMPTS, SamplingParams(max_new_tokens=6, temperature=0.0, eos_ids=()), max_len=10)
    assert [c.finish_reason for c in out] == ["length"] * 3
    assert [c.num_tokens for c in out] == [4, 6, 6]
    for prompt, c in zip(PROMPTS, out):
        check_against_forward(small_vocab_model, prompt, c)


def test_chi_square_first_and_second_tokens_through_the_engine(small_vocab_model):
    """4,000 samples of one prompt (one shared prefill): the first token's frequencies match the
    filtered softmax of the plain forward; so do second tokens given the most common first token."""
    prompt = [4, 9, 1]
    params = SamplingParams(max_new_tokens=2, temperature=1.4, top_k=12, top_p=0.95, n=4000, seed=5, eos_ids=())
    out = Sampler(small_vocab_model).generate([prompt], params)
    assert_first_two_tokens_follow_the_forward(small_vocab_model, prompt, [c.tokens for c in out], params)


def assert_first_two_tokens_follow_the_forward(model, prompt, draws, params):
    """Chi-square: the first tokens of `draws` against the filtered softmax of the plain forward at `prompt`, then
    the second tokens of the draws that start with the most common first token against the forward there."""
    first = np.array([d[0] for d in draws])
    warp = dict(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
    _chi_square(first, reference_distribution(teacher_forced_logits(model, prompt)[-1], **warp))
    top = np.bincount(first).argmax()
    second = np.array([d[1] for d in draws if d[0] == top])
    _chi_square(second, reference_distribution(teacher_forced_logits(model, prompt + [top])[-1], **warp))


def _chi_square(draws, ref):
    counts = np.bincount(draws, minlength=len(ref))
    assert counts[ref == 0].sum() == 0
    support = ref > 0
    expected = ref[support] * len(draws)
    # pool categories expected fewer than 5 times (chi-square validity)
    small = expected < 5
    obs = np.append(counts[support][~small], counts[support][small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    _, p = stats.chisquare(obs, exp)
    assert p > 1e-3, (obs, exp)


def test_sharded_params_and_cache_match_unsharded(small_vocab_model):
    from flax import nnx

    from reasoner.sharding import make_mesh, state_shardings

    mesh = make_mesh("data=2,fsdp=2,tensor=2")
    graphdef, state = nnx.split(small_vocab_model)
    sharded = nnx.merge(graphdef, jax.device_put(state, state_shardings(state, mesh)))
    params = SamplingParams(max_new_tokens=8, temperature=0.9, n=2, seed=4, eos_ids=())
    ref = Sampler(small_vocab_model).generate(PROMPTS[:2], params)
    out = Sampler(sharded, mesh=mesh).generate(PROMPTS[:2], params)
    for i, (a, b) in enumerate(zip(ref, out)):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        # log-probs of the same tokens through another sharding: each run within the decoder's float32 error at
        # this depth and logit scale of the exact value (completions come prompt by prompt, n each)
        ids = list(PROMPTS[i // params.n]) + [int(t) for t in a.tokens]
        logits = teacher_forced_logits(small_vocab_model, ids)
        np.testing.assert_allclose(a.model_logprobs, b.model_logprobs, rtol=0,
                                   atol=2 * logprob_atol(logits, small_vocab_model.cfg, seq_len=len(ids)))


def test_lora_params_run_and_change_the_output(small_vocab_model):
    from flax import nnx

    from reasoner.models.lora import apply_lora

    graphdef, state = nnx.split(small_vocab_model)
    model = nnx.merge(graphdef, jax.tree.map(lambda x: x, state))  # a copy: the fixture stays plain
    apply_lora(model, pattern=r"attn\.(q|v)_proj|mlp\.up_proj", rank=4, alpha=8.0, rngs=nnx.Rngs(3))
    for _, module in nnx.iter_modules(model):
        if getattr(module, "b", None) is not None and isinstance(module.b, nnx.LoRAParam):
            module.b.set_value(np.random.default_rng(0).normal(size=module.b.shape).astype(np.float32) * 0.5)
    params = SamplingParams(max_new_tokens=10, temperature=0.0, eos_ids=())
    out = Sampler(model).generate(PROMPTS, params)
    base = Sampler(small_vocab_model).generate(PROMPTS, params)
    assert any(not np.array_equal(a.tokens, b.tokens) for a, b in zip(out, base))
    for prompt, c in zip(PROMPTS, out):
        check_against_forward(model, prompt, c)
