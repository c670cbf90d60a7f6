"""Multi-turn rollouts on one KV cache: the continuation rule (shared by GRPO and `SamplerPolicy`) and `rollout`.

The continuation rule (`ChatCache`): each cache row holds the text of its rendered conversation so far (the chat
template's rendering with the tool schema, generation prompt added, then every reply as the cache holds it, an
end-of-turn token that stopped the row included). When the re-rendered conversation (with the new tool messages)
starts with that text, only the suffix (end of the assistant turn, tool messages, next generation prompt) is
tokenized and appended to the row's cache; the history is never prefilled again. Otherwise the row cannot be
continued (a template that rewrites earlier turns).

`rollout(sampler, prompt_ids=..., examples=..., sampling=..., budget=..., tool=None)` generates `sampling.n`
completions per prompt and, with a tool (`reasoner.agents.environment.EnvironmentTool`: the SMT scratchpad's
`ScratchpadTool`, Python function tools, any `Environment`), continues rows for up to `max_turns` turns, the tool's
responses masked out of the loss (`tool_mask` 0). Returns a `Rollout`.

What runs where: `sampler` is either generator. One turn is its `generate`; more are a session (`sampler.start`):
the paged `RolloutEngine`'s `EngineSession` on one device (`trainers.grpo.sampler_for` "auto"), the static
`Sampler`'s `Session` on a multi-device mesh (the engine's block pool is not sharded). Both continue each row's
cache and draw the same tokens from the same keys (tests/trainers/test_grpo_engine_turns.py), so the choice is
speed and memory only: the engine's rows hold blocks for what they use, attend over their live blocks and share
their prompt's full blocks, where the static cache is `rows x (max_len + reserve)`. The session is closed when the
rollout returns (the engine's holds its slots until then).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Protocol, Sequence

import numpy as np


def render_with_tools(tokenizer, messages: list[dict], tools) -> str:
    """The chat template's rendering with the generation prompt, passing `tools` where the template accepts it."""
    from reasoner.tokenization import render_chat

    try:
        return render_chat(tokenizer, messages, add_generation_prompt=True, tools=tools)
    except Exception:  # templates without tool support reject `tools`
        return render_chat(tokenizer, messages, add_generation_prompt=True)


def text_in_cache(tokenizer, completion) -> str:
    """A sampled turn's text as its row's cache holds it: every token drawn, special ones (the end-of-turn token
    that stopped it) included, and the whole of the token that completed a stop string."""
    return tokenizer.decode([int(t) for t in completion.tokens], skip_special_tokens=False,
                            clean_up_tokenization_spaces=False)


def reply_text(tokenizer, completion) -> str:
    """A sampled turn's text for the conversation: `completion.text` is cut right after a stop string, but the token
    that completed it may go on (SmolLM2 writes '</tool_call>.' with the token '>.') and the cache holds all of it;
    the conversation takes every drawn token's text (special tokens skipped), so that re-rendering it extends the
    row's cache and continuing the row gives the tokens a fresh prefill of the conversation would."""
    if completion.finish_reason != "stop":
        return completion.text
    return tokenizer.decode([int(t) for t in completion.tokens], skip_special_tokens=True,
                            clean_up_tokenization_spaces=False)


class ChatCache:
    """The text each cache row holds, and the suffix that continues a row to a re-rendered conversation."""

    def __init__(self, tokenizer, tools):
        self.tokenizer, self.tools = tokenizer, tools
        self.rows: list[str] = []

    def render(self, messages: list[dict]) -> str:
        return render_with_tools(self.tokenizer, list(messages), self.tools)

    def reset(self, texts: Sequence[str]) -> None:
        """One row per prompt text (the prefill)."""
        self.rows = list(texts)

    def add_reply(self, row: int, completion) -> None:
        self.rows[row] += text_in_cache(self.tokenizer, completion)

    def suffix(self, row: int, text: str) -> str | None:
        """What to append to `row` so that it holds `text` (and records it), or None when `text` does not extend it."""
        if len(text) <= len(self.rows[row]) or not text.startswith(self.rows[row]):
            return None
        out, self.rows[row] = text[len(self.rows[row]):], text
        return out


class Tool(Protocol):
    """What `rollout` needs of a multi-turn tool (see `reasoner.agents.environment.EnvironmentTool`): the strings
    that end a turn, `begin` with one example per row, `turn` (row -> completion of this turn; returns row -> the
    text to append before the next turn, for the rows that go on) and the rows' completions for the rewards."""

    stop: tuple[str, ...]

    def begin(self, examples: Sequence[Mapping]) -> None: ...

    def turn(self, completions: Mapping[int, object], *, want_next: bool) -> dict[int, str]: ...

    def trajectories(self) -> list: ...


@dataclasses.dataclass(frozen=True)
class Rollout:
    """B = prompts x G rows (row b: sample b % G of prompt b // G), completion tokens of every turn.

    completion_ids / tool_mask (1 = model token, 0 = tool response) / old_logps: per row, the same length.
    completions: per row, the chat messages of its assistant turns (single turn), or what its tool's environment
    returns (multi-turn: a `reasoner.agents.environment.Trajectory` with messages, tool calls, observations,
    answer), for the rewards.
    """

    prompt_ids: list[list[int]]
    completion_ids: list[np.ndarray]
    tool_mask: list[np.ndarray]
    old_logps: list[np.ndarray]
    truncated: np.ndarray
    completions: list
    examples: list[Mapping]

    @property
    def texts(self) -> list[str]:
        from reasoner.rewards import completion_text

        return [completion_text(c) for c in self.completions]


class _OneTurn:
    """A single-turn rollout's `session`: `run()` generates every row once; nothing continues."""

    def __init__(self, sampler, prompt_ids, sampling, max_len: int):
        self.sampler, self.prompt_ids, self.sampling, self.max_len = sampler, prompt_ids, sampling, max_len

    def run(self):
        return self.sampler.generate([list(p) for p in self.prompt_ids], self.sampling, max_len=self.max_len)


def rollout(sampler, *, prompt_ids: Sequence[Sequence[int]], examples: Sequence[Mapping], sampling,
            budget: int, tool: Tool | None = None, max_turns: int = 1, tool_reserve: int = 256) -> Rollout:
    """Generates `sampling.n` completions per prompt, continuing rows through `tool` for up to `max_turns` turns.

    With a tool, `prompt_ids` must be `tool.prompt_ids(example["prompt"])`. A row ends when its turn stops on
    length, when the tool ends it (finish(), no tool call), or when its completion would exceed `budget` tokens
    (then it counts as truncated). Tool responses are appended to the same KV cache with tool_mask 0.
    """
    n = sampling.n
    multi = tool is not None and max_turns > 1
    if tool is not None:
        sampling = sampling.replace(stop=tuple(dict.fromkeys((*sampling.stop, *tool.stop))))
        tool.begin([examples[b // n] for b in range(len(prompt_ids) * n)])
    max_len = max(len(p) for p in prompt_ids) + budget + 1
    # One turn is a plain `generate`; more continue each row's KV cache through a session (`start`: the static
    # Sampler's `Session` or the RolloutEngine's `EngineSession`, the same interface and draws).
    session = sampler.start([list(p) for p in prompt_ids], sampling, max_len=max_len,
                            reserve=tool_reserve) if multi else _OneTurn(sampler, prompt_ids, sampling, max_len)
    try:
        return _turns(session, getattr(sampler, "tokenizer", None), prompt_ids=prompt_ids, examples=examples, sampling=sampling,
                      budget=budget, tool=tool, max_turns=max_turns, multi=multi, max_len=max_len)
    finally:
        close = getattr(session, "close", None)
        if close is not None:  # the engine's session holds its slots and blocks until closed
            close()


def _turns(session, tokenizer, *, prompt_ids, examples, sampling, budget: int, tool, max_turns: int, multi: bool,
           max_len: int) -> Rollout:
    from reasoner.tokenization import encode

    n = sampling.n
    B = len(prompt_ids) * n
    ids: list[list[int]] = [[] for _ in range(B)]
    model_tok: list[list[int]] = [[] for _ in range(B)]
    logps: list[list[float]] = [[] for _ in range(B)]
    messages: list[list[dict]] = [[] for _ in range(B)]
    truncated = np.zeros(B, bool)
    rows = list(range(B))
    for turn in range(max_turns):
        done = dict(zip(rows, session.run()))
        for b, comp in done.items():
            ids[b] += [int(t) for t in comp.tokens]
            model_tok[b] += [1] * comp.num_tokens
            logps[b] += [float(x) for x in comp.sample_logprobs]
            messages[b].append({"role": "assistant", "content": comp.text})
            truncated[b] |= comp.finish_reason == "length"
        if tool is None:
            break
        suffixes = tool.turn(done, want_next=turn < max_turns - 1)
        if not multi:
            break
        appends = {}
        for b, suffix in suffixes.items():
            if truncated[b]:
                continue
            resp_ids = encode(tokenizer, suffix)
            if len(ids[b]) + len(resp_ids) + 1 > budget or len(session.history[b]) + len(resp_ids) + 2 >= max_len:
                truncated[b] = True  # no room for the response and another turn
                continue
            ids[b] += resp_ids
            model_tok[b] += [0] * len(resp_ids)
            logps[b] += [0.0] * len(resp_ids)
            appends[b] = resp_ids
        if not appends:
            break
        rows = sorted(appends)
        room = min(budget - len(ids[b]) for b in rows)
        session.extend(appends, max_new_tokens=max(1, min(sampling.max_new_tokens, room)))
    for b in range(B):
        if len(ids[b]) > budget:  # the last turn ran past the budget
            ids[b], model_tok[b], logps[b] = ids[b][:budget], model_tok[b][:budget], logps[b][:budget]
            truncated[b] = True
    return Rollout(prompt_ids=[list(prompt_ids[b // n]) for b in range(B)],
                   completion_ids=[np.asarray(x, np.int32) for x in ids],
                   tool_mask=[np.asarray(x, np.float32) for x in model_tok],
                   old_logps=[np.asarray(x, np.float32) for x in logps], truncated=truncated,
                   completions=tool.trajectories() if tool is not None else messages,
                   examples=[examples[b // n] for b in range(B)])
