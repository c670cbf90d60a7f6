"""Weighted reward registry: failure isolation (raise / NaN / inf / timeout -> 0 and counted), n/a handling,
weights, async submit, and the hand-off to trainers.grpo_loss."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from reasoner.rewards import CompositeReward, RewardFailure, WeightedReward, build_reward, registered_rewards
from tests.tolerances import EPS32
from trainers.grpo_loss import combine_rewards, group_advantages

EXAMPLES = [{"answer": "yes"}] * 4


def length_reward(completions, *, examples):
    return [len(c) / 10 for c in completions]


def flaky_reward(completions, *, examples):
    """Raises on a completion containing 'boom', NaN for 'nan', inf for 'inf', None (n/a) for 'skip'."""
    out = []
    for c in completions:
        if "boom" in c:
            raise RuntimeError("verifier crashed")
        out.append({"nan": math.nan, "inf": math.inf, "skip": None}.get(c, 1.0))
    return out


def test_one_bad_completion_gets_zero_and_is_counted():
    reward = CompositeReward([WeightedReward("len", length_reward, 0.5), WeightedReward("flaky", flaky_reward, 2.0)])
    completions = ["ok", "boom", "nan", "inf", "skip"]
    batch = reward(completions, examples=[{}] * 5)
    # per_function is float64 rounded once to float32 (<= EPS32 / 2 relative); total_B is sum_f w_f r_f in float64
    # with float32 weights (one rounding each) and one final rounding, all terms >= 0: <= EPS32 relative.
    np.testing.assert_allclose(batch.per_function_BxF[:, 0], [0.2, 0.4, 0.3, 0.3, 0.4], rtol=EPS32)
    flaky = batch.per_function_BxF[:, 1]
    assert flaky[:4].tolist() == [1.0, 0.0, 0.0, 0.0] and math.isnan(flaky[4])
    np.testing.assert_allclose(batch.total_B, [0.1 + 2.0, 0.2, 0.15, 0.15, 0.2], rtol=EPS32)
    counters = reward.counter_dict()["flaky"]
    assert (counters["errors"], counters["non_finite"], counters["not_applicable"], counters["scored"]) == (1, 2, 1, 1)
    assert "verifier crashed" in counters["last_error"]
    assert counters["calls"] == 1 and counters["completions"] == 5
    assert reward.counter_dict()["len"]["errors"] == 0


def test_unscorable_rows_are_nan_and_get_zero_advantage():
    reward = CompositeReward([WeightedReward("flaky", flaky_reward)])
    batch = reward(["ok", "skip", "ok", "boom"], examples=[{}] * 4)
    assert math.isnan(batch.total_B[1])
    # Same as the device-side combination, and advantages stay finite.
    np.testing.assert_array_equal(np.asarray(combine_rewards(batch.per_function_BxF, reward.weights)), batch.total_B)
    adv, _, _ = group_advantages(batch.total_B, num_generations=4)
    adv = np.asarray(adv)
    assert adv[1] == 0.0 and np.all(np.isfinite(adv)) and adv[0] > 0 > adv[3]
    assert batch.means() == {"flaky": pytest.approx(2 / 3, rel=EPS32)}  # exact sum 2 of 0/1 values, one division


def test_failure_objects_and_timeouts_are_counted():
    def verifier(completions, *, examples):
        return [RewardFailure("timeout", "z3 30 s") if c == "slow" else 1.0 for c in completions]

    def raises_timeout(completions, *, examples):
        if any(c == "slow" for c in completions):
            raise TimeoutError("sandbox deadline")
        return [1.0] * len(completions)

    release, returned = threading.Event(), threading.Event()

    def hangs(completions, *, examples):
        release.wait(60)  # hangs until the test releases it (60 s only if the registry wrongly waits for it)
        returned.set()
        return [1.0] * len(completions)

    reward = CompositeReward([
        WeightedReward("verifier", verifier), WeightedReward("raises", raises_timeout),
        WeightedReward("hangs", hangs, timeout_s=0.2),
    ])
    batch = reward(["fast", "slow"], examples=[{}] * 2)
    # The step got its batch while the hung function was still running (no wall-clock bound: the ordering of
    # events shows it), and scored it as timed out, not as the 1.0 it returns once released.
    assert not returned.is_set()
    release.set()
    assert batch.per_function_BxF.tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    counters = reward.counter_dict()
    assert counters["verifier"]["timeouts"] == 1 and counters["raises"]["timeouts"] == 1
    assert counters["hangs"]["timeouts"] == 2 and "timeout_s=0.2" in counters["hangs"]["last_error"]


def test_submit_overlaps_and_returns_the_same_batch():
    release, finished = threading.Event(), threading.Event()

    def slow(completions, *, examples):
        release.wait(30)  # blocks until the caller has its future (30 s only if submit wrongly runs inline)
        finished.set()
        return [1.0] * len(completions)

    reward = CompositeReward([WeightedReward("slow", slow)])
    future = reward.submit(["a", "b"], examples=[{}] * 2)
    assert not finished.is_set()  # submit returned before the reward function could finish: it overlaps
    release.set()
    assert future.result().total_B.tolist() == [1.0, 1.0]
    reward.close()


def test_from_config_builds_registered_rewards():
    assert {"exact_match", "integer_match", "set_match", "astar"} <= set(registered_rewards())
    reward = CompositeReward.from_config([
        {"name": "exact_match", "weight": 1 / 3},
        {"name": "exact_match", "as": "label", "weight": 2 / 3, "options": {"normalize": "upper", "span_tag": None}},
    ])
    batch = reward(["<answer>Yes </answer>", "YES", "<answer>no</answer>", "yes"], examples=EXAMPLES)
    np.testing.assert_allclose(batch.per_function_BxF, [[1, 0], [0, 1], [0, 0], [0, 1]])
    np.testing.assert_allclose(batch.total_B, [1 / 3, 2 / 3, 0, 2 / 3], rtol=EPS32)  # as above: float32 weights


def test_chat_message_completions():
    reward = CompositeReward.from_config([{"name": "exact_match"}])
    msgs = [{"role": "assistant", "content": "<think>x</think>"}, {"role": "tool", "content": "<answer>no</answer>"},
            {"role": "assistant", "content": "<answer> YES</answer>"}]
    assert reward([msgs], examples=EXAMPLES[:1]).total_B.tolist() == [1.0]


def test_bad_configuration_raises_clear_errors():
    with pytest.raises(KeyError, match="unknown reward 'nope'"):
        build_reward("nope")
    with pytest.raises(ValueError, match="expected unique names"):
        CompositeReward([WeightedReward("a", length_reward), WeightedReward("a", length_reward)])
    with pytest.raises(ValueError, match="weight=nan"):
        CompositeReward([WeightedReward("a", length_reward, math.nan)])
    with pytest.raises(ValueError, match="returned 1 values for 2 completions"):
        CompositeReward([WeightedReward("short", lambda c, *, examples: [1.0])])(["a", "b"], examples=[{}, {}])
    with pytest.raises(ValueError, match="returned 'high'"):
        CompositeReward([WeightedReward("s", lambda c, *, examples: ["high"])])(["a"], examples=[{}])
    with pytest.raises(ValueError, match="2 completions and 1 examples"):
        CompositeReward([WeightedReward("a", length_reward)])(["a", "b"], examples=[{}])
    with pytest.raises(ValueError, match="normalize='title'"):
        build_reward("exact_match", normalize="title")
