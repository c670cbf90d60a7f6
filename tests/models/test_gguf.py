"""GGUF -> our params -> HF safetensors -> transformers round trip, on a tiny file and on SmolLM2."""

import os

import jax.numpy as jnp
import numpy as np
import pytest
from tests.models.tiny_checkpoints import hf_logits, make_hf_model, write_tiny_gguf

from reasoner.models import load_model
from reasoner.models.export import export_hf, hf_tensors
from reasoner.models.gguf import permute_llama_qk, unpermute_llama_qk


def _transformers_from_dir(path, **kw):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw).eval()


def test_llama_qk_permutation_is_inverted():
    w = np.arange(8 * 16 * 3, dtype=np.float32).reshape(8 * 16, 3)
    permuted = permute_llama_qk(w, 8)
    assert not np.array_equal(permuted, w)
    np.testing.assert_array_equal(unpermute_llama_qk(permuted, 8), w)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    hf = make_hf_model("llama", seed=5, tie_word_embeddings=False,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    path = str(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    return hf, write_tiny_gguf(path, hf)


def test_tiny_gguf_weights_match_the_original_within_q8_error(tiny_gguf):
    hf, path = tiny_gguf
    ours = hf_tensors(load_model(path))
    for name, t in hf.state_dict().items():
        ref = t.numpy()
        scale = np.abs(ref).max()
        # Q8_0 keeps ~1/127 of each block's max; a wrong Q/K row order would be off by O(scale)
        np.testing.assert_allclose(ours[name], ref, atol=scale / 100, err_msg=name)


def test_tiny_gguf_roundtrip_through_safetensors_into_transformers(tiny_gguf, tmp_path):
    hf, path = tiny_gguf
    model = load_model(path)
    tokens = np.random.default_rng(0).integers(0, hf.config.vocab_size, (2, 20))
    ours, _ = model(jnp.asarray(tokens), positions_BxT=jnp.broadcast_to(jnp.arange(20), (2, 20)))
    export_hf(model, str(tmp_path / "export"))
    ref = hf_logits(_transformers_from_dir(str(tmp_path / "export")), tokens)
    np.testing.assert_allclose(np.asarray(ours), ref, atol=1e-4, rtol=0)
    # transformers' own GGUF reader must agree with ours too (same dequantization, same unpermute)
    direct = _transformers_from_dir(os.path.dirname(path), gguf_file=os.path.basename(path))
    np.testing.assert_allclose(hf_logits(direct, tokens), ref, atol=1e-4, rtol=0)
    # and our loader reads our own export back identically
    again, _ = load_model(str(tmp_path / "export"))(jnp.asarray(tokens),
                                                    positions_BxT=jnp.broadcast_to(jnp.arange(20), (2, 20)))
    np.testing.assert_allclose(np.asarray(again), np.asarray(ours), atol=1e-6)


@pytest.mark.slow
def test_smollm2_gguf_export_loads_in_transformers(tmp_path):
    model = load_model("smollm2-135m-instruct")
    assert (model.cfg.num_layers, model.cfg.num_heads, model.cfg.num_kv_heads) == (30, 9, 3)
    tokens = np.random.default_rng(0).integers(0, model.cfg.vocab_size, (1, 40))
    ours, _ = model(jnp.asarray(tokens), positions_BxT=jnp.arange(40)[None])
    export_hf(model, str(tmp_path))
    ref = hf_logits(_transformers_from_dir(str(tmp_path)), tokens)
    np.testing.assert_allclose(np.asarray(ours), ref, atol=2e-3, rtol=0)
    assert (np.asarray(ours).argmax(-1) == ref.argmax(-1)).all()
