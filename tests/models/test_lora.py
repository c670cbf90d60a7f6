"""LoRA: zero-B adapters leave the model unchanged; merged == unmerged; only adapters get gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from reasoner.models import Decoder, ModelConfig
from reasoner.models.lora import BASE_PARAMS, apply_lora, merge_lora, unmerge_lora

CFG = ModelConfig(family="llama", vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8)
TOKENS = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 10)))
POS = jnp.broadcast_to(jnp.arange(10), (2, 10))


def logits(model):
    graphdef, state = nnx.split(model)
    return np.asarray(jax.jit(lambda s: nnx.merge(graphdef, s)(TOKENS, positions_BxT=POS)[0])(state))


@pytest.fixture(scope="module")
def base_logits():
    return logits(Decoder(CFG, rngs=nnx.Rngs(0)))


def test_regex_selects_projections_and_zero_b_equals_base(base_logits):
    model = Decoder(CFG, rngs=nnx.Rngs(0))
    paths = apply_lora(model, pattern=r"attn\.(q|v)_proj|mlp\.down_proj", rank=4, alpha=8, rngs=nnx.Rngs(1))
    assert sorted(paths) == sorted(f"layers.{i}.{p}" for i in range(2)
                                   for p in ("attn.q_proj", "attn.v_proj", "mlp.down_proj"))
    assert model.layers[0].attn.k_proj.lora is None
    lora = nnx.state(model, nnx.LoRAParam)
    assert len(jax.tree.leaves(lora)) == 2 * len(paths)
    assert model.layers[0].attn.q_proj.lora.a[...].shape == (32, 4)
    assert model.layers[0].attn.q_proj.lora.b[...].shape == (4, 4, 8)
    np.testing.assert_allclose(logits(model), base_logits, atol=1e-6)


def test_merged_equals_unmerged_and_unmerge_restores_kernel(base_logits):
    model = Decoder(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, pattern=r"proj", rank=2, alpha=4, rngs=nnx.Rngs(2))
    kernel0 = np.asarray(model.layers[1].attn.o_proj.kernel[...])
    key = jax.random.key(5)
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.LoRAParam)):
        if path[-1] == "b":
            key, sub = jax.random.split(key)
            var.set_value(0.1 * jax.random.normal(sub, var[...].shape))
    unmerged = logits(model)
    assert np.abs(unmerged - base_logits).max() > 1e-2  # the adapters really act
    merge_lora(model)
    assert np.abs(np.asarray(model.layers[1].attn.o_proj.kernel[...]) - kernel0).max() > 1e-4
    np.testing.assert_allclose(logits(model), unmerged, atol=1e-5)
    unmerge_lora(model)
    np.testing.assert_allclose(np.asarray(model.layers[1].attn.o_proj.kernel[...]), kernel0, atol=1e-6)
    np.testing.assert_allclose(logits(model), unmerged, atol=1e-5)


def test_only_adapters_are_trained_when_splitting_by_lora_param():
    model = Decoder(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, pattern=r"q_proj", rank=2, alpha=2, dropout=0.1, rngs=nnx.Rngs(3))
    graphdef, lora, rest = nnx.split(model, nnx.LoRAParam, ...)
    base = nnx.state(model, BASE_PARAMS)
    assert not any(p[-1] in ("a", "b") for p, _ in nnx.to_flat_state(base))

    def loss(lora, rest):
        rest = jax.tree.map(lambda x: x, rest)  # see reasoner/models/lora.py: dropout RNG under grad
        m = nnx.merge(graphdef, lora, rest)
        return jax.nn.log_softmax(m(TOKENS, positions_BxT=POS)[0])[..., 3].mean(), nnx.state(m, nnx.RngState)

    grads, rng_state = jax.jit(jax.grad(loss, has_aux=True))(lora, rest)
    counts = [int(v[...]) for p, v in nnx.to_flat_state(rng_state) if p[-1] == "count"]
    assert counts and all(c == 1 for c in counts)  # dropout drew one key per adapter
    flat = {p: np.asarray(v[...]) for p, v in nnx.to_flat_state(grads)}
    assert set(p[-1] for p in flat) == {"a", "b"}
    # with B = 0 only B receives gradient at the first step
    assert all(np.abs(g).max() > 0 for p, g in flat.items() if p[-1] == "b")
    assert all(np.abs(g).max() == 0 for p, g in flat.items() if p[-1] == "a")


def test_pattern_matching_nothing_is_an_error():
    with pytest.raises(ValueError, match="matches no projection"):
        apply_lora(Decoder(CFG, rngs=nnx.Rngs(0)), pattern=r"nonexistent", rank=2, alpha=2)
