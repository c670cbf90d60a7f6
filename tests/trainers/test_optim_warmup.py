"""Warm-up in optimizer steps (`optim.warmup_steps`, CEDAR Table 7's "Warmup Steps 2"): the schedule against optax's
own warm-up schedules, the count winning over `warmup_ratio`, and bad values as one-line errors."""

import math

import ml_collections
import numpy as np
import optax
import pytest

from tests.tolerances import EPS32
from trainers.optim import make_optimizer, make_schedule, warmup_steps

LR, FLOOR = 1e-5, 0.1
# float32 schedule vs optax's float32 schedule computed in another order: each is within a few roundings of the
# exact value (step / W, progress, pi * p, cos, 1 +, 0.5 *, scale, floor +: 8 at most), relative to the peak lr.
ATOL = 2 * 8 * EPS32 * LR


def optim(schedule: str, **changes) -> ml_collections.ConfigDict:
    from configs import common

    return common.optim(name="adamw", lr=LR, schedule=schedule, min_lr_ratio=FLOOR, **changes)


def optax_reference(schedule: str, *, warm: int, total: int) -> optax.Schedule:
    """optax's own warm-up schedules: linear 0 -> peak over `warm` steps, then the decay over total - warm."""
    floor = LR * FLOOR
    if schedule == "cosine":  # decay_steps is the whole length, warm-up included (optax's docstring)
        return optax.warmup_cosine_decay_schedule(init_value=0.0, peak_value=LR, warmup_steps=warm,
                                                  decay_steps=total, end_value=floor)
    after = (optax.linear_schedule(LR, floor, total - warm) if schedule == "linear"
             else optax.constant_schedule(LR))
    return optax.join_schedules([optax.linear_schedule(0.0, LR, warm), after], [warm])


@pytest.mark.parametrize("schedule", ["cosine", "linear", "constant"])
@pytest.mark.parametrize("warm, total", [(2, 2400), (2, 7), (5, 40)])
def test_warmup_steps_match_optax(schedule, warm, total):
    # a ratio that alone would give another warm-up: the count must win
    ours = make_schedule(optim(schedule, warmup_steps=warm, warmup_ratio=0.5), total_steps=total)
    ref = optax_reference(schedule, warm=warm, total=total)
    steps = sorted({*range(min(total, 12)), *range(total - 3, total), total // 2})
    got = np.array([float(ours(s)) for s in steps])
    want = np.array([float(ref(s)) for s in steps])
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    assert float(ours(0)) == 0.0 and abs(float(ours(warm)) - LR) <= ATOL  # starts at 0, peaks at step W
    assert abs(float(ours(1)) - LR / warm) <= ATOL


def test_warmup_steps_win_over_the_ratio_and_zero_falls_back_to_it():
    assert warmup_steps(warmup_ratio=0.5, total_steps=100, steps=2) == 2
    assert warmup_steps(warmup_ratio=0.03, total_steps=100, steps=0) == math.ceil(0.03 * 100)
    ratio_only = make_schedule(optim("cosine", warmup_ratio=0.1), total_steps=40)
    ref = optax_reference("cosine", warm=4, total=40)
    assert all(abs(float(ratio_only(s)) - float(ref(s))) <= ATOL for s in range(40))


def test_a_warmup_longer_than_the_run_stays_in_warmup():
    sched = make_schedule(optim("cosine", warmup_steps=10), total_steps=4)
    assert [float(sched(s)) for s in range(4)] == pytest.approx([LR * s / 10 for s in range(4)], abs=ATOL)


def test_the_optimizer_applies_the_warmup_schedule():
    """SGD through `make_optimizer`: the first update is 0 (lr 0 at step 0), the second -lr/W * grad."""
    cfg = ml_collections.ConfigDict(dict(name="sgd", lr=LR, schedule="constant", warmup_steps=2, warmup_ratio=0.0,
                                         max_grad_norm=0.0))
    opt, _ = make_optimizer(cfg, total_steps=10)
    params = {"w": np.ones(3, np.float32)}
    grads = {"w": np.full(3, 2.0, np.float32)}
    state = opt.init(params)
    first, state = opt.update(grads, state, params)
    second, _ = opt.update(grads, state, params)
    assert np.all(np.asarray(first["w"]) == 0.0)
    np.testing.assert_allclose(np.asarray(second["w"]), -LR / 2 * 2.0, rtol=4 * EPS32)


@pytest.mark.parametrize("changes, message", [
    (dict(warmup_steps=-1), "optim.warmup_steps=-1; expected an int >= 0"),
    (dict(warmup_steps=2.5), "optim.warmup_steps=2.5; expected an int >= 0"),
    (dict(warmup_steps="2"), "optim.warmup_steps='2'; expected an int >= 0"),
    (dict(warmup_ratio=1.5), "optim.warmup_ratio=1.5; expected a fraction in [0, 1]"),
])
def test_bad_warmup_settings_are_one_line_errors(changes, message):
    with pytest.raises(ValueError) as err:
        make_schedule(optim("cosine", **changes), total_steps=10)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
