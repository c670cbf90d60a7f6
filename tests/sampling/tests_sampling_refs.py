"""References shared by the sampler tests: transformers' own logits warpers, and a float64 log-softmax.

`reference_distribution` runs the warpers transformers' `generate` builds for `do_sample=True` (its
`GenerationMixin._get_logits_processor`, called on a stand-in `self`: the list, its order and its arguments come from
transformers' source, not from us) on float32 torch scores, then takes the softmax of the result in float64.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
from transformers.generation.utils import GenerationMixin


def log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def transformers_warpers(*, temperature: float, top_k: int = 0, top_p: float = 1.0):
    """The LogitsProcessorList `generate(do_sample=True, temperature=, top_k=, top_p=)` applies, in its order."""
    config = GenerationConfig(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p)
    # _get_logits_processor only calls self._merge_criteria_processor_list(default, custom) with custom = []
    stand_in = SimpleNamespace(_merge_criteria_processor_list=lambda default, custom: default)
    warpers = GenerationMixin._get_logits_processor(stand_in, config)
    expected = ([TemperatureLogitsWarper] if temperature != 1.0 else []) + ([TopKLogitsWarper] if top_k else []) + (
        [TopPLogitsWarper] if top_p < 1.0 else [])
    assert [type(w) for w in warpers] == expected, f"transformers now builds {warpers}: revisit the sampler's order"
    return warpers


def reference_scores(logits, *, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """transformers' warped float32 scores [..., V] (-inf where a warper removed the token)."""
    scores = torch.tensor(np.asarray(logits, np.float32)).reshape(-1, np.shape(logits)[-1])
    out = transformers_warpers(temperature=temperature, top_k=top_k, top_p=top_p)(None, scores)
    return out.numpy().reshape(np.shape(logits))


def reference_distribution(logits, *, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """float64 softmax of transformers' warped scores: the distribution `generate` samples from."""
    return np.exp(log_softmax(reference_scores(logits, temperature=temperature, top_k=top_k, top_p=top_p)))
