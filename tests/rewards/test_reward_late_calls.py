"""Reward calls past their deadline: a function that takes `cancel` is told to stop; a function that cannot be
stopped is not called again while `max_late_calls` of its late calls still run. Before, every step whose call hung
left one more daemon thread running, holding its batch, without bound (a dead judge endpoint over a long run)."""

from __future__ import annotations

import threading

import pytest

from reasoner.rewards import CompositeReward, WeightedReward


def _join_late_threads():
    """Waits for the registry's deadline threads (released by the test) to end."""
    for thread in threading.enumerate():
        if thread.name == "reward-deadline":
            thread.join(60)


def test_late_calls_are_bounded_skipped_counted_and_reported(capsys):
    release, calls = threading.Event(), []

    def hangs(completions, *, examples):
        calls.append(len(completions))
        release.wait(60)  # hangs until the test releases it
        return [1.0] * len(completions)

    reward = CompositeReward([WeightedReward("hangs", hangs, timeout_s=0.2),
                              WeightedReward("fine", lambda cs, *, examples: [0.5] * len(cs))], max_late_calls=2)
    try:
        batches = [reward(["a", "b"], examples=[{}] * 2) for _ in range(4)]
        assert all(b.per_function_BxF.tolist() == [[0.0, 0.5], [0.0, 0.5]] for b in batches)
        counters = reward.counter_dict()["hangs"]
        assert (counters["timeouts"], counters["skipped"], counters["late_running"]) == (8, 4, 2)
        assert "2 calls past timeout_s=0.2 are still running" in counters["last_error"]
        assert capsys.readouterr().err.count("reward 'hangs' skipped") == 1  # once per spell, not per step
        release.set()
        _join_late_threads()
        assert calls == [2, 2]  # the third and fourth steps did not start a third and fourth hung thread
        assert reward.counter_dict()["hangs"]["late_running"] == 0
        reward(["c"], examples=[{}])
        _join_late_threads()
        assert calls == [2, 2, 1]  # called again once the late calls returned
    finally:
        release.set()
        reward.close()


def test_a_late_call_that_takes_cancel_is_told_to_stop():
    seen = []

    def pooled(completions, *, examples, cancel=None):
        seen.append(cancel.wait(60))  # a pool-backed verifier would cancel its futures here
        return [1.0] * len(completions)

    reward = CompositeReward([WeightedReward("pooled", pooled, timeout_s=0.2)], max_late_calls=1)
    try:
        assert reward(["a"], examples=[{}]).per_function_BxF.tolist() == [[0.0]]
        _join_late_threads()
        assert seen == [True] and reward.counter_dict()["pooled"]["late_running"] == 0
        reward(["b"], examples=[{}])  # not skipped: the cancelled call ended
        _join_late_threads()
        assert len(seen) == 2
    finally:
        reward.close()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_late_calls_is_checked(bad):
    with pytest.raises(ValueError, match="max_late_calls"):
        CompositeReward([WeightedReward("x", lambda cs, *, examples: [0.0] * len(cs))], max_late_calls=bad)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "60", True])
def test_timeout_s_is_checked(bad):
    """NaN was accepted; every call then raised in the deadline's join and each completion scored 0 as an error."""
    with pytest.raises(ValueError, match="reward 'x' timeout_s="):
        CompositeReward([WeightedReward("x", lambda cs, *, examples: [0.0] * len(cs), timeout_s=bad)])


def test_cancel_is_passed_without_a_deadline_too():
    def takes_cancel(completions, *, examples, cancel):  # no default: it always gets its event
        return [float(cancel.is_set())] * len(completions)

    reward = CompositeReward([WeightedReward("c", takes_cancel)])
    assert reward(["a"], examples=[{}]).per_function_BxF.tolist() == [[0.0]]
    assert reward.counter_dict()["c"]["errors"] == 0
