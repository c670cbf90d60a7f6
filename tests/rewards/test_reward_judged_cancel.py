"""A judged reward call past its deadline stops asking the judge (the registry's `cancel` event).

Before, `judged_coverage` / `judged_directionality` took no `cancel`: the registry scored a late batch 0 (counted as
timeouts) and set the event, but the reward never saw it and went on sending one request per completion of that
batch. The stub judge counts the requests it received; with `cancel` set after k of them, only the requests already
in flight (at most max_concurrency) come after.
"""

import json
import threading
import time

import pytest

from reasoner.judges.cache import cache_files
from reasoner.rewards import CompositeReward, WeightedReward, build_reward
from reasoner.rewards.registry import RewardFailure
from tests.chat_stub import ChatStub, serve

EXAMPLES = [{"prompt": "Premise: the cat is red.", "source": "balanced_copa"}] * 6
COMPLETIONS = [f"<think>FORWARD from premise {i}</think><answer>1</answer>" for i in range(6)]


def _verdict():
    return 200, {"choices": [{"message": {"content": json.dumps({"directionality_score": 1.0,
                                                                  "explanation": "forward"})}}]}


class _CancelAfter(ChatStub):
    """Sets `cancel` when its `k`-th request arrives (before answering it), then answers every request with 1.0."""

    k = 0
    cancel = threading.Event()
    lock = threading.Lock()

    def reply(self, body):
        with type(self).lock:
            if len(type(self).bodies) >= type(self).k:
                type(self).cancel.set()
        return _verdict()


@pytest.mark.parametrize("concurrency,k", [(1, 2), (2, 3)])
def test_cancel_after_k_requests_stops_the_rest(tmp_path, concurrency, k):
    _CancelAfter.k, _CancelAfter.cancel = k, threading.Event()
    with serve(_CancelAfter) as url:
        fn = build_reward("judged_directionality", judge={"endpoint": url, "model": f"cancel-{concurrency}",
                                                          "retries": 0, "max_concurrency": concurrency},
                          cache=str(tmp_path / "c.jsonl"))
        values = fn(COMPLETIONS, examples=EXAMPLES, cancel=_CancelAfter.cancel)
        sent = len(_CancelAfter.bodies)
        # requests already started when the k-th arrived finish: at most concurrency - 1 of them
        assert k <= sent <= k + concurrency - 1
        assert values[:sent] == [1.0] * sent
        assert values[sent:] == [RewardFailure("timeout", "judged_directionality: judge request not sent, the call "
                                                          "was cancelled at its deadline")] * (6 - sent)
        c = fn.counters
        assert (c.requests, c.valid, c.failed, c.cancelled, c.cache_misses) == (sent, sent, 0, 6 - sent, 6)
        assert sum(len(f.read_text().splitlines()) for f in cache_files(tmp_path / "c.jsonl")) == sent
        # unsent prompts were not cached as anything: the next (uncancelled) call asks exactly those
        assert fn(COMPLETIONS, examples=EXAMPLES, cancel=threading.Event()) == [1.0] * 6
        assert len(_CancelAfter.bodies) == 6 and (c.cache_hits, c.cancelled) == (sent, 6 - sent)


class _Held(ChatStub):
    """Holds every request until `release` is set (a judge slower than the reward's deadline)."""

    release = threading.Event()

    def reply(self, body):
        type(self).release.wait(30)
        return _verdict()


def test_a_late_judged_call_stops_sending_and_the_registry_counts_the_batch_as_timeouts():
    _Held.release = threading.Event()
    with serve(_Held) as url:
        fn = build_reward("judged_directionality", judge={"endpoint": url, "model": "held", "retries": 0,
                                                          "max_concurrency": 2})
        reward = CompositeReward([WeightedReward("directionality", fn, 1.0, timeout_s=3.0)])
        try:
            batch = reward(COMPLETIONS, examples=EXAMPLES)  # returns at the deadline: 2 requests held in flight
            assert batch.per_function_BxF[:, 0].tolist() == [0.0] * 6
            assert len(_Held.bodies) == 2 and reward.counter_dict()["directionality"]["late_running"] == 1
            _Held.release.set()
            deadline = time.monotonic() + 20
            while reward.counter_dict()["directionality"]["late_running"] and time.monotonic() < deadline:
                time.sleep(0.05)
            counts = reward.counter_dict()["directionality"]
        finally:
            reward.close()
    assert len(_Held.bodies) == 2  # before: all 6, for a batch already scored 0
    assert {k: counts[k] for k in ("timeouts", "scored", "errors", "skipped", "late_running", "completions")} == {
        "timeouts": 6, "scored": 0, "errors": 0, "skipped": 0, "late_running": 0, "completions": 6}
    assert (fn.counters.requests, fn.counters.valid, fn.counters.cancelled) == (2, 2, 4)
