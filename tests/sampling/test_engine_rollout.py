"""The rollout engine (continuous batching over a paged KV cache) on tiny random decoders: the same
tokens and log-probs as the static sampler and the plain forward with fewer slots than rows, per-request
budgets, shared prompt blocks, EOS and stop strings, the sampling distribution (chi-square), bad input."""

import numpy as np
import pytest

from reasoner.sampling import Sampler, SamplingParams
from reasoner.sampling.paged_cache import blocks_needed
from reasoner.sampling.rollout_engine import RolloutEngine
from tests.sampling.test_sampling_engine import assert_first_two_tokens_follow_the_forward, check_against_forward

PROMPTS = [[5, 17, 9, 23, 2, 11, 7], [12, 3], [8, 8, 20, 1, 19], [3, 1, 4, 1, 5, 9, 2, 6, 5], [7]]


def _same(a, b):
    assert [(c.prompt_index, c.sample_index) for c in a] == [(c.prompt_index, c.sample_index) for c in b]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.tokens, y.tokens)
        assert x.finish_reason == y.finish_reason


def test_greedy_equals_static_sampler_and_forward_with_fewer_slots_than_rows(small_vocab_model):
    params = SamplingParams(max_new_tokens=12, temperature=0.0, eos_ids=())
    engine = RolloutEngine(small_vocab_model, slots=2, block_size=4, chunk_steps=3)
    out = engine.generate(PROMPTS, params)
    _same(out, Sampler(small_vocab_model).generate(PROMPTS, params))
    for prompt, c in zip(PROMPTS, out):
        assert c.num_tokens == 12
        check_against_forward(small_vocab_model, prompt, c)
    # 5 requests through 2 slots: admissions happened between decode chunks, and every block came back
    assert engine.stats["prefill_calls"] >= 3
    assert engine.sched.alloc.free == engine.sched.alloc.num_blocks - 1


def test_sampled_rows_equal_static_sampler_and_their_logprobs_the_forward(small_vocab_model):
    params = SamplingParams(max_new_tokens=10, temperature=0.8, top_k=10, top_p=0.9, n=3, seed=11, eos_ids=())
    out = RolloutEngine(small_vocab_model, slots=4, block_size=4, chunk_steps=4).generate(PROMPTS, params)
    # same PRNG keys per (prompt, sample, position) as the static sampler, whichever slot a row ran in
    _same(out, Sampler(small_vocab_model).generate(PROMPTS, params))
    for c in out:
        check_against_forward(small_vocab_model, PROMPTS[c.prompt_index], c, params=params)
    assert len({tuple(c.tokens) for c in out[:3]}) > 1


def test_per_request_budgets_results_in_request_order_and_shared_prompt_blocks(small_vocab_model):
    engine = RolloutEngine(small_vocab_model, slots=6, block_size=4, chunk_steps=2, num_blocks=40)
    budgets = [9, 1, 5, 3, 7]
    ids = [engine.submit(p, SamplingParams(max_new_tokens=m, temperature=1.0, n=2, seed=4, eos_ids=()), prompt_index=i)
           for i, (p, m) in enumerate(zip(PROMPTS, budgets))]
    engine._admit()
    # the first 3 requests (6 slots) hold their reservation: a 7-token prompt's full block once for both samples
    used = engine.sched.alloc.num_blocks - 1 - engine.sched.alloc.free
    expect = sum(blocks_needed(length=len(p), capacities=[len(p) + m] * 2, block_size=4)
                 for p, m in zip(PROMPTS[:3], budgets[:3]))
    assert used == expect == (1 + 2 * 3) + (0 + 2 * 1) + (1 + 2 * 2)
    table = engine.sched.table
    slot_a, slot_b = [r.slot for r in engine.sched.rows.values() if r.request.request_id == ids[0]]
    assert table[slot_a, 0] == table[slot_b, 0] != 0 and table[slot_a, 1] != table[slot_b, 1]
    done = engine.collect()
    assert sorted(done) == ids
    for rid, p, m in zip(ids, PROMPTS, budgets):
        assert [c.num_tokens for c in done[rid]] == [m, m] and [c.sample_index for c in done[rid]] == [0, 1]
        for c in done[rid]:
            check_against_forward(small_vocab_model, p, c, params=SamplingParams(temperature=1.0))
    assert engine.sched.alloc.free == 39


def test_eos_and_capacity_end_rows_like_the_static_sampler(small_vocab_model):
    greedy = Sampler(small_vocab_model).generate(PROMPTS, SamplingParams(max_new_tokens=6, temperature=0.0,
                                                                         eos_ids=()))
    eos = int(greedy[0].tokens[2])
    params = SamplingParams(max_new_tokens=6, temperature=0.0, eos_ids=(eos,))
    engine = RolloutEngine(small_vocab_model, slots=2, block_size=4, chunk_steps=4)
    _same(engine.generate(PROMPTS, params), Sampler(small_vocab_model).generate(PROMPTS, params))
    # a cache of 10 positions: the 9-token prompt has room for 1 draw, the 7-token one for 3
    params = SamplingParams(max_new_tokens=6, temperature=0.0, eos_ids=())
    out = engine.generate(PROMPTS, params, max_len=10)
    _same(out, Sampler(small_vocab_model).generate(PROMPTS, params, max_len=10))
    assert [c.num_tokens for c in out] == [4, 6, 6, 2, 6]


def test_stop_strings_free_the_slot_and_match_the_static_sampler(tiny_model, tokenizer):
    prompts = [tokenizer("Once upon a time", add_special_tokens=False)["input_ids"],
               tokenizer("The answer is", add_special_tokens=False)["input_ids"]] * 3
    base = SamplingParams(max_new_tokens=24, temperature=1.0, seed=2, eos_ids=())
    free_run = Sampler(tiny_model, tokenizer).generate(prompts, base)
    stop = _stop_string_from(tokenizer, free_run[0].tokens[3:])  # text the first row produces: it stops early
    params = base.replace(stop=(stop,))
    out = RolloutEngine(tiny_model, tokenizer, slots=2, block_size=8, chunk_steps=4).generate(prompts, params)
    ref = Sampler(tiny_model, tokenizer).generate(prompts, params)
    _same(out, ref)
    assert [c.text for c in out] == [c.text for c in ref]
    assert out[0].finish_reason == "stop" and out[0].text.endswith(stop)


def test_a_request_arriving_mid_flight_with_a_longer_budget_waits_for_buffers_then_runs_whole(small_vocab_model):
    """A server submits between steps: a later request whose budget outgrows the running rows' token buffers
    must not be admitted into them (its tokens past the buffer would be lost); it runs once they drain."""
    engine = RolloutEngine(small_vocab_model, slots=4, block_size=4, chunk_steps=2, num_blocks=64)
    short = SamplingParams(max_new_tokens=4, temperature=0.0, eos_ids=())
    long = SamplingParams(max_new_tokens=20, temperature=0.0, eos_ids=())
    first = engine.submit(PROMPTS[0], short)
    engine.step()  # the first request runs with buffers for 4 tokens
    later = engine.submit(PROMPTS[1], long, prompt_index=1)
    engine.step()
    assert all(r.request.request_id == first for r in engine.sched.rows.values())  # the long one waits
    done = engine.collect()
    assert [c.num_tokens for c in done[later]] == [20]
    ref = Sampler(small_vocab_model).generate([PROMPTS[1]], long)
    np.testing.assert_array_equal(done[later][0].tokens, ref[0].tokens)
    check_against_forward(small_vocab_model, PROMPTS[1], done[later][0])


def test_streamed_text_arrives_in_pieces_that_concatenate_to_the_final_text(tiny_model, tokenizer):
    prompt = tokenizer("Once upon a time", add_special_tokens=False)["input_ids"]
    params = SamplingParams(max_new_tokens=24, temperature=1.0, seed=5, n=2, eos_ids=())
    engine = RolloutEngine(tiny_model, tokenizer, slots=2, block_size=8, chunk_steps=4)
    pieces: dict[int, list[str]] = {0: [], 1: []}
    rid = engine.submit(prompt, params, on_text=lambda j, delta: pieces[j].append(delta))
    out = engine.collect()[rid]
    plain = RolloutEngine(tiny_model, tokenizer, slots=2, block_size=8, chunk_steps=4).generate([prompt], params)
    for j in (0, 1):
        assert len(pieces[j]) >= 3  # 24 tokens in chunks of 4: text came out while decoding
        streamed = "".join(pieces[j])
        assert out[j].text.startswith(streamed)
        assert set(out[j].text[len(streamed):]) <= {"\ufffd"}  # only an unfinished character is held back
        assert out[j].text == plain[j].text  # streaming changes nothing drawn


def _stop_string_from(tokenizer, ids):
    """The first generated token whose text the tokenizer can produce as a stop string."""
    from reasoner.sampling.params import check_stop_string

    for t in ids:
        text = tokenizer.decode([int(t)], skip_special_tokens=True).strip()
        if text:
            try:
                check_stop_string(tokenizer, text)
            except ValueError:
                continue
            return text
    raise AssertionError("no usable stop string in the free run")


def test_chi_square_first_and_second_tokens_through_the_rollout_engine(small_vocab_model):
    """4,000 samples (16 requests x 250, each sharing its prefill): first-token frequencies match the
    filtered softmax of the plain forward; second tokens given the most common first token too."""
    prompt = [4, 9, 1]
    engine = RolloutEngine(small_vocab_model, slots=256, block_size=4, chunk_steps=2)
    params = SamplingParams(max_new_tokens=2, temperature=1.4, top_k=12, top_p=0.95, n=250, seed=5, eos_ids=())
    ids = [engine.submit(prompt, params, prompt_index=i) for i in range(16)]
    done = engine.collect()
    draws = [c.tokens for rid in ids for c in done[rid]]
    assert len(draws) == 4000
    assert_first_two_tokens_follow_the_forward(small_vocab_model, prompt, draws, params)


def test_bad_input_is_refused_with_a_clear_error(small_vocab_model):
    engine = RolloutEngine(small_vocab_model, slots=2, block_size=4, num_blocks=4)
    with pytest.raises(ValueError, match="slots=2"):
        engine.submit([1, 2], SamplingParams(max_new_tokens=2, n=3))
    with pytest.raises(ValueError, match="needs 4 blocks; the pool has 3"):
        engine.submit([1, 2, 3, 4, 5], SamplingParams(max_new_tokens=8))
    with pytest.raises(ValueError, match="vocabulary"):
        engine.submit([1, 99], SamplingParams(max_new_tokens=2))
    with pytest.raises(ValueError, match="slots=0"):
        RolloutEngine(small_vocab_model, slots=0)


def test_step_returns_each_request_once_and_a_cancelled_one_frees_its_slots(small_vocab_model):
    """A server drives the engine with `step` alone: what a step returns is forgotten (nothing accumulates over
    requests served); `cancel` drops a queued request and stops a running one, whose slots and blocks come back,
    while the others decode exactly as without it."""
    params = SamplingParams(max_new_tokens=12, temperature=0.0, eos_ids=())
    engine = RolloutEngine(small_vocab_model, slots=2, block_size=4, chunk_steps=2, num_blocks=40)
    short = engine.submit(PROMPTS[0], params.replace(max_new_tokens=2))
    long = engine.submit(PROMPTS[1], params)
    queued = engine.submit(PROMPTS[2], params)  # no free slot: waits in the queue
    returned = {}
    while short not in returned:
        returned.update(engine.step())
    assert list(returned) == [short]
    assert engine.cancel(queued) and engine.cancel(long) and not engine.cancel(long) and not engine.cancel(short)
    assert not engine.sched.rows and not engine.sched.queue
    assert engine.sched.alloc.free == engine.sched.alloc.num_blocks - 1
    assert engine.collect() == {}  # nothing finished since: the short one was returned, the others dropped
    again = engine.submit(PROMPTS[1], params)
    (alone,) = RolloutEngine(small_vocab_model, slots=2, block_size=4, chunk_steps=2).generate([PROMPTS[1]], params)
    np.testing.assert_array_equal(engine.collect()[again][0].tokens, alone.tokens)
