"""KV-cache overflow: a chunk written past the cache's `max_len` slots.

`dynamic_update_slice` clamps its start so that the update fits: a chunk of T tokens at offset i > S - T used to
land on slots S - T .. S - 1, overwriting keys of earlier tokens, and every logit of the call came out finite and
wrong. Now an eager call raises ValueError naming the cached (prompt) length, the new tokens and the cache length;
under jit (traced offsets) the tokens that fit are exact and those past the end are NaN, never written.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from reasoner.models import Decoder, init_cache
from tests.models.test_decoder import CFG, jitted, tol

PROMPT, CACHE = 10, 16


@pytest.fixture(scope="module")
def model():
    return Decoder(CFG, rngs=nnx.Rngs(0))


def _tokens(n: int) -> jnp.ndarray:
    return jnp.asarray(np.random.default_rng(5).integers(0, CFG.vocab_size, (2, n)))


def _positions(start: int, n: int) -> jnp.ndarray:
    return jnp.broadcast_to(jnp.arange(start, start + n), (2, n))


def _prefilled(f, tokens, cache_len: int):
    cache = init_cache(CFG, batch=2, max_len=cache_len)
    _, cache = f(tokens[:, :PROMPT], _positions(0, PROMPT), cache=cache)
    return cache


def test_eager_overflow_raises_and_exact_fit_does_not(model):
    tokens = _tokens(CACHE + 1)
    cache = init_cache(CFG, batch=2, max_len=CACHE)
    _, cache = model(tokens[:, :PROMPT], positions_BxT=_positions(0, PROMPT), cache=cache)
    over = CACHE - PROMPT + 1
    with pytest.raises(ValueError, match=rf"10 cached \(prompt\) tokens \+ {over} new tokens = 17 exceed the KV "
                                         rf"cache length {CACHE}"):
        model(tokens[:, PROMPT:PROMPT + over], positions_BxT=_positions(PROMPT, over), cache=cache)
    fit = CACHE - PROMPT
    logits, full_cache = model(tokens[:, PROMPT:CACHE], positions_BxT=_positions(PROMPT, fit), cache=cache)
    reference, _ = model(tokens[:, :CACHE], positions_BxT=_positions(0, CACHE))
    np.testing.assert_allclose(np.asarray(logits), np.asarray(reference)[:, PROMPT:], atol=tol(reference))
    assert full_cache.index_B.tolist() == [CACHE, CACHE]


def test_chunk_longer_than_the_cache_raises_even_under_jit(model):
    f = jitted(model)
    with pytest.raises(ValueError, match=rf"a chunk of {CACHE + 1} new tokens does not fit a KV cache of {CACHE}"):
        f(_tokens(CACHE + 1), _positions(0, CACHE + 1), cache=init_cache(CFG, batch=2, max_len=CACHE))


def test_jitted_overflow_keeps_earlier_keys_and_marks_the_rest_nan(model):
    """Traced offsets: 8 new tokens after a 10-token prompt in 16 slots. The 6 that fit must equal a run with room
    for all of them (the clamp moved the chunk onto slots 8..15: its logits and slots 8, 9 were wrong), the other
    2 are NaN, and a later call on the overflowed row stays NaN instead of reading a corrupted cache."""
    f = jitted(model)
    new = 8
    tokens = _tokens(PROMPT + new)
    roomy, _ = f(tokens[:, PROMPT:], _positions(PROMPT, new), cache=_prefilled(f, tokens, 2 * CACHE))
    capped_cache = _prefilled(f, tokens, CACHE)
    capped, after = f(tokens[:, PROMPT:], _positions(PROMPT, new), cache=capped_cache)
    fit = CACHE - PROMPT
    roomy, capped = np.asarray(roomy), np.asarray(capped)
    np.testing.assert_allclose(capped[:, :fit], roomy[:, :fit], atol=tol(roomy))
    assert np.isnan(capped[:, fit:]).all() and np.isfinite(capped[:, :fit]).all()
    for layer in range(CFG.num_layers):  # the prompt's keys are untouched
        np.testing.assert_array_equal(np.asarray(after.k[layer])[:, :PROMPT],
                                      np.asarray(capped_cache.k[layer])[:, :PROMPT])
    assert after.index_B.tolist() == [PROMPT + new] * 2
    next_logits, _ = f(tokens[:, :1], _positions(PROMPT + new, 1), cache=after)
    assert np.isnan(np.asarray(next_logits)).all()


def test_sampler_caps_the_cache_and_finishes_on_length(model):
    """The static sampler's own guard (`check_request`, `engine._record`): prompt + max_new_tokens beyond
    `max_len` finishes with reason "length" exactly when the cache is full, and its tokens are those of a run with
    room (greedy), so the decoder's overflow never happens there."""
    from reasoner.sampling import Sampler, SamplingParams

    prompt = np.asarray(_tokens(PROMPT))[0].tolist()
    params = SamplingParams(max_new_tokens=12, temperature=0.0, eos_ids=())
    sampler = Sampler(model)
    capped = sampler.generate([prompt], params, max_len=CACHE)[0]
    roomy = sampler.generate([prompt], params, max_len=2 * CACHE)[0]
    assert capped.finish_reason == "length" and roomy.finish_reason == "length"
    # every drawn token but the last is fed back: the 16 slots hold the prompt and 6 of them, the 7th is drawn last
    room = CACHE - PROMPT + 1
    assert len(capped.tokens) == room and len(roomy.tokens) == 12
    assert list(capped.tokens) == list(roomy.tokens)[:room]
    with pytest.raises(ValueError, match="do not fit the cache"):
        sampler.generate([prompt + prompt], params, max_len=CACHE)
