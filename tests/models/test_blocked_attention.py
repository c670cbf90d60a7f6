"""Query-blocked attention (`reasoner/models/blocked_attention.py`) against the dense path.

The dense einsum attention of `attention.py` is the reference: outputs and gradients of q, k, v
must agree at every non-padding query, for packed rows (several segments), left and right
padding, GQA groups, and lengths that are not a multiple of the block size.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from reasoner.models.attention import attention_mask
from reasoner.models.blocked_attention import blocked_attention, block_size
from reasoner.models.config import ModelConfig
from reasoner.models.decoder import Decoder
from tests.tolerances import EPS32, logits_atol, model_depth, prob_factor


def dense(q, k, v, seg, scale):
    B, T = seg.shape
    slots = jnp.broadcast_to(jnp.arange(T), (B, T))
    mask = attention_mask(seg, slots, seg, jnp.arange(T))
    s = jnp.einsum("btngk,bsnk->bngts", q, k) * scale
    s = jnp.where(mask[:, None, None], s, jnp.finfo(jnp.float32).min)
    return jnp.einsum("bngts,bsnk->btngk", jax.nn.softmax(s, -1), v)


def segments(T):
    rng = np.random.default_rng(T)
    packed = np.concatenate([np.full(n, i + 1) for i, n in enumerate(rng.multinomial(T - 7, [0.2, 0.5, 0.3]))] + [np.zeros(7)])
    left = np.concatenate([np.zeros(T // 3), np.ones(T - T // 3)])
    return np.stack([np.ones(T), packed, left]).astype(np.int32)


@pytest.mark.parametrize("T", [64, 200, 257])
def test_values_and_gradients_equal_dense(T):
    rng = np.random.default_rng(0)
    seg = jnp.asarray(segments(T))
    B, KV, G, Dh = seg.shape[0], 2, 3, 16
    q = jnp.asarray(rng.standard_normal((B, T, KV, G, Dh)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((B, T, KV, Dh)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((B, T, KV, Dh)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(q.shape), jnp.float32) * (seg != 0)[:, :, None, None, None]
    real = np.asarray(seg != 0)
    ours = blocked_attention(q, k, v, seg, scale=0.25)
    ref = dense(q, k, v, seg, 0.25)
    # scores reduce over Dh, the softmax normaliser and the weighted sum over T, the online rescaling adds one
    # rounding per block (<= T / 16 + 1 blocks): outputs are convex combinations of v, so the error scales with max|v|
    k_fwd = prob_factor(Dh + 2 * T + T // 16 + 1)
    np.testing.assert_allclose(np.asarray(ours)[real], np.asarray(ref)[real],
                               atol=k_fwd * EPS32 * float(jnp.abs(v).max()))
    loss = lambda f: lambda q, k, v: jnp.sum(f(q, k, v, seg, 0.25) * w)  # noqa: E731
    g_ours = jax.jit(jax.grad(loss(lambda *a: blocked_attention(*a[:4], scale=a[4])), argnums=(0, 1, 2)))(q, k, v)
    g_ref = jax.grad(loss(dense), argnums=(0, 1, 2))(q, k, v)
    k_bwd = prob_factor(2 * (Dh + 2 * T + T // 16 + 1))  # the backward runs the transposed reductions too
    for a, b in zip(g_ours, g_ref):
        assert np.abs(np.asarray(a) - np.asarray(b)).max() <= k_bwd * EPS32 * float(np.abs(np.asarray(b)).max())


def test_block_size_keeps_at_most_16_blocks():
    assert block_size(512) == 64 and block_size(1024) == 64 and block_size(2048) == 128 and block_size(4096) == 256


def test_decoder_blocked_equals_dense_logits_and_grads():
    cfg = ModelConfig(family="llama", vocab_size=97, hidden_size=32, intermediate_size=64, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=8, attention="dense")
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 97, (2, 150)), jnp.int32)
    seg = jnp.asarray(np.stack([np.ones(150), np.r_[np.ones(90), 2 * np.ones(50), np.zeros(10)]]), jnp.int32)
    pos = jnp.asarray(np.stack([np.arange(150), np.r_[np.arange(90), np.arange(50), np.zeros(10)]]), jnp.int32)
    out = {}
    for impl in ("dense", "blocked"):
        model = Decoder(cfg.replace(attention=impl), rngs=nnx.Rngs(0))
        graphdef, state = nnx.split(model)

        def loss(state):
            logits, _ = nnx.merge(graphdef, state)(tokens, positions_BxT=pos, segment_ids_BxT=seg)
            return jnp.sum(jax.nn.log_softmax(logits) * (seg != 0)[..., None]) / 1000, logits

        (value, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(state)
        out[impl] = value, logits, jax.tree.leaves(grads)
    real = np.asarray(seg != 0)
    # the forward's float32 error at this depth (logits), plus the sum of V * T * B log-probs (all < 0) for the
    # value, and forward + transposed backward + the sum over tokens for the gradients (relative to the largest)
    dense_logits = np.asarray(out["dense"][1])
    np.testing.assert_allclose(np.asarray(out["blocked"][1])[real], dense_logits[real],
                               atol=logits_atol(dense_logits[real], cfg, seq_len=150))
    depth = model_depth(cfg, seq_len=150)
    value = float(out["dense"][0])
    assert abs(float(out["blocked"][0]) - value) <= prob_factor(depth + dense_logits.size) * EPS32 * abs(value)
    k_grad = prob_factor(2 * depth + tokens.size)
    for a, b in zip(out["blocked"][2], out["dense"][2]):
        assert np.abs(np.asarray(a) - np.asarray(b)).max() <= k_grad * EPS32 * float(np.abs(np.asarray(b)).max())


def test_unknown_attention_setting_is_refused():
    with pytest.raises(ValueError, match="attention="):
        ModelConfig(family="llama", vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=1, num_heads=1,
                    num_kv_heads=1, head_dim=8, attention="flash")
