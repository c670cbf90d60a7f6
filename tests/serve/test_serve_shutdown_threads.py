"""`Server.close_gracefully` leaves no thread of the server behind: idle keep-alive connections are ended and their
threads joined, so the server (and the engine's device arrays it holds) is freed where the caller lets it go.

The failure this guards against: a connection thread that outlived close held the server through its target; when
its client let go or its socket timed out, possibly while the interpreter was exiting, that daemon thread freed the
engine's JAX arrays and the process aborted ("terminate called ... FATAL: exception not rethrown", rc 134, after
`pytest -n 0 tests/serve/test_serve_engine.py` had passed)."""

import gc
import json
import socket
import threading
import weakref
from urllib.parse import urlsplit

from tests.serve.conftest import start_server

MESSAGES = [{"role": "user", "content": "What is two plus two?"}]


def _keep_alive_request(url: str) -> socket.socket:
    """A connection that sent one request, read its whole answer and stays open (HTTP/1.1 keep-alive)."""
    where = urlsplit(url)
    body = json.dumps({"messages": MESSAGES, "max_tokens": 2, "temperature": 0}).encode()
    sock = socket.create_connection((where.hostname, where.port), timeout=120)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    head, _, rest = answer.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        rest += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" not in head
    return sock


def _connection_threads():
    """The live connection threads (ours are named; `ThreadingMixIn`'s are named after their target)."""
    return [t for t in threading.enumerate() if t.name == "reasoner-serve-connection" or "process_request" in t.name]


def test_close_ends_idle_connections_joins_their_threads_and_frees_the_server(tiny_model, tokenizer):
    before = set(_connection_threads())
    running = start_server(tiny_model, tokenizer, engine="paged", max_batch=2, max_len=128)
    idle = [_keep_alive_request(running.url) for _ in range(2)]
    running.client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)  # the client's pool keeps it
    assert len(set(_connection_threads()) - before) == 3
    server, loop = weakref.ref(running.server), weakref.ref(running.server.service.batcher)
    running.close()
    assert not set(_connection_threads()) - before  # no connection thread outlives the server
    for sock in idle:
        assert sock.recv(1) == b""  # the server ended the idle connection
        sock.close()
    del running
    gc.collect()
    assert server() is None and loop() is None  # freed here, on the thread that let it go
