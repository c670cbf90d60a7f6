"""`POST /v1/completions` (OpenAI's legacy text API, as vLLM serves it) through the official `openai` client, on the
tiny random decoder (fast). Every answer is compared with our `Sampler` run directly on `encode_prompt(text)` (or the
given ids), and with the chat endpoint's answer for the same ids: text, token counts, choice order for several
prompts, stop strings and finish reasons, streaming, logprobs, echo, and 400s naming the field."""

import httpx2 as httpx
import openai
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.sampling.stops import decode
from reasoner.tokenization import chat_ids, encode_prompt

PROMPT = "The three primary colours are"
OTHER = "Once upon a time, in a land far away,"
MESSAGES = [{"role": "user", "content": "What is two plus two?"}]


@pytest.fixture(scope="module")
def sampler(tiny_model, tokenizer):
    return Sampler(tiny_model, tokenizer)


def _greedy(sampler, ids, tokens):
    (want,) = sampler.generate([list(ids)], SamplingParams(temperature=0.0, max_new_tokens=tokens))
    return want


def test_greedy_text_and_usage_equal_the_sampler_on_encode_prompt(tiny_server, sampler, tokenizer):
    ids = encode_prompt(tokenizer, PROMPT)
    want = _greedy(sampler, ids, 12)
    assert want.finish_reason == "length" and len(want.text) > 10  # a random model: no EOS in 12 tokens
    out = tiny_server.client.completions.create(model="test-model", prompt=PROMPT, temperature=0, max_tokens=12)
    assert out.object == "text_completion" and out.id.startswith("cmpl-")
    (choice,) = out.choices
    assert choice.text == want.text and choice.index == 0 and choice.finish_reason == "length"
    assert choice.logprobs is None
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.total_tokens) == (
        len(ids), 12, len(ids) + 12)
    # the same ids given as token ids (OpenAI's list-of-ints form) answer the same
    as_ids = tiny_server.client.completions.create(model="test-model", prompt=ids, temperature=0, max_tokens=12)
    assert as_ids.choices[0].text == want.text and as_ids.usage.prompt_tokens == len(ids)
    # no max_tokens: OpenAI's default for this endpoint, 16 tokens (the server's chat default here is 8)
    default = tiny_server.client.completions.create(model="test-model", prompt=PROMPT, temperature=0)
    assert default.usage.completion_tokens == 16 and default.choices[0].text == _greedy(sampler, ids, 16).text


def test_text_and_logprobs_equal_the_chat_endpoints_for_the_same_ids(tiny_server, tokenizer):
    """The rendered chat's ids sent as a token-id prompt: the text completion is the chat content, token for token,
    and its completions-shaped logprobs carry the chat endpoint's tokens and values."""
    ids = chat_ids(tokenizer, MESSAGES)
    chat = tiny_server.client.chat.completions.create(model="test-model", messages=MESSAGES, temperature=0,
                                                      max_tokens=10, logprobs=True)
    for logprobs in (0, 1):  # 1 is the top-1 alternative: exact under greedy decoding
        out = tiny_server.client.completions.create(model="test-model", prompt=ids, temperature=0, max_tokens=10,
                                                    logprobs=logprobs)
        (choice,) = out.choices
        assert choice.text == chat.choices[0].message.content and out.usage == chat.usage
        lp, want = choice.logprobs, chat.choices[0].logprobs.content
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 10
        assert lp.tokens == [t.token for t in want] and "".join(lp.tokens) == choice.text
        assert lp.token_logprobs == [t.logprob for t in want] and all(x < 0 for x in lp.token_logprobs)
        assert lp.top_logprobs == [{t.token: t.logprob} for t in want]
        assert lp.text_offset == [len("".join(lp.tokens[:k])) for k in range(10)]


def test_two_prompts_n2_give_four_choices_in_openais_order(tiny_server, sampler, tokenizer):
    ids = [encode_prompt(tokenizer, p) for p in (PROMPT, OTHER)]
    out = tiny_server.client.completions.create(model="test-model", prompt=[PROMPT, OTHER], n=2, temperature=1.0,
                                                seed=7, max_tokens=8)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]  # index = prompt_index * n + j
    want = [s for p in ids for s in sampler.generate([p], SamplingParams(temperature=1.0, n=2, seed=7,
                                                                           max_new_tokens=8))]
    assert [c.text for c in out.choices] == [w.text for w in want]
    assert len({c.text for c in out.choices}) == 4  # four different draws, each its own prompt's
    assert out.usage.prompt_tokens == len(ids[0]) + len(ids[1])  # each prompt once, not once per sample
    assert out.usage.completion_tokens == sum(w.num_tokens for w in want) == 32
    # greedy, as a list of lists of token ids: one choice per prompt, the sampler's greedy text of each
    greedy = tiny_server.client.completions.create(model="test-model", prompt=ids, temperature=0, max_tokens=6)
    assert [c.text for c in greedy.choices] == [_greedy(sampler, p, 6).text for p in ids]


def test_stop_strings_and_max_tokens_set_the_finish_reason(tiny_server, sampler, tokenizer):
    free = _greedy(sampler, encode_prompt(tokenizer, PROMPT), 12)
    stop = " " + free.text.split(" ")[3]  # a piece of the greedy text: the answer ends right before it
    head = free.text[:free.text.index(stop)]
    kwargs = dict(model="test-model", prompt=PROMPT, temperature=0, max_tokens=12)
    stopped = tiny_server.client.completions.create(stop=[stop, "never appears"], **kwargs)
    assert stopped.choices[0].text == head and stopped.choices[0].finish_reason == "stop"
    assert stopped.usage.completion_tokens < 12
    single = tiny_server.client.completions.create(stop=stop, **kwargs)  # a plain string, as OpenAI allows
    assert single.choices[0].text == head
    streamed = list(tiny_server.client.completions.create(stop=stop, stream=True, **kwargs))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == head
    assert [c.choices[0].finish_reason for c in streamed if c.choices][-1] == "stop"
    cut = tiny_server.client.completions.create(**dict(kwargs, max_tokens=3))
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 3
    assert cut.choices[0].text == decode(tokenizer, free.tokens[:3])


def test_stream_concatenates_to_the_non_streamed_text(tiny_server):
    kwargs = dict(model="test-model", prompt=[PROMPT, OTHER], temperature=0, max_tokens=20)
    full = tiny_server.client.completions.create(**kwargs)
    chunks = list(tiny_server.client.completions.create(stream=True, stream_options={"include_usage": True},
                                                        **kwargs))
    assert all(c.object == "text_completion" and c.id == chunks[0].id for c in chunks)
    for choice in full.choices:
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == choice.index]
        assert "".join(m.text for m in mine) == choice.text and len(choice.text) > 20
        assert sum(1 for m in mine if m.text) > 1  # it did stream, in pieces
        assert [m.finish_reason for m in mine if m.finish_reason] == [choice.finish_reason] == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage == full.usage


def test_echo_returns_the_prompt_before_the_completion(tiny_server, tokenizer):
    plain = tiny_server.client.completions.create(model="test-model", prompt=PROMPT, temperature=0, max_tokens=6)
    echoed = tiny_server.client.completions.create(model="test-model", prompt=PROMPT, temperature=0, max_tokens=6,
                                                   echo=True)
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    ids = encode_prompt(tokenizer, OTHER)
    by_ids = tiny_server.client.completions.create(model="test-model", prompt=[ids], temperature=0, max_tokens=6,
                                                   echo=True)
    assert by_ids.choices[0].text.startswith(tokenizer.decode(ids)) and by_ids.choices[0].text.startswith(OTHER)
    chunks = list(tiny_server.client.completions.create(model="test-model", prompt=PROMPT, temperature=0,
                                                        max_tokens=6, echo=True, stream=True))
    assert chunks[0].choices[0].text == PROMPT
    assert "".join(c.choices[0].text for c in chunks if c.choices) == echoed.choices[0].text


def test_refusals_through_the_openai_client_name_the_field(tiny_server):
    client = tiny_server.client
    with pytest.raises(openai.BadRequestError) as info:  # a sampled token is not the top-1 alternative
        client.completions.create(model="test-model", prompt=PROMPT, temperature=1.0, logprobs=1, max_tokens=2)
    assert info.value.body["param"] == "logprobs" and "temperature 0" in info.value.body["message"]
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="test-model", prompt=PROMPT, echo=True, logprobs=0, max_tokens=2)
    assert info.value.body["param"] == "echo"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="test-model", prompt="word " * 400, max_tokens=4)
    assert info.value.body["code"] == "context_length_exceeded" and "context is 256 tokens" in info.value.body[
        "message"] and info.value.body["param"] == "prompt"
    n_prompt = len(encode_prompt(tiny_server.server.service.tokenizer, OTHER))
    with pytest.raises(openai.BadRequestError) as info:  # the prompt fits, prompt + budget does not
        client.completions.create(model="test-model", prompt=["fits", OTHER], max_tokens=257 - n_prompt)
    assert info.value.body["param"] == "max_tokens" and info.value.body["message"].startswith("prompt[1]: ")
    assert f"the prompt has {n_prompt} tokens and max_tokens is {257 - n_prompt}" in info.value.body["message"]
    ok = client.completions.create(model="test-model", prompt=PROMPT, max_tokens=2)  # and it still answers
    assert ok.choices[0].finish_reason == "length" and ok.usage.completion_tokens == 2


@pytest.mark.parametrize("body, param", [
    ({"model": "m"}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": 3}, "prompt"),
    ({"prompt": ["a", 1]}, "prompt"),
    ({"prompt": [[1, 2], []]}, "prompt[1]"),
    ({"prompt": [5, -1]}, "prompt[1]"),
    ({"prompt": [[1], [2, 49152]]}, "prompt[1][1]"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": ["fine", ""]}, "prompt[1]"),
    ({"prompt": PROMPT, "n": 0}, "n"),
    ({"prompt": PROMPT, "n": 17}, "n"),
    ({"prompt": PROMPT, "max_tokens": 0}, "max_tokens"),
    ({"prompt": PROMPT, "temperature": 3}, "temperature"),
    ({"prompt": PROMPT, "top_p": 0}, "top_p"),
    ({"prompt": PROMPT, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": PROMPT, "logprobs": 6}, "logprobs"),
    ({"prompt": PROMPT, "logprobs": 2, "temperature": 0}, "logprobs"),
    ({"prompt": PROMPT, "logprobs": True}, "logprobs"),
    ({"prompt": PROMPT, "echo": "yes"}, "echo"),
    ({"prompt": PROMPT, "suffix": " the end"}, "suffix"),
    ({"prompt": PROMPT, "best_of": 3}, "best_of"),
    ({"prompt": PROMPT, "n": 2, "best_of": 1}, "best_of"),
    ({"prompt": PROMPT, "logit_bias": {"50": 100}}, "logit_bias"),
    ({"prompt": PROMPT, "presence_penalty": 0.5}, "presence_penalty"),
    ({"prompt": PROMPT, "frequency_penalty": -1}, "frequency_penalty"),
    ({"prompt": PROMPT, "repetition_penalty": 1.2}, "repetition_penalty"),
    ({"prompt": PROMPT, "min_tokens": 4}, "min_tokens"),
    ({"prompt": PROMPT, "ignore_eos": True}, "ignore_eos"),
    ({"prompt": PROMPT, "seed": -1}, "seed"),
])
def test_bad_fields_get_400_naming_the_field(tiny_server, body, param):
    r = httpx.post(tiny_server.url + "/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert error["message"].startswith(param) and "expected" in error["message"]


def test_neutral_values_of_refused_fields_are_accepted(tiny_server, sampler, tokenizer):
    """What leaves the output as it is passes: penalties 0, empty logit_bias and suffix, best_of 1, vLLM's neutral
    extras (chat too: the refusal list is shared)."""
    neutral = {"presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "suffix": "", "best_of": 1,
               "repetition_penalty": 1.0, "min_tokens": 0, "ignore_eos": False, "user": "someone"}
    r = httpx.post(tiny_server.url + "/completions", timeout=60,
                   json={"model": "m", "prompt": PROMPT, "temperature": 0, "max_tokens": 4, **neutral})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == _greedy(sampler, encode_prompt(tokenizer, PROMPT), 4).text
    chat = httpx.post(tiny_server.url + "/chat/completions", timeout=60,
                      json={"messages": MESSAGES, "max_tokens": 2, "repetition_penalty": 1.3})
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "repetition_penalty"


def test_the_paged_engine_answers_the_same(tiny_model, tokenizer, sampler):
    """`--engine paged` (continuous batching, each prompt its own engine request): the same greedy texts, the same
    seeded samples and the same streamed text as the static sampler."""
    from tests.serve.conftest import start_server

    running = start_server(tiny_model, tokenizer, engine="paged", max_batch=8, batch_wait_ms=50, max_len=128)
    try:
        ids = [encode_prompt(tokenizer, p) for p in (PROMPT, OTHER)]
        greedy = running.client.completions.create(model="m", prompt=[PROMPT, OTHER], temperature=0, max_tokens=9)
        assert [c.text for c in greedy.choices] == [_greedy(sampler, p, 9).text for p in ids]
        sampled = running.client.completions.create(model="m", prompt=[PROMPT, OTHER], n=2, temperature=1.0, seed=3,
                                                    max_tokens=5)
        want = [s for p in ids for s in sampler.generate([p], SamplingParams(temperature=1.0, n=2, seed=3,
                                                                               max_new_tokens=5))]
        assert [(c.index, c.text) for c in sampled.choices] == list(enumerate(w.text for w in want))
        chunks = running.client.completions.create(model="m", prompt=PROMPT, temperature=0, max_tokens=9, stream=True)
        assert "".join(c.choices[0].text for c in chunks if c.choices) == greedy.choices[0].text
    finally:
        running.close()
