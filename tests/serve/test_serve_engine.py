"""`reasoner serve --engine paged`: the same wire answers over the continuous-batching engine (tiny decoder, fast),
with per-request budgets and seeds inside one batch."""

import threading

import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.tokenization import chat_ids
from tests.serve.conftest import start_server

MESSAGES = [{"role": "user", "content": "What is two plus two?"}]


@pytest.fixture(scope="module")
def paged_server(tiny_model, tokenizer):
    running = start_server(tiny_model, tokenizer, engine="paged", max_batch=8, batch_wait_ms=300, max_len=128)
    yield running
    running.close()


def test_greedy_stream_and_seeded_samples_equal_the_static_sampler(paged_server, tiny_model, tokenizer):
    client = paged_server.client
    sampler = Sampler(tiny_model, tokenizer)
    prompt = chat_ids(tokenizer, MESSAGES)
    (greedy,) = sampler.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=10))
    out = client.chat.completions.create(model="m", messages=MESSAGES, temperature=0, max_tokens=10)
    assert out.choices[0].message.content == greedy.text and out.usage.completion_tokens == 10
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, temperature=0, max_tokens=10,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == greedy.text
    sampled = sampler.generate([prompt], SamplingParams(temperature=1.0, n=4, seed=5, max_new_tokens=6))
    out = client.chat.completions.create(model="m", messages=MESSAGES, temperature=1.0, n=4, seed=5, max_tokens=6)
    assert [c.message.content for c in out.choices] == [s.text for s in sampled]


def test_requests_with_own_budgets_and_seeds_share_one_batch(paged_server, tiny_model, tokenizer):
    sampler = Sampler(tiny_model, tokenizer)
    prompt = chat_ids(tokenizer, MESSAGES)
    asks = {"short": dict(max_tokens=3, seed=1), "long": dict(max_tokens=9, seed=2)}
    answers = {}
    before = len(paged_server.log.batches())
    threads = [threading.Thread(target=lambda k=k, kw=kw: answers.__setitem__(k, paged_server.client.chat.completions
                                .create(model="m", messages=MESSAGES, temperature=1.0, **kw))) for k, kw in asks.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert paged_server.log.batches()[before:][0].startswith("batch of 2 requests, 2 rows")
    for key, kw in asks.items():
        (want,) = sampler.generate([prompt], SamplingParams(temperature=1.0, seed=kw["seed"],
                                                            max_new_tokens=kw["max_tokens"]))
        assert answers[key].choices[0].message.content == want.text
        assert answers[key].usage.completion_tokens == kw["max_tokens"]
