"""SamplerJudge: the in-process judge on a tiny random decoder with SmolLM2's real tokenizer and chat template."""

import pytest

from reasoner.judges import CachedJudge, JudgeCounters, SamplerJudge, judge_messages, score_traces
from tests.models_shared import TINY, random_decoder, smollm2_path


@pytest.fixture(scope="module")
def judge():
    from reasoner.tokenization import load_tokenizer

    return SamplerJudge(random_decoder(TINY, seed=3, scale=4.0), load_tokenizer(smollm2_path()), judge_id="tiny",
                        max_new_tokens=6, batch_size=2)


def test_batched_greedy_replies_are_deterministic_scored_and_cached(judge, tmp_path):
    prompts = [judge_messages("directionality", source="crypto", observation=f"pairs {i}", reasoning=f"trace {i}")
               for i in range(3)]
    first = judge.reply(prompts)
    assert judge.calls == 2  # 3 prompts in batches of 2 (the last padded)
    assert len(first) == 3 and all(isinstance(t, str) for t in first)
    assert judge.reply(prompts) == first  # temperature 0: greedy, the same replies again
    counters = JudgeCounters()
    cached = CachedJudge(judge, tmp_path / "cache.jsonl", counters)
    # A random model writes no rubric JSON: every row is an invalid judgement scoring 0, counted, no exception.
    out = score_traces(cached, "directionality", prompts, counters)
    assert [(j.score, j.valid) for j in out] == [(0.0, False)] * 3 and counters.invalid == 3
    calls = judge.calls
    assert cached.reply(prompts) == first and judge.calls == calls and counters.cache_hits == 3


def test_calls_from_several_threads_take_turns_and_reply_as_one_call_does(judge):
    """The reward pool scores two batches at once (and a late batch runs beside the next): the judge's sampler is
    entered by one thread at a time, and each thread gets the replies a lone call gives."""
    import threading
    import time

    prompts = [judge_messages("coverage", source="crypto", observation=f"obs {i}", reasoning=f"r {i}") for i in range(2)]
    want = judge.reply(prompts)
    generate, inside, most = judge.sampler.generate, [0], [0]

    def watched(*args, **kwargs):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.05)  # widens the window in which an unguarded second thread would enter
        try:
            return generate(*args, **kwargs)
        finally:
            inside[0] -= 1

    judge.sampler.generate = watched
    try:
        got = [None] * 4
        threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, judge.reply(prompts))) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        del judge.sampler.generate
    assert got == [want] * 4 and most[0] == 1


def test_cancel_stops_before_the_next_batch_and_the_rest_are_unsent(judge):
    """A reward call past its deadline holds the model (and the next batch's call waiting for it) for one batch at
    most: once `cancel` is set no further batch runs; the unrun prompts are UNSENT, counted as cancelled."""
    import threading

    from reasoner.judges.judge import UNSENT

    prompts = [judge_messages("directionality", source="crypto", observation=f"pairs {i}", reasoning=f"trace {i}")
               for i in range(5)]
    want = judge.reply(prompts)
    cancel, generate, calls = threading.Event(), judge.sampler.generate, judge.calls

    def then_cancel(*args, **kwargs):
        cancel.set()  # the deadline passes while the first batch runs
        return generate(*args, **kwargs)

    judge.sampler.generate = then_cancel
    try:
        assert judge.reply(prompts, cancel=cancel) == want[:2] + [UNSENT] * 3  # batches of 2: the first ran
        assert judge.calls == calls + 1
        counters = JudgeCounters()
        out = score_traces(judge, "directionality", prompts, counters, cancel=cancel)
        assert out == [None] * 5 and judge.calls == calls + 1  # set before the call: nothing runs
        assert (counters.requests, counters.cancelled) == (0, 5)
    finally:
        del judge.sampler.generate
