"""`SamplerPolicy`: the tool-loop policy (`reasoner.agents.policies.Policy`) over our jitted sampler.

    policy = SamplerPolicy(model, tokenizer, temperature=0.7, max_new_tokens=512)
    trajectories = run_scratchpad(policy, conversations, runner=runner)

Each call renders every conversation with the chat template (tools passed as `TOOLS`, generation
prompt added) and generates one assistant turn per conversation, stopping at end-of-turn or right
after `</tool_call>`, on the paged `RolloutEngine` when the model is on one device (else on the
static `Sampler` over its mesh: the engine's block pool is not sharded). Multi-turn continuation
follows `reasoner.agents.multiturn.ChatCache` (the one rule, shared with GRPO's rollouts): the
policy keeps the session of its last call (`Session` or `EngineSession`, one interface). When
every new conversation extends one of that session's rows - its rendered text starts with the row's
rendered prompt plus the reply the row produced - only the new suffix (end of the assistant turn,
tool response, next generation prompt) is tokenized and appended to the row's cache; the history is
not prefilled again. Otherwise (a new batch) it closes that session and starts a new one. In a
first call where every prompt appears the same number of times K (K samples per problem), the K
copies share one prefill (n = K).

The cache keeps the tokens the model sampled, so a continued row sees its own tokenization of
its earlier replies (the text is identical to the re-rendered conversation's).
"""

from __future__ import annotations

import collections
from typing import Sequence

from reasoner.agents.multiturn import ChatCache, reply_text
from reasoner.agents.policies import TOOLS, Reply

TOOL_CALL_END = "</tool_call>"


class SamplerPolicy:
    """Policy over our sampler: the paged `RolloutEngine` when the model is on one device, else the static
    `reasoner.sampling.Sampler` (sharded over `mesh`); their sessions draw the same tokens (tested).

    max_len: cache positions per conversation (prompt + every turn + tool responses).
    reserve: the static sampler's scratch slots, the longest appended chunk written in one call (longer appends
      take several calls); the engine writes an append in one call.
    paged: None (the engine when `mesh` is None and the model's parameters are on one device), True or False.
    """

    def __init__(self, model, tokenizer, *, temperature: float = 0.7, top_p: float = 1.0, top_k: int = 0,
                 max_new_tokens: int = 512, max_len: int = 4096, reserve: int = 128, seed: int = 0,
                 tools: list | None = None, mesh=None, paged: bool | None = None):
        import reasoner.sampling
        from reasoner.sampling import SamplingParams, rollout_engine

        if paged is None:
            paged = mesh is None and rollout_engine.on_one_device(model)
        if paged:
            self.sampler = rollout_engine.RolloutEngine(model, tokenizer, slots=1, max_len=max_len, chunk_steps=16)
        else:
            self.sampler = reasoner.sampling.Sampler(model, tokenizer, mesh=mesh)
        self.tokenizer = tokenizer
        self.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                     top_k=top_k, seed=seed, stop=(TOOL_CALL_END,))
        self.max_len, self.reserve = max_len, reserve
        self.tools = TOOLS if tools is None else tools
        self.calls = 0
        self._session = None
        self._cache = ChatCache(tokenizer, self.tools)  # rendered prompt + replies so far, per session row
        self.prefills = 0  # sessions started (for tests and logs)
        self.continuations = 0  # calls served by extending the existing cache

    def respond(self, conversations: Sequence[list[dict]]) -> list[Reply]:
        """One reply per conversation; a conversation that no longer fits `max_len` cache positions (a long tool
        output, a verbose model) gets `Reply("", failure=...)` (its episode ends as "infrastructure", as a served
        model's context-length error does) and the others are answered as if it were not there."""
        if not conversations:
            return []
        texts = [self._cache.render(list(c)) for c in conversations]
        rows = self._match_rows(texts)
        rows = self._start(texts) if rows is None else self._extend(texts, rows)  # a row, or why it does not fit
        self.calls += 1
        session = self._session
        live = session is not None and any(isinstance(row, int) for row in rows)
        by_row = {c.prompt_index * session.n + c.sample_index: c for c in session.run()} if live else {}
        replies = []
        for row in rows:
            if isinstance(row, str):
                replies.append(Reply("", failure=row))
                continue
            c = by_row[row]
            self._cache.add_reply(row, c)
            replies.append(Reply(reply_text(self.tokenizer, c), prompt_tokens=len(session.history[row]) - c.num_tokens,
                                 completion_tokens=c.num_tokens))
        return replies

    def _too_long(self, tokens: int) -> str:
        return (f"the conversation's {tokens} tokens do not fit the {self.max_len} cache positions (SamplerPolicy "
                "max_len; one must stay free to draw the reply)")

    def _match_rows(self, texts: list[str]) -> list[int] | None:
        """Session row of each conversation, or None when some conversation extends no row."""
        if self._session is None:
            return None
        free = collections.defaultdict(list)
        for row, done_text in enumerate(self._cache.rows):
            free[done_text].append(row)
        candidates = sorted(free, key=len, reverse=True)
        rows = []
        for text in texts:
            found = next((t for t in candidates if free[t] and len(text) > len(t) and text.startswith(t)), None)
            if found is None:
                return None
            rows.append(free[found].pop(0))
        return rows

    def _start(self, texts: list[str]) -> list[int | str]:
        """Prefills a new session with the conversations that fit; returns the row of each (why, for the others)."""
        from reasoner.tokenization import encode

        ids = {t: encode(self.tokenizer, t) for t in dict.fromkeys(texts)}
        fitting = [t for t in texts if len(ids[t]) < self.max_len]
        counts = collections.Counter(fitting)
        k = counts[fitting[0]] if fitting else 0
        if k > 1 and all(v == k for v in counts.values()):  # K samples per prompt share one prefill
            prompts, n = list(counts), k
        else:
            prompts, n = fitting, 1
        if self._session is not None and hasattr(self._session, "close"):
            self._session.close()  # the engine's session holds its slots until closed
        self._session = None
        self._cache.reset([p for p in prompts for _ in range(n)])
        if prompts:
            # the rendered chats' own ids (no special tokens added: the template wrote its BOS, if it has one),
            # the ids the fit check counted; a str would get a BOS-adding tokenizer's BOS (`encode_prompt`)
            self._session = self.sampler.start([ids[p] for p in prompts], self.params.replace(n=n),
                                               max_len=self.max_len, reserve=self.reserve)
            self.prefills += 1
        index = {p: i for i, p in enumerate(prompts)}
        taken = collections.Counter()
        rows = []
        for t in texts:  # n > 1: the j-th copy of a prompt takes that prompt's j-th sample; n == 1: rows in order
            if len(ids[t]) >= self.max_len:
                rows.append(self._too_long(len(ids[t])))
                continue
            rows.append(index[t] * n + taken[t] if n > 1 else sum(taken.values()))
            taken[t] += 1
        return rows

    def _extend(self, texts: list[str], rows: list[int]) -> list[int | str]:
        """Appends each conversation's new suffix to its row's cache; returns the rows (why, for a conversation
        whose suffix does not fit: the session's rule, one position left free)."""
        from reasoner.tokenization import encode

        appends, out = {}, []
        for text, row in zip(texts, rows):
            ids = encode(self.tokenizer, text[len(self._cache.rows[row]):])
            total = len(self._session.history[row]) + len(ids)
            if total >= self.max_len:
                out.append(self._too_long(total))
                continue
            self._cache.suffix(row, text)  # records the row's new text
            appends[row] = ids
            out.append(row)
        if appends:
            self._session.extend(appends, max_new_tokens=self.params.max_new_tokens)
            self.continuations += 1
        return out
