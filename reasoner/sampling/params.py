"""`SamplingParams`: what to generate, validated on the host before anything is compiled.

Semantics follow transformers' `generate` where they overlap: temperature is applied first,
then top-k (ties with the k-th logit are kept), then top-p (the smallest set of most likely
tokens whose probability reaches `top_p`, at least one token). `temperature == 0` means greedy.

`n` samples are drawn per prompt from one shared prefill. Sampling is reproducible: the token
at sequence position p of sample j of prompt i is drawn with `fold_in(key(seed, i, j), p)`, so
the same seed and prompts give the same samples however the decode steps are chunked, and a
continued conversation draws the same tokens as a fresh run on the joined prompt.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

MAX_SAMPLES_PER_PROMPT = 4096
MAX_STOP_STRING_CHARS = 256
MIN_TEMPERATURE = 1e-6  # smallest positive temperature: logits of |z| ~ 1e2 divided by it stay far from float32's max


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample one request (a batch of prompts shares one `SamplingParams`).

    Where a row ends:
    max_new_tokens: tokens generated per row and turn (>= 1; finish reason `length`).
    eos_ids: ids that end a row (finish reason `eos`); None -> the tokenizer's end-of-turn ids.
    stop: strings that end a row (finish reason `stop`); the text keeps the stop string and is
      cut right after it, the tokens end with the token that completed it.
    How each token is drawn:
    temperature: 0 -> greedy (argmax); >= MIN_TEMPERATURE divides the logits (between: refused).
    top_k: keep the k most likely tokens (0 = off). top_p: nucleus mass in (0, 1] (1 = off).
    n: samples per prompt. seed: 0 <= seed < 2**32.
    """

    max_new_tokens: int = 128
    eos_ids: tuple[int, ...] | None = None
    stop: tuple[str, ...] = ()
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    n: int = 1
    seed: int = 0

    def __post_init__(self):
        # Lists are accepted for convenience and frozen into tuples so params stay hashable.
        if self.eos_ids is not None and not isinstance(self.eos_ids, tuple):
            object.__setattr__(self, "eos_ids", tuple(self.eos_ids))
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop))
        _check_int("max_new_tokens", self.max_new_tokens, low=1)
        _check_int("n", self.n, low=1, high=MAX_SAMPLES_PER_PROMPT)
        _check_int("top_k", self.top_k, low=0)
        _check_int("seed", self.seed, low=0, high=2**32 - 1)
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature={self.temperature!r}: expected a finite number >= 0 (0 = greedy)")
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise ValueError(f"temperature={self.temperature!r}: expected 0 (greedy) or at least {MIN_TEMPERATURE} (the "
                             "float32 logits divided by less overflow)")
        if not isinstance(self.top_p, (int, float)) or not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p={self.top_p!r}: expected a number in (0, 1] (1 = off)")
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop string {s!r}: expected a non-empty str")
            if len(s) > MAX_STOP_STRING_CHARS:
                raise ValueError(f"stop string {s[:40]!r}...: longer than {MAX_STOP_STRING_CHARS} characters")
        if self.eos_ids is not None:
            for t in self.eos_ids:
                _check_int("eos id", t, low=0)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def replace(self, **changes) -> "SamplingParams":
        return dataclasses.replace(self, **changes)

    def check_against(self, *, vocab_size: int, max_len: int, tokenizer=None) -> None:
        """Checks what depends on the model: token ids inside the vocabulary, stop strings the
        tokenizer can produce, and `max_new_tokens` within the cache."""
        if self.top_k > vocab_size:
            raise ValueError(f"top_k={self.top_k}: expected at most the vocabulary size {vocab_size}")
        for t in self.eos_ids or ():
            if t >= vocab_size:
                raise ValueError(f"eos id {t}: outside the vocabulary of size {vocab_size}")
        if self.max_new_tokens >= max_len:
            raise ValueError(
                f"max_new_tokens={self.max_new_tokens}: expected fewer than the cache length {max_len} "
                "(the prompt needs at least one slot)"
            )
        if tokenizer is not None:
            for s in self.stop:
                check_stop_string(tokenizer, s)


def check_stop_string(tokenizer, stop: str) -> None:
    """A stop string must survive encode -> decode as generated text is decoded (special tokens
    skipped); otherwise no generated text can contain it (e.g. an end-of-turn marker, which
    belongs in `eos_ids`, or characters the vocabulary maps to an unknown token)."""
    ids = tokenizer(stop, add_special_tokens=False)["input_ids"]
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None and unk in ids:
        raise ValueError(f"stop string {stop!r}: contains text the tokenizer maps to its unknown token")
    back = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    if back != stop:
        raise ValueError(
            f"stop string {stop!r}: the tokenizer cannot produce it (encodes to {ids}, which decode to {back!r})"
        )


def check_request(prompts, params: SamplingParams, *, vocab_size: int, max_len, tokenizer, owner: str
                  ) -> list[list[int]]:
    """A request's token-id prompts as lists of ints once the cache size `max_len` (an int >= 2), every prompt
    (`validate_prompts`) and `params` (`SamplingParams.check_against`) fit this model and tokenizer; raises
    ValueError naming the input otherwise. Stop strings need the tokenizer: `owner` names the class to pass it to."""
    if not isinstance(max_len, int) or max_len < 2:
        raise ValueError(f"max_len={max_len!r}: expected an int >= 2")
    rows = validate_prompts(prompts, vocab_size=vocab_size, max_len=max_len)
    params.check_against(vocab_size=vocab_size, max_len=max_len, tokenizer=tokenizer)
    if params.stop and tokenizer is None:
        raise ValueError(f"stop strings need a tokenizer: pass one to {owner}(model, tokenizer)")
    return rows


def _check_int(name: str, value, *, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r}: expected an int")
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name}={value}: expected an int {bound}")


def validate_prompts(prompts: Sequence[Sequence[int]], *, vocab_size: int, max_len: int) -> list[list[int]]:
    """Token-id prompts as lists of ints; raises on an empty prompt, an id outside the vocabulary,
    or a prompt that does not leave one free slot in a cache of `max_len` slots. (A row whose
    prompt plus generated tokens reach `max_len` later finishes with reason `length`.)"""
    if isinstance(prompts, (str, bytes)) or not len(prompts):
        raise ValueError("prompts: expected a non-empty list of token-id lists")
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            raise ValueError(f"prompt {i}: expected token ids, got a str (encode it with the tokenizer first)")
        ids = [int(t) for t in p]
        if not ids:
            raise ValueError(f"prompt {i}: empty (expected at least one token)")
        bad = [t for t in ids if t < 0 or t >= vocab_size]
        if bad:
            raise ValueError(f"prompt {i}: token id {bad[0]} outside the vocabulary of size {vocab_size}")
        if len(ids) >= max_len:
            raise ValueError(
                f"prompt {i}: {len(ids)} tokens do not fit the cache of {max_len} slots (expected at most "
                f"{max_len - 1}); shorten the prompt or raise max_len"
            )
        out.append(ids)
    return out
