"""Logits processing against a NumPy transcription of transformers' warpers, and a chi-square test
of the drawn tokens on a synthetic logits source."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from reasoner.sampling.processors import DecodeSpec, choose_tokens, draw_categorical, filtered_distribution, model_logprobs, row_keys
from tests.sampling.tests_sampling_refs import reference_distribution


SETTINGS = [
    dict(temperature=1.0),
    dict(temperature=0.7, top_k=5),
    dict(temperature=1.3, top_p=0.8),
    dict(temperature=0.9, top_k=8, top_p=0.9),
]


@pytest.mark.parametrize("setting", SETTINGS)
def test_filtered_distribution_matches_numpy(setting):
    logits = np.random.default_rng(0).normal(size=(3, 40)).astype(np.float32) * 2
    spec = DecodeSpec(greedy=False, top_k=setting.get("top_k", 0), use_top_p=setting.get("top_p", 1.0) < 1)
    got = np.asarray(filtered_distribution(jnp.asarray(logits), spec=spec, temperature=setting["temperature"],
                                           top_p=setting.get("top_p", 1.0)))
    for row in range(3):
        np.testing.assert_allclose(got[row], reference_distribution(logits[row], **setting), atol=1e-6)


@pytest.mark.parametrize("setting", SETTINGS)
def test_chi_square_of_draws_matches_filtered_softmax(setting):
    """20,000 draws from one fixed logits vector: frequencies match the reference distribution,
    and a slightly wrong temperature is rejected (the test has power)."""
    V, draws = 16, 20_000
    logits = np.random.default_rng(3).normal(size=V).astype(np.float32)
    spec = DecodeSpec(greedy=False, top_k=setting.get("top_k", 0), use_top_p=setting.get("top_p", 1.0) < 1)
    keys = row_keys(1234, np.zeros(draws, np.int64), np.arange(draws))
    tokens, sample_logp, model_logp = jax.jit(
        lambda lg, k, p: choose_tokens(lg, k, p, spec=spec, temperature=setting["temperature"],
                                       top_p=setting.get("top_p", 1.0))
    )(jnp.broadcast_to(jnp.asarray(logits), (draws, V)), keys, jnp.zeros(draws, jnp.int32))
    tokens = np.asarray(tokens)
    ref = reference_distribution(logits, **setting)
    counts = np.bincount(tokens, minlength=V)
    assert counts[ref == 0].sum() == 0, "drew a token the filters remove"
    support = ref > 0
    assert support.sum() >= 3
    _, p_value = stats.chisquare(counts[support], ref[support] * draws)
    assert p_value > 1e-3, (counts, ref * draws)
    # Power: the same support at a 30% higher temperature is clearly rejected.
    hotter = reference_distribution(logits, temperature=setting["temperature"] * 1.3)[support]
    _, p_wrong = stats.chisquare(counts[support], hotter / hotter.sum() * draws)
    assert p_wrong < 1e-6
    np.testing.assert_allclose(np.asarray(sample_logp), np.log(ref[tokens]), atol=1e-5)
    log_softmax = logits - np.log(np.exp(logits.astype(np.float64)).sum())
    np.testing.assert_allclose(np.asarray(model_logp), log_softmax[tokens], atol=1e-5)


def test_greedy_is_argmax_with_zero_sampling_logprob():
    logits = jnp.asarray(np.random.default_rng(1).normal(size=(4, 30)).astype(np.float32))
    keys = row_keys(0, np.arange(4), np.zeros(4))
    tokens, slp, mlp = choose_tokens(logits, keys, jnp.zeros(4, jnp.int32), spec=DecodeSpec(greedy=True),
                                     temperature=1.0, top_p=1.0)
    np.testing.assert_array_equal(np.asarray(tokens), np.argmax(np.asarray(logits), -1))
    assert np.all(np.asarray(slp) == 0)
    np.testing.assert_allclose(np.asarray(mlp), np.asarray(model_logprobs(logits, tokens)))


def test_draws_depend_only_on_row_key_and_position():
    logits = jnp.zeros((3, 50))
    spec = DecodeSpec(greedy=False)
    keys = row_keys(7, np.array([0, 1, 0]), np.array([0, 0, 0]))  # rows 0 and 2 share a key
    t1, _, _ = choose_tokens(logits, keys, jnp.array([5, 5, 5]), spec=spec, temperature=1.0, top_p=1.0)
    t2, _, _ = choose_tokens(logits, keys, jnp.array([5, 5, 6]), spec=spec, temperature=1.0, top_p=1.0)
    assert t1[0] == t1[2] == t2[0]
    draws = [int(choose_tokens(logits, keys, jnp.array([p] * 3), spec=spec, temperature=1.0, top_p=1.0)[0][0])
             for p in range(20)]
    assert len(set(draws)) > 5  # positions give fresh draws


def test_draw_categorical_inverts_the_cdf_and_never_picks_zero_mass():
    """Against a float64 NumPy inversion: index i is drawn iff cdf[i-1] < u * total <= cdf[i]; -inf candidates
    (the zero-mass ones the filters remove) are skipped even at u = 0 and u just below 1."""
    rng = np.random.default_rng(5)
    values = rng.normal(size=(6, 64)).astype(np.float32) * 2
    values[:, 0] = -np.inf  # u = 0 must not land on a removed first candidate
    values[:, -5:] = -np.inf  # nor u -> 1 on removed last ones
    values[3, 10:40] = -np.inf
    us = np.array([0.0, 1e-9, 0.25, 0.5, 0.999, np.nextafter(np.float32(1), np.float32(0))], np.float32)
    got = np.asarray(draw_categorical(jnp.asarray(values), jnp.asarray(us)))
    for row, u in enumerate(us):
        p = np.exp(values[row].astype(np.float64) - values[row].max())
        cdf = np.cumsum(p)
        want = min(int(np.searchsorted(cdf, max(u * cdf[-1], 1e-300), side="left")), 63)
        assert np.isfinite(values[row, got[row]]), (row, u, got[row])
        if 1e-6 < u < 1 - 1e-6:
            assert got[row] == want, (row, u, got[row], want)
