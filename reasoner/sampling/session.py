"""The host side of the sampler: `Sampler.generate` and multi-turn `Session`s.

    sampler = Sampler(model, tokenizer)
    completions = sampler.generate(prompts, SamplingParams(max_new_tokens=64, temperature=0.7, n=4))

    session = sampler.start(prompts, params, reserve=64)   # room for appended chunks of <= 64
    first = session.run()                                  # e.g. stops on "</tool_call>"
    session.extend({row: tool_response_ids})               # written after the row's history
    second = session.run()                                 # resumes from the existing cache

Layout: right padding; row b = sample (b % n) of prompt (b // n). Decode runs in chunks of
`chunk_steps` device steps; between chunks the host reads the new tokens, checks stop strings
and, when a row stops, rolls its cache offset back to just after the stop string (the extra
tokens it drew are never attended to again and get overwritten). Without stop strings or a
streaming callback, a turn is a single device call.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import jax
import numpy as np
from flax import nnx

from reasoner.distributed import host_get
from reasoner.sampling import engine
from reasoner.sampling.buckets import bucket_length, right_pad
from reasoner.sampling.memory import check_fits
from reasoner.sampling.params import SamplingParams, check_request
from reasoner.sampling.processors import DecodeSpec, row_keys
from reasoner.sampling.results import Completion
from reasoner.sampling.stops import RowText, decode

STOP = 3  # host-side finish code, after engine.RUNNING/EOS/LENGTH
_REASONS = {engine.EOS: "eos", engine.LENGTH: "length", STOP: "stop"}
DEFAULT_CHUNK_STEPS = 16


class Sampler:
    """Generation over one model (any `Decoder`: plain, sharded, or with LoRA adapters).

    model: the NNX decoder; its state is split once and passed to every jitted call (so swapping
      in new params, e.g. after a GRPO update, is `sampler.params = new_state`).
    tokenizer: needed for text, stop strings and default EOS ids.
    mesh: when given, the cache is sharded by its logical axes (batch over data/fsdp, kv heads
      over tensor); params keep the shardings they carry.
    memory_limit_bytes: budget for the cache and activations (default: free memory now).
    """

    def __init__(self, model, tokenizer=None, *, mesh=None, memory_limit_bytes: int | None = None):
        self.cfg = model.cfg
        self.graphdef, self.params = nnx.split(model)
        self.tokenizer = tokenizer
        self.mesh = mesh
        self.memory_limit_bytes = memory_limit_bytes

    def generate(self, prompts, params: SamplingParams, *, max_len: int | None = None,
                 on_text: Callable[[int, str], None] | None = None) -> list[Completion]:
        """One turn for every row (P prompts x n samples), in row order."""
        return self.start(prompts, params, max_len=max_len).run(on_text=on_text)

    def start(self, prompts, params: SamplingParams, *, max_len: int | None = None, reserve: int = 0) -> "Session":
        """Prefills the prompts and draws each row's first token.

        prompts: token-id lists (or plain strings, tokenized by `reasoner.tokenization.encode_prompt`: with the
          tokenizer's BOS where it adds one).
        max_len: cache slots per row (default: the bucket of longest prompt + max_new_tokens).
        reserve: extra scratch slots so that `Session.extend` can write chunks of up to `reserve`
          tokens (0: no continuation).
        """
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params: expected SamplingParams, got {type(params).__name__}")
        if not isinstance(reserve, int) or reserve < 0:
            raise ValueError(f"reserve={reserve!r}: expected an int >= 0")
        if not isinstance(prompts, (list, tuple)):
            raise ValueError(f"prompts: expected a list of token-id lists or strings, got {type(prompts).__name__}")
        prompts = [self._encode(p) if isinstance(p, str) else p for p in prompts]
        if max_len is None:
            longest = max((len(p) for p in prompts), default=1)
            max_len = bucket_length(longest + params.max_new_tokens)
        rows = check_request(prompts, params, vocab_size=self.cfg.vocab_size, max_len=max_len,
                             tokenizer=self.tokenizer, owner="Sampler")
        eos = params.eos_ids if params.eos_ids is not None else self._default_eos()
        T = bucket_length(max(len(r) for r in rows), cap=max_len)
        B = len(rows) * params.n
        check_fits(self.cfg, batch=B, prompts=len(rows), prompt_bucket=T, alloc_len=max_len + reserve,
                   max_new=params.max_new_tokens, limit_bytes=self.memory_limit_bytes)
        tokens, segments, lengths = right_pad(rows, length=T)
        keys = row_keys(params.seed, np.repeat(np.arange(len(rows)), params.n), np.tile(np.arange(params.n), len(rows)))
        state = engine.prefill(
            self.graphdef, self.params, tokens, segments, lengths, keys,
            np.asarray(eos if eos else [-1], np.int32), params.temperature if params.temperature > 0 else 1.0,
            params.top_p, params.max_new_tokens, spec=DecodeSpec.from_params(params), n=params.n,
            max_len=max_len, alloc_len=max_len + reserve, max_new=params.max_new_tokens,
            kv_sharding=self._kv_sharding(B, max_len + reserve),
        )
        return Session(self, state, params, prompt_ids=[r for r in rows for _ in range(params.n)], n=params.n,
                       reserve=reserve)

    def _encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ValueError("a str prompt needs a tokenizer: pass one to Sampler(model, tokenizer)")
        from reasoner.tokenization import encode_prompt

        return encode_prompt(self.tokenizer, text)  # a plain string: the tokenizer's BOS where it adds one

    def _default_eos(self) -> tuple[int, ...]:
        if self.tokenizer is not None:
            from reasoner.tokenization import stop_token_ids

            return stop_token_ids(self.tokenizer)
        return tuple(int(i) for i in self.cfg.eos_token_ids)  # every EOS id of the config, as transformers stops

    def _kv_sharding(self, batch: int, alloc_len: int):
        if self.mesh is None:
            return None
        from reasoner.sharding import logical_sharding

        from reasoner.sharding import ShardingError

        # heads-major cache (see fast_decode)
        shape = (batch, self.cfg.num_kv_heads, alloc_len, self.cfg.head_dim)
        axes = ("batch", "kv_heads", "cache_seq", "head_dim")
        try:
            return logical_sharding(axes, shape, self.mesh, path="kv_cache")
        except ShardingError:
            # a request's row count is the caller's (e.g. 5 prompts on 8 devices): the cache rows are then
            # replicated over the batch axes, which is correct and only less parallel. Parameters never are.
            return logical_sharding((None,) + axes[1:], shape, self.mesh, path="kv_cache")


class Session:
    """A batch of rows being generated, turn by turn, over one KV cache (see module docstring)."""

    def __init__(self, sampler: Sampler, state: engine.DecodeState, params: SamplingParams, *,
                 prompt_ids: list[list[int]], n: int, reserve: int):
        self.sampler, self.state, self.params = sampler, state, params
        self.spec = DecodeSpec.from_params(params)
        self.n, self.reserve = n, reserve
        # Full token history per row (prompt, drawn tokens, appended tokens), kept on the host.
        self.history: list[list[int]] = [list(p) for p in prompt_ids]
        B = len(prompt_ids)
        self.turn_start = np.asarray([len(p) for p in prompt_ids], np.int64)  # cache index at this turn's 1st draw
        self.active = np.ones(B, bool)  # rows taking part in the current turn
        self.finish = np.zeros(B, np.int64)
        self.kept = np.zeros(B, np.int64)  # tokens of this turn kept so far (cut at stop strings)
        self.texts: list[RowText | None] = [None] * B
        self.last_turn: list[Completion | None] = [None] * B

    @property
    def batch(self) -> int:
        return len(self.history)

    def run(self, *, on_text: Callable[[int, str], None] | None = None, chunk_steps: int | None = None,
            on_chunk: Callable[[int], None] | None = None) -> list[Completion]:
        """Decodes until every active row finishes; returns this turn's completions of the active rows.

        on_text(row, delta): called with newly stable text (streaming). on_chunk(new_tokens): progress.
        """
        self._check_open("run")
        params, tok = self.params, self.sampler.tokenizer
        watch = bool(params.stop) or on_text is not None
        if watch and tok is None:
            raise ValueError("streaming text or stop strings need a tokenizer")
        steps = chunk_steps or (DEFAULT_CHUNK_STEPS if watch else params.max_new_tokens)
        rows = np.flatnonzero(self.active)
        for b in rows:
            self.texts[b] = RowText(tok, params.stop) if watch else None
        seen = np.zeros(self.batch, np.int64)
        while True:
            count, done, finish, tokens = host_get(
                (self.state.count_B, self.state.done_B, self.state.finish_B, self.state.tokens_BxN))
            stopped = {}
            for b in rows:
                if self.finish[b]:
                    continue
                new = tokens[b, seen[b]:count[b]]
                seen[b] = count[b]
                if on_chunk is not None:
                    on_chunk(len(new))
                text = self.texts[b]
                keep = text.append(new) if text is not None and len(new) else None
                if keep is not None:
                    stopped[b] = keep
                    self.finish[b] = STOP
                elif done[b]:
                    self.finish[b] = finish[b]
                if text is not None and on_text is not None:
                    delta = text.stream_delta()
                    if delta:
                        on_text(int(b), delta)
            if stopped:
                self._stop_rows(stopped, tokens)
            if all(self.finish[b] for b in rows):
                break
            self.state = engine.decode_chunk(self.sampler.graphdef, self.sampler.params, self.state, steps,
                                             spec=self.spec)
        return self._collect(rows)

    def _stop_rows(self, stopped: Mapping[int, int], tokens_BxN: np.ndarray) -> None:
        """Marks rows done on the device with their cache offset just after the kept tokens."""
        s = self.state
        done, index, pending, count = host_get((s.done_B, s.cache.index_B, s.pending_B, s.count_B))
        done, index, pending, count = done.copy(), index.copy(), pending.copy(), count.copy()
        for b, keep in stopped.items():
            done[b] = True
            count[b] = keep
            index[b] = self.turn_start[b] + keep - 1  # the kept last token is pending, not in the cache
            pending[b] = tokens_BxN[b, keep - 1]
        put = lambda new, old: jax.device_put(new, old.sharding)  # noqa: E731
        self.state = s.replace(done_B=put(done, s.done_B), count_B=put(count, s.count_B),
                               pending_B=put(pending, s.pending_B),
                               cache=s.cache.replace(index_B=put(index, s.cache.index_B)))

    def _collect(self, rows) -> list[Completion]:
        s = self.state
        count, tokens, slp, mlp = host_get((s.count_B, s.tokens_BxN, s.sample_logp_BxN, s.model_logp_BxN))
        out = []
        for b in rows:
            c = int(count[b])
            toks = tokens[b, :c].copy()
            text = self.texts[b].text if self.texts[b] is not None else (
                decode(self.sampler.tokenizer, toks) if self.sampler.tokenizer is not None else "")
            comp = Completion(tokens=toks, text=text, finish_reason=_REASONS[int(self.finish[b])],
                              sample_logprobs=slp[b, :c].copy(), model_logprobs=mlp[b, :c].copy(),
                              prompt_index=int(b) // self.n, sample_index=int(b) % self.n)
            self.history[b].extend(int(t) for t in toks)
            self.kept[b] = c
            self.last_turn[b] = comp
            out.append(comp)
        self.active[:] = False
        return out

    def extend(self, appends: Mapping[int, Sequence[int]], *, max_new_tokens: int | None = None) -> None:
        """Appends token ids to finished rows and starts their next turn (run() decodes it).

        The appended tokens are written after each row's history, in chunks of at most `reserve`
        tokens; the rows' first new tokens are drawn from the last appended token's logits.
        """
        self._check_open("extend")
        index = np.asarray(host_get(self.state.cache.index_B), np.int64)
        N, pieces = checked_appends(self, appends, max_new_tokens, vocab_size=self.sampler.cfg.vocab_size,
                                    index=index, max_len=self.state.max_len)
        calls = max(-(-len(p) // self.reserve) for p in pieces.values())
        B = self.batch
        for i in range(calls):
            chunk_rows = {}
            for b, p in pieces.items():
                # Right-align so that every row's last piece lands in the last call, which draws.
                first = len(p) - (calls - i) * self.reserve
                part = p[max(first, 0): first + self.reserve] if first + self.reserve > 0 else []
                if part:
                    chunk_rows[b] = part
            C = bucket_length(max(len(p) for p in chunk_rows.values()), cap=self.reserve, minimum=min(16, self.reserve))
            tokens, _, lengths = right_pad([chunk_rows.get(b, []) for b in range(B)], length=C)
            last = i == calls - 1
            draw = np.zeros(B, bool)
            if last:
                draw[list(pieces)] = True
            self.state = engine.extend(self.sampler.graphdef, self.sampler.params, self.state, tokens, lengths, draw,
                                       np.full(B, N, np.int32), spec=self.spec, max_new=N)
        for b, p in pieces.items():
            self.history[b].extend(p[1:])
            self.turn_start[b] = len(self.history[b])
            self.active[b] = True
            self.finish[b] = 0
        self.params = self.params.replace(max_new_tokens=N)

    def row_text(self, b: int) -> str:
        """Decoded full history of row b (prompt and every turn), for debugging and tools."""
        return decode(self.sampler.tokenizer, self.history[b])

    def close(self) -> None:
        """Drops the KV cache (the rows cannot run or extend afterwards); `EngineSession.close`'s counterpart."""
        self.state = None

    def _check_open(self, what: str) -> None:
        if self.state is None:
            raise RuntimeError(f"{what}: this session is closed")


def checked_appends(session, appends: Mapping[int, Sequence[int]], max_new_tokens: int | None, *, vocab_size: int,
                    index, max_len: int) -> tuple[int, dict[int, list[int]]]:
    """The checks of `extend`, shared by `Session` and the engine's `EngineSession`: returns the next turn's budget
    and, per row, the tokens to write (its last drawn token, never in the cache, then the appended ids).
    index[b]: positions row b's cache holds; max_len: positions per row (one must stay free)."""
    session._check_open("extend")
    if session.active.any():
        raise RuntimeError("extend: the current turn is still running; call run() first")
    if session.reserve < 1:
        raise ValueError("extend: this session has no scratch slots; start it with reserve >= 1")
    if not appends:
        raise ValueError("extend: expected at least one {row: token ids} entry")
    N = max_new_tokens if max_new_tokens is not None else session.params.max_new_tokens
    if isinstance(N, bool) or not isinstance(N, int) or N < 1:
        raise ValueError(f"max_new_tokens={N!r}: expected an int >= 1")
    pieces: dict[int, list[int]] = {}
    for b, ids in appends.items():
        if not 0 <= b < session.batch:
            raise ValueError(f"extend: row {b} outside the batch of {session.batch} rows")
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError(f"extend: row {b}: empty append (expected at least one token)")
        if any(t < 0 or t >= vocab_size for t in ids):
            raise ValueError(f"extend: row {b}: token id outside the vocabulary of size {vocab_size}")
        pieces[b] = [session.history[b][-1]] + ids
        if index[b] + len(pieces[b]) >= max_len:
            raise ValueError(
                f"extend: row {b}: {len(ids)} appended tokens overflow the cache ({index[b] + 1} of {max_len} "
                f"slots used; at least one slot must stay free)")
    return N, pieces
