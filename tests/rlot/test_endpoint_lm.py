"""EndpointLM against a local OpenAI-compatible server (stdlib http.server speaking /chat/completions)."""

import pytest

from reasoner.agents.rlot.llm import EndpointLM
from tests.chat_stub import ChatStub, serve


class _Echo(ChatStub):
    def reply(self, body):
        prompt = body["messages"][-1]["content"]
        return 200, {"choices": [{"message": {"role": "assistant", "content": f"echo: {prompt}"}}],
                     "usage": {"prompt_tokens": len(prompt), "completion_tokens": 7}}


@pytest.fixture()
def server():
    with serve(_Echo) as url:
        yield url


def test_endpoint_lm_answers_a_batch_in_order_with_usage(server):
    lm = EndpointLM(server, "served-model", max_new_tokens=33, temperature=0.0)
    outs = lm.generate(["first", "second", "third"])
    assert [g.text for g in outs] == ["echo: first", "echo: second", "echo: third"]
    assert [g.prompt_tokens for g in outs] == [5, 6, 5] and all(g.completion_tokens == 7 for g in outs)
    assert lm.calls == 1 and lm.completion_tokens == 21
    assert {b["max_tokens"] for b in _Echo.bodies} == {33} and all("tools" not in b for b in _Echo.bodies)
    sampled = lm.generate(["q"], samples=3, temperature=0.7, max_new_tokens=5)
    assert len(sampled) == 3 and lm.calls == 2
    assert [b["temperature"] for b in _Echo.bodies[-3:]] == [0.7] * 3
