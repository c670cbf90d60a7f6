"""`reasoner serve --engine paged`: the same wire answers over the continuous-batching engine (tiny decoder, fast),
with per-request budgets and seeds side by side, a request arriving mid-flight joining the running rows and
finishing first, streamed text arriving while rows decode, and a refused request failing alone."""

import threading
import time

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


def _answers_are_the_static_samplers(client, model, tokenizer, *, greedy_tokens, n, seed, sampled_tokens):
    """A greedy answer, the same streamed, and n seeded samples equal what the static sampler draws."""
    sampler = Sampler(model, tokenizer)
    prompt = chat_ids(tokenizer, MESSAGES)
    (greedy,) = sampler.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=greedy_tokens))
    out = client.chat.completions.create(model="m", messages=MESSAGES, temperature=0, max_tokens=greedy_tokens)
    assert out.choices[0].message.content == greedy.text and out.usage.completion_tokens == greedy.num_tokens
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, temperature=0,
                                                 max_tokens=greedy_tokens, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == greedy.text
    sampled = sampler.generate([prompt], SamplingParams(temperature=1.0, n=n, seed=seed, max_new_tokens=sampled_tokens))
    out = client.chat.completions.create(model="m", messages=MESSAGES, temperature=1.0, n=n, seed=seed,
                                         max_tokens=sampled_tokens)
    assert [c.message.content for c in out.choices] == [s.text for s in sampled]


def test_greedy_stream_and_seeded_samples_equal_the_static_sampler(paged_server, tiny_model, tokenizer):
    _answers_are_the_static_samplers(paged_server.client, tiny_model, tokenizer, greedy_tokens=10, n=4, seed=5,
                                     sampled_tokens=6)


def _ask(client, answers, key, done_at, **kw):
    answers[key] = client.chat.completions.create(model="m", messages=MESSAGES, temperature=1.0, **kw)
    done_at[key] = time.monotonic()


def test_a_short_request_arriving_mid_flight_joins_the_running_rows_and_finishes_first(paged_server, tiny_model,
                                                                                         tokenizer):
    sampler = Sampler(tiny_model, tokenizer)
    prompt = chat_ids(tokenizer, MESSAGES)
    loop = paged_server.server.service.batcher
    asks = {"long": dict(max_tokens=80, seed=2), "short": dict(max_tokens=3, seed=1)}
    answers, done_at = {}, {}
    steps = loop.steps
    long = threading.Thread(target=_ask, args=(paged_server.client, answers, "long", done_at), kwargs=asks["long"])
    long.start()
    deadline = time.monotonic() + 120
    while loop.steps < steps + 2 and long.is_alive() and time.monotonic() < deadline:  # the long one is decoding
        time.sleep(0.01)
    assert loop.steps >= steps + 2, "the long request did not start decoding"
    _ask(paged_server.client, answers, "short", done_at, **asks["short"])
    long.join(300)
    # the static Batcher would have decoded the long request's batch to its end before starting the short one
    assert done_at["short"] < done_at["long"] and loop.most_running >= 2
    for key, kw in asks.items():
        (want,) = sampler.generate([prompt], SamplingParams(temperature=1.0, seed=kw["seed"],
                                                            max_new_tokens=kw["max_tokens"]))
        assert answers[key].choices[0].message.content == want.text
        assert answers[key].usage.completion_tokens == kw["max_tokens"]


def test_streamed_text_arrives_in_several_chunks_while_decoding(paged_server, tiny_model, tokenizer):
    (greedy,) = Sampler(tiny_model, tokenizer).generate([chat_ids(tokenizer, MESSAGES)],
                                                        SamplingParams(temperature=0.0, max_new_tokens=40))
    chunks = list(paged_server.client.chat.completions.create(model="m", messages=MESSAGES, temperature=0,
                                                              max_tokens=40, stream=True))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == greedy.text
    assert len(pieces) >= 3  # 40 tokens in chunks of 8 steps: text came before the row ended


def test_a_request_the_engine_refuses_fails_alone(tiny_model, tokenizer):
    from reasoner.serve.backend import GenRequest
    from reasoner.serve.engine_loop import EngineLoop, server_engine

    loop = EngineLoop(lambda: server_engine(tiny_model, tokenizer, slots=2, max_len=64), max_len=64)
    try:
        bad = loop.submit(GenRequest(prompt_ids=(10**6,), params=SamplingParams(max_new_tokens=4)))
        good = loop.submit(GenRequest(prompt_ids=(5, 6, 7), params=SamplingParams(max_new_tokens=4, temperature=0.0)))
        with pytest.raises(ValueError, match="vocabulary"):
            bad.wait(60)
        assert good.wait(120)[0].num_tokens == 4
        with pytest.raises(ValueError, match="n=3"):
            loop.submit(GenRequest(prompt_ids=(5,), params=SamplingParams(max_new_tokens=4, n=3)))
    finally:
        loop.close(60)


def test_a_speculating_server_answers_what_the_static_sampler_draws(tiny_model, tokenizer):
    """`reasoner serve --speculate 4`: greedy, streamed and seeded sampled answers are the static sampler's."""
    running = start_server(tiny_model, tokenizer, engine="paged", max_batch=4, batch_wait_ms=50, max_len=128,
                           speculate=4)
    try:
        _answers_are_the_static_samplers(running.client, tiny_model, tokenizer, greedy_tokens=24, n=2, seed=3,
                                         sampled_tokens=8)
    finally:
        running.close()
    with pytest.raises(ValueError, match="paged"):
        start_server(tiny_model, tokenizer, engine="static", speculate=4)


def _post_and_hang_up(url: str, body: dict, *, read: bool, after_s: float) -> None:
    import json
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(url)
    data = json.dumps(body).encode()
    with socket.create_connection((where.hostname, where.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(data) + data)
        if read:
            sock.recv(200)  # the stream's headers: decoding has begun
        time.sleep(after_s)


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_hangs_up_has_its_request_dropped(tiny_model, tokenizer, stream):
    running = start_server(tiny_model, tokenizer, engine="paged", max_batch=2, batch_wait_ms=10, max_len=512)
    try:
        loop = running.server.service.batcher
        running.client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)  # compiled
        body = dict(model="m", messages=MESSAGES, temperature=0, max_tokens=400, stream=stream)
        _post_and_hang_up(running.url, body, read=stream, after_s=0.3)
        deadline = time.monotonic() + 60
        while not any("its client went away" in line for line in running.log.lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(line.startswith("request dropped after") for line in running.log.lines), running.log.lines
        assert not loop._live and not loop.engine.sched.rows  # its slots went back
        assert not any("400 tokens" in line for line in running.log.lines)
        # the server goes on answering
        assert running.client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=3).usage \
            .completion_tokens == 3
    finally:
        running.close()


def test_a_stalled_upload_does_not_hold_up_shutdown(tiny_model, tokenizer):
    import socket
    from urllib.parse import urlsplit

    running = start_server(tiny_model, tokenizer, engine="paged", max_batch=2, max_len=128)
    where = urlsplit(running.url)
    with socket.create_connection((where.hostname, where.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":")
        time.sleep(0.3)
        assert running.server.tracker.wait_idle(0)  # a body still arriving is not a request being answered
        running.close()


def test_an_engine_that_cannot_be_rebuilt_refuses_work_instead_of_hanging(tiny_model, tokenizer):
    """A step fails, then building a fresh engine fails too: the queued request fails, new ones get 503 and
    `/health` reports the error (the worker used to die and leave every later request waiting forever)."""
    import httpx2 as httpx

    running = start_server(tiny_model, tokenizer, engine="paged", max_batch=2, max_len=128)
    loop = running.server.service.batcher
    try:
        def broken_step():
            raise RuntimeError("device lost")

        def broken_build():
            raise MemoryError("no room for a fresh engine")

        loop.engine.step = broken_step
        loop._make_engine = broken_build
        first = httpx.post(running.url + "/chat/completions", json={"messages": MESSAGES, "max_tokens": 2},
                           timeout=120)
        assert first.status_code == 500 and "device lost" in first.json()["error"]["message"]
        later = httpx.post(running.url + "/chat/completions", json={"messages": MESSAGES, "max_tokens": 2},
                           timeout=120)
        assert later.status_code == 503 and "no room for a fresh engine" in later.json()["error"]["message"]
        health = httpx.get(running.url.removesuffix("/v1") + "/health", timeout=60)
        assert health.status_code == 503 and health.json()["status"] == "error"
    finally:
        running.close()
