"""EndpointJudge against a fake OpenAI-compatible server on 127.0.0.1: replies, timeouts, 500s, the cache."""

import http.server
import json
import threading
import time

import pytest

from reasoner.judges import CachedJudge, EndpointJudge, JudgeCounters, judge_messages, score_traces

VERDICT = {"directionality_score": 1.0, "explanation": "forward"}


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        trace = body["messages"][-1]["content"]
        if "HANG" in trace:
            time.sleep(self.server.hang_s)
        if "FAIL500" in trace:
            self.send_error(500, "boom")
            return
        reply = "Thinking about the direction.\n" + json.dumps(VERDICT)
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.bodies, srv.hang_s = [], 2.0
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _prompt(trace):
    return judge_messages("directionality", source="balanced_copa", observation="Premise: x", reasoning=trace)


def test_timeouts_and_500s_score_zero_and_the_rest_goes_on(server):
    judge = EndpointJudge(f"http://127.0.0.1:{server.server_port}/v1", "judge", timeout_s=0.3, retries=1,
                          backoff_s=0.0, max_concurrency=4)
    counters = JudgeCounters()
    traces = ["given the premise", "HANG", "FAIL500", "given the evidence"]
    out = score_traces(judge, "directionality", [_prompt(t) for t in traces], counters)
    assert [j.score for j in out] == [1.0, 0.0, 0.0, 1.0]
    assert [j.valid for j in out] == [True, False, False, True]
    assert (counters.failed, counters.valid, counters.invalid) == (2, 2, 0)
    assert judge.failures == 2
    assert all(b["temperature"] == 0.0 for b in server.bodies)
    # 2 good + (1 + 1 retry) for each failing row.
    assert len(server.bodies) == 6


def test_cache_avoids_a_second_call_and_survives_a_restart(server, tmp_path):
    url = f"http://127.0.0.1:{server.server_port}/v1"
    path = tmp_path / "judge_cache.jsonl"
    counters = JudgeCounters()
    cached = CachedJudge(EndpointJudge(url, "judge", timeout_s=5.0, retries=0), path, counters)
    prompts = [_prompt("given a"), _prompt("given b"), _prompt("given a"), _prompt("FAIL500")]
    first = cached.reply(prompts)
    assert len(server.bodies) == 3  # the duplicate prompt is asked once
    assert first[0] == first[2] and first[3] is None
    again = CachedJudge(EndpointJudge(url, "judge", timeout_s=5.0, retries=0), path, counters)
    assert again.reply(prompts[:3]) == first[:3]
    assert len(server.bodies) == 3 and counters.cache_hits == 3
    assert again.reply(prompts[3:]) == [None]  # failures are not cached: asked again
    assert len(server.bodies) == 4
    other = CachedJudge(EndpointJudge(url, "other-judge", timeout_s=5.0, retries=0), path)
    other.reply(prompts[:1])  # a different judge id is a different key
    assert len(server.bodies) == 5


def test_dead_endpoint_fails_every_row_without_raising():
    judge = EndpointJudge("http://127.0.0.1:9/v1", "judge", timeout_s=0.5, retries=0)
    out = score_traces(judge, "coverage", [judge_messages("coverage", source="crypto", observation="o",
                                                          reasoning="r")] * 2)
    assert [(j.score, j.valid) for j in out] == [(0.0, False), (0.0, False)]


def test_prompts_carry_the_rubric_and_dataset_note():
    messages = judge_messages("coverage", source="uniadilr", observation="sent1: a", reasoning="because a")
    assert messages[0]["content"].startswith("## Training System Context")
    assert "observation_details" in messages[0]["content"]
    assert "Dataset: UniADILR" in messages[1]["content"]
    assert "<observation>sent1: a</observation><reasoning_trace>because a</reasoning_trace>" in messages[1]["content"]
    with pytest.raises(ValueError, match="source 'gsm8k'"):
        judge_messages("coverage", source="gsm8k", observation="", reasoning="")
