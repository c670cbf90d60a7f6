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


def test_the_tool_loop_gives_the_same_conversation_on_the_engine_and_the_static_sampler(tiny_model, tokenizer):
    """On one device SamplerPolicy runs on the paged RolloutEngine; three calls (two samples per problem, then a
    continued subset with tool responses, then a new batch: the engine's session is closed and another started)
    give the static sampler's replies, token for token."""
    from reasoner.sampling import Sampler
    from reasoner.sampling.rollout_engine import RolloutEngine

    def loop(policy):
        a = [{"role": "user", "content": "Is Anne kind?"}]
        b = [{"role": "user", "content": "Solve x + 1 = 2."}]
        convs = [list(a), list(a), list(b), list(b)]
        replies = [policy.respond(convs)]
        for conv, reply in zip(convs, replies[0]):
            conv += [{"role": "assistant", "content": reply.text},
                     {"role": "tool", "content": '{"sat_result": "sat", "output": "sat\\n(model (define-fun x () Int 1))"}'}]
        replies.append(policy.respond([convs[3], convs[0], convs[1]]))
        replies.append(policy.respond([[{"role": "user", "content": "A new problem."}]]))
        return [[(r.text, r.prompt_tokens, r.completion_tokens) for r in call] for call in replies]

    kwargs = dict(temperature=1.0, max_new_tokens=6, max_len=1024, reserve=64, seed=3)
    paged = SamplerPolicy(tiny_model, tokenizer, **kwargs)
    static = SamplerPolicy(tiny_model, tokenizer, paged=False, **kwargs)
    assert isinstance(paged.sampler, RolloutEngine) and isinstance(static.sampler, Sampler)
    got, want = loop(paged), loop(static)
    assert got == want
    assert paged.prefills == 2 and paged.continuations == 1
    assert got[0][0][0] != got[0][1][0] and all(c == 6 for call in got for _, _, c in call)
    engine = paged.sampler  # the last session holds one slot; the first one's were freed when it was replaced
    assert len(engine.sched.rows) == 1


def test_a_bos_adding_tokenizer_gets_the_rendered_chat_ids_alone(tiny_model, tokenizer):
    """The policy prefills the rendered conversation's own ids (a chat template writes its BOS itself), the ids its
    fit check counted: handing the sampler the text made a BOS-adding tokenizer whose template writes no BOS
    prepend one (`encode_prompt`'s rule for plain strings), one token past what was checked."""
    import copy

    from tokenizers import processors

    from reasoner.tokenization import encode

    bos_adding = copy.deepcopy(tokenizer)  # SmolLM2's, adding <|endoftext|> first; its template writes no BOS
    bos_adding.bos_token = "<|endoftext|>"
    bos_adding._tokenizer.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A",
                                                                         special_tokens=[("<|endoftext|>", 0)])
    conv = [{"role": "user", "content": "Is Anne kind?"}]
    assert bos_adding("hi")["input_ids"][0] == 0 != encode(bos_adding, render_chat(bos_adding, conv))[0]
    policy = SamplerPolicy(tiny_model, bos_adding, temperature=1.0, max_new_tokens=3, max_len=256, reserve=64,
                           tools=[])
    (reply,) = policy.respond([conv])
    prompt = encode(bos_adding, render_chat(bos_adding, conv))
    assert policy._session.history[0][:len(prompt)] == prompt
    assert reply.prompt_tokens == len(prompt)
