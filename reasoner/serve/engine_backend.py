"""`Backend` over the continuous-batching `reasoner.sampling.rollout_engine.RolloutEngine` (`--engine paged`).

The engine takes per-request settings, so a batch needs only one sampling distribution (greedy, or one
temperature / top-p / top-k): budgets, stop strings, n and seeds differ freely, and a finished row's slot goes to
the next row at once instead of idling until the longest row of the batch ends. Each request is submitted with
prompt index 0, so its rows draw with the keys (seed, 0, sample): a seeded request returns the same samples
whatever its neighbours (with the static sampler only when it is alone or first in its batch).

The engine has no text callback yet: a streamed request gets its text in one piece when its rows finish.
"""

from __future__ import annotations

import secrets
from typing import Hashable, Sequence

from reasoner.sampling import Completion
from reasoner.serve.backend import GenRequest


class EngineBackend:
    """See module docstring. max_len: positions per row (prompt + completion)."""

    def __init__(self, engine, *, max_len: int):
        if engine.tokenizer is None:
            raise ValueError("EngineBackend: the engine needs a tokenizer (text, stop strings)")
        self.engine, self.max_len = engine, int(max_len)
        self.vocab_size = int(engine.cfg.vocab_size)

    def batch_key(self, request: GenRequest) -> Hashable:
        p = request.params
        return ("greedy",) if p.greedy else ("sample", p.temperature, p.top_p, p.top_k)

    def generate(self, requests: Sequence[GenRequest]) -> list[list[Completion]]:
        ids = []
        try:
            for r in requests:
                params = r.params if r.seeded else r.params.replace(seed=secrets.randbelow(2**32))
                ids.append(self.engine.submit(list(r.prompt_ids), params, prompt_index=0, max_len=self.max_len))
        except Exception:
            self.engine.collect()  # the group fails as a whole: do not leave its first requests queued
            raise
        done = self.engine.collect()
        out = []
        for r, rid in zip(requests, ids):
            completions = done[rid]
            if r.on_text is not None:
                for j, c in enumerate(completions):
                    r.on_text(j, c.text)
            out.append(list(completions))
        return out
