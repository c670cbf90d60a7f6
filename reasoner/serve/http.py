"""The HTTP layer: standard-library `ThreadingHTTPServer`, one thread per connection, JSON and server-sent events.

Routes: `GET /v1/models`, `GET /health`, `POST /v1/chat/completions` and `POST /v1/completions` (the legacy text
API, `reasoner.serve.completions`); stream=true answers `text/event-stream`: `data: {chunk}` lines and a final
`data: [DONE]`. Errors use OpenAI's JSON: 400 for a bad body (invalid JSON,
too large, wrong fields), 404 for an unknown route, 500 when the batch holding the request failed, 503 while
shutting down. HTTP/1.1 keep-alive for JSON answers; a stream closes its connection when done.

`Server.close_gracefully()` (SIGTERM/SIGINT in `reasoner serve`) stops accepting connections, lets the batcher
finish the queued requests, waits for the handlers still writing their answers, then ends the connections left open
(idle keep-alive ones, stalled uploads) and joins their threads: no thread of the server outlives it. (A connection's
thread holds the server, and through it the engine and its device arrays; one that ended later, when its client let
go or its socket timed out, dropped the last reference there, and a JAX array freed on a daemon thread while the
interpreter exits aborts the process: "terminate called ... exception not rethrown".) A client that closes its
connection before its answer (a streaming one, or one waiting for JSON) has its request dropped from the engine,
and a socket that stalls for `SOCKET_TIMEOUT_S` is closed.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from reasoner.serve.batcher import ServerClosing
from reasoner.serve.completions import TextCompletions
from reasoner.serve.protocol import RequestError, error_body
from reasoner.serve.service import ChatService

log = logging.getLogger("reasoner.serve")
SOCKET_TIMEOUT_S = 60.0  # seconds a read or write on a client's socket may block


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "reasoner-serve"
    server: "Server"
    timeout = SOCKET_TIMEOUT_S  # a client that stalls mid-request (or an idle keep-alive) frees its thread

    def _client_gone(self) -> bool:
        """Whether the client closed its connection (polled while its answer is generated): the socket reads as
        closed (EOF) or fails. Pipelined bytes of a next request mean it is still there. `poll`, not `select`:
        select() refuses descriptors past 1023 (ValueError), which a busy server's sockets reach, and the handler then
        answered 500 to a client that was still waiting."""
        try:
            poller = select.poll()
            poller.register(self.connection, select.POLLIN)
            return bool(poller.poll(0)) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
        log.debug("%s %s", self.address_string(), format % args)

    # ------------------------------------------------------------------------------------------ writing
    def _send_json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, err: RequestError) -> None:
        self._send_json(err.status, err.body())

    # ------------------------------------------------------------------------------------------ routes
    def _route(self) -> str:
        """The request's path without its query string (`?api-version=...`, which some clients add) or last '/'."""
        return urlsplit(self.path).path.rstrip("/")

    def do_GET(self):  # noqa: N802 - http.server's naming
        if self._route() == "/v1/models":
            service = self.server.service
            self._send_json(200, {"object": "list", "data": [
                {"id": service.model_name, "object": "model", "created": self.server.started, "owned_by": "reasoner",
                 "max_model_len": service.backend.max_len}]})
        elif self._route() == "/health":
            broken = self.server.service.batcher.broken
            if broken is None:
                self._send_json(200, {"status": "ok"})
            else:
                self._send_json(503, {"status": "error", "error": f"{type(broken).__name__}: {broken}"})
        else:
            self._send_error(RequestError(f"no route GET {self.path}", status=404, code="not_found"))

    def do_POST(self):  # noqa: N802
        api = {"/v1/chat/completions": self.server.service, "/v1/completions": self.server.completions}.get(
            self._route())
        if api is None:
            self.close_connection = True  # the body was not read
            self._send_error(RequestError(f"no route POST {self.path} (expected /v1/chat/completions or "
                                          "/v1/completions)", status=404, code="not_found"))
            return
        try:
            body = self._read_json()  # before the in-flight count: a stalled upload never holds up shutdown
        except RequestError as err:
            try:
                self._send_error(err)
            except OSError:  # the client left mid-body: nobody to tell
                self.close_connection = True
            return
        except OSError as err:  # the socket timed out or broke mid-body
            self.close_connection = True
            log.info("client %s: request body not received (%s)", self.address_string(), type(err).__name__)
            return
        with self.server.tracker:
            try:
                prep = api.prepare(body)
                if prep.request.stream:
                    self._stream(api, prep)
                else:
                    self._send_json(200, api.complete(prep, gone=self._client_gone))
            except RequestError as err:
                self._send_error(err)
            except ServerClosing as err:
                self._send_error(RequestError(str(err), status=503, kind="server_error", code="shutting_down"))
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                log.info("client %s went away before its answer", self.address_string())
            except Exception as err:  # noqa: BLE001 - answer 500, keep serving
                log.exception("internal error")
                self._send_json(500, error_body(f"internal error: {type(err).__name__}: {err}", kind="server_error"))

    def _read_json(self):
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            raise RequestError("request body: expected a Content-Length header with a JSON body", param=None)
        size = int(length)
        if size > self.server.max_body_bytes:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            raise RequestError(f"request body: {size} bytes, expected at most {self.server.max_body_bytes}",
                               code="body_too_large")
        raw = self.rfile.read(size)
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise RequestError(f"request body: not valid JSON ({err})", code="invalid_json") from None
        where = _lone_surrogate(body)
        if where is not None:  # valid JSON ("\ud800"), but no text the tokenizer can take
            raise RequestError(f"{where or 'request body'}: a string holds a lone UTF-16 surrogate escape; expected "
                               "valid Unicode text", param=where or None, code="invalid_json")
        return body

    def _stream(self, api, prep) -> None:
        chunks = api.stream(prep)
        try:
            self._write_stream(chunks)
        finally:
            chunks.close()  # a client gone mid-stream: the generator cancels its job

    def _write_stream(self, chunks) -> None:
        first = next(chunks)  # errors before any byte is written still get a JSON answer
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(b"data: " + json.dumps(first).encode() + b"\n\n")
            for chunk in chunks:
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            raise
        except Exception as err:  # noqa: BLE001 - headers are out: report in-band, as OpenAI does
            log.exception("internal error while streaming")
            body = error_body(f"internal error: {type(err).__name__}: {err}", kind="server_error")
            self.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def _lone_surrogate(value, path: str = "") -> str | None:
    """The path (`messages[0].content`) of the first string in a parsed JSON value that is not valid Unicode (a
    lone surrogate escape), '' for the value itself, None when there is none."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        items = ((f"{path}.{k}" if path else str(k), k, v) for k, v in value.items())
        for where, key, item in items:
            found = _lone_surrogate(key, where) or _lone_surrogate(item, where)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _lone_surrogate(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


class _InFlight:
    """Counts requests being answered (a context manager) so shutdown can wait for them."""

    def __init__(self):
        self._count, self._cond = 0, threading.Condition()

    def __enter__(self):
        with self._cond:
            self._count += 1

    def __exit__(self, *exc):
        with self._cond:
            self._count -= 1
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._count == 0, timeout)


class Server(ThreadingHTTPServer):
    """The OpenAI-compatible server over a `ChatService` (see module docstring)."""

    request_queue_size = 128  # the listen backlog (socketserver's default 5 dropped connections of 16 clients at once)
    allow_reuse_address = True

    def __init__(self, service: ChatService, *, host: str = "127.0.0.1", port: int = 8000,
                 max_body_bytes: int = 4 << 20):
        super().__init__((host, port), _Handler)
        self.service, self.max_body_bytes = service, int(max_body_bytes)
        self.completions = TextCompletions(service)  # /v1/completions, over the same batcher and backend
        self.tracker = _InFlight()
        self.started = int(time.time())
        self._connections: dict[threading.Thread, socket.socket] = {}  # open connections, by their handler thread
        self._connections_lock = threading.Lock()

    def process_request(self, request, client_address):
        """One thread per connection (as `ThreadingMixIn`), registered before it starts, so that `close_gracefully`
        finds every connection `serve_forever` accepted; a daemon, so that idle keep-alive connections do not hold up
        a process that exits without closing the server."""
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  name="reasoner-serve-connection", daemon=True)
        with self._connections_lock:
            self._connections[thread] = request
        thread.start()

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self._connections.pop(threading.current_thread(), None)

    def _end_connections(self, timeout: float) -> None:
        """Shuts the open connections (their handlers read EOF and return) and joins their threads."""
        with self._connections_lock:
            open_now = list(self._connections.items())
        for _, sock in open_now:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed by its handler
                pass
        deadline = time.monotonic() + timeout
        for thread, _ in open_now:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = sum(thread.is_alive() for thread, _ in open_now)
        if left:
            log.warning("shutdown: %d connection threads still running after %.0f s", left, timeout)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close_gracefully(self, *, timeout: float = 600.0) -> None:
        """Call from a thread other than the one in `serve_forever`: stop accepting, drain, close."""
        self.shutdown()
        self.service.batcher.close(timeout)
        if not self.tracker.wait_idle(timeout):
            log.warning("shutdown: requests still being answered after %.0f s", timeout)
        self._end_connections(timeout)
        self.server_close()
