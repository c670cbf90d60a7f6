"""Every bad input of issue 3 raises a clear error before anything is compiled."""

import pytest

from reasoner.sampling import Sampler, SamplingParams, engine


def compiled_count():
    return engine.prefill._cache_size() + engine.decode_chunk._cache_size()


@pytest.mark.parametrize("kwargs, message", [
    (dict(n=0), "n=0"),
    (dict(n=10**6), "n=1000000"),
    (dict(max_new_tokens=0), "max_new_tokens=0"),
    (dict(max_new_tokens=2.5), "max_new_tokens=2.5"),
    (dict(temperature=-1.0), "temperature=-1.0"),
    (dict(temperature=float("nan")), "temperature=nan"),
    (dict(top_p=0.0), "top_p=0.0"),
    (dict(top_p=1.5), "top_p=1.5"),
    (dict(top_k=-2), "top_k=-2"),
    (dict(seed=-1), "seed=-1"),
    (dict(stop=("",)), "stop string ''"),
    (dict(eos_ids=(-3,)), "eos id=-3"),
])
def test_sampling_params_out_of_range(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        SamplingParams(**kwargs)


@pytest.fixture(scope="module")
def sampler(tiny_model, tokenizer):
    return Sampler(tiny_model, tokenizer)


def _raises_before_compile(fn, error, match):
    before = compiled_count()
    with pytest.raises(error, match=match):
        fn()
    assert compiled_count() == before


def test_prompt_longer_than_the_cache(sampler):
    _raises_before_compile(lambda: sampler.generate([[1] * 40], SamplingParams(max_new_tokens=4), max_len=32),
                           ValueError, "prompt 0: 40 tokens do not fit the cache of 32 slots")


def test_empty_prompt_and_bad_ids(sampler):
    p = SamplingParams(max_new_tokens=4)
    _raises_before_compile(lambda: sampler.generate([[1, 2], []], p), ValueError, "prompt 1: empty")
    _raises_before_compile(lambda: sampler.generate([], p), ValueError, "non-empty list")
    _raises_before_compile(lambda: sampler.generate([[1, 10**6]], p), ValueError,
                           "token id 1000000 outside the vocabulary of size 49152")


def test_unknown_stop_string_token_and_eos_id(sampler):
    # a special token's text cannot appear in decoded text (special tokens are skipped)
    _raises_before_compile(lambda: sampler.generate([[1, 2]], SamplingParams(max_new_tokens=4, stop=("<|im_end|>",))),
                           ValueError, "stop string '<|im_end|>': the tokenizer cannot produce it")
    _raises_before_compile(lambda: sampler.generate([[1, 2]], SamplingParams(max_new_tokens=4, eos_ids=(49152,))),
                           ValueError, "eos id 49152: outside the vocabulary")


def test_max_new_tokens_beyond_the_cache(sampler):
    _raises_before_compile(lambda: sampler.generate([[1, 2]], SamplingParams(max_new_tokens=64), max_len=32),
                           ValueError, "max_new_tokens=64: expected fewer than the cache length 32")


def test_batch_that_does_not_fit_in_memory(tiny_model):
    small = Sampler(tiny_model, memory_limit_bytes=1 << 20)
    _raises_before_compile(lambda: small.generate([[1, 2, 3]] * 4, SamplingParams(max_new_tokens=8, n=512)),
                           MemoryError, "batch of 2048 rows x 16 cache slots .* needs about")
    # and the default budget (free memory) rejects an absurd batch
    _raises_before_compile(
        lambda: Sampler(tiny_model).generate([[1]] * 4096, SamplingParams(max_new_tokens=4000, n=4096),
                                             max_len=8192),
        MemoryError, "lower the number of prompts, n, or max_len")


def test_prompts_as_text_need_a_tokenizer(tiny_model):
    with pytest.raises(ValueError, match="needs a tokenizer"):
        Sampler(tiny_model).generate(["hello"], SamplingParams(max_new_tokens=2))
    with pytest.raises(ValueError, match="stop strings need a tokenizer"):
        Sampler(tiny_model).generate([[1, 2]], SamplingParams(max_new_tokens=2, stop=("x",)))


