"""A local OpenAI-compatible chat-completions stub for policy and rollout tests.

    class Teacher(ChatStub):
        def reply(self, body):              # body: the request's JSON
            return 200, {"choices": [...], "usage": {...}}
    with serve(Teacher) as url: ...         # url: "http://127.0.0.1:<port>/v1"; Teacher.bodies: the requests
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading


class ChatStub(http.server.BaseHTTPRequestHandler):
    """POST handler: the JSON body goes to `reply(body) -> (status, payload)`; a dict payload is sent as JSON, bytes
    as they are. Every body is appended to the class's `bodies` (reset by `serve`)."""

    bodies: list = []

    def reply(self, body: dict) -> tuple[int, dict | bytes]:
        raise NotImplementedError

    def do_POST(self):  # noqa: N802 - http.server naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        status, payload = self.reply(body)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    # socketserver's listen backlog of 5 dropped connections when 8 concurrent judge calls (and their retries) hit a
    # stub whose handlers sleep: a dropped SYN timed the client out before its body was sent, so a retry the client
    # made never reached the stub's `bodies`.
    request_queue_size = 128


@contextlib.contextmanager
def serve(handler: type[ChatStub]):
    """Runs `handler` on a free local port; yields the base URL of its OpenAI-style API."""
    handler.bodies = []
    httpd = _Server(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
