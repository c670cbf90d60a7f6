"""The shared chat-completions client: which failures are retried, the backoff, and what comes back."""

import pytest

from reasoner.chat_http import ChatEndpoint
from tests.chat_stub import ChatStub, serve

OK = {"choices": [{"message": {"role": "assistant", "content": "fine"}}]}


class _Scripted(ChatStub):
    """Answers each request with the next (status, payload) of `script`."""
    script: list = []
    seen = 0

    def reply(self, body):
        _Scripted.seen += 1
        return _Scripted.script.pop(0)


def _content(completion):
    content = completion["choices"][0]["message"]["content"]
    if not isinstance(content, str):
        raise ValueError("content is not a string")
    return content


def _run(script, **kwargs):
    _Scripted.script, _Scripted.seen = list(script), 0
    sleeps = []
    with serve(_Scripted) as url:
        endpoint = ChatEndpoint(url, sleep=sleeps.append, **kwargs)
        value, error = endpoint.complete({"model": "m", "messages": []}, _content)
    return value, error, sleeps, endpoint


def test_infrastructure_failures_are_retried_with_doubling_backoff_then_succeed():
    # 503, a body that is not JSON, a message that is not an object, a content the caller refuses, then a reply
    script = [(503, b"busy"), (200, b"<html>"), (200, {"choices": [{"message": "x"}]}),
              (200, {"choices": [{"message": {"content": 3}}]}), (200, OK)]
    value, error, sleeps, endpoint = _run(script, retries=4, backoff_s=0.25)
    assert (value, error) == ("fine", "") and _Scripted.seen == 5
    assert sleeps == [0.25, 0.5, 1.0, 2.0] and endpoint.failures == 0


def test_backoff_is_capped_and_exhausted_retries_return_the_last_error():
    value, error, sleeps, endpoint = _run([(429, b"slow down")] * 4, retries=3, backoff_s=20.0)
    assert value is None and "HTTP 429" in error and "slow down" in error
    assert sleeps == [20.0, 30.0, 30.0] and endpoint.failures == 1 and endpoint.last_error == error


@pytest.mark.parametrize("status", [400, 401, 404])
def test_a_refused_request_is_not_retried(status):
    value, error, sleeps, endpoint = _run([(status, b"no such model"), (200, OK)], retries=3)
    assert value is None and f"HTTP {status}" in error and _Scripted.seen == 1 and sleeps == []
    assert endpoint.failures == 1


def test_a_dead_port_is_an_error_not_an_exception():
    endpoint = ChatEndpoint("http://127.0.0.1:9/v1", retries=1, timeout_s=2.0, sleep=lambda s: None)
    value, error = endpoint.complete({}, _content)
    assert value is None and "127.0.0.1:9" in error and endpoint.failures == 1


def test_bad_settings_name_themselves():
    with pytest.raises(ValueError, match="retries=-1"):
        ChatEndpoint("http://x/v1", retries=-1)


def test_a_reply_cut_short_on_the_wire_is_retried():
    """A server that dies mid-body makes `read()` raise `http.client.IncompleteRead` (an `HTTPException`, not an
    `OSError`): retried like a dropped connection, never raised out of `complete`."""
    import http.client
    import io
    import json

    class _Opener:
        calls = 0

        def open(self, request, timeout):
            _Opener.calls += 1
            if _Opener.calls == 1:
                class _Cut(io.BytesIO):
                    def read(self, *args):
                        raise http.client.IncompleteRead(b'{"choi', 120)
                return _Cut()
            return io.BytesIO(json.dumps(OK).encode())

    sleeps = []
    endpoint = ChatEndpoint("http://127.0.0.1:1/v1", retries=2, backoff_s=0.5, sleep=sleeps.append)
    endpoint._opener = _Opener()
    assert endpoint.complete({"model": "m", "messages": []}, _content) == ("fine", "")
    assert _Opener.calls == 2 and sleeps == [0.5] and endpoint.failures == 0


def test_a_cancelled_call_is_not_retried_and_skips_the_backoff():
    """A reward call past its deadline sets `cancel`: the attempt in flight finishes, no retry follows (3 requests
    without it, 1 with it set during the first), and the error says why."""
    import threading

    value, error, sleeps, _ = _run([(503, b"busy")] * 3, retries=2, backoff_s=0.5)
    assert value is None and _Scripted.seen == 3 and sleeps == [0.5, 1.0] and "not retried" not in error
    cancel = threading.Event()

    class _CancelDuring(_Scripted):
        def reply(self, body):
            cancel.set()  # set while the first request is being answered
            return super().reply(body)

    _Scripted.script, _Scripted.seen = [(503, b"busy"), (200, OK)], 0
    sleeps = []
    with serve(_CancelDuring) as url:
        endpoint = ChatEndpoint(url, sleep=sleeps.append, retries=2, backoff_s=0.5)
        value, error = endpoint.complete({"model": "m", "messages": []}, _content, cancel=cancel)
    assert value is None and _Scripted.seen == 1 and sleeps == []
    assert "HTTP 503" in error and error.endswith("(not retried: cancelled after 1 attempt)")
    assert endpoint.failures == 1


def test_an_endpoint_judge_passes_its_cancel_to_the_retries():
    """`EndpointJudge.reply(cancel=)`: a request that fails after the reward's deadline passed is not retried (1
    request, a None reply counted as failed), where without `cancel` the judge would ask 3 times."""
    import threading

    from reasoner.judges.judge import EndpointJudge

    cancel = threading.Event()

    class _CancelDuring(_Scripted):
        def reply(self, body):
            cancel.set()
            return super().reply(body)

    _Scripted.script, _Scripted.seen = [(503, b"busy"), (200, OK), (200, OK)], 0
    with serve(_CancelDuring) as url:
        judge = EndpointJudge(url, "judge", retries=2, sleep=lambda s: None)
        replies = judge.reply([[{"role": "user", "content": "score this"}]], cancel=cancel)
    assert replies == [None] and _Scripted.seen == 1 and "cancelled after 1 attempt" in judge.last_error
