"""The fused native paged-attention kernel (`reasoner.sampling.native`) against a float64 brute force and the
pure-JAX path it replaces, on random pools and tables: decode (one query a slot) and multi-token queries, sliding
windows, idle slots on the null block, finished rows past their capacity, more slots than threads."""

import numpy as np
import pytest

from reasoner.sampling import native

EPS = np.finfo(np.float32).eps


@pytest.fixture(scope="module")
def kernel(native_kernels):
    return native_kernels.paged_attention


def brute_force(q, k, v, table, pos, *, scale, window):
    """float64, position by position, straight from the definition: query (a, c) sees the positions t of its slot
    with t <= pos (and t > pos - window when window > 0) and t < J * bs; none visible gives zeros."""
    A, C, KV, G, Dh = q.shape
    bs, J = k.shape[2], table.shape[1]
    out = np.zeros(q.shape)
    for a in range(A):
        for c in range(C):
            p = int(pos[a, c])
            ts = [t for t in range(J * bs) if t <= p and (window == 0 or t > p - window)]
            if not ts:
                continue
            for h in range(KV):
                keys = np.stack([k[h, table[a, t // bs], t % bs] for t in ts]).astype(np.float64)
                values = np.stack([v[h, table[a, t // bs], t % bs] for t in ts]).astype(np.float64)
                s = q[a, c, h].astype(np.float64) @ keys.T * scale  # [G, L]
                w = np.exp(s - s.max(-1, keepdims=True))
                out[a, c, h] = (w / w.sum(-1, keepdims=True)) @ values
    return out


def tolerance(q, k, v, *, scale, L):
    """float32 error bound of one output: a score's dot of Dh terms rounds within Dh * eps of the sum of |terms|
    (gamma_Dh), which moves a softmax weight by at most twice that relatively; the exp, the sum of L weights and
    the weighted sum of L values add about L * eps each. All times the largest |value|."""
    Dh = q.shape[-1]
    score_err = Dh * EPS * scale * np.abs(q).max() * np.abs(k).max() * Dh
    return (2 * score_err + 3 * L * EPS) * np.abs(v).max()


def problem(rng, *, A, C, KV=2, G=3, Dh=16, NB=12, bs=4, J=3):
    q = rng.standard_normal((A, C, KV, G, Dh), np.float32) * 2
    k = rng.standard_normal((KV, NB, bs, Dh), np.float32)
    v = rng.standard_normal((KV, NB, bs, Dh), np.float32)
    table = rng.integers(1, NB, (A, J)).astype(np.int32)
    table[0] = 0  # an idle slot: every column on the null block
    pos = rng.integers(0, J * bs, (A, C)).astype(np.int32)
    pos[-1] = J * bs + 5  # a finished row writing past its capacity: attends over its J * bs positions
    return q, k, v, table, pos


@pytest.mark.parametrize("C, window", [(1, 0), (1, 5), (3, 0), (3, 2)])
def test_native_paged_attention_equals_the_float64_brute_force(kernel, C, window):
    rng = np.random.default_rng(10 * C + window)
    q, k, v, table, pos = problem(rng, A=9, C=C)
    scale = q.shape[-1] ** -0.5
    got = np.asarray(kernel(q, k, v, table, pos, scale=scale, window=window))
    want = brute_force(q, k, v, table, pos, scale=scale, window=window)
    tol = tolerance(q, k, v, scale=scale, L=table.shape[1] * k.shape[2])
    assert np.abs(got - want).max() < tol
    assert np.abs(want).max() > 0.1  # outputs are not all zero: the bound is not met trivially


@pytest.mark.parametrize("G, Dh, bs, J", [(3, 64, 16, 12), (7, 128, 8, 9), (1, 32, 5, 7), (4, 24, 4, 10)])
def test_native_paged_attention_head_shapes(kernel, G, Dh, bs, J):
    """The vector paths at real head sizes (scores a lane-width of positions at a time through the transposing
    sum; values for several heads in registers, in more than one pass when G heads do not fit), lengths that are not
    a multiple of the lane width and blocks smaller than it, and a head size no vector width divides (24: the
    scalar path). Scores up to ~+-40 put the vector exp's whole range to use."""
    rng = np.random.default_rng(G * Dh + bs)
    q, k, v, table, pos = problem(rng, A=5, C=2, KV=2, G=G, Dh=Dh, NB=3 * J, bs=bs, J=J)
    pos[1:-1] = rng.integers(J * bs // 2, J * bs, pos[1:-1].shape)  # long rows: many lanes' worth of positions
    scale = 0.5 * Dh ** -0.5
    for window in (0, 11):
        got = np.asarray(kernel(q, k, v, table, pos, scale=scale, window=window))
        want = brute_force(q, k, v, table, pos, scale=scale, window=window)
        tol = tolerance(q, k, v, scale=scale, L=J * bs)
        assert np.abs(got - want).max() < tol
        assert np.abs(want).max() > 0.1


def test_native_paged_attention_with_exact_scores_is_within_a_few_ulp(kernel):
    """Queries and keys in halves and small integers make every score exact in float32, so what is left is the
    softmax's own rounding: the vector exp (within 1 ulp of std::exp), the sum of L weights and the weighted sum of
    L values (L * eps each at most). Scores spread over [-100, 0] past the max, through the exp's whole range and
    below its cut-off at -87."""
    rng = np.random.default_rng(3)
    q, k, v, table, pos = problem(rng, A=4, C=1, KV=1, G=3, Dh=64, NB=30, bs=16, J=12)
    q = rng.integers(-4, 5, q.shape).astype(np.float32) / 2
    k = rng.integers(-2, 3, k.shape).astype(np.float32)
    got = np.asarray(kernel(q, k, v, table, pos, scale=1.0, window=0))
    want = brute_force(q, k, v, table, pos, scale=1.0, window=0)
    L = table.shape[1] * k.shape[2]
    assert np.abs(got - want).max() < (4 + 2 * L) * EPS * np.abs(v).max()
    spread = q[1, 0, 0] @ k[0].reshape(-1, 64).T
    assert spread.max() - spread.min() > 87  # the cut-off is crossed


def test_native_paged_attention_equals_the_jax_path_under_jit(kernel, monkeypatch):
    """`paged_device._paged_attention` takes the kernel when it is available and keeps its pure-JAX code otherwise;
    both, jitted, give the same attention within float32 rounding (here with many slots: work split over threads)."""
    import jax

    from reasoner.sampling import paged_device

    class Attn:
        num_kv_heads, group, scale, window = 2, 3, 16 ** -0.5, 0

    rng = np.random.default_rng(7)
    q, k, v, table, pos = problem(rng, A=64, C=2, NB=40, J=5)
    q_flat = q.reshape(64, 2, 6, 16)

    def run():
        return np.asarray(jax.jit(lambda *a: paged_device._paged_attention(Attn, *a))(q_flat, k, v, table, pos))

    fused = run()
    monkeypatch.setenv("REASONER_NATIVE", "0")
    plain = run()  # a new lambda: traced again, now without the kernel
    assert not native.available()
    tol = tolerance(q, k, v, scale=Attn.scale, L=table.shape[1] * k.shape[2])
    assert np.abs(fused - plain).max() < 2 * tol
    hlo_plain = jax.jit(lambda *a: paged_device._paged_attention(Attn, *a)).lower(q_flat, k, v, table, pos).as_text()
    assert native.ATTENTION not in hlo_plain  # REASONER_NATIVE=0 still set: the JAX path
    monkeypatch.delenv("REASONER_NATIVE")
    hlo = jax.jit(lambda *a: paged_device._paged_attention(Attn, *a)).lower(q_flat, k, v, table, pos).as_text()
    assert native.ATTENTION in hlo


def test_native_kernel_refuses_mismatched_shapes(kernel):
    rng = np.random.default_rng(0)
    q, k, v, table, pos = problem(rng, A=2, C=1)
    with pytest.raises(Exception, match="mismatched shapes"):
        np.asarray(kernel(q, k, v[:, :, :, :8], table, pos, scale=1.0, window=0))


def test_the_engine_decodes_and_continues_through_the_kernel_with_the_jax_paths_tokens(kernel, small_vocab_model,
                                                                                       monkeypatch):
    """The rollout engine's decode steps (one query a slot) and multi-token forwards (speculative verification)
    call the kernel where it is available, and draw exactly the tokens the pure-JAX attention draws: greedy and
    sampled, with the same keys."""
    import jax

    from reasoner.sampling import SamplingParams
    from reasoner.sampling.rollout_engine import RolloutEngine

    prompts = [[5, 17, 9, 23, 2, 11, 7], [12, 3], [8, 8, 20, 1, 19, 8, 8, 20], [7]]
    calls = []
    traced = native.paged_attention
    monkeypatch.setattr(native, "paged_attention", lambda q, *a, **kw: calls.append(q.shape[1]) or traced(q, *a, **kw))

    def run():
        jax.clear_caches()
        out = []
        for params in (SamplingParams(max_new_tokens=14, temperature=0.0, eos_ids=()),
                       SamplingParams(max_new_tokens=14, temperature=0.9, n=2, seed=5, eos_ids=())):
            engine = RolloutEngine(small_vocab_model, slots=3, block_size=4, chunk_steps=4, speculate=3)
            out.append([list(c.tokens) for c in engine.generate(prompts, params)])
        return out

    fused = run()
    assert 1 in calls and max(calls) > 1  # decode steps and multi-token verification passes took the kernel
    monkeypatch.setenv("REASONER_NATIVE", "0")
    calls.clear()
    assert run() == fused and not calls
