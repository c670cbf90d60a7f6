"""RL-of-Thoughts: the navigator's Double-Dueling DQN and the environment over logic blocks.

Variants:
  "paper": the authors' defaults (details file): buffer 500, batch 64, gamma 0.9, Adam lr 0.01 halved every
    1,000 episodes, epsilon 1.0 * 0.9995 per environment step down to 0, hard target sync every 50 updates,
    3,000 episodes one at a time, max depth 5, seed 1.
  "tiny": the same algorithm sized to train a small synthetic environment (about 10 states, episodes of a few
    steps) to convergence in about a minute on 2 CPU cores: 8 episodes per batch, 4,000 episodes, a smaller
    buffer (256) that fills early, epsilon decayed faster (0.999) to a floor of 0.2 (every action keeps being
    tried, so every Q-value, not only the greedy one, is learned), lr 3e-3 halved every 1,000 episodes.
  None / "cpu": the demo (`reasoner demo rlot`) on the embedded SmolLM2-135M-Instruct: the navigator trained for a
    CPU-sized number of episodes over GSM8K problems the model fails when asked directly (see `env`, `demo`).
"""

import ml_collections


def dqn_paper() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        buffer_size=500, batch_size=64, gamma=0.9, lr=0.01, lr_decay=0.5, lr_decay_every=1000,
        epsilon_start=1.0, epsilon_decay=0.9995, epsilon_floor=0.0, target_sync_every=50,
        num_episodes=3000, episodes_per_batch=1, max_episode_steps=64, checkpoint_every=100, seed=1,
        adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8))  # torch.optim.Adam's defaults, as the authors' code


def env_paper() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        max_depth=5, max_new_tokens=512, eval_max_new_tokens=128, temperature=0.0, max_len=4096,
        prm="outcome", task="gsm8k", seed=1))


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.trainer = "dqn"
    c.dqn = dqn_paper()
    c.env = env_paper()
    c.demo = ml_collections.ConfigDict(dict(
        task="gsm8k", train_pool=48, test=24, train_episodes=32, episodes_per_batch=8, sc_samples=3,
        sc_temperature=0.7, model="", max_new_tokens=96, max_len=2048))
    return c


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = base_config()
    if variant == "paper":
        return c
    if variant == "tiny":
        c.dqn.update(dict(buffer_size=256, batch_size=64, lr=3e-3, lr_decay_every=1000, epsilon_decay=0.999,
                          epsilon_floor=0.2, num_episodes=4000, episodes_per_batch=8, checkpoint_every=50,
                          seed=0))
        return c
    if variant in (None, "cpu"):
        # The demo: few, short episodes on the embedded model; learning starts once the (small) buffer is full.
        c.dqn.update(dict(buffer_size=64, batch_size=32, lr=0.01, epsilon_decay=0.99, epsilon_floor=0.05,
                          num_episodes=32, episodes_per_batch=8, checkpoint_every=1))
        c.env.update(dict(max_depth=3, max_new_tokens=96, max_len=2048))
        return c
    raise ValueError(f"configs/rlot.py: unknown variant {variant!r}; expected one of None, 'cpu', 'tiny', 'paper'")
