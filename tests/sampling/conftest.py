"""Fixtures for the sampler tests: tiny random decoders (fast) and transformers' SmolLM2 (slow, shared); our SmolLM2
and its tokenizer are the session fixtures of `tests/conftest.py`."""

import os

import numpy as np
import pytest
from flax import nnx

from tests.models_shared import SMALL_VOCAB, TINY, random_decoder, smollm2_path  # noqa: F401 (re-exported)


@pytest.fixture(scope="session")
def native_kernels():
    """`reasoner.sampling.native` where its kernels build and load here; a skip (a failure under CI) elsewhere."""
    from reasoner.sampling import native

    if not native.available():
        pytest.skip(f"the native kernels are unavailable here: {native.unavailable_reason()}")
    return native


@pytest.fixture(scope="session")
def tiny_model():
    return random_decoder(TINY, seed=0, scale=1.0)


@pytest.fixture(scope="session")
def small_vocab_model():
    return random_decoder(SMALL_VOCAB, seed=1, scale=30.0)


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
