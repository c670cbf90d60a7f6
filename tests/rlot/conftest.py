"""Fixtures for the RL-of-Thoughts tests: a tiny random decoder on SmolLM2's vocabulary (the real tokenizer and the
real model are the session fixtures `tokenizer` and `smollm2` of `tests/conftest.py`)."""

import pytest

from tests.models_shared import TINY, random_decoder


@pytest.fixture(scope="session")
def tiny_model():
    return random_decoder(TINY, seed=0, scale=4.0)  # peaked logits: greedy choices are far from ties
