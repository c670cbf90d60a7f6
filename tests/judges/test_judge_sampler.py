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
