"""The server's tool-call, streaming and failure paths over a scripted backend (no model): replies are fixed
texts, so what reaches the wire is fully determined."""

import copy
import json

import numpy as np
import openai
import pytest

from reasoner.sampling import Completion
from reasoner.serve.render import HERMES_TOOLS_PROMPT, parse_reply, render_prompt, streamable_prefix
from tests.serve.conftest import start_server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


class ScriptedBackend:
    """Answers each request with `replies[last user message]`, streamed in pieces of 3 characters; a reply of
    None raises (an internal error inside the batch). Records the prompts it was given."""

    max_len, vocab_size = 4096, 49152

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.prompts = tokenizer, replies, []

    def batch_key(self, request):
        return 0

    def generate(self, requests):
        out = []
        for r in requests:
            prompt = self.tokenizer.decode(list(r.prompt_ids))
            self.prompts.append(prompt)
            key = next((k for k in self.replies if k in prompt.rsplit("<|im_start|>user\n", 1)[-1]), None)
            text = self.replies[key]
            if text is None:
                raise RuntimeError("scripted failure")
            if r.on_text is not None:
                for i in range(0, len(text), 3):
                    r.on_text(0, text[i:i + 3])
            ids = np.asarray(self.tokenizer(text, add_special_tokens=False)["input_ids"], np.int32)
            zeros = np.zeros(len(ids), np.float32)
            out.append([Completion(tokens=ids, text=text, finish_reason="eos", sample_logprobs=zeros,
                                   model_logprobs=zeros, prompt_index=0, sample_index=0)])
        return out


@pytest.fixture(scope="module")
def scripted(tokenizer):
    backend = ScriptedBackend(tokenizer, {"check": "Let me check. " + CALL, "weather": CALL, "hello": "Hi there!",
                                          "explode": None})
    running = start_server(None, tokenizer, backend=backend, batch_wait_ms=5)
    yield running, backend
    running.close()


def ask(client, text, **kwargs):
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], **kwargs)


def test_tool_call_is_returned_as_tool_calls(scripted):
    running, _ = scripted
    out = ask(running.client, "weather in Paris?", tools=[WEATHER])
    (choice,) = out.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    mixed = ask(running.client, "check the weather", tools=[WEATHER]).choices[0]
    assert mixed.message.content == "Let me check. " and mixed.message.tool_calls[0].function.name == "get_weather"
    plain = ask(running.client, "weather?").choices[0]  # no tools offered: the text is the content
    assert plain.message.content == CALL and plain.message.tool_calls is None and plain.finish_reason == "stop"


def test_streamed_tool_call(scripted):
    running, _ = scripted
    chunks = list(ask(running.client, "check the weather", tools=[WEATHER], stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert content == "Let me check. "  # the tagged call never leaks into the content
    assert [(tc.index, tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
        (0, "get_weather", {"city": "Paris"})]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_results_are_rendered_back_into_the_prompt(scripted):
    running, backend = scripted
    first = ask(running.client, "weather in Paris?", tools=[WEATHER]).choices[0].message
    follow = [{"role": "user", "content": "weather in Paris?"},
              {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in first.tool_calls]},
              {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "18 C, sunny"},
              {"role": "user", "content": "hello"}]
    out = running.client.chat.completions.create(model="m", messages=follow, tools=[WEATHER])
    assert out.choices[0].message.content == "Hi there!"
    prompt = backend.prompts[-1]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<tool_response>\n18 C, sunny\n</tool_response>" in prompt
    assert json.dumps(WEATHER) in prompt  # SmolLM2's template ignores `tools`: the Hermes system prompt carries them


def test_internal_error_answers_500_and_the_server_stays_up(scripted):
    running, _ = scripted
    with pytest.raises(openai.InternalServerError, match="scripted failure"):
        ask(running.client, "explode now")
    assert ask(running.client, "hello").choices[0].message.content == "Hi there!"
    assert any("failed" in line for line in running.log.lines)


def test_a_template_that_reads_tools_gets_them(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = ("{% if tools %}TOOLS {{ tools | tojson }}\n{% endif %}{% for m in messages %}"
                         "[{{ m.role }}] {{ m.content }}{% for c in m.tool_calls or [] %} CALL {{ c.function.name }} "
                         "{{ c.function.arguments | tojson }}{% endfor %}\n{% endfor %}[assistant]")
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}
    text = render_prompt(tok, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "",
                                                                     "tool_calls": [call]}], [WEATHER])
    assert text.startswith("TOOLS [{") and '"name": "get_weather"' in text
    assert 'CALL get_weather {"city": "Rome"}' in text and "<tools>" not in text


def test_hermes_prompt_and_parsing_pieces(tokenizer):
    text = render_prompt(tokenizer, [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "hi"}], [WEATHER])
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools") and json.dumps(WEATHER) in text
    assert HERMES_TOOLS_PROMPT.format(schemas=json.dumps(WEATHER)) in text
    assert parse_reply("no call here", tools_offered=True).content == "no call here"
    assert parse_reply("<tool_call>not json at all", tools_offered=True).tool_calls == ()
    assert streamable_prefix("abc <tool_", tools_offered=True) == 4
    assert streamable_prefix("abc <tool_", tools_offered=False) == 10
    assert streamable_prefix("abc <tool_call>{", tools_offered=True) == 4
    # whitespace before a call is held back: a reply of tool calls alone streams no content, as it answers none
    assert streamable_prefix("\n", tools_offered=True) == 0
    assert streamable_prefix("\n<tool_call>{", tools_offered=True) == 0
    assert parse_reply('\n<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
                       tools_offered=True).content is None
    # only tagged calls of offered tools: the SMT agent's plain-text forms and unoffered names stay content
    prose = 'Wrap calls in <tool_call> tags; when done, finish("B")'
    assert parse_reply(prose, tools_offered=True, names=("get_weather",)) == parse_reply(prose, tools_offered=False)
    stray = '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
    assert parse_reply(stray, tools_offered=True, names=("get_weather",)).content == stray
    assert parse_reply(stray, tools_offered=True, names=("rm_rf",)).tool_calls[0]["function"]["name"] == "rm_rf"
