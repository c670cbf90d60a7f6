"""Policies: scripted replay errors, and the OpenAI-compatible HTTP policy against a local server."""

import json

import pytest

from reasoner.agents.policies import TOOLS, OpenAIChatPolicy, Reply, ScriptedPolicy, as_reply
from tests.chat_stub import ChatStub, serve


def test_scripted_policy_replays_by_conversation_and_turn():
    policy = ScriptedPolicy({"q1": ["a", "b"], "q2": [["c"], ["d", "e"]]})
    q1, q2a, q2b = ([{"role": "user", "content": k}] for k in ("q1", "q2", "q2"))
    assert [r.text for r in policy.respond([q2a, q1, q2b])] == ["c", "a", "d"]
    q1 += [{"role": "assistant", "content": "a"}, {"role": "tool", "content": "{}"}]
    q2b += [{"role": "assistant", "content": "d"}]
    assert [r.text for r in policy.respond([q2b, q1])] == ["e", "b"]
    q2a += [{"role": "assistant", "content": "c"}]
    with pytest.raises(IndexError, match="turn 1 was requested"):
        policy.respond([q2a])
    with pytest.raises(IndexError, match="episode 3 was requested"):
        policy.respond([[{"role": "user", "content": "q2"}]])
    with pytest.raises(KeyError, match="no script"):
        policy.respond([[{"role": "user", "content": "q3"}]])
    with pytest.raises(TypeError, match="Reply or str"):
        as_reply(3)


class _Handler(ChatStub):
    requests: list = []

    def reply(self, body):
        _Handler.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        last = body["messages"][-1]
        if "fail" in last["content"]:
            return 500, b"boom"
        if last["role"] == "user" and "structured" in last["content"]:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "z3_solve", "arguments": json.dumps({"smt_code": "(check-sat)"})}}]}
        else:
            message = {"role": "assistant", "content": f"echo {len(body['messages'])}: {last['content']}"}
        return 200, {"choices": [{"message": message}], "usage": {"prompt_tokens": 11, "completion_tokens": 7}}


@pytest.fixture
def server():
    _Handler.requests = []
    with serve(_Handler) as url:
        yield url


def test_http_policy_round_trip(server):
    policy = OpenAIChatPolicy(server, "teacher", api_key="k", temperature=0.5, max_tokens=64)
    convs = [[{"role": "user", "content": "plain"}],
             [{"role": "user", "content": "structured"}],
             [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
              {"role": "tool", "name": "z3_solve", "content": "{\"sat_result\": \"sat\"}", "turn": 0}]]
    replies = policy.respond(convs)
    assert replies[0] == Reply("echo 1: plain", prompt_tokens=11, completion_tokens=7)
    assert replies[1].text.strip() == '<tool_call>{"name": "z3_solve", "arguments": {"smt_code": "(check-sat)"}}</tool_call>'
    assert replies[2].text == 'echo 3: {"sat_result": "sat"}'
    sent = {r["body"]["messages"][-1]["content"]: r for r in _Handler.requests}
    first = sent["plain"]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer k"
    assert first["body"]["model"] == "teacher" and first["body"]["tools"] == TOOLS
    assert first["body"]["temperature"] == 0.5 and first["body"]["max_tokens"] == 64
    assert sent['{"sat_result": "sat"}']["body"]["messages"][-1] == {
        "role": "tool", "name": "z3_solve", "content": '{"sat_result": "sat"}'}


def test_http_policy_tool_role_user_and_errors(server):
    policy = OpenAIChatPolicy(server, "teacher", tool_role="user", send_tools=False)
    reply = policy.respond([[{"role": "user", "content": "x"}, {"role": "tool", "content": "obs"}]])[0]
    assert reply.text == "echo 2: <tool_response>\nobs\n</tool_response>"
    assert "tools" not in _Handler.requests[-1]["body"]
    sleeps = []
    failing = OpenAIChatPolicy(server, "teacher", retries=2, backoff_s=0.5, sleep=sleeps.append)
    before = len(_Handler.requests)
    (reply,) = failing.respond([[{"role": "user", "content": "please fail"}]])
    # an infrastructure failure: retried twice with exponential backoff, then a Reply marked failed (not raised)
    assert reply.failure is not None and "HTTP 500" in reply.failure and reply.text == ""
    assert len(_Handler.requests) - before == 3 and sleeps == [0.5, 1.0] and failing.failures == 1
    with pytest.raises(ValueError, match="tool_role"):
        OpenAIChatPolicy(server, "m", tool_role="system")
