"""A scripted stand-in for the sampler behind `SamplerPolicy` (the static `reasoner.sampling.Sampler` or the paged
`RolloutEngine`, whichever it builds), for CLI tests that need known replies.

`use_script(monkeypatch, replies)` makes every `SamplerPolicy` built afterwards (the one `reasoner smt eval` and
`reasoner smt rollout --model CKPT` build) sample from `replies(prompt_index, sample_index, turn) -> text`, so the
CLI path (policy, multi-turn cache continuation, scratchpad, real Z3, scoring, curation, files) runs unchanged while
a test knows which attempt is right. Rows follow the real sampler's layout: row = prompt_index * n + sample_index.
"""

from __future__ import annotations

import json

import numpy as np

from reasoner.sampling.results import Completion
from reasoner.tokenization import encode


def finish(answer: str) -> str:
    return '<tool_call>{"name": "finish", "arguments": {"answer": ' + json.dumps(answer) + '}}</tool_call>'


def z3_solve(code: str) -> str:
    return "Let me check.\n<tool_call>" + json.dumps({"name": "z3_solve", "arguments": {"smt_code": code}}) \
        + "</tool_call>"


class _Session:
    def __init__(self, tokenizer, prompts, n, replies):
        self.tokenizer, self.n, self.replies = tokenizer, n, replies
        self.rows = list(range(len(prompts) * n))
        # prompts as the real sampler takes them: token-id lists (what SamplerPolicy hands over) or strings
        self.history = [list(p) if not isinstance(p, str) else encode(tokenizer, p)
                        for p in (prompts[b // n] for b in self.rows)]
        self.turn = [0] * len(self.rows)

    def run(self):
        out = []
        for b in self.rows:
            text = self.replies(b // self.n, b % self.n, self.turn[b])
            self.turn[b] += 1
            ids = np.asarray(encode(self.tokenizer, text), np.int32)
            self.history[b] += ids.tolist()
            out.append(Completion(tokens=ids, text=text, finish_reason="stop", sample_logprobs=np.zeros(len(ids)),
                                  model_logprobs=np.zeros(len(ids)), prompt_index=b // self.n,
                                  sample_index=b % self.n))
        return out

    def extend(self, appends, *, max_new_tokens):
        for b, ids in appends.items():
            self.history[b] += list(ids)
        self.rows = sorted(appends)


def use_script(monkeypatch, replies) -> list:
    """Patches the sampler classes `SamplerPolicy` builds; returns the list of sessions started (for asserts)."""
    import reasoner.sampling
    from reasoner.sampling import rollout_engine

    sessions = []

    class ScriptedSampler:
        def __init__(self, model, tokenizer, **options):
            self.tokenizer = tokenizer

        def start(self, prompts, sampling, *, max_len, reserve):
            sessions.append(_Session(self.tokenizer, prompts, sampling.n, replies))
            return sessions[-1]

    monkeypatch.setattr(reasoner.sampling, "Sampler", ScriptedSampler)
    monkeypatch.setattr(rollout_engine, "RolloutEngine", ScriptedSampler)
    return sessions
