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
  "demo_tiny": the demo's every stage on a random 2-layer model and a handful of problems (tests, smoke runs).
Transfer: any variant with `--config.demo.navigator=DIR --config.demo.model=OTHER` evaluates the navigator trained in
DIR with another model (no training).
Checks: `check(config)` (run before any model loads by `reasoner train` and `reasoner demo rlot`, and `check_dqn` /
`check_episode_steps` again by `trainers.dqn.train_dqn` on its environment) stops a config the training cannot run.
"""

import math

import ml_collections

from configs import common


def dqn_paper() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        buffer_size=500, batch_size=64, gamma=0.9, lr=0.01, lr_decay=0.5, lr_decay_every=1000,
        epsilon_start=1.0, epsilon_decay=0.9995, epsilon_floor=0.0, target_sync_every=50,
        num_episodes=3000, episodes_per_batch=1, max_episode_steps=64, checkpoint_every=100, seed=1,
        adam_b1=0.9, adam_b2=0.999, adam_eps=1e-8))  # torch.optim.Adam's defaults, as the authors' code


def env_paper() -> ml_collections.ConfigDict:
    """The environment: max depth 5 and width 5 (the authors' defaults); tokens per block stage and per
    self-evaluation / check-finished reply; prm: outcome | verifier (arithmetic check of GSM8K-style steps) |
    math_shepherd (the Math-Shepherd protocol over `prm_model`, default the policy model itself; the published PRM is
    a Mistral-7B) | astar (the A* step verifier on proof steps; demo.task proofwriter or prontoqa, whose theories
    are read as logic programs) | z3 (Z3's verdicts on the SMT-LIB scripts a step writes, through a verifier pool
    of `prm_workers` processes with `prm_timeout_s` per script). prm_unverifiable: the astar / z3 score of a step
    with nothing to check (no proof block, no script)."""
    return ml_collections.ConfigDict(dict(
        max_depth=5, max_width=5, max_new_tokens=512, eval_max_new_tokens=160, prm="verifier", prm_model="",
        prm_unverifiable=0.0, prm_timeout_s=10.0, prm_workers=2))


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.trainer = "dqn"
    c.single_device = True  # on a CPU, simulated devices only split the same cores
    c.dqn = dqn_paper()
    c.env = env_paper()
    c.log = common.log()  # metric writers of `train_dqn` (completions_every does not apply)
    # The demo: task data (data_root "" = ../shared/data beside the checkout), a direct-answer pass over
    # `train_pool` training problems to find the failed ones, navigator training, evaluation on `test` held-out
    # problems of navigator / direct / CoT / CoT-SC (and navigator-SC when navigator_sc = k > 1).
    # navigator: "" trains one; a DQN run directory (a demo's workdir or its navigator/, or a `reasoner train
    # configs/rlot.py` workdir) skips the direct pass and training and evaluates that navigator with `model`
    # (transfer across LLMs, `reasoner.agents.rlot.transfer`).
    c.demo = ml_collections.ConfigDict(dict(
        task="gsm8k", data_root="", train_pool=256, test=256, model="smollm2-135m-instruct", max_len=4096,
        direct_max_new_tokens=32, cot_max_new_tokens=512, sc_samples=5, sc_temperature=0.7, navigator_sc=0,
        navigator="", seed=0))
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
        # The demo on the embedded SmolLM2-135M-Instruct on 2 CPU cores: few, short episodes; the buffer is small
        # so that learning starts within the run; depth 2 and short replies keep prompts under ~1k tokens.
        c.dqn.update(dict(buffer_size=24, batch_size=16, lr=0.01, epsilon_decay=0.97, epsilon_floor=0.05,
                          num_episodes=40, episodes_per_batch=8, checkpoint_every=1))
        c.env.update(dict(max_depth=2, max_width=2, max_new_tokens=48, eval_max_new_tokens=40))
        c.demo.update(dict(train_pool=24, test=32, max_len=1536, direct_max_new_tokens=24, cot_max_new_tokens=96,
                           sc_samples=3))
        return c
    if variant == "demo_tiny":
        # A random 2-layer model on SmolLM2's tokenizer and a handful of problems: a smoke run of every stage.
        c = get_config("cpu")
        c.demo.update(dict(model="random-tiny", train_pool=6, test=4, max_len=1024, direct_max_new_tokens=4,
                           cot_max_new_tokens=6, sc_samples=2, navigator_sc=2))
        c.env.update(dict(max_new_tokens=4, eval_max_new_tokens=4))
        c.dqn.update(dict(num_episodes=8, episodes_per_batch=4, buffer_size=6, batch_size=4))
        return c
    raise ValueError(f"configs/rlot.py: unknown variant {variant!r}; expected one of None, 'cpu', 'tiny', 'paper', "
                     "'demo_tiny'")


def check_dqn(dqn) -> None:
    """A ValueError naming the first `dqn.*` number out of its range (in the jitted update a 0 divisor is silent:
    `lr_decay_every=0` gave lr0 * 0.5 ** (5 // 0) = 4 lr0, `target_sync_every=0` a target synced at every update),
    or a batch of episodes that does not divide the run, or a TD batch larger than the buffer (sampled without
    replacement)."""
    rules = {**{k: (lambda v: v >= 1 and v == int(v), "an integer >= 1") for k in (
        "buffer_size", "batch_size", "episodes_per_batch", "num_episodes", "target_sync_every", "lr_decay_every",
        "max_episode_steps")},
        **{k: (lambda v: 0 <= v <= 1, "a number in [0, 1]") for k in ("gamma", "epsilon_start", "epsilon_floor")},
        **{k: (lambda v: 0 < v <= 1, "a number in (0, 1]") for k in ("epsilon_decay", "lr_decay")},
        "lr": (lambda v: v > 0, "a number > 0")}
    for key, (ok, want) in rules.items():
        v = dqn[key] if isinstance(dqn[key], (int, float)) and not isinstance(dqn[key], bool) else float("nan")
        if not (math.isfinite(v) and ok(v)):
            raise ValueError(f"dqn.{key}={dqn[key]!r}: expected {want}")
    if int(dqn.num_episodes) % int(dqn.episodes_per_batch):
        raise ValueError(f"dqn.num_episodes={dqn.num_episodes} must be a positive multiple of "
                         f"dqn.episodes_per_batch={dqn.episodes_per_batch}")
    if int(dqn.batch_size) > int(dqn.buffer_size):
        raise ValueError(f"dqn.batch_size={dqn.batch_size}: expected at most dqn.buffer_size={dqn.buffer_size} "
                         "(sampling is without replacement)")


def check_episode_steps(dqn, longest, key: str) -> None:
    """A ValueError when an episode may take more steps than `dqn.max_episode_steps` (`longest`, the bound that
    `key` sets; None: unknown). The step loop sees it only after the episodes ran: on RL-of-Thoughts a batch of
    LLM calls spent, then "still running after max_steps"."""
    if longest is not None and int(dqn.max_episode_steps) < int(longest):
        raise ValueError(f"dqn.max_episode_steps={dqn.max_episode_steps} is below {key} = {longest}, the most steps "
                         f"an episode can take; expected dqn.max_episode_steps >= {key}")


def check(config) -> None:
    """The errors a training run would otherwise meet after LLM calls (the direct pass, the first episodes): the
    `dqn.*` numbers, and `dqn.max_episode_steps` below `env.max_depth + 1` (a `ThoughtEnv` episode takes up to
    `env.max_depth + 1` steps: `env.max_depth` blocks, then the step that forces the answer, as the authors'
    `ENV.step`; `reasoner.agents.rlot.env`)."""
    check_dqn(config.dqn)
    check_episode_steps(config.dqn, int(config.env.max_depth) + 1, "env.max_depth + 1")
