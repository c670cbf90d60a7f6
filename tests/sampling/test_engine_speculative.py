"""Prompt-lookup speculative decoding on the rollout engine (`speculate=k`, `reasoner.sampling.speculative`): the
drafter against a brute-force lookup; the engine with speculation draws the tokens, finish reasons and (within the
forward's float32 bound) log-probs of the engine without it and of the static sampler, greedy and sampled, with
EOS, budgets, a full cache, stop strings, a sliding window and multi-turn sessions, while running fewer decode
kept draft tokens (so the verification path ran and accepted)."""

import numpy as np
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.sampling.rollout_engine import RolloutEngine
from reasoner.sampling.speculative import propose
from tests.sampling.conftest import teacher_forced_logits
from tests.sampling.test_engine_session import windowed_decoder, windowed_turns
from tests.sampling.test_sampling_continuation import _stop_string_from
from tests.tolerances import logprob_atol

# prompts that repeat themselves (as outputs that restate their prompt do), and some that do not
PROMPTS = [[5, 17, 9, 23, 5, 17, 9, 23, 5, 17], [12, 3], [8, 8, 20, 1, 19, 8, 20], [3, 1, 4, 1, 5, 9, 2, 6, 5], [7]]


def _lookup(tokens, *, k, ngram_min, ngram_max):
    """The drafter by brute force: the longest n-gram first, its latest earlier occurrence, the known tokens after."""
    L = len(tokens) - 1
    for g in range(ngram_max, ngram_min - 1, -1):
        if L < g - 1:
            continue
        suffix = tokens[L - g + 1:]
        for end in range(L - 1, g - 2, -1):
            if tokens[end - g + 1:end + 1] == suffix:
                return tokens[end + 1:end + 1 + k]
    return []


def test_propose_equals_a_brute_force_lookup():
    rng = np.random.default_rng(0)
    W, k = 24, 4
    rows, lengths = [], []
    for a in range(64):
        n = int(rng.integers(1, W + 1))
        rows.append(list(rng.integers(0, 3 if a % 2 else 6, size=n)))  # small alphabets: many matches
        lengths.append(n - 1)
    context = np.zeros((len(rows), W), np.int32)
    for a, r in enumerate(rows):
        context[a, :len(r)] = r
    for gmin, gmax in ((1, 3), (2, 2), (1, 1)):
        draft, count = propose(context, np.asarray(lengths, np.int32), k=k, ngram_min=gmin, ngram_max=gmax)
        draft, count = np.asarray(draft), np.asarray(count)
        for a, r in enumerate(rows):
            want = _lookup([int(t) for t in r], k=k, ngram_min=gmin, ngram_max=gmax)
            assert int(count[a]) == len(want), (a, r, gmin, gmax)
            assert draft[a, :len(want)].tolist() == want
    # a row longer than the kept context drafts nothing
    _, count = propose(context[:1], np.asarray([W], np.int32), k=k)
    assert int(count[0]) == 0


def _same(got, want, model, prompts, *, sampled):
    assert [(c.prompt_index, c.sample_index) for c in got] == [(c.prompt_index, c.sample_index) for c in want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.tokens, w.tokens)
        assert g.finish_reason == w.finish_reason
        history = list(prompts[g.prompt_index]) + list(g.tokens)
        atol = logprob_atol(teacher_forced_logits(model, history), model.cfg, seq_len=len(history))
        np.testing.assert_allclose(g.model_logprobs, w.model_logprobs, rtol=0, atol=atol)
        if sampled:
            np.testing.assert_allclose(g.sample_logprobs, w.sample_logprobs, rtol=0, atol=atol / 0.8)


@pytest.mark.parametrize("sampled", [False, True])
def test_speculation_draws_the_tokens_of_plain_decoding_and_keeps_drafts(small_vocab_model, sampled):
    params = SamplingParams(max_new_tokens=24, temperature=0.8 if sampled else 0.0, top_k=10 if sampled else 0,
                            top_p=0.9 if sampled else 1.0, n=2 if sampled else 1, seed=11, eos_ids=())
    plain = RolloutEngine(small_vocab_model, slots=4, block_size=4, chunk_steps=3)
    # single-token matches too: the tiny model's sampled rows rarely repeat 2-grams, and the draws must be exercised
    fast = RolloutEngine(small_vocab_model, slots=4, block_size=4, chunk_steps=3, speculate=4, ngram=(1, 3))
    want = plain.generate(PROMPTS, params)
    got = fast.generate(PROMPTS, params)
    _same(got, want, small_vocab_model, PROMPTS, sampled=sampled)
    _same(got, Sampler(small_vocab_model).generate(PROMPTS, params), small_vocab_model, PROMPTS, sampled=sampled)
    # the verification path ran and kept drafts (a pass's count follows the batch's slowest row, so no fewer passes)
    assert int(fast.state.accepted) >= (3 if sampled else 10) and int(plain.state.accepted) == 0
    assert fast.sched.alloc.free == fast.sched.alloc.num_blocks - 1


def test_eos_budgets_and_a_full_cache_stop_rows_where_plain_decoding_stops(small_vocab_model):
    greedy = Sampler(small_vocab_model).generate(PROMPTS, SamplingParams(max_new_tokens=12, temperature=0.0,
                                                                         eos_ids=()))
    eos = int(greedy[0].tokens[5])  # a token the first row draws mid-way (maybe inside an accepted draft)
    fast = RolloutEngine(small_vocab_model, slots=2, block_size=4, chunk_steps=2, speculate=6)
    for params, max_len in ((SamplingParams(max_new_tokens=12, temperature=0.0, eos_ids=(eos,)), None),
                            (SamplingParams(max_new_tokens=12, temperature=0.0, eos_ids=()), 16)):
        want = Sampler(small_vocab_model).generate(PROMPTS, params, max_len=max_len)
        _same(fast.generate(PROMPTS, params, max_len=max_len), want, small_vocab_model, PROMPTS, sampled=False)
    assert [c.num_tokens for c in want] == [min(12, 17 - len(p)) for p in PROMPTS] != [12] * 5  # the 16-position cache
    # per-request budgets: rows end at their own budgets, whatever a draft proposed past them
    ids = [fast.submit(p, SamplingParams(max_new_tokens=9, temperature=0.0, eos_ids=()), prompt_index=i,
                       budgets=[b]) for i, (p, b) in enumerate(zip(PROMPTS, [3, 9, 1, 5, 7]))]
    done = fast.collect()
    for rid, ref, b in zip(ids, greedy, [3, 9, 1, 5, 7]):
        np.testing.assert_array_equal(done[rid][0].tokens, ref.tokens[:b])


def test_stop_strings_end_rows_like_the_static_sampler(tiny_model, tokenizer):
    prompts = [tokenizer("Once upon a time", add_special_tokens=False)["input_ids"],
               tokenizer("The answer is", add_special_tokens=False)["input_ids"]] * 2
    base = SamplingParams(max_new_tokens=24, temperature=1.0, seed=2, eos_ids=())
    free_run = Sampler(tiny_model, tokenizer).generate(prompts, base)
    stop, _ = _stop_string_from(tokenizer, list(free_run[0].tokens[3:]))
    params = base.replace(stop=(stop,))
    got = RolloutEngine(tiny_model, tokenizer, slots=2, block_size=8, chunk_steps=4, speculate=5).generate(prompts,
                                                                                                          params)
    want = Sampler(tiny_model, tokenizer).generate(prompts, params)
    assert [c.tokens.tolist() for c in got] == [c.tokens.tolist() for c in want]
    assert [c.text for c in got] == [c.text for c in want] and got[0].finish_reason == "stop"


def test_sliding_window_and_multi_turn_sessions():
    """A window of 4 positions (Mistral-style) masks inside a verification pass what plain decoding masks, across
    three turns of a session whose appended tokens enter the lookup's context."""
    fast = RolloutEngine(windowed_decoder(), slots=2, block_size=4, chunk_steps=3, speculate=4)
    got = windowed_turns(fast)
    assert got == windowed_turns(Sampler(windowed_decoder()))
    assert int(fast.state.accepted) > 0  # drafts were kept


def test_bad_speculation_settings_are_refused(small_vocab_model):
    for kwargs, word in (({"speculate": -1}, "speculate"), ({"speculate": True}, "speculate"),
                         ({"ngram": (3, 1)}, "ngram"), ({"ngram": (0, 2)}, "ngram"), ({"draft_budget": 1}, "draft")):
        with pytest.raises(ValueError, match=word):
            RolloutEngine(small_vocab_model, **kwargs)
