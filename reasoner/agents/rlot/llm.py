"""Batched text generation for the RL-of-Thoughts environment: one call answers every prompt of a stage.

    lm = SamplerLM(model, tokenizer, max_new_tokens=256)        # our jitted sampler, greedy by default
    lm = EndpointLM("http://127.0.0.1:8000/v1", "smollm2")      # any OpenAI-compatible server
    outs = lm.generate(["prompt 1", "prompt 2"])                 # -> [Generation(text, prompt_tokens, ...)]

Each prompt is one user message rendered with the model's chat template (generation prompt added).
`SamplerLM.generate` is ONE `generate` call for the whole list, on the paged `RolloutEngine` when the model sits on
one device (continuous batching: a stage's short answers free their slots for the rest instead of decoding to the
longest answer's length; each row attends over its live blocks), else on the static `Sampler` (prompts padded into
one batch). Both draw the same tokens from the same keys (tested). Identical prompts (the same problem's root
evaluation in several episodes) are prefilled once and share their rows when decoding is greedy (greedy rows of one
prompt are identical by construction).
`calls` counts `generate` calls; `prompt_tokens` / `completion_tokens` sum what was sent and produced.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence


@dataclasses.dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int


class BatchLM(Protocol):
    calls: int

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int | None = None, samples: int = 1,
                 temperature: float | None = None, seed: int | None = None) -> list[Generation]: ...


class SamplerLM:
    """`BatchLM` over `reasoner.sampling.Sampler`.

    temperature: 0 = greedy (the authors' top-k 1). seed: the sampler seed of every call when sampling (row keys
    then depend on a row's position in the batch: sampled runs are reproducible for the same batch only).
    max_len: cache slots per row, the same for every call (one decode compile per batch size, not one per
      prompt length); prompts longer than `max_len - max_new_tokens` keep their last tokens
    (the problem text comes first, so this only happens on runaway thoughts) and are counted in `truncated`.
    paged: None (the engine when the model is on one device), True or False. slots: the engine's decode slots (a
      larger stage queues for them).
    """

    def __init__(self, model, tokenizer, *, max_new_tokens: int = 256, temperature: float = 0.0, seed: int = 0,
                 max_len: int = 4096, system: str | None = None, paged: bool | None = None, slots: int = 64):
        from reasoner.sampling import Sampler
        from reasoner.sampling.rollout_engine import RolloutEngine, on_one_device

        self.paged = on_one_device(model) if paged is None else bool(paged)
        self.sampler = (RolloutEngine(model, tokenizer, slots=slots, max_len=max_len) if self.paged
                        else Sampler(model, tokenizer))
        self.tokenizer = tokenizer
        self.max_new_tokens, self.temperature, self.seed = int(max_new_tokens), float(temperature), int(seed)
        self.max_len, self.system = int(max_len), system
        self.calls = self.prompt_tokens = self.completion_tokens = self.truncated = 0

    def encode(self, prompt: str) -> list[int]:
        from reasoner.tokenization import chat_ids

        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": prompt}]
        return chat_ids(self.tokenizer, messages, add_generation_prompt=True)

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int | None = None, samples: int = 1,
                 temperature: float | None = None, seed: int | None = None) -> list[Generation]:
        """One generation per prompt (prompt order); with `samples` = k > 1, k sampled generations per prompt
        drawn from one shared prefill (prompt-major: prompt 0's k samples first). `temperature` / `seed`
        override the LM's for this call."""
        from reasoner.sampling import SamplingParams
        from reasoner.sampling.buckets import bucket_length

        if not prompts:
            return []
        max_new = int(max_new_tokens or self.max_new_tokens)
        temperature = self.temperature if temperature is None else float(temperature)
        if samples > 1:
            return self._sample(prompts, max_new=max_new, k=int(samples), temperature=temperature,
                                seed=self.seed if seed is None else int(seed))
        ids = self._encode_all(prompts, max_new)
        greedy = temperature == 0
        unique = list(dict.fromkeys(tuple(r) for r in ids)) if greedy else [tuple(r) for r in ids]
        params = SamplingParams(max_new_tokens=max_new, temperature=temperature,
                                seed=self.seed if seed is None else int(seed))
        # The static sampler's batch is padded to a power of two with copies of its first prompt, so a run compiles
        # a few batch shapes rather than one per stage size; the copies' outputs are dropped. The engine buckets
        # its own batches.
        batch = [list(r) for r in unique]
        if not self.paged:
            batch += [batch[0]] * (bucket_length(len(batch), minimum=1) - len(batch))
        outs = self.sampler.generate(batch, params, max_len=self.max_len)[:len(unique)]
        self.calls += 1
        by_prompt = dict(zip(unique, outs)) if greedy else None
        result = []
        for i, row in enumerate(ids):
            c = by_prompt[tuple(row)] if greedy else outs[i]
            result.append(Generation(text=c.text, prompt_tokens=len(row), completion_tokens=c.num_tokens))
            self.prompt_tokens += len(row)
            self.completion_tokens += c.num_tokens
        return result

    def _encode_all(self, prompts: Sequence[str], max_new: int) -> list[list[int]]:
        room = self.max_len - max_new - 1
        ids = []
        for p in prompts:
            row = self.encode(p)
            if len(row) > room:
                row, self.truncated = row[-room:], self.truncated + 1
            ids.append(row)
        return ids

    def _sample(self, prompts, *, max_new: int, k: int, temperature: float, seed: int) -> list[Generation]:
        from reasoner.sampling import SamplingParams

        ids = self._encode_all(prompts, max_new)
        params = SamplingParams(max_new_tokens=max_new, temperature=temperature, seed=seed, n=k)
        outs = self.sampler.generate(ids, params, max_len=self.max_len)
        self.calls += 1
        result = []
        for c in outs:
            n_prompt = len(ids[c.prompt_index])
            result.append(Generation(text=c.text, prompt_tokens=n_prompt, completion_tokens=c.num_tokens))
            self.prompt_tokens += n_prompt
            self.completion_tokens += c.num_tokens
        return result


class EndpointLM:
    """`BatchLM` over an OpenAI-compatible `/chat/completions` endpoint (our `reasoner serve`, vLLM, an API).

    One `generate` call sends its prompts concurrently (`max_concurrency` at a time).
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, max_new_tokens: int = 256,
                 temperature: float = 0.0, timeout_s: float = 120.0, max_concurrency: int = 16):
        from reasoner.agents.policies import OpenAIChatPolicy

        self._policy_args = dict(api_key=api_key, temperature=temperature, timeout_s=timeout_s,
                                 max_concurrency=max_concurrency, send_tools=False)
        self.base_url, self.model, self.max_new_tokens = base_url, model, int(max_new_tokens)
        self.calls = self.prompt_tokens = self.completion_tokens = 0
        self._policies: dict = {}
        self._policy = OpenAIChatPolicy

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int | None = None, samples: int = 1,
                 temperature: float | None = None, seed: int | None = None) -> list[Generation]:
        """As `SamplerLM.generate` (k samples per prompt are k concurrent requests; `seed` is not sent)."""
        if not prompts:
            return []
        n = int(max_new_tokens or self.max_new_tokens)
        args = dict(self._policy_args)
        if temperature is not None:
            args["temperature"] = float(temperature)
        key = (n, args["temperature"])
        if key not in self._policies:
            self._policies[key] = self._policy(self.base_url, self.model, max_tokens=n, **args)
        prompts = [p for p in prompts for _ in range(int(samples))]
        replies = self._policies[key].respond([[{"role": "user", "content": p}] for p in prompts])
        self.calls += 1
        out = []
        for p, r in zip(prompts, replies):
            g = Generation(text=r.text, prompt_tokens=int(r.prompt_tokens or len(p.split())),
                           completion_tokens=int(r.completion_tokens or len(r.text.split())))
            self.prompt_tokens += g.prompt_tokens
            self.completion_tokens += g.completion_tokens
            out.append(g)
        return out


class CountingLM:
    """Wraps a `BatchLM` and records the size of every call (tests, reports)."""

    def __init__(self, inner):
        self.inner = inner
        self.batch_sizes: list[int] = []

    @property
    def calls(self) -> int:
        return len(self.batch_sizes)

    def generate(self, prompts: Sequence[str], **kwargs) -> list[Generation]:
        self.batch_sizes.append(len(prompts))
        return self.inner.generate(prompts, **kwargs)
