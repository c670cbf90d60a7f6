"""Double-Dueling DQN for any batched environment of the protocol

    reset(rng, n)   -> obs float32[n, 7]
    step(actions)   -> (obs float32[n, 7], reward float32[n], done bool[n])

(a row that is done stays done: its later actions are ignored and it returns reward 0 until the next reset).
The environment owns its rules (RL-of-Thoughts: Refine never first, Terminate only after an answer, the
depth limit); this file knows nothing about LLMs.

Sections: config -> state (one pytree: online/target params, Adam state, replay buffer, epsilon, counters,
rng) -> jitted pieces (`act`, `observe_and_learn`) -> the episode source (checkpointable) -> `train_dqn`
(`trainers.loop.run_loop` over the episode source: resume, checkpoints, metrics, progress, preemption and the
non-finite guard, as for every trainer) -> `DQNResult`.

The algorithm (Mnih et al. 2015 + van Hasselt's Double DQN + Wang's dueling head, as in the RLoT code):
  * epsilon-greedy on the online net; epsilon *= decay at every environment transition, floored, BEFORE the action
    is chosen, as the authors' loop (`epsilons`: the first action already explores with start * decay);
  * transitions (s, a, r, done, s') go to a circular buffer of `buffer_size`; learning starts once it is full;
  * one update per stored transition: a uniform batch without replacement, a' = argmax_a Q_online(s', a),
    y = r + gamma * (1 - done) * Q_target(s', a'), loss = mean (Q_online(s, a) - y)^2, Adam;
  * the target net is a hard copy of the online net every `target_sync_every` updates, counted as the authors'
    `learn_count` (train_Dueling_DDQN_MATH.py `learn()`, l. 151 `self.learn_count += 1`, l. 157 `if self.learn_count
    % self.target_update_interval == 0:` the copy), which only `learn()` advances, once per environment step after
    the buffer is full (l. 232 `if len(self.memory) >= self.buffer_size: self.learn()`): updates, not environment
    steps, so the k-th sync follows transition buffer_size - 1 + k * target_sync_every. A skipped (non-finite)
    update counts none here (theirs has no skip: it would copy NaN weights);
  * lr = lr0 * lr_decay ** (episodes // lr_decay_every) (torch's StepLR advanced once per episode).
Batched episodes (choice, the paper runs one at a time): `episodes_per_batch` episodes run together; after each
batched step the k new transitions are stored in row order, then one update per transition after whose append the
buffer is full (per transition the paper's schedule; one row: the paper's loop). The rng is split once per batch
of episodes and once per step, and checkpoints are taken between batches, so resume is exact: a run stopped and
resumed ends with bit-identical parameters to an uninterrupted one.

Checkpoints: the whole `DQNState` is the loop's checkpointed state, the episode source's `get_state()` its data
item. One loop step is one batch of episodes; `dqn.checkpoint_every` counts them.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx, struct

from reasoner.agents.rlot.navigator import GreedyNavigator, Navigator

TRAINER = "dqn"


class Environment(Protocol):
    """A batched environment. After `step`, an optional `executed` array ([n] ints) names the action each row
    actually ran where the environment overrode the chosen one (RL-of-Thoughts runs Reason for a first Refine);
    the replay buffer and the action statistics record it, as the authors' loop does."""

    num_actions: int

    def reset(self, rng, n: int) -> np.ndarray: ...

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


# ----------------------------------------------------------------------------------------------- state


@struct.dataclass
class DQNState:
    """Everything that changes during training (a pytree of arrays; checkpointed whole).

    online / target: navigator params (nnx.State). opt_state: Adam moments of `online`.
    buf_obs_Cx7, buf_action_C, buf_reward_C, buf_done_C, buf_next_Cx7: the circular replay buffer of C slots;
    buf_ptr: next write slot; buf_size: filled slots (<= C).
    epsilon: the exploration rate of the latest transition (start before the first).
    env_steps / updates / episodes: transitions stored, updates made, episodes finished (int32 scalars).
    rng: raw key data uint32[2].
    """

    online: Any
    target: Any
    opt_state: Any
    buf_obs_Cx7: jax.Array
    buf_action_C: jax.Array
    buf_reward_C: jax.Array
    buf_done_C: jax.Array
    buf_next_Cx7: jax.Array
    buf_ptr: jax.Array
    buf_size: jax.Array
    epsilon: jax.Array
    env_steps: jax.Array
    updates: jax.Array
    episodes: jax.Array
    rng: jax.Array

    @property
    def step(self) -> jax.Array:
        """Optimizer updates made (what `reasoner train` reports as the step)."""
        return self.updates


def _adam(cfg) -> optax.GradientTransformation:
    """Adam's direction only; the (episode-scheduled) lr is applied in the update."""
    return optax.scale_by_adam(b1=float(cfg.adam_b1), b2=float(cfg.adam_b2), eps=float(cfg.adam_eps))


def init_state(cfg, *, obs_dim: int, num_actions: int) -> tuple[Any, DQNState]:
    """(graphdef, state) for a fresh run; params from `Navigator` seeded with `cfg.seed`."""
    net = Navigator(rngs=nnx.Rngs(int(cfg.seed)), num_inputs=obs_dim, num_actions=num_actions)
    graphdef, params = nnx.split(net)
    C, f32 = int(cfg.buffer_size), jnp.float32
    state = DQNState(
        online=params, target=jax.tree.map(jnp.copy, params), opt_state=_adam(cfg).init(params),
        buf_obs_Cx7=jnp.zeros((C, obs_dim), f32), buf_action_C=jnp.zeros((C,), jnp.int32),
        buf_reward_C=jnp.zeros((C,), f32), buf_done_C=jnp.zeros((C,), f32),
        buf_next_Cx7=jnp.zeros((C, obs_dim), f32), buf_ptr=jnp.zeros((), jnp.int32),
        buf_size=jnp.zeros((), jnp.int32), epsilon=jnp.asarray(float(cfg.epsilon_start), f32),
        env_steps=jnp.zeros((), jnp.int32), updates=jnp.zeros((), jnp.int32), episodes=jnp.zeros((), jnp.int32),
        rng=jax.random.key_data(jax.random.key(int(cfg.seed))),
    )
    return graphdef, state


# ------------------------------------------------------------------------------------------ jitted parts


@dataclasses.dataclass(frozen=True)
class Hyper:
    """The static numbers of the update (hashable, so the jits specialise on them)."""

    batch_size: int
    gamma: float
    lr: float
    lr_decay: float
    lr_decay_every: int
    epsilon_start: float
    epsilon_decay: float
    epsilon_floor: float
    target_sync_every: int
    adam_b1: float
    adam_b2: float
    adam_eps: float

    @classmethod
    def from_config(cls, cfg) -> "Hyper":  # each field from the config key of its name, as its type
        return cls(**{f.name: (int if f.type == "int" else float)(cfg[f.name]) for f in dataclasses.fields(cls)})


def q_values(graphdef, params, obs_NxS) -> jax.Array:
    return nnx.merge(graphdef, params)(obs_NxS)


@jax.jit
def _split(rng):
    key = jax.random.wrap_key_data(rng)
    a, b = jax.random.split(key)
    return jax.random.key_data(a), jax.random.key_data(b)


@jax.jit
def begin_batch(state: DQNState) -> tuple[DQNState, jax.Array]:
    """Splits off the key for the environment's reset of this batch of episodes."""
    keep, reset_key = _split(state.rng)
    return state.replace(rng=keep), reset_key


def epsilons(hp: Hyper, env_steps, active_N) -> tuple[jax.Array, jax.Array]:
    """(epsilon of each row float32[N], epsilon of the step's last active row): the active rows are transitions
    env_steps + 1, env_steps + 2, ... in row order, and transition t explores with max(floor, start * decay**t):
    the authors' loop runs `self.epsilon = max(min_epsilon, self.epsilon * epsilon_decay)` and only then
    `choose_action`, so its first action uses start * decay. The closed form equals the authors' repeated
    `max(floor, eps * decay)` (decay <= 1 keeps the floor a floor) without a float32 product drifting over a run."""
    rate = lambda t: jnp.maximum(  # noqa: E731
        hp.epsilon_start * jnp.power(jnp.float32(hp.epsilon_decay), t.astype(jnp.float32)), hp.epsilon_floor)
    t_N = env_steps + jnp.cumsum(jnp.asarray(active_N).astype(jnp.int32))
    return rate(t_N), rate(t_N[-1])


@functools.partial(jax.jit, static_argnames=("graphdef", "hp"))
def act(graphdef, state: DQNState, obs_NxS, active_N, *, hp: Hyper) -> tuple[DQNState, jax.Array]:
    """Epsilon-greedy actions int32[N] from the online net; `active_N` marks the rows whose transitions will be
    stored (`epsilons`: each explores with its own transition's rate). state.epsilon becomes the last one's."""
    keep, key = _split(state.rng)
    k_explore, k_random = jax.random.split(jax.random.wrap_key_data(key))
    q = q_values(graphdef, state.online, obs_NxS)
    n, num_actions = q.shape
    greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
    eps_N, last = epsilons(hp, state.env_steps, active_N)
    explore = jax.random.uniform(k_explore, (n,)) < eps_N
    random_a = jax.random.randint(k_random, (n,), 0, num_actions, jnp.int32)
    epsilon = jnp.where(jnp.any(active_N), last, state.epsilon)
    return state.replace(rng=keep, epsilon=epsilon), jnp.where(explore, random_a, greedy)


def _td_loss(online, target, graphdef, gamma, obs, action, reward, done, nxt):
    """Double-DQN squared TD error: online picks a', target values it."""
    q = q_values(graphdef, online, obs)
    q_sa = jnp.take_along_axis(q, action[:, None], axis=1)[:, 0]
    a_next = jnp.argmax(q_values(graphdef, online, nxt), axis=-1)
    q_next = jnp.take_along_axis(q_values(graphdef, target, nxt), a_next[:, None], axis=1)[:, 0]
    y = jax.lax.stop_gradient(reward + gamma * (1.0 - done) * q_next)
    return jnp.mean(jnp.square(q_sa - y))


def _one_update(graphdef, hp: Hyper, state: DQNState) -> tuple[DQNState, jax.Array]:
    keep, key = _split(state.rng)
    C = state.buf_action_C.shape[0]
    idx = jax.random.choice(jax.random.wrap_key_data(key), C, (hp.batch_size,), replace=False)
    loss, grads = jax.value_and_grad(_td_loss)(
        state.online, state.target, graphdef, hp.gamma, state.buf_obs_Cx7[idx], state.buf_action_C[idx],
        state.buf_reward_C[idx], state.buf_done_C[idx], state.buf_next_Cx7[idx])
    direction, opt_state = optax.scale_by_adam(b1=hp.adam_b1, b2=hp.adam_b2, eps=hp.adam_eps).update(
        grads, state.opt_state)
    lr = hp.lr * hp.lr_decay ** (state.episodes // hp.lr_decay_every).astype(jnp.float32)
    online = jax.tree.map(lambda p, d: p - lr * d, state.online, direction)
    # a non-finite loss or gradient (a diverging net) changes nothing: weights, moments, target and the update
    # count stay as they were, as `trainers.step` skips such a step, so no checkpoint ever holds NaN weights
    finite = jnp.isfinite(loss) & jnp.isfinite(optax.global_norm(grads))
    keep_if = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)  # noqa: E731
    online, opt_state = keep_if(online, state.online), keep_if(opt_state, state.opt_state)
    updates = state.updates + finite.astype(state.updates.dtype)
    sync = finite & ((updates % hp.target_sync_every) == 0)
    target = jax.tree.map(lambda t, o: jnp.where(sync, o, t), state.target, online)
    return state.replace(online=online, target=target, opt_state=opt_state, updates=updates, rng=keep), loss


def buffer_slots(ptr, active_N, C: int) -> jax.Array:
    """The buffer slot of each row's transition, int32[N] (C: not written). The k active rows go to ptr, ptr+1, ...
    (mod C) in row order, as k appends to a FIFO; when k > C only the last C are written, the ones a FIFO keeps:
    a scatter with a repeated slot leaves the winner unspecified (XLA on GPU), so no slot is written twice."""
    rank = jnp.cumsum(jnp.asarray(active_N).astype(jnp.int32))  # 1-based among the active rows
    return jnp.where(active_N & (rank > rank[-1] - C), (ptr + rank - 1) % C, C)


@functools.partial(jax.jit, static_argnames=("graphdef", "hp"), donate_argnums=(1,))
def observe_and_learn(graphdef, state: DQNState, obs_NxS, action_N, reward_N, done_N, next_NxS, active_N, *,
                      hp: Hyper) -> tuple[DQNState, dict]:
    """Stores the active rows' transitions (in row order) and, once the buffer is full, makes one update per
    stored transition (a `fori_loop`: one compile whatever the count). Returns (state, metrics): the mean TD loss,
    the updates tried and how many of them were `skipped` (non-finite, not applied)."""
    C = state.buf_action_C.shape[0]
    k, filled = jnp.sum(active_N.astype(jnp.int32)), state.buf_size
    slot = buffer_slots(state.buf_ptr, active_N, C)
    put = lambda buf, x: buf.at[slot].set(x.astype(buf.dtype), mode="drop")  # noqa: E731
    state = state.replace(
        buf_obs_Cx7=put(state.buf_obs_Cx7, obs_NxS), buf_action_C=put(state.buf_action_C, action_N),
        buf_reward_C=put(state.buf_reward_C, reward_N), buf_done_C=put(state.buf_done_C, done_N),
        buf_next_Cx7=put(state.buf_next_Cx7, next_NxS), buf_ptr=(state.buf_ptr + k) % C,
        buf_size=jnp.minimum(state.buf_size + k, C), env_steps=state.env_steps + k,
    )
    n_updates = jnp.clip(filled + k - C + 1, 0, k)  # one per append after which the buffer is full, as the paper

    def body(_, carry):
        s, total, skipped = carry
        before = s.updates
        s, loss = _one_update(graphdef, hp, s)
        return s, total + loss, skipped + (s.updates == before).astype(jnp.int32)  # a skipped update counts none

    zero = jnp.zeros((), jnp.int32)
    state, total, skipped = jax.lax.fori_loop(0, n_updates, body, (state, jnp.zeros((), jnp.float32), zero))
    return state, {"loss": total / jnp.maximum(n_updates, 1).astype(jnp.float32), "updates": n_updates,
                   "skipped": skipped}


# ------------------------------------------------------------------------------------------ episode source


@dataclasses.dataclass
class BatchStats:
    """One batch of episodes: return, length and action sequence of each episode (for curves and Table 5)."""

    returns: list[float]
    lengths: list[int]
    actions: list[list[int]]
    loss: float
    updates: int
    skipped: int = 0  # updates with a non-finite TD loss or gradient, not applied


class EpisodeSource:
    """Runs batches of `n` episodes of `env` with epsilon-greedy actions, feeding `observe_and_learn`.

    A `trainers.loop.Source`: iterating yields the index of the next batch of episodes (up to `total_steps`
    batches), `run_batch` runs it. Checkpointable: `get_state()` / `set_state()` hold the batches taken and the
    environment's own state (when the environment has `get_state`/`set_state`, e.g. a problem sampler's position).
    `max_steps` caps an episode (an environment that never ends is an error, not a hang).
    """

    def __init__(self, env, *, n: int, max_steps: int, total_steps: int = 0):
        self.env, self.n, self.max_steps = env, int(n), int(max_steps)
        self.total_steps = int(total_steps)
        self.batches = 0

    @property
    def step(self) -> int:
        return self.batches

    def __iter__(self):
        return self

    def __next__(self) -> int:
        if self.batches >= self.total_steps:
            raise StopIteration
        self.batches += 1
        return self.batches - 1

    def get_state(self) -> dict:
        env_state = self.env.get_state() if hasattr(self.env, "get_state") else None
        return {"batches": self.batches, "env": env_state}

    def set_state(self, data: dict) -> None:
        self.batches = int(data["batches"])
        if data.get("env") is not None and hasattr(self.env, "set_state"):
            self.env.set_state(data["env"])

    def run_batch(self, graphdef, state: DQNState, hp: Hyper) -> tuple[DQNState, BatchStats]:
        state, reset_key = begin_batch(state)
        obs = _check_obs(self.env.reset(reset_key, self.n), self.n, "reset")
        done = np.zeros((self.n,), bool)
        returns = np.zeros((self.n,), np.float64)
        lengths = np.zeros((self.n,), np.int64)
        actions: list[list[int]] = [[] for _ in range(self.n)]
        loss_sum, updates, skipped = 0.0, 0, 0
        for _ in range(self.max_steps):
            if done.all():
                break
            active = ~done
            state, action = act(graphdef, state, jnp.asarray(obs), jnp.asarray(active), hp=hp)
            action = np.asarray(action)
            nxt, reward, new_done = self.env.step(action)
            action = np.asarray(getattr(self.env, "executed", action)).reshape(action.shape).astype(action.dtype)
            nxt = _check_obs(nxt, self.n, "step")
            reward, new_done = np.asarray(reward, np.float32), np.asarray(new_done, bool)
            if reward.shape != (self.n,) or not np.isfinite(reward).all():
                raise ValueError(f"environment {type(self.env).__name__} step: rewards {reward.tolist()}; expected "
                                 f"{self.n} finite floats (a NaN or inf would reach the replay buffer)")
            state, m = observe_and_learn(graphdef, state, jnp.asarray(obs), jnp.asarray(action), jnp.asarray(reward),
                                         jnp.asarray(new_done, jnp.float32), jnp.asarray(nxt), jnp.asarray(active),
                                         hp=hp)
            k = int(m["updates"])
            loss_sum += float(m["loss"]) * k
            updates += k
            skipped += int(m["skipped"])
            for i in np.flatnonzero(active):
                actions[i].append(int(action[i]))
            returns += np.where(active, reward, 0.0)
            lengths += active
            done = done | new_done
            obs = nxt
        if not done.all():
            raise RuntimeError(f"environment {type(self.env).__name__}: {int((~done).sum())} of {self.n} episodes "
                               f"still running after max_steps={self.max_steps}; expected every episode to end")
        state = state.replace(episodes=state.episodes + self.n)
        return state, BatchStats(returns=returns.tolist(), lengths=lengths.tolist(), actions=actions,
                                 loss=loss_sum / max(updates, 1), updates=updates, skipped=skipped)


def _check_obs(obs, n: int, where: str) -> np.ndarray:
    obs = np.asarray(obs, np.float32)
    if obs.ndim != 2 or obs.shape[0] != n:
        raise ValueError(f"environment {where}: observations of shape {obs.shape}; expected float32[{n}, obs_dim]")
    if not np.isfinite(obs).all():
        bad = sorted({int(i) for i in np.argwhere(~np.isfinite(obs))[:, 0]})
        raise ValueError(f"environment {where}: non-finite observations in rows {bad}; expected finite floats "
                         "(a NaN or inf would reach the replay buffer)")
    return obs


# ---------------------------------------------------------------------------------------------- train_dqn


@dataclasses.dataclass
class DQNResult(GreedyNavigator):
    """A trained navigator: greedy `act`, `q_values` (`GreedyNavigator`), the final `state` and the per-batch
    `history`."""

    graphdef: Any
    state: DQNState
    history: list[dict]
    resumed_from: int | None
    preempted: bool = False

    @property
    def online_params(self):
        return self.state.online

    def navigator(self) -> Navigator:
        return nnx.merge(self.graphdef, self.state.online)

    @property
    def last_metrics(self) -> dict:
        return dict(self.history[-1]) if self.history else {}

    eval_history: tuple = ()  # the DQN has no periodic evaluation; `reasoner train` reads this


def _section(config) -> ml_collections.ConfigDict:
    return config.dqn if "dqn" in config else config


def train_dqn(env, config, *, workdir=None, stop_after_episodes: int | None = None,
              on_batch: Callable[[int, BatchStats, dict], None] | None = None, progress: bool = False) -> DQNResult:
    """Trains (or resumes, when `workdir/checkpoints` holds a run) a navigator on `env`.

    config: a `configs/rlot.py` config (its `dqn` section is read) or the section itself.
    workdir: where checkpoints (every `checkpoint_every` batches and at the end), `metrics.jsonl` and the other
      metric writers' files go; None uses a temporary directory, removed at the end.
    stop_after_episodes: stop early once this many episodes are done (simulates an interruption; a later call
      with the same workdir resumes).
    on_batch(batch_index, stats, record): called after each batch of episodes (e.g. for logging).
    The record (a metrics row): `mean_return`, each episode's undiscounted sum of rewards averaged over the batch;
    `mean_step_reward`, each episode's mean reward per transition averaged over the batch: the authors' curve
    (train_Dueling_DDQN_MATH.py l. 238 `episode_reward = np.mean(episode_rewards)`, printed as "Reward", plotted
    per episode and as a 100-episode mean by `save()`, l. 167, 175); the sum grows with the episode's length.
    progress: the loop's progress bar.
    """
    import tempfile

    from configs.rlot import check_dqn, check_episode_steps
    from reasoner.checkpoint import fingerprint
    from reasoner.metrics.curves import read_metrics
    from trainers.loop import run_loop

    cfg = _section(config)
    check_dqn(cfg)
    check_episode_steps(cfg, getattr(env, "max_episode_length", None),
                        getattr(env, "max_episode_length_key", f"{type(env).__name__}.max_episode_length"))
    n, num_episodes = int(cfg.episodes_per_batch), int(cfg.num_episodes)
    obs_dim = int(getattr(env, "obs_dim", 7))
    graphdef, state = init_state(cfg, obs_dim=obs_dim, num_actions=int(getattr(env, "num_actions", 5)))
    hp = Hyper.from_config(cfg)
    total_batches = num_episodes // n
    stop = total_batches if stop_after_episodes is None else min(total_batches, -(-stop_after_episodes // n))
    source = EpisodeSource(env, n=n, max_steps=int(cfg.max_episode_steps), total_steps=stop)

    def update(state: DQNState, batch_index: int) -> tuple[DQNState, dict]:
        state, stats = source.run_batch(graphdef, state, hp)
        b = source.batches
        record = {"step": b, "episodes": b * n, "mean_return": float(np.mean(stats.returns)),
                  "mean_step_reward": float(np.mean(np.asarray(stats.returns) / np.maximum(stats.lengths, 1))),
                  "mean_length": float(np.mean(stats.lengths)), "loss": stats.loss,
                  "epsilon": float(state.epsilon), "updates": int(state.updates), "skipped_updates": stats.skipped}
        if on_batch is not None:
            on_batch(b, stats, record)
        record.pop("step")
        return state, {**record, "skipped": stats.skipped > 0 or not np.isfinite(stats.loss)}

    loop_config = _loop_config(config, cfg)
    if workdir is None:  # nothing can resume from a temporary directory: one checkpoint, at the end
        loop_config.train.checkpoint_every = stop
    run = DQNRun(config=loop_config, state=state, mesh=None)
    meta = {"trainer": TRAINER, "fingerprint": fingerprint(state)}
    with tempfile.TemporaryDirectory(prefix="dqn_") as scratch:
        workdir = pathlib.Path(scratch if workdir is None else workdir)
        result = run_loop(run, source=source, update=update, workdir=workdir, trainer=TRAINER, meta=meta,
                          progress=progress)
        history = list(result.history)
        if result.resumed_from is not None:  # the records before the restored step, from the run's metrics file
            earlier = read_metrics(workdir / "metrics.jsonl", kind="train") if (workdir / "metrics.jsonl").exists() \
                else []
            history = [{k: v for k, v in r.items() if k != "kind"} for r in earlier
                       if int(r["step"]) <= result.resumed_from] + history
    return DQNResult(graphdef=graphdef, state=result.state, history=history, resumed_from=result.resumed_from,
                     preempted=result.preempted)


@dataclasses.dataclass(frozen=True)
class DQNRun:
    """The DQN's run for `trainers.loop.run_loop` (`LoopRun`): config with a `train` section, the state, no mesh
    (the navigator is a few thousand parameters on one device)."""

    config: Any
    state: DQNState
    mesh: Any = None


def _loop_config(config, cfg) -> ml_collections.ConfigDict:
    """The run's config with the loop's `train` section made from the `dqn` one: a checkpoint every
    `dqn.checkpoint_every` batches, the last two kept, written synchronously (the state is small), and the run
    stopped after `dqn.max_nonfinite_steps` batches in a row with a NaN/inf TD loss."""
    full = ml_collections.ConfigDict(config.to_dict() if "dqn" in config else {"dqn": cfg.to_dict()})
    full.train = ml_collections.ConfigDict(dict(
        checkpoint_every=max(int(cfg.checkpoint_every), 1), keep_checkpoints=2, async_checkpoint=False,
        max_nonfinite_steps=int(cfg.get("max_nonfinite_steps", 3))))
    return full


def train(config, *, workdir, progress: bool = True) -> DQNResult:
    """`reasoner train configs/rlot.py[:variant]`: `configs.rlot.check` (before the model loads), then the navigator
    trained on the environment `reasoner.agents.rlot.setup.training_env` builds (the direct pass first)."""
    from configs.rlot import check
    from reasoner.agents.rlot.setup import batch_line, training_env

    check(config)
    log = (lambda b, stats, record: print(f"[dqn] {batch_line(b, record)}", flush=True)) if progress else None
    return train_dqn(training_env(config), config, workdir=workdir, on_batch=log, progress=progress)
