"""EndpointJudge against a fake OpenAI-compatible server on 127.0.0.1: replies, timeouts, 500s, the cache."""

import json
import time

import pytest

from reasoner.judges import CachedJudge, EndpointJudge, JudgeCounters, judge_messages, score_traces
from tests.chat_stub import ChatStub, serve

VERDICT = {"directionality_score": 1.0, "explanation": "forward"}


class _Judge(ChatStub):
    """A verdict for every trace; a trace containing HANG waits 2 s (past the client's timeout), FAIL500 gets 500."""

    def reply(self, body):
        trace = body["messages"][-1]["content"]
        if "HANG" in trace:
            time.sleep(2.0)
        if "FAIL500" in trace:
            return 500, b"boom"
        reply = "Thinking about the direction.\n" + json.dumps(VERDICT)
        return 200, {"choices": [{"message": {"role": "assistant", "content": reply}}]}


@pytest.fixture
def url():
    with serve(_Judge) as base_url:
        yield base_url


def _prompt(trace):
    return judge_messages("directionality", source="balanced_copa", observation="Premise: x", reasoning=trace)


def test_timeouts_and_500s_score_zero_and_the_rest_goes_on(url):
    judge = EndpointJudge(url, "judge", timeout_s=0.3, retries=1,
                          backoff_s=0.0, max_concurrency=4)
    counters = JudgeCounters()
    traces = ["given the premise", "HANG", "FAIL500", "given the evidence"]
    out = score_traces(judge, "directionality", [_prompt(t) for t in traces], counters)
    assert [j.score for j in out] == [1.0, 0.0, 0.0, 1.0]
    assert [j.valid for j in out] == [True, False, False, True]
    assert (counters.failed, counters.valid, counters.invalid) == (2, 2, 0)
    assert judge.failures == 2
    assert all(b["temperature"] == 0.0 for b in _Judge.bodies)
    # 2 good + (1 + 1 retry) for each failing row.
    assert len(_Judge.bodies) == 6


def test_cache_avoids_a_second_call_and_survives_a_restart(url, tmp_path):
    path = tmp_path / "judge_cache.jsonl"
    counters = JudgeCounters()
    cached = CachedJudge(EndpointJudge(url, "judge", timeout_s=5.0, retries=0), path, counters)
    prompts = [_prompt("given a"), _prompt("given b"), _prompt("given a"), _prompt("FAIL500")]
    first = cached.reply(prompts)
    assert len(_Judge.bodies) == 3  # the duplicate prompt is asked once
    assert first[0] == first[2] and first[3] is None
    again = CachedJudge(EndpointJudge(url, "judge", timeout_s=5.0, retries=0), path, counters)
    assert again.reply(prompts[:3]) == first[:3]
    assert len(_Judge.bodies) == 3 and counters.cache_hits == 3
    assert again.reply(prompts[3:]) == [None]  # failures are not cached: asked again
    assert len(_Judge.bodies) == 4
    other = CachedJudge(EndpointJudge(url, "other-judge", timeout_s=5.0, retries=0), path)
    other.reply(prompts[:1])  # a different judge id is a different key
    assert len(_Judge.bodies) == 5


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


class _CutOff(ChatStub):
    """A server that dies mid-reply: it promises 1000 bytes of body, sends 13 and closes the connection."""

    def do_POST(self):  # noqa: N802 - http.server naming
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).bodies.append(1)
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b'{"choices": [')
        self.close_connection = True


def test_a_reply_cut_off_mid_body_is_a_failed_call_not_a_raise():
    """http.client.IncompleteRead escaped the endpoint client: the judge raised (its contract: a failure is a None
    reply), so a judged reward's batch failed and was re-run one completion at a time, none counted as failed."""
    with serve(_CutOff) as cut:
        judge = EndpointJudge(cut, "judge", timeout_s=5.0, retries=0)
        counters = JudgeCounters()
        out = score_traces(judge, "directionality", [_prompt("given a"), _prompt("given b")], counters)
    assert [(j.score, j.valid, j.reason) for j in out] == [(0.0, False, "judge call failed")] * 2
    assert (counters.failed, counters.requests) == (2, 2)
    assert judge.failures == 2 and "IncompleteRead" in judge.last_error


class _Overthinks(ChatStub):
    """A reasoning judge that spends its max_tokens thinking: no content, finish_reason "length"."""

    def reply(self, body):
        return 200, {"choices": [{"message": {"role": "assistant", "content": None, "reasoning_content": "Hmm..."},
                                  "finish_reason": "length"}]}


def test_a_reasoning_judge_out_of_tokens_is_an_invalid_reply_asked_once(tmp_path):
    """It was a bad body: retried (the same reply at temperature 0), counted as a failed call, never cached, so
    every later step asked again, retries included."""
    with serve(_Overthinks) as url:
        counters = JudgeCounters()
        judge = CachedJudge(EndpointJudge(url, "judge", retries=2, backoff_s=0.0), tmp_path / "c.jsonl")
        out = score_traces(judge, "directionality", [_prompt("given a")], counters)
        again = score_traces(judge, "directionality", [_prompt("given a")], counters)
        assert len(_Overthinks.bodies) == 1
    assert [(j.score, j.valid, j.reason) for j in out + again] == [(0.0, False, "empty reply")] * 2
    assert (counters.invalid, counters.failed, counters.cache_hits) == (2, 0, 1)
