"""Multi-turn continuation: appending tokens to finished rows and resuming from the existing cache
gives the same tokens (and log-probs) as generating from the whole concatenated prompt."""

import numpy as np
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.sampling.params import check_stop_string
from reasoner.sampling.stops import decode
from tests.sampling.conftest import teacher_forced_logits
from tests.tolerances import logprob_atol

PROMPTS = [[101, 2045, 318, 1000, 42], [7, 7, 900]]


def fresh(sampler, histories, params):
    return sampler.generate(histories, params)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_continuation_equals_generation_from_concatenated_prompt(tiny_model, tokenizer, temperature):
    sampler = Sampler(tiny_model, tokenizer)
    params = SamplingParams(max_new_tokens=6, temperature=temperature, top_k=50, seed=9, eos_ids=())
    session = sampler.start(PROMPTS, params, max_len=96, reserve=16)
    session.run()
    # row 1's append is longer than the 16 scratch slots: written in two chunks
    appends = {0: [300, 301, 302, 303, 304], 1: list(range(500, 520))}
    session.extend(appends, max_new_tokens=7)
    turn2 = session.run()
    expected = fresh(sampler, [session.history[b][:-7] for b in range(2)], params.replace(max_new_tokens=7))
    for b, (got, want) in enumerate(zip(turn2, expected)):
        np.testing.assert_array_equal(got.tokens, want.tokens)
        # the same model over the same tokens through another cache layout: the float32 error of a log-prob at
        # this depth and logit scale (tests.tolerances.logprob_atol), for the model's and the warped distribution
        full = list(session.history[b])
        atol = logprob_atol(teacher_forced_logits(tiny_model, full), tiny_model.cfg, seq_len=len(full))
        np.testing.assert_allclose(got.model_logprobs, want.model_logprobs, atol=atol)
        np.testing.assert_allclose(got.sample_logprobs, want.sample_logprobs, atol=atol / params.temperature
                                   if params.temperature > 0 else atol)
    # a third turn on row 0 only; row 1 stays untouched and can still be continued afterwards
    session.extend({0: [11, 12]}, max_new_tokens=5)
    (turn3,) = session.run()
    (want3,) = fresh(sampler, [session.history[0][:-5]], params.replace(max_new_tokens=5))
    np.testing.assert_array_equal(turn3.tokens, want3.tokens)
    session.extend({1: [13]}, max_new_tokens=5)
    (turn3b,) = session.run()
    want3b = fresh(sampler, [session.history[0][:1], session.history[1][:-5]], params.replace(max_new_tokens=5))[1]
    np.testing.assert_array_equal(turn3b.tokens, want3b.tokens)


def _stop_string_from(tokenizer, tokens, *, absent_from: str = ""):
    """A stop string that first appears when token k is added, for some k in 2..len-3, and not in `absent_from`."""
    for k in range(2, len(tokens) - 2):
        before, after = decode(tokenizer, tokens[:k]), decode(tokenizer, tokens[:k + 1])
        if not after.startswith(before) or len(after) == len(before):
            continue
        candidate = after[max(0, len(before) - 2):]
        if candidate.strip() and candidate not in before and candidate not in absent_from:
            try:
                check_stop_string(tokenizer, candidate)
            except ValueError:
                continue
            return candidate, k + 1
    pytest.fail(f"no usable stop string in {decode(tokenizer, tokens)!r}")


def test_stop_string_rolls_back_and_continues(tiny_model, tokenizer):
    sampler = Sampler(tiny_model, tokenizer)
    greedy = SamplingParams(max_new_tokens=14, temperature=0.0, eos_ids=())
    plain = sampler.generate(PROMPTS, greedy)
    stop, kept = _stop_string_from(tokenizer, list(plain[0].tokens), absent_from=plain[1].text)
    session = sampler.start(PROMPTS, greedy.replace(stop=(stop,)), reserve=16, max_len=64)
    first = session.run()
    assert first[0].finish_reason == "stop" and first[0].text.endswith(stop)
    np.testing.assert_array_equal(first[0].tokens, plain[0].tokens[:kept])
    # the other row (where the stop string never appears) is unaffected by row 0 stopping
    assert first[1].finish_reason == plain[1].finish_reason
    np.testing.assert_array_equal(first[1].tokens, plain[1].tokens)
    session.extend({0: [400, 401, 402]}, max_new_tokens=8)
    (again,) = session.run()
    (want,) = fresh(sampler, [session.history[0][:-len(again.tokens)]], greedy.replace(max_new_tokens=8, stop=(stop,)))
    np.testing.assert_array_equal(again.tokens, want.tokens)
    assert again.finish_reason == want.finish_reason
