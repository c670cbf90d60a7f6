"""Sliding-window attention (Mistral; Qwen2's `use_sliding_window`) against transformers' own models.

A tiny random `MistralForCausalLM` (window 8) and a Qwen2 whose upper layer is windowed are saved with
transformers and loaded with our loader. Their logits at 40 tokens (5x the window) must equal transformers' within
the forward's float32 bound on the dense path, and at 160 tokens on the CPU blocked path (several query blocks,
so a block's key range starts inside the sequence); the same weights without a window must differ beyond the
window (the check can fail). Greedy decoding with the KV cache, through the static sampler and the paged rollout
engine, must give transformers' `generate` tokens past the window, where the window-less model's differ.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reasoner.models import load_model
from reasoner.models.attention import attention_mask
from reasoner.models.blocked_attention import blocked_attention
from reasoner.models.config import ModelConfig, UnsupportedModelError
from reasoner.sampling import Sampler, SamplingParams
from reasoner.sampling.rollout_engine import RolloutEngine
from tests.models.tiny_checkpoints import hf_logits, make_hf_model, save_hf
from tests.tolerances import EPS32, logits_atol, prob_factor

WINDOW = 8
MISTRAL = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-5,
               sliding_window=WINDOW, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def make_mistral(seed: int = 0, **overrides):
    """A random transformers Mistral with the weight scales of `tiny_checkpoints.make_hf_model`."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.MistralConfig(**{**MISTRAL, **overrides})
    model = transformers.MistralForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.3 * torch.randn_like(p) if name.endswith("norm.weight") else 0.15 * torch.randn_like(p))
    return model.eval()


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    hf = make_mistral(seed=2)
    return hf, save_hf(hf, str(tmp_path_factory.mktemp("mistral")))


def load_variant(path, **changes):
    """Our model from `path` with config fields changed (e.g. no window, or the blocked attention path)."""
    from flax import nnx

    from reasoner.models.loading import load_into_state, open_checkpoint

    cfg, source = open_checkpoint(path)
    graphdef, state = load_into_state(cfg.replace(**changes), source)
    return nnx.merge(graphdef, state)


def forward(model, tokens):
    T = tokens.shape[1]
    return np.asarray(model(jnp.asarray(tokens), positions_BxT=jnp.broadcast_to(jnp.arange(T), tokens.shape))[0])


def test_config_reads_the_windows_as_transformers_does():
    import transformers

    from tests.models.tiny_checkpoints import hf_config

    cfg = ModelConfig.from_hf_dict(transformers.MistralConfig(**MISTRAL).to_dict())
    assert cfg.family == "mistral" and cfg.sliding_window == WINDOW and cfg.sliding_layers == (0, 1)
    assert not cfg.tie_embeddings and not cfg.qkv_bias
    assert ModelConfig.from_hf_dict(cfg.to_hf_dict()) == cfg
    again = transformers.MistralConfig(**cfg.to_hf_dict())
    assert again.sliding_window == WINDOW
    none = ModelConfig.from_hf_dict(transformers.MistralConfig(**{**MISTRAL, "sliding_window": None}).to_dict())
    assert none.sliding_window == 0 and none.sliding_layers == () and none.layer_window(1) == 0
    # Qwen2 windows only the layers from max_window_layers on, and only with use_sliding_window
    qwen = hf_config("qwen2", num_hidden_layers=3, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)
    q = ModelConfig.from_hf_dict(qwen.to_dict())
    assert q.sliding_layers == (1, 2) and [q.layer_window(i) for i in range(3)] == [0, WINDOW, WINDOW]
    back = hf_config("qwen2", **{k: v for k, v in q.to_hf_dict().items() if k in (
        "num_hidden_layers", "use_sliding_window", "sliding_window", "layer_types")})
    assert back.layer_types == qwen.layer_types
    off = ModelConfig.from_hf_dict(hf_config("qwen2", sliding_window=WINDOW).to_dict())
    assert off.sliding_window == 0  # use_sliding_window false: transformers drops the window
    bad = dict(hf_config("llama").to_dict(), use_sliding_window=True, sliding_window=4)
    with pytest.raises(UnsupportedModelError, match="sliding-window attention in a llama"):
        ModelConfig.from_hf_dict(bad)
    with pytest.raises(UnsupportedModelError, match="sliding_window=0"):
        ModelConfig.from_hf_dict(dict(transformers.MistralConfig(**MISTRAL).to_dict(), sliding_window=0))
    with pytest.raises(ValueError, match="sliding_layers"):
        cfg.replace(sliding_layers=(0, 5))


def test_mistral_logits_match_transformers_and_the_window_matters(mistral):
    hf, path = mistral
    model = load_model(path)
    assert model.cfg.family == "mistral" and [b.attn.window for b in model.layers] == [WINDOW, WINDOW]
    tokens = np.random.default_rng(0).integers(0, 96, size=(2, 5 * WINDOW))
    ref = hf_logits(hf, tokens)
    ours = forward(model, tokens)
    atol = logits_atol(ref, model.cfg, seq_len=tokens.shape[1])  # the forward's float32 error at this depth
    assert np.abs(ref).max() > 1.0
    np.testing.assert_allclose(ours, ref, atol=atol, rtol=0)
    # the same weights with full causal attention: equal inside the window, far apart beyond it
    full = forward(load_variant(path, sliding_window=0, sliding_layers=None), tokens)
    np.testing.assert_allclose(full[:, :WINDOW], ref[:, :WINDOW], atol=atol, rtol=0)
    assert np.abs(full[:, 2 * WINDOW:] - ref[:, 2 * WINDOW:]).max(axis=-1).min() > 100 * atol


def test_blocked_path_matches_transformers_past_several_blocks(mistral):
    hf, path = mistral
    model = load_variant(path, attention="blocked")
    tokens = np.random.default_rng(1).integers(0, 96, size=(1, 160))  # blocks of 64: keys start at 57 and 121
    ref = hf_logits(hf, tokens)
    np.testing.assert_allclose(forward(model, tokens), ref, atol=logits_atol(ref, model.cfg, seq_len=160), rtol=0)


@pytest.mark.parametrize("window", [1, 20])
def test_blocked_attention_window_values_and_gradients_equal_dense(window):
    from tests.models.test_blocked_attention import segments

    T, KV, G, Dh = 130, 2, 2, 8  # blocks of 64 queries at 0, 64, 128
    rng = np.random.default_rng(window)
    seg = jnp.asarray(segments(T))
    B = seg.shape[0]
    q = jnp.asarray(rng.standard_normal((B, T, KV, G, Dh)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((B, T, KV, Dh)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((B, T, KV, Dh)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(q.shape), jnp.float32) * (seg != 0)[:, :, None, None, None]

    def dense(q, k, v):
        slots = jnp.broadcast_to(jnp.arange(T), (B, T))
        mask = attention_mask(seg, slots, seg, jnp.arange(T), window=window)
        s = jnp.where(mask[:, None, None], jnp.einsum("btngk,bsnk->bngts", q, k) * 0.3, jnp.finfo(jnp.float32).min)
        return jnp.einsum("bngts,bsnk->btngk", jax.nn.softmax(s, -1), v)

    def blocked(q, k, v):
        return blocked_attention(q, k, v, seg, scale=0.3, window=window)

    real = np.asarray(seg != 0)
    # as in test_blocked_attention: scores over Dh, the softmax normaliser and weighted sum over <= T keys, one
    # rescaling per block; outputs are convex combinations of v
    k_fwd = prob_factor(Dh + 2 * T + T // 16 + 1)
    np.testing.assert_allclose(np.asarray(blocked(q, k, v))[real], np.asarray(dense(q, k, v))[real], rtol=0,
                               atol=k_fwd * EPS32 * float(jnp.abs(v).max()))
    if window == 1:  # each query sees only itself: the output is its own value
        want = np.broadcast_to(np.asarray(v)[:, :, :, None], q.shape)
        np.testing.assert_allclose(np.asarray(blocked(q, k, v))[real], want[real], rtol=0,
                                   atol=k_fwd * EPS32 * float(jnp.abs(v).max()))
    loss = lambda f: lambda q, k, v: jnp.sum(f(q, k, v) * w)  # noqa: E731
    g_ours = jax.jit(jax.grad(loss(blocked), argnums=(0, 1, 2)))(q, k, v)
    g_ref = jax.grad(loss(dense), argnums=(0, 1, 2))(q, k, v)
    k_bwd = prob_factor(2 * (Dh + 2 * T + T // 16 + 1))  # the transposed reductions of the backward too
    # the q/k gradients sum terms ds * k * scale with ds = p (w.v - w.out) ~ |w| |v|: their error scales with that
    # size even where they cancel exactly (window 1: a one-key softmax has no q/k gradient at all)
    terms = 0.3 * float(jnp.abs(w).max() * jnp.abs(v).max() * jnp.maximum(jnp.abs(q).max(), jnp.abs(k).max()))
    for a, b in zip(g_ours, g_ref):
        size = max(float(np.abs(np.asarray(b)).max()), terms)
        assert np.abs(np.asarray(a) - np.asarray(b)).max() <= k_bwd * EPS32 * size


def hf_greedy(hf, prompt, n):
    import torch

    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0,
                          eos_token_id=None, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


def test_greedy_decode_with_cache_equals_transformers_generate(mistral):
    hf, path = mistral
    model = load_model(path)
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, 96, size=5).tolist(), rng.integers(0, 96, size=3 * WINDOW - 3).tolist()]
    n = 4 * WINDOW
    want = [hf_greedy(hf, p, n) for p in prompts]
    # every greedy choice is clear of ties by more than the logits' float32 bound (else equality proves nothing)
    for p, w in zip(prompts, want):
        seq = np.asarray([p + w])
        logits = hf_logits(hf, seq)[0, len(p) - 1:-1]
        top2 = np.sort(logits, axis=-1)[:, -2:]
        assert (top2[:, 1] - top2[:, 0]).min() > 2 * logits_atol(logits, model.cfg, seq_len=seq.shape[1])
    params = SamplingParams(max_new_tokens=n, temperature=0.0, eos_ids=())
    static = Sampler(model).generate(prompts, params)
    assert [c.tokens.tolist() for c in static] == want
    paged = RolloutEngine(model, slots=2, block_size=4, chunk_steps=5).generate(prompts, params)
    assert [c.tokens.tolist() for c in paged] == want
    # without the window the same weights decode other tokens past it
    unwindowed = Sampler(load_variant(path, sliding_window=0, sliding_layers=None)).generate(prompts, params)
    assert all(c.tokens.tolist() != w for c, w in zip(unwindowed, want))


def test_qwen2_windowed_upper_layer_matches_transformers():
    import tempfile

    hf = make_hf_model("qwen2", seed=4, num_hidden_layers=2, use_sliding_window=True, sliding_window=WINDOW,
                       max_window_layers=1)
    assert hf.config.layer_types == ["full_attention", "sliding_attention"]
    with tempfile.TemporaryDirectory() as d:
        model = load_model(save_hf(hf, d))
    assert [b.attn.window for b in model.layers] == [0, WINDOW]
    tokens = np.random.default_rng(5).integers(0, hf.config.vocab_size, size=(2, 5 * WINDOW))
    ref = hf_logits(hf, tokens)
    np.testing.assert_allclose(forward(model, tokens), ref, atol=logits_atol(ref, model.cfg, seq_len=40), rtol=0)
