"""Without a tokenizer the engine and the static session stop on every EOS id of the model's config (transformers'
`generation_config.eos_token_id` list), not only the first: a config with EOS ids (a, b) ends a greedy row at b."""

import dataclasses

import numpy as np
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.sampling.rollout_engine import RolloutEngine
from tests.models_shared import SMALL_VOCAB, random_decoder

PROMPT = [5, 17, 9, 23, 2, 11, 7]


@pytest.mark.parametrize("backend", ["engine", "static"])
def test_rows_stop_on_the_configs_second_eos_id(backend):
    free = random_decoder(SMALL_VOCAB, seed=1, scale=30.0)
    plain = Sampler(free).generate([PROMPT], SamplingParams(max_new_tokens=8, temperature=0.0, eos_ids=()))[0]
    tokens = [int(t) for t in plain.tokens]
    second = tokens[3]  # the 4th greedy token becomes the config's second EOS id (the row ends at its first draw)
    first = next(v for v in range(SMALL_VOCAB.vocab_size) if v not in tokens)  # never drawn here
    stop_at = tokens.index(second)
    cfg = dataclasses.replace(SMALL_VOCAB, eos_token_id=first, eos_token_ids=(first, second))
    model = random_decoder(cfg, seed=1, scale=30.0)
    params = SamplingParams(max_new_tokens=8, temperature=0.0)  # eos_ids None: the defaults under test
    if backend == "engine":
        out = RolloutEngine(model, slots=1, block_size=4, chunk_steps=2).generate([PROMPT], params)[0]
    else:
        out = Sampler(model).generate([PROMPT], params)[0]
    np.testing.assert_array_equal(out.tokens, tokens[: stop_at + 1])
    assert out.finish_reason == "eos"
