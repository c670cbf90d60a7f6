"""A scripted sampler for multi-turn rollout tests: `multiturn.rollout` drives it like `reasoner.sampling.Sampler`,
and it replays fixed replies, so a test knows every turn of every row (a random model writes no tool calls)."""

from __future__ import annotations

import numpy as np

from reasoner.sampling.results import Completion
from reasoner.tokenization import encode, render_chat


class ScriptedSession:
    """The sampler session `multiturn.rollout` drives: row b replays script[b % n] (`per_row`: script[b]) turn by
    turn (finish `stop`, sampling log-prob -1 per token)."""

    def __init__(self, tok, prompts, n, script, *, per_row: bool = False):
        self.tok, self.n, self.script, self.per_row = tok, n, script, per_row
        self.rows = list(range(len(prompts) * n))
        self.history = [list(prompts[b // n]) for b in self.rows]
        self.turn = [0] * len(self.rows)
        self.extended: list[dict] = []

    def run(self):
        out = []
        for b in self.rows:
            text = self.script[b if self.per_row else b % self.n][self.turn[b]]
            self.turn[b] += 1
            ids = np.asarray(encode(self.tok, text), np.int32)
            self.history[b] += ids.tolist()
            out.append(Completion(tokens=ids, text=text, finish_reason="stop", sample_logprobs=np.full(len(ids), -1.0),
                                  model_logprobs=np.full(len(ids), -1.0), prompt_index=b // self.n,
                                  sample_index=b % self.n))
        return out

    def extend(self, appends, *, max_new_tokens):
        self.extended.append({b: list(ids) for b, ids in appends.items()})
        for b, ids in appends.items():
            self.history[b] += list(ids)
        self.rows = sorted(appends)


class ScriptedSampler:
    """script: sample index (`per_row`: row) -> the replies of its turns (a row that ends is not asked again).
    `stops` and `sessions` keep every call's stop strings and session."""

    def __init__(self, tok, script, *, per_row: bool = False):
        self.tokenizer, self.script, self.per_row, self.params = tok, script, per_row, None
        self.stops, self.sessions = [], []

    def start(self, prompts, sampling, *, max_len, reserve):
        self.stops.append(sampling.stop)
        self.sessions.append(ScriptedSession(self.tokenizer, prompts, sampling.n, self.script, per_row=self.per_row))
        return self.sessions[-1]

    def generate(self, prompts, sampling, *, max_len):  # a single-turn rollout: the first turn of each row
        return self.start(prompts, sampling, max_len=max_len, reserve=0).run()


def expected_row(tok, messages_after, prompt, *, tools=None):
    """(ids, tool_mask) a row must hold for its conversation `prompt + messages_after`: each reply's tokens (mask 1),
    and before each later reply the chat template's rendering of what followed the previous one (end of turn, the
    environment's messages, the next generation prompt; mask 0)."""
    ids, mask, messages = [], [], [dict(m) for m in prompt]
    held = render_chat(tok, messages, add_generation_prompt=True, tools=tools)
    for m in messages_after:
        if m["role"] == "assistant":
            if ids:
                full = render_chat(tok, messages, add_generation_prompt=True, tools=tools)
                span = encode(tok, full[len(held):])
                ids, mask, held = ids + span, mask + [0] * len(span), full
            reply = encode(tok, m["content"])
            ids, mask, held = ids + reply, mask + [1] * len(reply), held + m["content"]
        messages.append(m)
    return ids, mask
