"""Tiny random Llama / Qwen2 / Qwen3 from transformers -> safetensors -> our loader: same logits."""

import jax.numpy as jnp
import numpy as np
import pytest
from tests.models.tiny_checkpoints import hf_logits, make_hf_model, save_hf

from reasoner.models import load_model
from reasoner.models.config import ModelConfig
from tests.tolerances import logits_atol


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3"])
def tiny_checkpoint(request, tmp_path_factory):
    family = request.param
    hf = make_hf_model(family, seed=1)
    path = save_hf(hf, str(tmp_path_factory.mktemp(family)))
    return family, hf, path


def test_logits_match_transformers(tiny_checkpoint):
    family, hf, path = tiny_checkpoint
    model = load_model(path)
    assert model.cfg.family == family
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, hf.config.vocab_size, size=(2, 24))  # past the llama3 original length 16
    ours, _ = model(jnp.asarray(tokens), positions_BxT=jnp.broadcast_to(jnp.arange(24), (2, 24)))
    ref = hf_logits(hf, tokens)
    assert np.abs(ref).max() > 1.0  # the check is not vacuous
    # float32 error of the whole forward relative to the logits' magnitude and the depth (any CPU kernel)
    np.testing.assert_allclose(np.asarray(ours), ref, atol=logits_atol(ref, model.cfg, seq_len=24), rtol=0)


def test_left_padding_matches_transformers_attention_mask(tiny_checkpoint):
    _, hf, path = tiny_checkpoint
    model = load_model(path)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, hf.config.vocab_size, size=(2, 12))
    mask = np.ones((2, 12), np.int64)
    mask[1, :5] = 0  # row 1 is left-padded
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    ours, _ = model(jnp.asarray(tokens), positions_BxT=jnp.asarray(positions), segment_ids_BxT=jnp.asarray(mask))
    ref = hf_logits(hf, tokens, attention_mask=mask)
    valid = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(ours)[valid], ref[valid], atol=logits_atol(ref[valid], model.cfg, seq_len=12),
                               rtol=0)  # as above: the forward's float32 error at this depth


def test_sharded_index_checkpoint(tmp_path):
    hf = make_hf_model("qwen2", seed=3)
    path = save_hf(hf, str(tmp_path), max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    model = load_model(str(tmp_path))
    tokens = np.arange(10)[None] % hf.config.vocab_size
    ours, _ = model(jnp.asarray(tokens), positions_BxT=jnp.arange(10)[None])
    ref = hf_logits(hf, tokens)
    np.testing.assert_allclose(np.asarray(ours), ref, atol=logits_atol(ref, model.cfg, seq_len=10), rtol=0)


def test_config_roundtrip_through_hf_dict():
    from tests.models.tiny_checkpoints import hf_config

    for family in ("llama", "qwen2", "qwen3"):
        cfg = ModelConfig.from_hf_dict(hf_config(family).to_dict())
        again = ModelConfig.from_hf_dict(cfg.to_hf_dict())
        assert again == cfg
    llama = ModelConfig.from_hf_dict(hf_config("llama").to_dict())
    assert llama.rope_type == "llama3" and dict(llama.rope_scaling)["factor"] == 8.0
    qwen2 = ModelConfig.from_hf_dict(hf_config("qwen2").to_dict())
    assert qwen2.qkv_bias and not qwen2.o_bias and qwen2.tie_embeddings
    qwen3 = ModelConfig.from_hf_dict(hf_config("qwen3").to_dict())
    assert qwen3.qk_norm and qwen3.rope_type == "linear"


def test_bf16_params_and_compute_stay_close(tiny_checkpoint):
    _, hf, path = tiny_checkpoint
    model = load_model(path, param_dtype="bfloat16", dtype="bfloat16")
    assert model.embed[...].dtype == jnp.bfloat16
    tokens = np.arange(16)[None] % hf.config.vocab_size
    ours, _ = model(jnp.asarray(tokens), positions_BxT=jnp.arange(16)[None])
    assert ours.dtype == jnp.float32
    ref = hf_logits(hf, tokens)
    # bf16 has ~3 significant digits; the argmax of random logits should still mostly agree
    assert np.mean(np.asarray(ours).argmax(-1) == ref.argmax(-1)) >= 0.8
    assert np.abs(np.asarray(ours) - ref).max() < 0.1 * np.abs(ref).max()


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_config_without_tie_key_is_untied_as_in_transformers(family, tmp_path):
    # a hand-written config.json without tie_word_embeddings: transformers' classes default to untied; we tied
    # qwen2/qwen3 and ignored lm_head.weight (logits off by O(1))
    import json

    from transformers import AutoModelForCausalLM

    path = save_hf(make_hf_model(family, seed=2, tie_word_embeddings=False), str(tmp_path))
    config = json.loads((tmp_path / "config.json").read_text())
    del config["tie_word_embeddings"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = load_model(path)
    assert not model.cfg.tie_embeddings
    tokens = np.random.default_rng(0).integers(0, model.cfg.vocab_size, (1, 8))
    ours, _ = model(jnp.asarray(tokens), positions_BxT=jnp.arange(8)[None])
    ref = hf_logits(AutoModelForCausalLM.from_pretrained(path), tokens)
    np.testing.assert_allclose(np.asarray(ours), ref, atol=logits_atol(ref, model.cfg, seq_len=8), rtol=0)
