"""KV-cache overflow: a chunk written past the cache's `max_len` slots.

`dynamic_update_slice` clamps its start so that the update fits: a chunk of T tokens at offset i > S - T used to
land on slots S - T .. S - 1, overwriting keys of earlier tokens, and every logit of the call came out finite and
wrong. Now an eager call raises ValueError naming the cached (prompt) length, the new tokens and the cache length;
under jit (traced offsets) a row whose chunk does not fit writes nothing and its logits are NaN; other rows are exact.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from reasoner.models import Decoder, init_cache
from tests.models.test_decoder import CFG, jitted, tol
from tests.tolerances import logits_atol

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


def test_jitted_overflow_writes_nothing_and_marks_the_row_nan(model):
    """Traced offsets: 8 new tokens in a cache of 16 slots, row 0 after its 10-token prompt (overflow), row 1 rewound
    to slot 8 (fits exactly). Row 1 must equal a run with room for both; row 0 must be NaN with its cache untouched
    (the clamp moved its chunk onto slots 8..15: finite, wrong logits over its prompt's last keys), and a later call
    on row 0 stays NaN instead of reading a corrupted cache."""
    f = jitted(model)
    new = 8
    tokens = _tokens(PROMPT + new)
    offsets = jnp.asarray([PROMPT, CACHE - new])
    chunk, chunk_positions = tokens[:, PROMPT:], offsets[:, None] + jnp.arange(new)
    roomy_cache = _prefilled(f, tokens, 2 * CACHE).replace(index_B=offsets)
    roomy, roomy_after = f(chunk, chunk_positions, cache=roomy_cache)
    capped_cache = _prefilled(f, tokens, CACHE).replace(index_B=offsets)
    capped, after = f(chunk, chunk_positions, cache=capped_cache)
    roomy, capped = np.asarray(roomy), np.asarray(capped)
    np.testing.assert_allclose(capped[1], roomy[1], atol=tol(roomy))
    assert np.isnan(capped[0]).all() and np.isfinite(roomy).all()
    for layer in range(CFG.num_layers):  # row 0 wrote nothing; row 1 wrote its chunk where the roomy run did
        np.testing.assert_array_equal(np.asarray(after.k[layer])[0], np.asarray(capped_cache.k[layer])[0])
        want = np.asarray(roomy_after.v[layer])[1, :CACHE]  # layer 1's values went through attention over 32 slots
        np.testing.assert_allclose(np.asarray(after.v[layer])[1], want, atol=logits_atol(want, CFG, seq_len=CACHE))
    np.testing.assert_array_equal(np.asarray(after.segment_ids_BxS)[0], np.asarray(capped_cache.segment_ids_BxS)[0])
    assert after.index_B.tolist() == [PROMPT + new, CACHE]
    next_logits, _ = f(tokens[:, :1], _positions(PROMPT + new, 1), cache=after)
    assert np.isnan(np.asarray(next_logits)[0]).all()


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
