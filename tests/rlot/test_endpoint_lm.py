"""EndpointLM against a local OpenAI-compatible server (stdlib http.server speaking /chat/completions)."""

import http.server
import json
import threading

import pytest

from reasoner.agents.rlot.llm import EndpointLM


class _Handler(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append(body)
        prompt = body["messages"][-1]["content"]
        reply = {"choices": [{"message": {"role": "assistant", "content": f"echo: {prompt}"}}],
                 "usage": {"prompt_tokens": len(prompt), "completion_tokens": 7}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Handler.seen = []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_endpoint_lm_answers_a_batch_in_order_with_usage(server):
    lm = EndpointLM(server, "served-model", max_new_tokens=33, temperature=0.0)
    outs = lm.generate(["first", "second", "third"])
    assert [g.text for g in outs] == ["echo: first", "echo: second", "echo: third"]
    assert [g.prompt_tokens for g in outs] == [5, 6, 5] and all(g.completion_tokens == 7 for g in outs)
    assert lm.calls == 1 and lm.completion_tokens == 21
    assert {b["max_tokens"] for b in _Handler.seen} == {33} and all("tools" not in b for b in _Handler.seen)
    sampled = lm.generate(["q"], samples=3, temperature=0.7, max_new_tokens=5)
    assert len(sampled) == 3 and lm.calls == 2
    assert [b["temperature"] for b in _Handler.seen[-3:]] == [0.7] * 3
