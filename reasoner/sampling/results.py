"""What generation returns, per row (one row = one sample of one prompt)."""

from __future__ import annotations

import dataclasses

import numpy as np

FINISH_REASONS = ("eos", "stop", "length")


@dataclasses.dataclass
class Completion:
    """One generated turn of one row.

    tokens: [N] generated ids (an EOS token that ended the row is included, as the last id).
    text: decoded tokens (special tokens skipped; cut right after the stop string if one hit).
    finish_reason: `eos`, `stop` or `length` (max_new_tokens or the cache is full).
    sample_logprobs: [N] log-probs under the sampling distribution (0 for greedy).
    model_logprobs: [N] log-probs under the plain model at temperature 1.
    prompt_index / sample_index: which prompt of the request and which of its `n` samples.
    """

    tokens: np.ndarray
    text: str
    finish_reason: str
    sample_logprobs: np.ndarray
    model_logprobs: np.ndarray
    prompt_index: int
    sample_index: int

    def __post_init__(self):
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason {self.finish_reason!r}: expected one of {FINISH_REASONS}")

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[0])

    def to_json(self) -> dict:
        return {
            "prompt_index": self.prompt_index,
            "sample_index": self.sample_index,
            "text": self.text,
            "tokens": [int(t) for t in self.tokens],
            "finish_reason": self.finish_reason,
            "sample_logprobs": [float(x) for x in self.sample_logprobs],
            "model_logprobs": [float(x) for x in self.model_logprobs],
        }
