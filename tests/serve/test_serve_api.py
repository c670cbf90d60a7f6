"""`reasoner serve` through the official `openai` client, on a tiny random decoder (fast).

Every answer is compared with the sampler run directly on the same rendered prompt: the server must add
nothing and lose nothing (greedy text, the n seeded samples, stop strings, logprobs, usage)."""

import numpy as np
import openai
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.tokenization import chat_ids

MESSAGES = [{"role": "user", "content": "What is two plus two?"}]


@pytest.fixture(scope="module")
def reference(tiny_model, tokenizer):
    """The sampler's own completions of a chat, as the server should return them."""
    sampler = Sampler(tiny_model, tokenizer)

    def run(messages, **params):
        return sampler.generate([chat_ids(tokenizer, messages)], SamplingParams(**params))

    return run


def test_models_lists_the_served_model(tiny_server):
    models = tiny_server.client.models.list()
    assert [m.id for m in models.data] == ["test-model"]


def test_greedy_completion_equals_the_sampler(tiny_server, reference, tokenizer):
    out = tiny_server.client.chat.completions.create(model="test-model", messages=MESSAGES, temperature=0,
                                                     max_tokens=12, logprobs=True)
    (want,) = reference(MESSAGES, temperature=0.0, max_new_tokens=12)
    (choice,) = out.choices
    assert choice.message.role == "assistant" and choice.message.content == want.text
    assert choice.finish_reason == {"eos": "stop", "length": "length"}[want.finish_reason]
    assert out.usage.prompt_tokens == len(chat_ids(tokenizer, MESSAGES))
    assert out.usage.completion_tokens == want.num_tokens == 12
    # the wire's log-probs are the sampler's model log-probs of the same tokens (float32 through JSON: exact)
    assert [t.logprob for t in choice.logprobs.content] == [float(x) for x in want.model_logprobs]
    assert "".join(t.token for t in choice.logprobs.content) == want.text
    # a temperature under 1e-5 is greedy (vLLM's rule): float32 logits divided by 1e-40 drew token 0
    for tiny in (1e-6, 1e-40):
        low = tiny_server.client.chat.completions.create(model="test-model", messages=MESSAGES, temperature=tiny,
                                                         max_tokens=12)
        assert low.choices[0].message.content == want.text


def test_n4_returns_the_four_seeded_samples(tiny_server, reference):
    out = tiny_server.client.chat.completions.create(model="test-model", messages=MESSAGES, n=4, temperature=1.0,
                                                     seed=7, max_tokens=8)
    want = reference(MESSAGES, temperature=1.0, n=4, seed=7, max_new_tokens=8)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    assert [c.message.content for c in out.choices] == [w.text for w in want]
    assert len({c.message.content for c in out.choices}) > 1  # four draws, not one repeated
    assert out.usage.completion_tokens == sum(w.num_tokens for w in want)
    # sent at once with another seeded request (same seed, other prompt), each still gets its samples alone
    other = [{"role": "user", "content": "Name a prime number."}]
    both = tiny_server.ask_at_once([dict(model="test-model", messages=m, n=2, temperature=1.0, seed=7, max_tokens=8)
                                    for m in (other, MESSAGES)], join_s=300)
    for answer, messages in zip(both, (other, MESSAGES)):
        alone = reference(messages, temperature=1.0, n=2, seed=7, max_new_tokens=8)
        assert [c.message.content for c in answer.choices] == [w.text for w in alone]


def test_stream_concatenates_to_the_non_streamed_text(tiny_server):
    kwargs = dict(model="test-model", messages=MESSAGES, temperature=0, max_tokens=20)
    full = tiny_server.client.chat.completions.create(**kwargs)
    chunks = list(tiny_server.client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                             **kwargs))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content and len(text) > 0
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1  # it did stream, in pieces
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [full.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_stop_string_ends_the_answer_and_is_not_returned(tiny_server, reference, tokenizer):
    (free,) = reference(MESSAGES, temperature=0.0, max_new_tokens=12)
    words = free.text.split(" ")
    stop = " " + words[3]  # a piece of the greedy text: the answer must end right before it
    head = free.text[:free.text.index(stop)]
    kwargs = dict(model="test-model", messages=MESSAGES, temperature=0, max_tokens=12, stop=[stop])
    out = tiny_server.client.chat.completions.create(**kwargs)
    assert out.choices[0].message.content == head and out.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       tiny_server.client.chat.completions.create(stream=True, **kwargs) if c.choices)
    assert streamed == head


def test_sixteen_concurrent_clients_are_answered_in_shared_batches(tiny_server, tiny_model, tokenizer):
    chats = [[{"role": "user", "content": f"Question number {i}: what comes next?"}] for i in range(16)]
    before = len(tiny_server.log.batches())
    answers = tiny_server.ask_at_once([dict(model="test-model", messages=c, temperature=0, max_tokens=6)
                                       for c in chats], join_s=300)
    assert len({a.id for a in answers}) == 16
    want = Sampler(tiny_model, tokenizer).generate([chat_ids(tokenizer, c) for c in chats],
                                                   SamplingParams(temperature=0.0, max_new_tokens=6))
    assert [a.choices[0].message.content for a in answers] == [w.text for w in want]
    lines = tiny_server.log.batches()[before:]
    requests = [int(line.split()[2]) for line in lines]
    assert sum(requests) == 16 and len(lines) < 16 and max(requests) > 1, lines


@pytest.mark.parametrize("body, param", [
    ({"model": "m"}, "messages"),
    ({"messages": "hello"}, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": MESSAGES, "n": 0}, "n"),
    ({"messages": MESSAGES, "n": 17}, "n"),
    ({"messages": MESSAGES, "temperature": -0.5}, "temperature"),
    ({"messages": MESSAGES, "temperature": "hot"}, "temperature"),
    ({"messages": MESSAGES, "top_p": 0}, "top_p"),
    ({"messages": MESSAGES, "max_tokens": 0}, "max_tokens"),
    ({"messages": MESSAGES, "stop": [""]}, "stop"),
    ({"messages": MESSAGES, "stream": "yes"}, "stream"),
    ({"messages": MESSAGES, "tools": [{"type": "function"}]}, "tools[0]"),
    ({"messages": MESSAGES, "presence_penalty": 1.0}, "presence_penalty"),
])
def test_bad_fields_get_400_naming_the_field(tiny_server, body, param):
    import httpx2 as httpx

    r = httpx.post(tiny_server.url + "/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"].startswith(param) and "expected" in error["message"]


def test_malformed_bodies_get_400_and_the_server_still_answers(tiny_server):
    import httpx2 as httpx

    url = tiny_server.url + "/chat/completions"
    bad_json = httpx.post(url, content=b'{"messages": [', headers={"Content-Type": "application/json"}, timeout=60)
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == "invalid_json"
    not_object = httpx.post(url, json=[1, 2], timeout=60)
    assert not_object.status_code == 400 and "expected a JSON object" in not_object.json()["error"]["message"]
    surrogate = httpx.post(url, content=b'{"messages": [{"role": "user", "content": "hi \\ud800"}]}', timeout=60)
    assert surrogate.status_code == 400 and surrogate.json()["error"]["param"] == "messages[0].content"
    assert "lone UTF-16 surrogate" in surrogate.json()["error"]["message"]
    too_large = httpx.post(url, content=b" " * (tiny_server.server.max_body_bytes + 1), timeout=60)
    assert too_large.status_code == 400 and too_large.json()["error"]["code"] == "body_too_large"
    assert httpx.get(tiny_server.url + "/nothing", timeout=60).status_code == 404
    assert httpx.get(tiny_server.url + "/models?api-version=1", timeout=60).status_code == 200  # a query is no route
    with pytest.raises(openai.BadRequestError, match="messages"):
        tiny_server.client.chat.completions.create(model="test-model", messages=[])
    ok = tiny_server.client.chat.completions.create(model="test-model", messages=MESSAGES, max_tokens=2)
    assert ok.choices[0].finish_reason == "length" and ok.usage.completion_tokens == 2


def test_prompt_too_long_for_the_cache_is_a_clear_400(tiny_server, tokenizer):
    long = [{"role": "user", "content": "word " * 400}]  # > 256 cache slots
    with pytest.raises(openai.BadRequestError) as info:
        tiny_server.client.chat.completions.create(model="test-model", messages=long, max_tokens=4)
    error = info.value.body
    assert error["code"] == "context_length_exceeded" and "context is 256 tokens" in error["message"]
    n_prompt = len(chat_ids(tokenizer, MESSAGES))
    with pytest.raises(openai.BadRequestError, match="max_tokens is 250"):  # prompt fits, prompt + budget does not
        tiny_server.client.chat.completions.create(model="test-model", messages=MESSAGES, max_tokens=250)
    assert n_prompt + 250 > 256
    ok = tiny_server.client.chat.completions.create(model="test-model", messages=MESSAGES, max_tokens=256 - n_prompt)
    assert ok.usage.completion_tokens == 256 - n_prompt


def test_requests_with_different_budgets_share_a_batch_and_keep_their_own(tiny_server, reference):
    """Non-streamed requests of one setting share the batch whatever their max_tokens; each is cut to its own."""
    results = dict(zip((3, 9), tiny_server.ask_at_once(
        [dict(model="test-model", messages=MESSAGES, temperature=0, max_tokens=m) for m in (3, 9)], join_s=300)))
    (want,) = reference(MESSAGES, temperature=0.0, max_new_tokens=9)
    from reasoner.sampling.stops import decode

    assert results[9].choices[0].message.content == want.text
    assert results[3].choices[0].message.content == decode(tiny_server.server.service.tokenizer, want.tokens[:3])
    assert [results[m].usage.completion_tokens for m in (3, 9)] == [3, 9]
    assert np.all([results[m].choices[0].finish_reason == "length" for m in (3, 9)])
