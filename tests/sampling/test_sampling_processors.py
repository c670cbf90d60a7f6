"""Logits processing against transformers' own warpers (TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper, in the order `generate` applies them), and a chi-square test of the drawn tokens.

Float32 bound on a filtered probability (u = eps32 / 2): both sides divide the same float32 logits by the same
float32 temperature; ours then takes a float32 softmax over at most V candidates: exp is within a few ulps (XLA's
polynomial; we allow 4 eps), the normaliser sums <= V terms (V u relative error), the division one more u. So
|p_ours - p_ref| <= (V + 8) eps p_ref, with p_ref the float64 softmax of transformers' warped float32 scores.
Supports must be identical; the data is checked to keep every top-p cut farther than V eps from a cumulative mass,
so which side of the cut a token lands on cannot depend on summation order.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from reasoner.sampling.processors import DecodeSpec, choose_tokens, draw_categorical, filtered_distribution, model_logprobs, row_keys
from tests.sampling.tests_sampling_refs import reference_distribution, reference_scores

EPS32 = float(np.finfo(np.float32).eps)

SETTINGS = [
    dict(temperature=1.0),
    dict(temperature=0.7, top_k=5),
    dict(temperature=1.3, top_p=0.8),
    dict(temperature=0.9, top_k=8, top_p=0.9),
    dict(temperature=0.5, top_k=40, top_p=0.95),  # top_k == V: a no-op filter
    dict(temperature=2.0, top_p=0.0),  # top_p = 0: only the most likely token survives (both keep >= 1)
]


def spec_of(setting) -> DecodeSpec:
    return DecodeSpec(greedy=False, top_k=setting.get("top_k", 0), use_top_p=setting.get("top_p", 1.0) < 1)


_filtered = jax.jit(filtered_distribution, static_argnames="spec")  # one compile per (spec, shape), not per op
_choose = jax.jit(choose_tokens, static_argnames="spec")


def ours(logits, setting) -> np.ndarray:
    return np.asarray(_filtered(jnp.asarray(logits, jnp.float32), spec=spec_of(setting),
                                temperature=setting["temperature"], top_p=setting.get("top_p", 1.0)))


def assert_same_distribution(got, ref, what):
    """Identical support, probabilities within (V + 8) eps32 relative (module docstring)."""
    np.testing.assert_array_equal(got > 0, ref > 0, err_msg=f"{what}: supports differ")
    tol = (ref.shape[-1] + 8) * EPS32 * ref
    assert (np.abs(got - ref) <= tol).all(), f"{what}: max rel err {np.max(np.abs(got - ref) / np.maximum(ref, 1e-300)):.3g}"


def assert_top_p_margin(logits, setting):
    """Precondition on the data: no cumulative mass of the (top-k filtered) sorted distribution lies within V eps of
    top_p, so the cut is decided by the data, not by float32 summation order."""
    if setting.get("top_p", 1.0) >= 1.0:
        return
    scores = reference_scores(logits, temperature=setting["temperature"], top_k=setting.get("top_k", 0))
    for row in np.atleast_2d(scores):
        p = np.sort(np.exp(row.astype(np.float64) - row.max()))[::-1]
        mass_before = (np.cumsum(p / p.sum()) - p / p.sum())[1:]  # the most likely token is always kept
        assert np.min(np.abs(mass_before - setting["top_p"])) > row.size * EPS32, "test data too close to the cut"


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_filtered_distribution_matches_transformers(setting):
    logits = np.random.default_rng(0).normal(size=(4, 40)).astype(np.float32) * 2
    logits[3, ::3] = -np.inf  # tokens masked out upstream stay out
    assert_top_p_margin(logits, setting)
    assert_same_distribution(ours(logits, setting), reference_distribution(logits, **setting), str(setting))


def test_top_k_ties_inside_the_kept_set_match_transformers():
    """Ties among the kept tokens (not at the boundary) change nothing: same distribution as transformers."""
    logits = np.random.default_rng(1).normal(size=(2, 30)).astype(np.float32)
    logits[:, [4, 9, 17]] = 5.0  # three-way tie for the top
    setting = dict(temperature=0.8, top_k=6)
    assert_same_distribution(ours(logits, setting), reference_distribution(logits, **setting), "ties inside top-k")


def test_top_k_ties_at_the_boundary_keep_exactly_k_lowest_ids():
    """Our documented deviation: TopKLogitsWarper keeps every token tied with the k-th score (here 5 for k = 3);
    we keep exactly k (static shapes), breaking the tie towards lower token ids. So we equal transformers applied to
    the logits with the surplus tied tokens (the highest ids) removed."""
    logits = np.random.default_rng(2).normal(size=30).astype(np.float32) - 3.0
    logits[7] = 4.0
    logits[[3, 11, 20, 25]] = 2.5  # tied for places 2..5
    setting = dict(temperature=1.0, top_k=3)
    got = ours(logits[None], setting)[0]
    hf = reference_distribution(logits, **setting)
    assert np.flatnonzero(hf > 0).tolist() == [3, 7, 11, 20, 25]  # transformers keeps all ties
    assert np.flatnonzero(got > 0).tolist() == [3, 7, 11]
    trimmed = logits.copy()
    trimmed[[20, 25]] = -np.inf
    assert_same_distribution(got, reference_distribution(trimmed, **setting), "ties at the top-k boundary")


def top_p_edge_logits():
    """One row with a known top-1 mass p1: the cut is placed 1e-4 (>> V eps) below and above p1."""
    logits = np.random.default_rng(3).normal(size=40).astype(np.float32)
    logits[12] = 3.0
    return logits


@pytest.mark.parametrize("offset,kept", [(-1e-4, 1), (1e-4, 2)], ids=["just-below-p1", "just-above-p1"])
def test_top_p_cut_next_to_the_top_token_mass(offset, kept):
    logits = top_p_edge_logits()
    p1 = reference_distribution(logits, temperature=1.0).max()
    setting = dict(temperature=1.0, top_p=float(p1 + offset))
    assert_top_p_margin(logits[None], setting)
    got = ours(logits[None], setting)[0]
    assert (got > 0).sum() == kept
    assert_same_distribution(got, reference_distribution(logits, **setting), str(setting))


def test_top_p_keeping_all_but_the_tail_and_with_masked_tokens():
    logits = top_p_edge_logits()
    logits[::5] = -np.inf
    setting = dict(temperature=1.1, top_p=0.99)
    assert_top_p_margin(logits[None], setting)
    got = ours(logits[None], setting)[0]
    assert 1 < (got > 0).sum() < np.isfinite(logits).sum()  # the cut is inside the finite tokens
    assert_same_distribution(got, reference_distribution(logits, **setting), str(setting))


def test_top_k_is_applied_before_top_p_as_in_transformers():
    """Top-p on the renormalised top-3 {0.6, 0.35, 0.05} at 0.9 keeps 2 tokens; top-p first (on the full
    distribution, where those 3 hold 0.95 / 2.43 of the mass) would keep all 3. We match transformers' order."""
    logits = np.log(np.array([0.6, 0.35, 0.05] + [0.04] * 37)).astype(np.float32)
    setting = dict(temperature=1.0, top_k=3, top_p=0.9)
    assert_top_p_margin(logits[None], setting)
    got = ours(logits[None], setting)[0]
    assert (got > 0).sum() == 2
    assert_same_distribution(got, reference_distribution(logits, **setting), "top-k then top-p")
    other_order = reference_distribution(reference_scores(logits, temperature=1.0, top_p=0.9), temperature=1.0,
                                         top_k=3)
    assert (other_order > 0).sum() == 3  # the order really matters here


def top_p_then_top_k(logits, setting) -> np.ndarray:
    """A deliberately wrong sampler: our own filters in the other order (top-p on the full distribution, then top-k
    on what it kept). `ours` with top-p alone gives the renormalised top-p distribution p1; the log of p1 is the
    top-p-filtered logits up to a constant, and `ours` with top-k alone at temperature 1 then keeps its k best."""
    first = ours(logits, dict(temperature=setting["temperature"], top_p=setting["top_p"]))
    with np.errstate(divide="ignore"):
        return ours(np.log(first), dict(temperature=1.0, top_k=setting["top_k"]))


def test_the_other_filter_order_fails_the_comparison():
    """The comparison has power: on the data of the order test above, and on random logits where the order changes
    the kept set, top-p before top-k fails `assert_same_distribution` against transformers."""
    cases = [(np.log(np.array([0.6, 0.35, 0.05] + [0.04] * 37)).astype(np.float32),
              dict(temperature=1.0, top_k=3, top_p=0.9)),
             (np.random.default_rng(0).normal(size=(4, 40)).astype(np.float32) * 2, SETTINGS[3])]
    for logits, setting in cases:
        logits = np.atleast_2d(logits)
        assert_top_p_margin(logits, setting)
        ref = reference_distribution(logits, **setting)
        assert_same_distribution(ours(logits, setting), ref, "our order")  # the right order passes
        with pytest.raises(AssertionError, match="supports differ"):
            assert_same_distribution(top_p_then_top_k(logits, setting), ref, f"top-p first {setting}")
    # where top-k keeps everything the order cannot matter, and the swapped sampler keeps transformers' support:
    # only the order is wrong in it
    logits, setting = cases[1][0], SETTINGS[4]
    assert_top_p_margin(logits, setting)
    np.testing.assert_array_equal(top_p_then_top_k(logits, setting) > 0, reference_distribution(logits, **setting) > 0)


@pytest.mark.parametrize("setting", SETTINGS[:4], ids=str)
def test_chi_square_of_draws_matches_filtered_softmax(setting):
    """20,000 draws from one fixed logits vector: frequencies match transformers' distribution,
    and a slightly wrong temperature is rejected (the test has power)."""
    V, draws = 16, 20_000
    logits = np.random.default_rng(3).normal(size=V).astype(np.float32)
    assert_top_p_margin(logits[None], setting)
    spec = spec_of(setting)
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
    # log-softmax in float32 over V terms: |v - max| <= |log p|, log(sum) <= log V, the sum has V u relative error,
    # exp/log a few ulps: within (V + 8) eps (1 + |log p| + log V) of the float64 value
    ref_logp = np.log(ref[tokens])
    bound = (V + 8) * EPS32 * (1 + np.abs(ref_logp) + np.log(V))
    assert (np.abs(np.asarray(sample_logp) - ref_logp) <= bound).all()
    log_softmax = logits - np.log(np.exp(logits.astype(np.float64)).sum())
    bound = (V + 8) * EPS32 * (1 + np.abs(log_softmax[tokens]) + np.log(V))
    assert (np.abs(np.asarray(model_logp) - log_softmax[tokens]) <= bound).all()


def test_greedy_is_argmax_with_zero_sampling_logprob():
    logits = np.random.default_rng(1).normal(size=(4, 30)).astype(np.float32)
    keys = row_keys(0, np.arange(4), np.zeros(4))
    tokens, slp, mlp = choose_tokens(jnp.asarray(logits), keys, jnp.zeros(4, jnp.int32), spec=DecodeSpec(greedy=True),
                                     temperature=1.0, top_p=1.0)
    np.testing.assert_array_equal(np.asarray(tokens), np.argmax(logits, -1))
    assert np.all(np.asarray(slp) == 0)
    # against float64 log-softmax, same bound as above with V = 30
    want = (logits.astype(np.float64) - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True)))[
        np.arange(4), np.asarray(tokens)]
    assert (np.abs(np.asarray(mlp) - want) <= 38 * EPS32 * (1 + np.abs(want) + np.log(30))).all()


def test_draws_depend_only_on_row_key_and_position():
    logits = jnp.zeros((3, 50))
    spec = DecodeSpec(greedy=False)
    keys = row_keys(7, np.array([0, 1, 0]), np.array([0, 0, 0]))  # rows 0 and 2 share a key
    t1, _, _ = _choose(logits, keys, jnp.array([5, 5, 5]), spec=spec, temperature=1.0, top_p=1.0)
    t2, _, _ = _choose(logits, keys, jnp.array([5, 5, 6]), spec=spec, temperature=1.0, top_p=1.0)
    assert t1[0] == t1[2] == t2[0]
    draws = [int(_choose(logits, keys, jnp.array([p] * 3), spec=spec, temperature=1.0, top_p=1.0)[0][0])
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
        # away from u = 0 and u -> 1 the float32 CDF (64 terms, error <= 64 u) must pick the float64 index,
        # unless u * total lies within that error of a CDF step (checked, so the comparison is decided by the data)
        if 1e-6 < u < 1 - 1e-6:
            assert np.min(np.abs(cdf - u * cdf[-1])) > 64 * EPS32 * cdf[-1]
            assert got[row] == want, (row, u, got[row], want)


def test_greedy_tokens_equal_numpy_argmax_with_ties_infinities_and_nan():
    """`greedy_tokens` against `np.argmax` (first index of the maximum; first NaN where a row has one): random
    rows, ties (the first wins), rows all -inf, +inf, a NaN after the max, a vocabulary of one."""
    import jax
    import numpy as np

    from reasoner.sampling.processors import greedy_tokens

    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, 1000)).astype(np.float32)
    x[1, [5, 700]] = 9.0  # a tie: 5 wins
    x[2] = -np.inf
    x[3, [3, 900]] = np.inf
    x[4, 10], x[4, 20] = 9.0, np.nan  # NaN after the max: NaN's index, as argmax
    x[5, [40, 30]] = np.nan
    x[6] = 0.0
    x[7, -1] = 50.0
    got = np.asarray(jax.jit(greedy_tokens)(x))
    assert got.dtype == np.int32
    assert got.tolist() == np.argmax(x, axis=-1).tolist()
    assert got[:6].tolist() == [int(np.argmax(x[0])), 5, 0, 3, 20, 30]
    assert np.asarray(greedy_tokens(np.ones((2, 1), np.float32))).tolist() == [0, 0]
