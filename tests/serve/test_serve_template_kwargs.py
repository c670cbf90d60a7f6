"""vLLM's `chat_template_kwargs` on `/v1/chat/completions` (the `openai` client's `extra_body`, e.g. Qwen3's
`{"enable_thinking": false}`): extra variables for the chat template, checked against what transformers renders
with the same variables, on the tiny random decoder (fast) over SmolLM2's tokenizer with a template of the test's
own that reads a custom variable. Keys that clash with the renderer's own arguments are a 400 naming the key."""

import copy

import httpx2 as httpx
import openai
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.tokenization import encode
from tests.serve.conftest import start_server

# ChatML as SmolLM2 writes it, with custom variables: `shout` upper-cases every message, `style` is written after the
# generation prompt, `refuse` makes the template raise
SHOUTING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if shout %}{{ m['content'] | upper }}{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if refuse %}{{ raise_exception(refuse) }}{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if style %}({{ style }}) {% endif %}{% endif %}"
)
MESSAGES = [{"role": "user", "content": "Say something about the sea."}]


@pytest.fixture(scope="module")
def shouting(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = SHOUTING_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def shouting_server(tiny_model, shouting):
    running = start_server(tiny_model, shouting, max_batch=8, batch_wait_ms=50, max_len=128, default_max_tokens=8)
    yield running
    running.close()


def test_template_kwargs_reach_the_template(shouting_server, tiny_model, shouting):
    client = shouting_server.client
    sampler = Sampler(tiny_model, shouting)
    answers = {}
    for kwargs in (None, {"shout": True}, {"shout": True, "style": "brief"}):
        extra = {"chat_template_kwargs": kwargs} if kwargs is not None else None
        out = client.chat.completions.create(model="m", messages=MESSAGES, temperature=0, max_tokens=6,
                                             extra_body=extra)
        # transformers' own rendering with the same variables is the reference
        text = shouting.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True, **(kwargs or {}))
        ids = encode(shouting, text)
        (want,) = sampler.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=6))
        assert out.usage.prompt_tokens == len(ids) and out.choices[0].message.content == want.text
        answers[str(kwargs)] = (text, out.choices[0].message.content)
    plain, loud, styled = answers.values()
    assert "Say something about the sea." in plain[0] and "SAY SOMETHING ABOUT THE SEA." in loud[0]
    assert styled[0].endswith("<|im_start|>assistant\n(brief) ") and plain[0].endswith("<|im_start|>assistant\n")
    assert len({plain[1], loud[1], styled[1]}) == 3  # three prompts, three greedy answers
    # streamed the same
    chunks = client.chat.completions.create(model="m", messages=MESSAGES, temperature=0, max_tokens=6, stream=True,
                                            extra_body={"chat_template_kwargs": {"shout": True}})
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == loud[1]


def test_a_variable_the_template_does_not_read_changes_nothing(tiny_server):
    """SmolLM2's own template reads no `enable_thinking` (Qwen3's does): the answer is the one without it."""
    kwargs = dict(model="m", messages=MESSAGES, temperature=0, max_tokens=6)
    plain = tiny_server.client.chat.completions.create(**kwargs)
    extra = tiny_server.client.chat.completions.create(extra_body={"chat_template_kwargs": {"enable_thinking": False}},
                                                       **kwargs)
    assert extra.choices[0].message.content == plain.choices[0].message.content
    assert extra.usage == plain.usage


@pytest.mark.parametrize("kwargs, param", [
    ({"add_generation_prompt": False}, "chat_template_kwargs.add_generation_prompt"),
    ({"messages": []}, "chat_template_kwargs.messages"),
    ({"tools": [{"type": "function"}]}, "chat_template_kwargs.tools"),
    ({"shout": True, "chat_template": "{{ 'x' }}"}, "chat_template_kwargs.chat_template"),
    ({"bos_token": "<s>"}, "chat_template_kwargs.bos_token"),
    ({"raise_exception": 1}, "chat_template_kwargs.raise_exception"),
    ("shout", "chat_template_kwargs"),
    ([["shout", True]], "chat_template_kwargs"),
])
def test_clashing_or_malformed_template_kwargs_are_refused(shouting_server, kwargs, param):
    r = httpx.post(shouting_server.url + "/chat/completions", timeout=60,
                   json={"messages": MESSAGES, "max_tokens": 2, "chat_template_kwargs": kwargs})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"].startswith(param) and "expected" in error["message"]


def test_a_template_that_refuses_a_variable_is_a_400_and_the_server_goes_on(shouting_server):
    """The template's own `raise_exception` on a client's variable is the client's error (400 naming the variables),
    not a 500."""
    with pytest.raises(openai.BadRequestError) as info:
        shouting_server.client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2,
                                                       extra_body={"chat_template_kwargs": {"refuse": "no thanks"}})
    error = info.value.body
    assert error["param"] == "messages" and "chat_template_kwargs ['refuse']" in error["message"]
    assert "no thanks" in error["message"]
    ok = shouting_server.client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)
    assert ok.usage.completion_tokens == 2
