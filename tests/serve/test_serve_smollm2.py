"""`reasoner serve` on the embedded SmolLM2 through the official `openai` client (slow): what the server answers
is what our sampler generates from the same rendered prompt, also for 16 clients at once, decoded in shared
batches; `/v1/completions` answers what transformers' greedy `generate` does. SmolLM2-135M does not emit tool calls
(it answers in prose or writes Python), so the tool test checks that the schemas reach the prompt the model
continues; the `tool_calls` path is tested in test_serve_scripted."""

import httpx2 as httpx
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.sampling.stops import decode
from reasoner.serve.render import render_prompt
from reasoner.tokenization import chat_ids, encode, encode_prompt, stop_token_ids
from tests.sampling.conftest import smollm2_torch  # noqa: F401 (a fixture: transformers' SmolLM2, f32)
from tests.serve.conftest import start_server
from tests.serve.test_serve_scripted import WEATHER

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
BUDGET = 16  # one decode length everywhere: fewer compiled shapes


@pytest.fixture(scope="module")
def smollm2_server(smollm2, tokenizer):
    running = start_server(smollm2, tokenizer, model_name="smollm2-135m-instruct", max_batch=16, batch_wait_ms=300,
                           max_len=512, default_max_tokens=BUDGET)
    yield running
    running.close()


def test_greedy_chat_and_stream_equal_the_sampler(smollm2_server, smollm2, tokenizer):
    client = smollm2_server.client
    out = client.chat.completions.create(model="smollm2-135m-instruct", messages=QUESTION, temperature=0,
                                         max_tokens=BUDGET)
    (want,) = Sampler(smollm2, tokenizer).generate([chat_ids(tokenizer, QUESTION)],
                                                   SamplingParams(temperature=0.0, max_new_tokens=BUDGET))
    assert out.choices[0].message.content == want.text and "Paris" in want.text
    assert out.usage.completion_tokens == want.num_tokens
    chunks = list(client.chat.completions.create(model="smollm2-135m-instruct", messages=QUESTION, temperature=0,
                                                 max_tokens=BUDGET, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want.text
    assert chunks[-1].choices[0].finish_reason == out.choices[0].finish_reason


def test_n4_samples_equal_the_samplers(smollm2_server, smollm2, tokenizer):
    out = smollm2_server.client.chat.completions.create(model="smollm2-135m-instruct", messages=QUESTION, n=4,
                                                        temperature=0.8, top_p=0.95, seed=11, max_tokens=BUDGET)
    want = Sampler(smollm2, tokenizer).generate(
        [chat_ids(tokenizer, QUESTION)],
        SamplingParams(temperature=0.8, top_p=0.95, n=4, seed=11, max_new_tokens=BUDGET))
    assert [c.message.content for c in out.choices] == [w.text for w in want]
    assert len(out.choices) == 4


def test_tools_are_rendered_into_the_prompt(smollm2_server, smollm2, tokenizer):
    messages = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    out = smollm2_server.client.chat.completions.create(model="smollm2-135m-instruct", messages=messages,
                                                        tools=[WEATHER], temperature=0, max_tokens=BUDGET)
    prompt = render_prompt(tokenizer, messages, [WEATHER])
    assert '"name": "get_weather"' in prompt and "<tools>" in prompt
    assert out.usage.prompt_tokens == len(encode(tokenizer, prompt)) > len(chat_ids(tokenizer, messages)) + 50
    (want,) = Sampler(smollm2, tokenizer).generate([encode(tokenizer, prompt)],
                                                   SamplingParams(temperature=0.0, max_new_tokens=BUDGET))
    assert out.choices[0].message.content == want.text


def test_sixteen_concurrent_clients_and_a_bad_request(smollm2_server):
    url = smollm2_server.url + "/chat/completions"
    bad = httpx.post(url, content=b"{not json", timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    before = len(smollm2_server.log.batches())
    answers = smollm2_server.ask_at_once(
        [dict(model="smollm2-135m-instruct", temperature=0, max_tokens=8,
              messages=[{"role": "user", "content": f"Name a number larger than {i}."}]) for i in range(16)],
        join_s=600)
    assert all(a.choices[0].message.content for a in answers)
    lines = smollm2_server.log.batches()[before:]
    counts = [int(line.split()[2]) for line in lines]
    assert sum(counts) == 16 and len(lines) < 16 and max(counts) > 1, lines


def test_text_completions_equal_the_sampler_and_transformers_generate(smollm2_server, smollm2, smollm2_torch,
                                                                      tokenizer):
    """Two plain prompts in one `/v1/completions` request: each choice is our sampler's greedy text for
    `encode_prompt(prompt)` and transformers' greedy `generate` on the same ids, token count included."""
    import torch

    prompts = ["The capital of France is", "def fibonacci(n):"]
    out = smollm2_server.client.completions.create(model="smollm2-135m-instruct", prompt=prompts, temperature=0,
                                                   max_tokens=BUDGET)
    eos = list(stop_token_ids(tokenizer))
    ids = [encode_prompt(tokenizer, p) for p in prompts]
    ours = Sampler(smollm2, tokenizer).generate(ids, SamplingParams(temperature=0.0, max_new_tokens=BUDGET))
    generated = 0
    for choice, prompt_ids, mine in zip(out.choices, ids, ours):
        with torch.no_grad():
            theirs = smollm2_torch.generate(input_ids=torch.tensor([prompt_ids]), max_new_tokens=BUDGET,
                                            do_sample=False, eos_token_id=eos)[0, len(prompt_ids):].tolist()
        end = next((j + 1 for j, t in enumerate(theirs) if t in eos), len(theirs))
        assert list(mine.tokens) == theirs[:end]
        assert choice.text == mine.text == decode(tokenizer, theirs[:end])
        assert choice.finish_reason == ("stop" if theirs[end - 1] in eos else "length")
        generated += end
    assert "Paris" in out.choices[0].text and [c.index for c in out.choices] == [0, 1]
    assert out.usage.completion_tokens == generated and out.usage.prompt_tokens == sum(len(i) for i in ids)
