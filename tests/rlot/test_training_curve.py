"""The navigator's training log: the mean return and the authors' curve quantity, the mean reward per step."""

import numpy as np

REWARDS = ([0.5, 1.0], [0.25, 0.5, 0.0])  # episode 0 ends after 2 steps, episode 1 after 3 (exact in float32)


class Scripted:
    """Two episodes per batch whose rewards are `REWARDS` whatever the actions."""

    num_actions = 5

    def reset(self, rng, n):
        self.t = 0
        return np.zeros((n, 7), np.float32)

    def step(self, actions):
        self.t += 1
        reward = [r[self.t - 1] if self.t <= len(r) else 0.0 for r in REWARDS]
        done = [self.t >= len(r) for r in REWARDS]
        return np.full((2, 7), self.t, np.float32), np.asarray(reward, np.float32), np.asarray(done)


def _history():
    from configs.rlot import get_config
    from trainers.dqn import train_dqn

    config = get_config("tiny")
    config.dqn.update(dict(episodes_per_batch=2, num_episodes=2, buffer_size=8, batch_size=4))
    return train_dqn(Scripted(), config).history


def test_the_log_has_the_return_and_the_authors_mean_reward_per_step():
    """`mean_return` is the mean over the batch of each episode's sum of rewards: (1.5 + 0.75) / 2 = 1.125. The
    authors log and plot `np.mean(episode_rewards)` per episode (train_Dueling_DDQN_MATH.py), here 0.75 and 0.25:
    `mean_step_reward` = 0.5. Only the sum was logged, and the demo's curve, titled "mean return", showed it."""
    from reasoner.agents.rlot.setup import batch_line

    (row,) = _history()
    assert row["episodes"] == 2 and row["mean_length"] == 2.5
    assert row["mean_return"] == 1.125 and row["mean_step_reward"] == 0.5
    assert "mean return 1.125, mean reward per step 0.500, " in batch_line(1, row)


def test_the_demo_curve_plots_the_mean_reward_per_step_first(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from reasoner.pipelines import rlot

    history = _history() + [{"episodes": 4, "mean_return": 2.0, "loss": 0.1, "epsilon": 0.5}]  # an older row
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    rlot.plot_training(history, tmp_path / "curve.png")
    (fig,) = figures
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["mean reward per step", "mean return (sum of rewards)", "TD loss", "epsilon"]
    first, second = (ax.lines[0].get_ydata() for ax in fig.axes[:2])
    np.testing.assert_array_equal(first, [0.5, np.nan])  # the row without the key is a gap
    np.testing.assert_array_equal(second, [1.125, 2.0])
    assert (tmp_path / "curve.png").stat().st_size > 1000
