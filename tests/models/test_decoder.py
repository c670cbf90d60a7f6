"""Decoder contracts: packed segments == separate documents, KV-cache decoding == full forward."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from reasoner.models import Decoder, ModelConfig, init_cache
from tests.tolerances import EPS32, logits_atol, logprob_atol, model_depth, prob_factor

CFG = ModelConfig(family="qwen3", vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, qkv_bias=True, rope_theta=1000.0)


def tol(ref, seq_len=16):
    """The forward's float32 error at CFG's depth relative to the logits' scale: holds for any kernel/layout."""
    return logits_atol(ref, CFG, seq_len=seq_len)


@pytest.fixture(scope="module")
def model():
    return Decoder(CFG, rngs=nnx.Rngs(0))


def jitted(model):
    graphdef, state = nnx.split(model)

    @jax.jit
    def run(state, tokens, positions, segments, cache):
        return nnx.merge(graphdef, state)(tokens, positions_BxT=positions, segment_ids_BxT=segments, cache=cache)

    return lambda tokens, positions, segments=None, cache=None: run(state, tokens, positions, segments, cache)


def test_packed_segments_equal_separate_documents(model):
    f = jitted(model)
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 64, n) for n in (5, 7, 3)]
    tokens = np.concatenate(docs + [np.zeros(1, int)])[None]  # one padding slot at the end
    segments = np.concatenate([np.full(len(d), i + 1) for i, d in enumerate(docs)] + [np.zeros(1, int)])[None]
    positions = np.concatenate([np.arange(len(d)) for d in docs] + [np.zeros(1, int)])[None]
    packed, _ = f(jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(segments))
    start = 0
    for d in docs:
        alone, _ = f(jnp.asarray(d[None]), jnp.arange(len(d))[None])
        np.testing.assert_allclose(np.asarray(packed)[0, start:start + len(d)], np.asarray(alone)[0], atol=tol(alone))
        start += len(d)
    assert np.isfinite(np.asarray(packed)).all()


def test_kv_cache_incremental_decode_equals_full_forward(model):
    f = jitted(model)
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(0, 64, (2, 11)))
    positions = jnp.broadcast_to(jnp.arange(11), (2, 11))
    full, _ = f(tokens, positions)
    cache = init_cache(CFG, batch=2, max_len=16)
    prefill, cache = f(tokens[:, :6], positions[:, :6], cache=cache)
    steps = [prefill]
    for t in range(6, 11):
        logits, cache = f(tokens[:, t:t + 1], positions[:, t:t + 1], cache=cache)
        steps.append(logits)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), np.asarray(full), atol=tol(full))
    assert cache.index_B.tolist() == [11, 11]


def test_rows_at_different_offsets_and_left_padding(model):
    """Row 0 has a 4-token prompt left-padded to 6; row 1 a 6-token prompt. Then each row appends
    a second turn at its own offset; everything must match the unpadded single-row forwards."""
    f = jitted(model)
    rng = np.random.default_rng(2)
    p0, p1 = rng.integers(0, 64, 4), rng.integers(0, 64, 6)
    turn0, turn1 = rng.integers(0, 64, 3), rng.integers(0, 64, 3)
    prompt = np.stack([np.concatenate([np.zeros(2, int), p0]), p1])
    seg = np.array([[0, 0, 1, 1, 1, 1], [1] * 6])
    pos = np.array([[0, 0, 0, 1, 2, 3], list(range(6))])
    cache = init_cache(CFG, batch=2, max_len=12)
    first, cache = f(jnp.asarray(prompt), jnp.asarray(pos), jnp.asarray(seg), cache)
    # second turn: row 0 continues at position 4 (slot 6), row 1 at position 6 (slot 6)
    second, cache = f(jnp.asarray(np.stack([turn0, turn1])), jnp.asarray([[4, 5, 6], [6, 7, 8]]), None, cache)
    ref0, _ = f(jnp.asarray(np.concatenate([p0, turn0])[None]), jnp.arange(7)[None])
    ref1, _ = f(jnp.asarray(np.concatenate([p1, turn1])[None]), jnp.arange(9)[None])
    np.testing.assert_allclose(np.asarray(first)[0, 2:], np.asarray(ref0)[0, :4], atol=tol(ref0))
    np.testing.assert_allclose(np.asarray(second)[0], np.asarray(ref0)[0, 4:], atol=tol(ref0))
    np.testing.assert_allclose(np.asarray(first)[1], np.asarray(ref1)[0, :6], atol=tol(ref1))
    np.testing.assert_allclose(np.asarray(second)[1], np.asarray(ref1)[0, 6:], atol=tol(ref1))
    # now rows diverge: only row 1 writes (row 0's index moved back onto its last real slot)
    cache = cache.replace(index_B=jnp.asarray([9, 9]))
    tok = jnp.asarray([[5], [7]])
    step, _ = f(tok, jnp.asarray([[7], [9]]), None, cache)
    ref1b, _ = f(jnp.asarray(np.concatenate([p1, turn1, [7]])[None]), jnp.arange(10)[None])
    np.testing.assert_allclose(np.asarray(step)[1, 0], np.asarray(ref1b)[0, -1], atol=tol(ref1b))


def test_remat_gives_same_values_and_gradients():
    cfg = CFG.replace(num_layers=1)  # one layer keeps the two gradient compiles small
    base = Decoder(cfg, rngs=nnx.Rngs(3))
    remat = Decoder(cfg.replace(remat=True), rngs=nnx.Rngs(3))
    tokens = jnp.asarray(np.random.default_rng(3).integers(0, 64, (2, 6)))
    positions = jnp.broadcast_to(jnp.arange(6), (2, 6))

    def loss_and_grad(m):
        graphdef, state = nnx.split(m)

        def loss(state):
            logits, _ = nnx.merge(graphdef, state)(tokens, positions_BxT=positions)
            return jax.nn.log_softmax(logits)[..., 0].mean()

        return jax.jit(jax.value_and_grad(loss))(state)

    l_base, g_base = loss_and_grad(base)
    l_remat, g_remat = loss_and_grad(remat)
    # remat recomputes the forward inside the backward, which XLA may fuse differently: the loss (a mean of
    # log-probs) within the forward's error; gradients within k(forward + backward) EPS32 of the largest one
    k_grad = prob_factor(2 * model_depth(cfg, seq_len=6) + tokens.size)
    np.testing.assert_allclose(l_base, l_remat, atol=prob_factor(model_depth(cfg, seq_len=6)) * EPS32 * (
        abs(float(l_base)) + 1.0))
    leaves = jax.tree.leaves(g_base)
    assert len(leaves) == len(jax.tree.leaves(g_remat)) and max(float(jnp.abs(g).max()) for g in leaves) > 0
    for a, b in zip(leaves, jax.tree.leaves(g_remat)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=k_grad * EPS32 * float(jnp.abs(a).max()))


def test_chunked_token_logprobs_equal_log_softmax_of_full_logits(model):
    from reasoner.models.scoring import token_logps

    tokens = jnp.asarray(np.random.default_rng(4).integers(0, 64, (3, 37)))
    graphdef, state = nnx.split(model)
    logp = jax.jit(lambda s, t: token_logps(nnx.merge(graphdef, s), t, chunk=8))(state, tokens)
    logits, _ = jitted(model)(tokens, jnp.broadcast_to(jnp.arange(37), (3, 37)))
    ref = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits[:, :-1])), np.asarray(tokens)[:, 1:, None], -1)[..., 0]
    np.testing.assert_allclose(np.asarray(logp)[:, :-1], ref, atol=logprob_atol(logits, CFG, seq_len=37))
    assert (np.asarray(logp)[:, -1] == 0).all()
