"""The server's one interface to a generator: `Backend.generate(requests) -> completions per request`.

A `GenRequest` is one chat request's prompt ids with its own `SamplingParams` (n samples). The batcher groups
the requests it collected by `backend.batch_key(request)` and calls `generate` once per group; the backend
decodes one group as ONE batch. `SamplerBackend` runs today's static `reasoner.sampling.Sampler`, whose batch
shares one `SamplingParams`: its key holds what must be equal across a batch (greedy or temperature/top-p/top-k,
stop strings, and for streamed requests the token budget; a seeded request is alone in its group); prompts, `n` and (non-streamed)
`max_tokens` may differ. An engine with per-request settings can return one constant key.

Row layout of a group: when every request has the same n, one sampler call with P prompts and that n (each
prompt prefilled once, shared by its samples); otherwise each request contributes n copies of its prompt with
n = 1. Non-streamed requests shorter than the group's budget are cut to their own `max_tokens` afterwards
(the tokens drawn at a position do not depend on the budget, so the cut is what a shorter run gives).
Shapes are bucketed so that a long-running server compiles a bounded set of programs: a group's prompts are
padded (copies of its last prompt, whose rows are dropped) to `buckets.batch_bucket` sizes and a non-streamed
group's budget is rounded up to the same sizes (at least 16; its requests are cut as above).

Seeds: a client seed s gives its rows the keys (s, 0, sample): a seeded request is decoded in a group of its own
(its key holds the request itself), so it reproduces `Sampler.generate([prompt], params with seed s)` exactly
whatever arrives beside it (OpenAI's `seed` contract; batched beside another, its prompt index and so its samples
would depend on its neighbours). Requests without a seed share one random seed per group.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Callable, Hashable, Protocol, Sequence

from reasoner.sampling import Completion, SamplingParams


@dataclasses.dataclass(frozen=True)
class GenRequest:
    """prompt_ids: [P] token ids. params: the request's settings (params.seed is used only if `seeded`).
    on_text(sample_index, delta): streamed text of each sample as it becomes stable (None: not streamed)."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams
    seeded: bool = False
    on_text: Callable[[int, str], None] | None = None

    @property
    def rows(self) -> int:
        return self.params.n


class Backend(Protocol):
    """What the server needs from a generator."""

    max_len: int  # cache slots per row: prompt + completion must fit
    vocab_size: int

    def batch_key(self, request: GenRequest) -> Hashable:
        """Requests with equal keys may be decoded in one `generate` call."""

    def generate(self, requests: Sequence[GenRequest]) -> list[list[Completion]]:
        """Completions of each request (its n samples in order), in request order."""


class SamplerBackend:
    """`Backend` over `reasoner.sampling.Sampler` (see module docstring). `max_len`: cache slots per row."""

    def __init__(self, sampler, *, max_len: int):
        if sampler.tokenizer is None:
            raise ValueError("SamplerBackend: the sampler needs a tokenizer (text, stop strings)")
        self.sampler, self.max_len = sampler, int(max_len)
        self.vocab_size = int(sampler.cfg.vocab_size)

    def batch_key(self, request: GenRequest) -> Hashable:
        p = request.params
        budget = p.max_new_tokens if request.on_text is not None else None
        if p.greedy:
            return ("greedy", p.stop, budget)
        return ("sample", p.temperature, p.top_p, p.top_k, p.stop, id(request) if request.seeded else None, budget)

    def generate(self, requests: Sequence[GenRequest]) -> list[list[Completion]]:
        if not requests:
            return []
        budget = max(r.params.max_new_tokens for r in requests)
        seeded = [r for r in requests if r.seeded]
        seed = seeded[0].params.seed if seeded else secrets.randbelow(2**32)
        ns = {r.params.n for r in requests}
        n = ns.pop() if len(ns) == 1 else 1
        prompts, owners = [], []  # owners[prompt index] = (request index, first sample index)
        for i, r in enumerate(requests):
            copies = 1 if n > 1 else r.params.n
            for j in range(copies):
                prompts.append(list(r.prompt_ids))
                owners.append((i, j))
        streams = [r.on_text for r in requests]
        watch = any(s is not None for s in streams)
        longest = max(len(p) for p in prompts)
        real = len(prompts)
        from reasoner.sampling.buckets import batch_bucket, bucket_length

        # Shapes bucketed (module docstring): unbucketed, the server compiled one program per batch size and budget
        # it met and ran out of code memory after 10-16 minutes of varied requests (`bench rollout`). A streamed
        # group keeps its exact budget (it is in the batch key), so that nothing past it is streamed.
        prompts += [prompts[-1]] * (batch_bucket(real, cap=1 << 30) - real)
        if not watch:
            budget = max(budget, min(batch_bucket(max(budget, 16), cap=1 << 30), self.max_len - longest))
        params = requests[0].params.replace(max_new_tokens=budget, n=n, seed=seed)
        max_len = min(bucket_length(longest + budget), self.max_len)

        def on_text(row: int, delta: str) -> None:
            if row // n >= real:
                return
            i, j = owners[row // n]
            if streams[i] is not None:
                streams[i](j + row % n, delta)

        completions = self.sampler.generate(prompts, params, max_len=max_len, on_text=on_text if watch else None)
        out: list[list[Completion]] = [[] for _ in requests]
        for c in completions:
            if c.prompt_index >= real:  # a padding row
                continue
            i, j = owners[c.prompt_index]
            c = dataclasses.replace(c, prompt_index=0, sample_index=j + c.sample_index)
            out[i].append(self._cut(c, requests[i].params.max_new_tokens))
        return out

    def _cut(self, c: Completion, limit: int) -> Completion:
        """`c` as a run with budget `limit` would have ended it."""
        if c.num_tokens <= limit:
            return c
        from reasoner.sampling.stops import decode

        tokens = c.tokens[:limit]
        return dataclasses.replace(c, tokens=tokens, text=decode(self.sampler.tokenizer, tokens), finish_reason="length",
                                   sample_logprobs=c.sample_logprobs[:limit], model_logprobs=c.model_logprobs[:limit])

