"""GGUF -> our params -> HF safetensors -> transformers round trip, on a tiny file and on SmolLM2."""

import os

import jax.numpy as jnp
import numpy as np
import pytest
from tests.models.tiny_checkpoints import hf_logits, make_hf_model, write_tiny_gguf

from reasoner.models import load_model
from reasoner.models.export import export_hf, hf_tensors
from reasoner.models.gguf import permute_llama_qk, unpermute_llama_qk

EPS32 = float(np.finfo(np.float32).eps)


def forward_tolerance(ref: np.ndarray, *, layers: int, fan_in: int) -> float:
    """Two float32 implementations of one decoder (ours, transformers') differ by rounding only. A float32 dot of n
    terms errs by at most lambda sqrt(n) u relative with probability >= 1 - 2 exp(-lambda^2 / 2) (Higham & Mary's
    probabilistic bound; the worst case n u is never approached by independent roundings); we take lambda = 8 and
    count n = fan_in + 8 (the few norm/softmax/activation ops around each dot). Each of the 7 projections per layer
    and the head adds that much; RMSNorm rescales every layer's input, so the terms add up rather than compound:
    (7 layers + 1) * 8 sqrt(fan_in + 8) eps times the largest logit (eps = 2 u for margin)."""
    return (7 * layers + 1) * 8 * np.sqrt(fan_in + 8) * EPS32 * float(np.abs(ref).max())


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
        # gguf's Q8_0: d = block max / 127, q = round(x / d), so |x - q d| <= d / 2 = max / 254; d stored as float16
        # (relative 2**-11) moves q d by <= 127 d 2**-11 = max 2**-11. A wrong Q/K row order is off by O(scale).
        np.testing.assert_allclose(ours[name], ref, atol=scale * (1 / 254 + 2 ** -11), rtol=0, err_msg=name)


def test_a_gguf_without_context_length_takes_transformers_default(tmp_path):
    """`llama.context_length` absent: transformers' GGUF loader leaves LlamaConfig's default (2048) and so do we
    (we read 8192 before: a model told it may attend 4x further than the reference)."""
    from transformers import AutoConfig

    hf = make_hf_model("llama", seed=6, max_position_embeddings=512)
    path = write_tiny_gguf(str(tmp_path / "noctx.gguf"), hf, context_length=False)
    reference = AutoConfig.from_pretrained(str(tmp_path), gguf_file="noctx.gguf").max_position_embeddings
    assert load_model(path).cfg.max_position_embeddings == reference == 2048
    written = write_tiny_gguf(str(tmp_path / "ctx.gguf"), hf)  # present: read as written
    assert load_model(written).cfg.max_position_embeddings == 512


def test_llama_gguf_with_attention_biases_keeps_them(tmp_path):
    # the biases were mapped but never read (qkv_bias only for qwen2): the model loaded without error and wrong
    hf = make_hf_model("llama", seed=4, attention_bias=True, tie_word_embeddings=False,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    model = load_model(write_tiny_gguf(str(tmp_path / "bias.gguf"), hf, quantize_linear=False))
    assert model.cfg.qkv_bias and model.cfg.o_bias
    tokens = np.random.default_rng(1).integers(0, hf.config.vocab_size, (2, 16))
    ours, _ = model(jnp.asarray(tokens), positions_BxT=jnp.broadcast_to(jnp.arange(16), (2, 16)))
    ref = hf_logits(hf, tokens)
    tol = forward_tolerance(ref, layers=hf.config.num_hidden_layers, fan_in=hf.config.intermediate_size)
    np.testing.assert_allclose(np.asarray(ours), ref, atol=tol, rtol=0)


def test_tiny_gguf_roundtrip_through_safetensors_into_transformers(tiny_gguf, tmp_path):
    hf, path = tiny_gguf
    model = load_model(path)
    tokens = np.random.default_rng(0).integers(0, hf.config.vocab_size, (2, 20))
    ours, _ = model(jnp.asarray(tokens), positions_BxT=jnp.broadcast_to(jnp.arange(20), (2, 20)))
    export_hf(model, str(tmp_path / "export"))
    ref = hf_logits(_transformers_from_dir(str(tmp_path / "export")), tokens)
    tol = forward_tolerance(ref, layers=hf.config.num_hidden_layers, fan_in=hf.config.intermediate_size)
    np.testing.assert_allclose(np.asarray(ours), ref, atol=tol, rtol=0)
    # transformers' own GGUF reader must agree with ours too (same dequantization, same unpermute): the same
    # weights in transformers twice, so only its own run-to-run rounding could differ
    direct = _transformers_from_dir(os.path.dirname(path), gguf_file=os.path.basename(path))
    np.testing.assert_allclose(hf_logits(direct, tokens), ref, atol=tol, rtol=0)
    # and our loader reads our own export back identically: float32 safetensors round-trip bit for bit and the
    # computation is the same, so no rounding can differ
    again, _ = load_model(str(tmp_path / "export"))(jnp.asarray(tokens),
                                                    positions_BxT=jnp.broadcast_to(jnp.arange(20), (2, 20)))
    np.testing.assert_array_equal(np.asarray(again), np.asarray(ours))


@pytest.mark.slow
def test_smollm2_gguf_export_loads_in_transformers(tmp_path):
    model = load_model("smollm2-135m-instruct")
    assert (model.cfg.num_layers, model.cfg.num_heads, model.cfg.num_kv_heads) == (30, 9, 3)
    tokens = np.random.default_rng(0).integers(0, model.cfg.vocab_size, (1, 40))
    ours, _ = model(jnp.asarray(tokens), positions_BxT=jnp.arange(40)[None])
    export_hf(model, str(tmp_path))
    ref = hf_logits(_transformers_from_dir(str(tmp_path)), tokens)
    np.testing.assert_allclose(np.asarray(ours), ref, rtol=0,
                               atol=forward_tolerance(ref, layers=model.cfg.num_layers,
                                                      fan_in=model.cfg.intermediate_size))
    assert (np.asarray(ours).argmax(-1) == ref.argmax(-1)).all()
