"""`completion_logps` scores positions prompt_len - 1 .. prompt_len + N - 2; a window that leaves the sequence raises.

`jax.lax.dynamic_slice_in_dim` clamps its start so that the slice fits: with a sequence shorter than
prompt_len + N - 1 (or prompt_len = 0) it used to score the completion from the wrong positions without a word.
The reference is `picked_logps` of the full forward's logits at the positions that predict each completion token.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from reasoner.models import Decoder
from reasoner.models.scoring import completion_logps, picked_logps
from tests.models.test_decoder import CFG
from tests.tolerances import logprob_atol

P, N = 5, 4


@pytest.fixture(scope="module")
def model():
    return Decoder(CFG, rngs=nnx.Rngs(2))


def _score(model, tokens, ids, prompt_len):
    T = tokens.shape[1]
    return completion_logps(model, tokens, positions_BxT=jnp.broadcast_to(jnp.arange(T), tokens.shape),
                            segment_ids_BxT=None, completion_ids_BxN=ids, prompt_len=prompt_len, temperature=1.0)


def test_exact_window_matches_the_full_forward(model):
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, CFG.vocab_size, (2, P + N - 1)))
    ids = jnp.asarray(np.random.default_rng(1).integers(0, CFG.vocab_size, (2, N)))
    logits, _ = model(tokens, positions_BxT=jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape))
    want = np.asarray(picked_logps(logits[:, P - 1:P - 1 + N], ids))
    got, _ = _score(model, tokens, ids, P)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=logprob_atol(logits, CFG, seq_len=P + N))


@pytest.mark.parametrize("length, prompt_len", [(P + N - 2, P), (N, 0)], ids=["short", "no-prompt"])
def test_window_outside_the_sequence_raises(model, length, prompt_len):
    tokens = jnp.zeros((2, length), jnp.int32)
    with pytest.raises(ValueError, match=rf"completion_logps: prompt_len={prompt_len} and {N} completion tokens"):
        _score(model, tokens, jnp.zeros((2, N), jnp.int32), prompt_len)
