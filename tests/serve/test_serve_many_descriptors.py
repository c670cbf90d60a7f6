"""A server whose sockets have descriptors past 1023 (a busy server's, or one in a process with many files open) still
notices a client that hangs up and answers one that waits: `select()` refused such descriptors (ValueError), so the
client-gone check raised and the handler answered 500 to a client that was still waiting."""

import contextlib
import os
import resource
import socket
import time
import types

import pytest

from reasoner.serve.http import _Handler
from tests.serve.conftest import start_server

MESSAGES = [{"role": "user", "content": "What is two plus two?"}]


@contextlib.contextmanager
def descriptors_past_1023():
    """Holds enough open descriptors that the next sockets get numbers above 1023."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 1400:
        pytest.skip(f"RLIMIT_NOFILE {soft}: too few descriptors to pass 1023")
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)


def test_client_gone_check_works_past_descriptor_1023():
    with descriptors_past_1023():
        server_side, client_side = socket.socketpair()
        assert server_side.fileno() > 1023
        handler = types.SimpleNamespace(connection=server_side)
        assert _Handler._client_gone(handler) is False  # connected, nothing sent
        client_side.sendall(b"GET")  # pipelined bytes of a next request: still there
        assert _Handler._client_gone(handler) is False
        client_side.close()
        server_side.recv(3)
        assert _Handler._client_gone(handler) is True
        server_side.close()


def test_a_waiting_client_on_a_high_descriptor_gets_its_answer(tiny_model, tokenizer):
    running = start_server(tiny_model, tokenizer, engine="paged", max_batch=2, max_len=128)
    try:
        loop = running.server.service.batcher
        running.client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)  # compiled
        step = loop.engine.step

        def slow_step():  # an answer that takes a few client-gone checks (one every 0.25 s)
            time.sleep(0.2)
            return step()

        loop.engine.step = slow_step
        with descriptors_past_1023():
            import httpx2 as httpx

            answer = httpx.post(running.url + "/chat/completions", timeout=120,
                                json={"messages": MESSAGES, "max_tokens": 8, "temperature": 0})
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] == 8
    finally:
        running.close()
