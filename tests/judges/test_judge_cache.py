"""The judge cache's hits and misses (counted where the other judge counters are), and a multi-process job's
appends (one file per process, all read back): before, `make_judge` built the cache without counters, a judged
reward's counters never saw a hit, and every process of a job appended to the same file."""

import json

from reasoner.judges import CachedJudge, JudgeCounters, judge_messages, score_traces

VERDICT = "Thinking.\n" + json.dumps({"directionality_score": 1.0, "explanation": "forward"})


class Canned:
    """A judge that answers every prompt with VERDICT and records what it was asked."""

    judge_id = "canned"

    def __init__(self):
        self.asked = []

    def reply(self, prompts):
        self.asked += list(prompts)
        return [VERDICT] * len(prompts)


def _prompt(trace):
    return judge_messages("directionality", source="balanced_copa", observation="Premise: x", reasoning=trace)


def test_hits_and_misses_reach_the_counters_score_traces_counts_into(tmp_path):
    own, per_metric = JudgeCounters(), JudgeCounters()
    cached = CachedJudge(Canned(), tmp_path / "c.jsonl", own)
    score_traces(cached, "directionality", [_prompt("a"), _prompt("b"), _prompt("a")], per_metric)
    score_traces(cached, "directionality", [_prompt("a"), _prompt("c")], per_metric)
    assert (per_metric.cache_hits, per_metric.cache_misses, per_metric.requests) == (1, 4, 5)
    assert (own.cache_hits, own.cache_misses) == (1, 4) and len(cached.judge.asked) == 3
    # the same counters held by the cache and passed by the caller (rewards.judged.build_judge) count once
    shared = JudgeCounters()
    again = CachedJudge(Canned(), tmp_path / "c.jsonl", shared)
    score_traces(again, "directionality", [_prompt("a"), _prompt("d")], shared)
    assert (shared.cache_hits, shared.cache_misses) == (1, 1)


def test_each_process_appends_to_its_own_file_and_all_are_read_back(tmp_path, monkeypatch):
    from reasoner import distributed
    from reasoner.judges.judge import cache_files

    path = tmp_path / "judge_cache[run1].jsonl"  # a glob metacharacter in the name is a name
    monkeypatch.setattr(distributed, "process_index", lambda: 1)
    p1 = CachedJudge(Canned(), path)
    p0 = CachedJudge(Canned(), path, process=0)
    p1.reply([_prompt("one")])
    p0.reply([_prompt("zero")])
    p12 = CachedJudge(Canned(), path, process=12)
    p12.reply([_prompt("twelve")])
    (tmp_path / "judge_cache[run1].pX.jsonl").write_text("not a cache file\n")
    assert cache_files(path) == [path, *(tmp_path / f"judge_cache[run1].p{k}.jsonl" for k in (1, 12))]
    assert cache_files(tmp_path / "absent" / "c.jsonl") == []
    assert [len(f.read_text().splitlines()) for f in cache_files(path)] == [1, 1, 1]
    counters = JudgeCounters()
    later = CachedJudge(Canned(), path, counters, process=0)  # the next run, process 0: every process's replies
    assert later.reply([_prompt("one"), _prompt("zero"), _prompt("twelve")]) == [VERDICT] * 3
    assert later.judge.asked == [] and counters.cache_hits == 3


def test_a_judge_that_drops_replies_is_named_not_a_key_error(tmp_path):
    import pytest

    class Short(Canned):
        def reply(self, prompts):
            return super().reply(prompts)[:-1]

    cached = CachedJudge(Short(), tmp_path / "c.jsonl")
    with pytest.raises(ValueError, match="judge 'canned' returned 1 replies for 2 prompts"):
        cached.reply([_prompt("a"), _prompt("b")])
