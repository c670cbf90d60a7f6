"""SamplerPolicy's continued turns hold exactly what a fresh prefill of the whole conversation holds, and its
draws (same seed, same positions) are a fresh session's, when a stop string ends inside a token (SmolLM2 spells '</tool_call>.'
with the token '>.', so the cut text ends before the '.' that the cache holds)."""

import pytest

from reasoner.agents.sampler_policy import SamplerPolicy
from reasoner.tokenization import encode, render_chat


@pytest.fixture(scope="module")
def tiny():
    from tests.models_shared import TINY, random_decoder

    return random_decoder(TINY, seed=0, scale=1.0)


def _policy(model, tokenizer, *stop: str, paged=None) -> SamplerPolicy:
    policy = SamplerPolicy(model, tokenizer, temperature=1.0, seed=5, max_new_tokens=6, max_len=512, reserve=64,
                           tools=[], paged=paged)
    policy.params = policy.params.replace(stop=stop)
    return policy


@pytest.mark.parametrize("paged", [None, False])  # the engine, the static sampler
def test_a_stop_string_inside_a_token_continues_as_a_fresh_prefill(tiny, tokenizer, paged):
    first = [{"role": "user", "content": "Is Anne kind?"}]
    probe = _policy(tiny, tokenizer)
    probe.respond([list(first)])
    drawn = probe._session.history[0][-6:]
    pieces = [tokenizer.decode([t]) for t in drawn]
    k = next(i for i, p in enumerate(pieces) if i >= 1 and len(p) >= 2)  # a token of two or more characters
    stop = "".join(pieces[:k]) + pieces[k][0]  # ends inside token k
    tail = pieces[k][1:]

    policy = _policy(tiny, tokenizer, stop, paged=paged)
    conv = list(first)
    (reply,) = policy.respond([conv])
    assert reply.completion_tokens == k + 1
    assert reply.text == stop + tail  # every drawn token's text, not the text cut at the stop string
    conv += [{"role": "assistant", "content": reply.text}, {"role": "tool", "content": "sat"}]
    (second,) = policy.respond([conv])
    assert policy.prefills == 1 and policy.continuations == 1  # the cache was continued, not prefilled again
    history = policy._session.history[0]
    fresh_ids = encode(tokenizer, render_chat(tokenizer, conv))
    assert history[:len(history) - second.completion_tokens] == fresh_ids
    assert second.prompt_tokens == len(fresh_ids)

    fresh = _policy(tiny, tokenizer, stop, paged=paged)
    (again,) = fresh.respond([conv])  # one prefill of the whole conversation
    assert fresh._session.history[0] == history
    assert (again.text, again.prompt_tokens, again.completion_tokens) == (
        second.text, second.prompt_tokens, second.completion_tokens)


def test_grpo_rows_continue_as_a_fresh_prefill_after_a_stop_inside_a_token(tokenizer):
    """EnvironmentTool (GRPO's multi-turn rollouts): the turn's token '>.' completes '</tool_call>'; the prompt's
    ids, the drawn ids and the appended suffix's ids are a fresh encoding of the re-rendered conversation."""
    import numpy as np

    from reasoner.agents.environment import EnvironmentTool, ToolEnvironment
    from reasoner.agents.tools import Toolset
    from reasoner.sampling.results import Completion
    from tests.agents import tool_fixtures as fx

    with Toolset([fx.add], mode="inprocess", timeout_s=5.0) as toolset:
        tool = EnvironmentTool(tokenizer, lambda: ToolEnvironment(toolset), schemas=toolset.schemas)
        example = {"prompt": "What is 2 + 3?"}
        tool.begin([example])
        prompt_ids = tool.prompt_ids(example["prompt"])
        drawn = encode(tokenizer, '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>.')
        assert tokenizer.decode(drawn[-1:]) == ">."  # the stop string ends inside the last token
        cut = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
        completion = Completion(tokens=np.asarray(drawn), text=cut, finish_reason="stop",
                                sample_logprobs=np.zeros(len(drawn)), model_logprobs=np.zeros(len(drawn)),
                                prompt_index=0, sample_index=0)
        suffix = tool.turn({0: completion}, want_next=True)[0]
        conversation = tool.conversations[0]
        assert [m["role"] for m in conversation] == ["user", "assistant", "tool"] and conversation[2]["content"] == "5"
        fresh = encode(tokenizer, render_chat(tokenizer, conversation))
        assert prompt_ids + drawn + encode(tokenizer, suffix) == fresh


def test_a_conversation_past_the_cache_fails_alone(tiny, tokenizer):
    """A conversation that no longer fits `max_len` (a long tool output, a verbose model) gets a failure reply; the
    other conversations of the call are answered as if it were not there (it raised ValueError for the batch)."""
    def policy():
        return SamplerPolicy(tiny, tokenizer, temperature=1.0, seed=5, max_new_tokens=4, max_len=64, reserve=64,
                             tools=[])

    prompt = [{"role": "user", "content": "Is Anne kind?"}]
    first_len = len(encode(tokenizer, render_chat(tokenizer, prompt)))
    assert first_len + 4 < 64
    p = policy()
    a, b = list(prompt), list(prompt)
    replies = p.respond([a, b])
    long_output = " ".join(["sat"] * 60)
    a += [{"role": "assistant", "content": replies[0].text}, {"role": "tool", "content": "sat"}]
    b += [{"role": "assistant", "content": replies[1].text}, {"role": "tool", "content": long_output}]
    assert len(encode(tokenizer, render_chat(tokenizer, b))) >= 64 > len(encode(tokenizer, render_chat(tokenizer, a)))
    got_a, got_b = p.respond([a, b])
    assert got_b.text == "" and "64" in got_b.failure and got_a.failure is None
    alone = policy()
    alone.respond([list(prompt), list(prompt)])
    (want_a,) = alone.respond([a])  # the same draws: the same session rows, continued without b
    assert (got_a.text, got_a.prompt_tokens, got_a.completion_tokens) == (
        want_a.text, want_a.prompt_tokens, want_a.completion_tokens)
    assert got_a.prompt_tokens == len(encode(tokenizer, render_chat(tokenizer, a)))

    # a new batch (a fresh prefill) with a conversation too long to start: it fails, the other starts
    other = [{"role": "user", "content": "Solve x + 1 = 2."}]
    too_long = [{"role": "user", "content": long_output}]
    got = policy().respond([list(prompt), too_long, list(other)])
    want = policy().respond([list(prompt), list(other)])
    assert got[1].text == "" and got[1].failure is not None
    assert [(r.text, r.prompt_tokens, r.failure) for r in (got[0], got[2])] == [
        (r.text, r.prompt_tokens, None) for r in want]

