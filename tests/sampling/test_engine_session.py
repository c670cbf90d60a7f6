"""Multi-turn sessions on the rollout engine (`RolloutEngine.start`, KV continuation over the paged cache): three
turns give the static `Session`'s tokens, finish reasons and (within the forward's float32 bound) log-probs, greedy
and sampled with n > 1, with a row stopped by a stop string, a row left out of a turn, appends longer than a block
and more rows than the engine had slots; the same errors; slots and blocks held until close()."""

import gc

import numpy as np
import pytest

from reasoner.sampling import Sampler, SamplingParams, paged_device
from reasoner.sampling.rollout_engine import RolloutEngine
from tests.sampling.conftest import teacher_forced_logits
from tests.sampling.test_sampling_continuation import _stop_string_from
from tests.tolerances import logprob_atol

PROMPTS = [[101, 2045, 318, 1000, 42], [7, 7, 900]]
# turn 2: row 0 gets 11 tokens (blocks of 4: the append spans three), the last row one; the others skip the turn.
# turn 3: row 1 comes back after skipping turn 2, row 0 goes on; longer turns than the first (bigger buffers).
TURN2 = {0: list(range(300, 311))}
TURN3 = {0: [11, 12], 1: [500, 501, 502, 503, 504]}


def _three_turns(gen, params, *, last_row):
    session = gen.start(PROMPTS, params, max_len=80, reserve=16)
    pieces: dict[int, list[str]] = {}
    turns = [session.run()]
    session.extend({**TURN2, last_row: [4000]}, max_new_tokens=6)
    turns.append(session.run(on_text=lambda b, delta: pieces.setdefault(b, []).append(delta)))
    session.extend(TURN3, max_new_tokens=12)
    turns.append(session.run())
    return session, turns, pieces


@pytest.mark.parametrize("sampled", [False, True])
def test_three_turns_equal_the_static_session(tiny_model, tokenizer, sampled):
    base = SamplingParams(max_new_tokens=8, temperature=1.0 if sampled else 0.0, top_k=40 if sampled else 0,
                          n=2 if sampled else 1, seed=7, eos_ids=())
    # a stop string row 0 writes in its first turn (found on a free run without it), so that row stops early
    free = Sampler(tiny_model, tokenizer).generate(PROMPTS, base)
    stop, kept = _stop_string_from(tokenizer, list(free[0].tokens))
    params = base.replace(stop=(stop,))
    engine = RolloutEngine(tiny_model, tokenizer, slots=1, block_size=4, chunk_steps=3)
    last_row = 2 * base.n - 1
    static, want, want_text = _three_turns(Sampler(tiny_model, tokenizer), params, last_row=last_row)
    session, got, got_text = _three_turns(engine, params, last_row=last_row)
    assert engine.slots == 2 * base.n  # one slot per row, grown from 1 at start
    assert got[0][0].finish_reason == "stop" and got[0][0].num_tokens == kept
    assert [len(t) for t in got] == [2 * base.n, 2, 2]
    assert [(c.prompt_index, c.sample_index) for t in got for c in t] == [
        (c.prompt_index, c.sample_index) for t in want for c in t]
    for b in range(session.batch):  # the whole conversation of every row, prompt to last token
        assert session.history[b] == static.history[b]
        assert session.row_text(b) == static.row_text(b)
    atol = max(logprob_atol(teacher_forced_logits(tiny_model, h), tiny_model.cfg, seq_len=len(h))
               for h in static.history)
    for turn_got, turn_want in zip(got, want):
        for g, w in zip(turn_got, turn_want):
            np.testing.assert_array_equal(g.tokens, w.tokens)
            assert g.finish_reason == w.finish_reason and g.text == w.text
            np.testing.assert_allclose(g.model_logprobs, w.model_logprobs, rtol=0, atol=atol)
            np.testing.assert_allclose(g.sample_logprobs, w.sample_logprobs, rtol=0,
                                       atol=atol / base.temperature if sampled else 0)
    if sampled:
        assert got[0][0].text != got[0][1].text  # two samples of one prompt differ
    for b, parts in got_text.items():  # turn 2 streamed (row, delta) pieces of each continued row's text
        turn2 = {0: got[1][0], last_row: got[1][1]}[b]
        assert turn2.text.startswith("".join(parts)) and "".join(parts) == "".join(want_text[b])
    assert sorted(got_text) == sorted(want_text)
    session.close()
    assert engine.sched.alloc.free == engine.sched.alloc.num_blocks - 1 and not engine.sched.rows


def test_rows_keep_their_slots_until_close_and_the_engine_refuses_other_work(small_vocab_model):
    engine = RolloutEngine(small_vocab_model, slots=4, block_size=4, chunk_steps=2)
    params = SamplingParams(max_new_tokens=3, temperature=0.0, n=2, eos_ids=())
    session = engine.start([[1, 2, 3, 4, 5], [6, 7]], params, max_len=24, reserve=8)
    progress: list[int] = []
    first = session.run(on_chunk=progress.append, chunk_steps=1)
    assert sum(progress) == 4 * 3 and len(progress) > 4  # new tokens per row, reported chunk by chunk
    # each row holds its slot and its blocks for max_len=24 positions: 6 blocks, a 5-token prompt's first shared
    assert sorted(engine.sched.parked) == [0, 1, 2, 3]
    assert engine.sched.alloc.num_blocks - 1 - engine.sched.alloc.free == (1 + 2 * 5) + 2 * 6
    for call in (lambda: engine.generate([[1]], params), lambda: engine.submit([1], params),
                 lambda: engine.start([[1]], params)):
        with pytest.raises(RuntimeError, match="a session holds 4 of the engine's slots.*close\\(\\) it first"):
            call()
    session.extend({3: [9, 9]}, max_new_tokens=2)
    (again,) = session.run()
    ref = Sampler(small_vocab_model).start([[1, 2, 3, 4, 5], [6, 7]], params, max_len=24, reserve=8)
    assert [c.tokens.tolist() for c in ref.run()] == [c.tokens.tolist() for c in first]
    ref.extend({3: [9, 9]}, max_new_tokens=2)
    assert ref.run()[0].tokens.tolist() == again.tokens.tolist()
    compiled = paged_device.extend_slots._cache_size()
    session.extend({2: [9]}, max_new_tokens=2)  # another row and length, the same (A, C, J) bucket
    session.run()
    assert paged_device.extend_slots._cache_size() == compiled
    session.close()
    session.close()  # idempotent
    with pytest.raises(RuntimeError, match="run: this session is closed"):
        session.run()
    assert engine.sched.alloc.free == engine.sched.alloc.num_blocks - 1 and not engine.sched.rows
    assert len(engine.generate([[1, 2]], params)) == 2  # the engine takes other work again
    # a session that is dropped without close() frees its slots when collected
    engine.start([[1, 2]], params, max_len=16, reserve=4).run()
    gc.collect()
    assert not engine.sched.rows and engine.sched.alloc.free == engine.sched.alloc.num_blocks - 1


@pytest.mark.parametrize("paged", [False, True])
def test_extend_errors_are_the_static_sessions(tiny_model, tokenizer, paged):
    gen = RolloutEngine(tiny_model, tokenizer, slots=1, block_size=4) if paged else Sampler(tiny_model, tokenizer)
    params = SamplingParams(max_new_tokens=3, temperature=0.0, eos_ids=())
    session = gen.start([[1, 2, 3]], params, max_len=16, reserve=4)
    with pytest.raises(RuntimeError, match="still running"):
        session.extend({0: [5]})
    session.run()
    with pytest.raises(ValueError, match="row 3 outside the batch of 1 rows"):
        session.extend({3: [5]})
    with pytest.raises(ValueError, match="row 0: empty append"):
        session.extend({0: []})
    with pytest.raises(ValueError, match="overflow the cache"):
        session.extend({0: list(range(10, 30))})
    with pytest.raises(ValueError, match="token id outside the vocabulary of size 49152"):
        session.extend({0: [5, 49152]})
    with pytest.raises(ValueError, match="expected at least one"):
        session.extend({})
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        session.extend({0: [5]}, max_new_tokens=0)
    assert session.history[0][:3] == [1, 2, 3] and len(session.history[0]) == 6  # nothing was written
    session.extend({0: list(range(10, 19))})  # the cache then holds 15 of 16 positions
    (last,) = session.run()
    assert last.finish_reason == "length" and last.num_tokens == 2  # drawn at positions 15 and 16: no room after
    session.close()
    no_room = gen.start([[1, 2, 3]], params, max_len=16)
    no_room.run()
    with pytest.raises(ValueError, match="no scratch slots; start it with reserve >= 1"):
        no_room.extend({0: [5]})
    no_room.close()


def windowed_decoder(*, seed: int = 1):
    """The SMALL_VOCAB decoder with a window of 4 positions in every layer (Mistral-style)."""
    import dataclasses

    from tests.models_shared import SMALL_VOCAB, random_decoder

    return random_decoder(dataclasses.replace(SMALL_VOCAB, sliding_window=4, sliding_layers=None), seed=seed,
                          scale=3.0)


def windowed_turns(gen) -> list[list[list[int]]]:
    """Three greedy turns of two rows whose turns and appends run past a 4-position window; the tokens of each."""
    params = SamplingParams(max_new_tokens=6, temperature=0.0, eos_ids=())
    session = gen.start([[5, 17, 9, 23, 2, 11, 7], [12, 3]], params, max_len=48, reserve=8)
    out = [session.run()]
    session.extend({0: [1, 2, 3, 4, 5, 6, 7, 8, 9], 1: [4]}, max_new_tokens=7)
    out.append(session.run())
    session.extend({1: [20, 21, 22, 23, 1, 2]}, max_new_tokens=7)
    out.append(session.run())
    session.close()
    return [[c.tokens.tolist() for c in t] for t in out]


def test_continuation_respects_sliding_window_layers():
    """A window of 4 positions in every layer: the engine's paged continuation masks what the static Session's cache
    masks, and the window changes what is drawn."""
    from tests.models_shared import SMALL_VOCAB, random_decoder

    windowed = windowed_decoder()
    got = windowed_turns(RolloutEngine(windowed, slots=2, block_size=4, chunk_steps=3))
    assert got == windowed_turns(Sampler(windowed))
    # the same weights without the window: other tokens somewhere, so the masks above mattered
    assert got != windowed_turns(Sampler(random_decoder(SMALL_VOCAB, seed=1, scale=3.0)))
