"""SamplerPolicy: the tool-loop policy over the sampler continues conversations from the cache."""

from reasoner.agents.policies import Reply
from reasoner.agents.sampler_policy import SamplerPolicy
from reasoner.tokenization import render_chat


def test_second_turn_extends_the_cache_and_k_samples_share_a_prefill(tiny_model, tokenizer):
    policy = SamplerPolicy(tiny_model, tokenizer, temperature=1.0, max_new_tokens=5, max_len=1024, reserve=64,
                           tools=[])
    a = [{"role": "user", "content": "Is Anne kind?"}]
    b = [{"role": "user", "content": "Solve x + 1 = 2."}]
    convs = [list(a), list(a), list(b), list(b)]  # K = 2 samples per problem
    first = policy.respond(convs)
    assert len(first) == 4 and all(isinstance(r, Reply) for r in first)
    assert policy.prefills == 1 and policy._session.n == 2
    assert first[0].text != first[1].text  # two samples of one prompt differ
    for conv, reply in zip(convs, first):
        conv.append({"role": "assistant", "content": reply.text})
        conv.append({"role": "user", "content": "The solver says: sat"})
    live = [convs[3], convs[0]]  # a subset, in another order
    second = policy.respond(live)
    assert policy.prefills == 1 and policy.continuations == 1
    session = policy._session
    for conv, reply in zip(live, second):
        rendered = render_chat(tokenizer, conv)
        rows = [r for r in range(4)
                if tokenizer.decode(session.history[r][:-reply.completion_tokens], skip_special_tokens=False) == rendered]
        # the cache holds exactly the rendered conversation followed by the new reply's tokens
        assert len(rows) == 1
        assert reply.prompt_tokens + reply.completion_tokens == len(session.history[rows[0]])
        assert reply.completion_tokens == 5
