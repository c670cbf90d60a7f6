"""GRPO's prompt stream: each epoch a permutation of the prompts, resumed exactly, and never over other prompts."""

import numpy as np
import pytest

from trainers.data import PromptStream


def test_every_epoch_is_a_permutation_and_a_restored_stream_goes_on_exactly():
    stream = PromptStream(size=6, per_step=4, seed=3, total_steps=6)
    drawn = [i for _ in range(3) for i in next(stream)]  # 12 indices: two whole epochs
    assert sorted(drawn[:6]) == sorted(drawn[6:]) == list(range(6)) and drawn[:6] != drawn[6:]
    resumed = PromptStream(size=6, per_step=4, seed=3, total_steps=6)
    resumed.set_state(stream.get_state())
    assert list(resumed) == list(stream) and resumed.step == 6


def test_a_state_from_other_prompts_or_settings_is_refused():
    state = PromptStream(size=6, per_step=4, seed=3).get_state()
    for changed in (dict(size=7), dict(per_step=2), dict(seed=4)):
        other = PromptStream(**{**dict(size=6, per_step=4, seed=3), **changed})
        with pytest.raises(ValueError, match=r"was saved over .*this run has .*another --workdir"):
            other.set_state(state)
    old = PromptStream(size=6, per_step=4, seed=3)
    old.set_state({"step": 2})  # a checkpoint from before the stream recorded its settings
    assert old.step == 2 and np.all(np.asarray(old.next()) < 6)
