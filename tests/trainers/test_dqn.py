"""Double-Dueling DQN on a synthetic MDP with a known optimal Q; exact resume; bad environments; NaN updates."""

import numpy as np
import pytest

from configs.rlot import get_config
from trainers.dqn import train_dqn

GAMMA = 0.9
X, T = 3, 3  # positions x 0..2, depths t 0..2: 9 states; depth T-1 is the last decision (like RLoT's limit)
MOVES = (lambda x: min(x + 1, 2), lambda x: max(x - 1, 0), lambda x: x, lambda x: 2)  # actions 0..3
R_MOVE = np.array([[-0.1, 0.1, 0.6], [0.6, 0.0, 0.4], [-0.1, 0.3, 0.2], [0.2, 0.5, 0.1]])  # [action, x]
R_TERM = np.array([0.6, 0.6, 0.2])  # action 4 (terminate) or any action at the last depth ends with R_TERM[x]


def _transition(x: int, t: int, a: int):
    """(reward, next (x, t) or None when the episode ends)."""
    if a == 4:
        return R_TERM[x], None
    x2 = MOVES[a](x)
    if t == T - 1:
        return R_MOVE[a, x] + R_TERM[x2], None
    return R_MOVE[a, x], (x2, t + 1)


def _obs(x, t) -> np.ndarray:
    """7 'scores' in 0..3, distinct for each state."""
    return np.array([x, t, 3 - x, 3 - t, (x + 2 * t) % 4, 1, 2], np.float32)


class GridMDP:
    """Batched MDP of the DQN protocol; every episode starts at a random position at depth 0."""

    num_actions = 5

    def reset(self, rng, n):
        import jax

        self.x = np.array(jax.random.randint(jax.random.wrap_key_data(rng), (n,), 0, X))
        self.t = np.zeros(n, np.int64)
        self.done = np.zeros(n, bool)
        return np.stack([_obs(x, t) for x, t in zip(self.x, self.t)])

    def step(self, actions):
        reward = np.zeros(len(actions), np.float32)
        for i, a in enumerate(np.asarray(actions)):
            if self.done[i]:
                continue  # a done row stays done: action ignored, reward 0
            r, nxt = _transition(int(self.x[i]), int(self.t[i]), int(a))
            reward[i] = r
            if nxt is None:
                self.done[i] = True
            else:
                self.x[i], self.t[i] = nxt
        obs = np.stack([_obs(x, t) for x, t in zip(self.x, self.t)])
        return obs, reward, self.done.copy()


def optimal_q() -> np.ndarray:
    """Q*[t, x, a] by backward induction (the MDP is a DAG in t)."""
    q = np.zeros((T, X, 5))
    for t in reversed(range(T)):
        for x in range(X):
            for a in range(5):
                r, nxt = _transition(x, t, a)
                q[t, x, a] = r + (0.0 if nxt is None else GAMMA * q[nxt[1], nxt[0]].max())
    return q


def test_tiny_config_converges_to_optimal_q_and_policy():
    q_star = optimal_q()
    top2 = np.sort(q_star, -1)[..., -2:]
    # the optimal action wins by more than 2 x 5% everywhere, so Q within 5% implies the optimal greedy action
    assert ((top2[..., 1] - top2[..., 0]) / top2[..., 1]).min() > 0.1
    result = train_dqn(GridMDP(), get_config("tiny"))
    obs = np.stack([_obs(x, t) for t in range(T) for x in range(X)])
    q = result.q_values(obs).reshape(T, X, 5)
    np.testing.assert_array_equal(result.act(obs).reshape(T, X), q_star.argmax(-1))
    rel = np.abs(q - q_star) / np.abs(q_star)
    assert rel.max() <= 0.05, f"worst relative Q error {rel.max():.3f} at {np.unravel_index(rel.argmax(), rel.shape)}"
    assert result.num_params == 2566


def _small_config():
    c = get_config("tiny")
    c.dqn.update(dict(num_episodes=96, buffer_size=64, batch_size=16, checkpoint_every=2, target_sync_every=7,
                      lr_decay_every=40))  # lr decays and the target syncs inside both halves
    return c


def test_resume_is_exact(tmp_path):
    import jax

    whole = train_dqn(GridMDP(), _small_config())
    part = train_dqn(GridMDP(), _small_config(), workdir=tmp_path, stop_after_episodes=48)
    assert int(part.state.episodes) == 48 and part.resumed_from is None
    resumed = train_dqn(GridMDP(), _small_config(), workdir=tmp_path)
    assert resumed.resumed_from == 48 // 8
    assert int(resumed.state.updates) == int(whole.state.updates) > 0
    for a, b in zip(jax.tree.leaves(whole.state), jax.tree.leaves(resumed.state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in whole.history]


class NeverEnds(GridMDP):
    def step(self, actions):
        obs, reward, _ = super().step(np.full(len(actions), 2))
        self.t[:] = 0
        return obs, reward, np.zeros(len(actions), bool)


class BadShape(GridMDP):
    def reset(self, rng, n):
        return super().reset(rng, n)[:, :3][None]


def test_bad_environments_get_clear_errors():
    c = _small_config()
    c.dqn.max_episode_steps = 10
    with pytest.raises(RuntimeError, match="still running after max_steps=10"):
        train_dqn(NeverEnds(), c)
    with pytest.raises(ValueError, match=r"expected float32\[8, obs_dim\]"):
        train_dqn(BadShape(), c)
    c.dqn.num_episodes = 10
    with pytest.raises(ValueError, match="multiple of"):
        train_dqn(GridMDP(), c)


class NaNReward(GridMDP):
    def step(self, actions):
        obs, reward, done = super().step(actions)
        return obs, np.where(np.arange(len(reward)) == 2, np.nan, reward).astype(np.float32), done


class InfObservation(GridMDP):
    def step(self, actions):
        obs, reward, done = super().step(actions)
        obs[5, 0] = np.inf
        return obs, reward, done


def test_non_finite_rewards_and_observations_never_reach_the_buffer():
    with pytest.raises(ValueError, match=r"environment NaNReward step: rewards .*nan.*expected 8 finite floats"):
        train_dqn(NaNReward(), _small_config())
    with pytest.raises(ValueError, match=r"environment step: non-finite observations in rows \[5\]"):
        train_dqn(InfObservation(), _small_config())


def test_a_non_finite_update_is_skipped_not_applied():
    """A NaN that still reaches the TD loss (here a reward written into the buffer by hand; in practice a
    diverging net) leaves the weights, Adam's moments, the target and the update count as they were, and the
    learning loop counts it skipped; finite transitions keep training."""
    import jax
    import jax.numpy as jnp

    from trainers import dqn

    cfg = _small_config().dqn
    cfg.update(dict(buffer_size=16, batch_size=4))
    graphdef, state = dqn.init_state(cfg, obs_dim=7, num_actions=5)
    hp = dqn.Hyper.from_config(cfg)
    rng = np.random.default_rng(0)
    obs = jnp.asarray(rng.uniform(0, 3, size=(16, 7)), jnp.float32)
    args = (obs, jnp.zeros(16, jnp.int32), jnp.ones(16, jnp.float32), jnp.zeros(16, jnp.float32), obs,
            jnp.ones(16, bool))
    state, metrics = dqn.observe_and_learn(graphdef, state, *args, hp=hp)  # fills the buffer: 1 finite update
    assert int(metrics["updates"]) == 1 and int(metrics["skipped"]) == 0 and int(state.updates) == 1
    poisoned = state.replace(buf_reward_C=jnp.full_like(state.buf_reward_C, jnp.nan))
    before = jax.tree.map(np.asarray, (poisoned.online, poisoned.opt_state, poisoned.target))
    after, metrics = dqn.observe_and_learn(graphdef, poisoned, *[a[:4] for a in args], hp=hp)
    assert int(metrics["updates"]) == 4 and int(metrics["skipped"]) == 4 and not np.isfinite(float(metrics["loss"]))
    assert int(after.updates) == 1
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves((after.online, after.opt_state, after.target))):
        np.testing.assert_array_equal(a, np.asarray(b))


def test_out_of_range_numbers_are_config_errors():
    """In the jitted update a 0 divisor is silent (XLA: e // 0 = -2 for e >= 1, u % 0 = 0): lr_decay_every=0 trained
    at 0.01 * 0.5 ** -2 = 0.04, target_sync_every=0 copied the target after every update (no target network), and a
    gamma or epsilon out of [0, 1] trained as well. Each now stops before the first episode, naming the key."""
    import ml_collections

    bad = [("lr_decay_every", 0), ("target_sync_every", 0), ("gamma", 1.5), ("gamma", -0.1), ("epsilon_decay", 0.0),
           ("epsilon_decay", 1.01), ("epsilon_floor", -0.1), ("epsilon_start", 2.0), ("lr", 0.0), ("lr", float("nan")),
           ("lr_decay", 1.5), ("buffer_size", 0), ("batch_size", 2.5), ("max_episode_steps", 0), ("gamma", "0.9")]
    for key, value in bad:
        section = ml_collections.ConfigDict({**_small_config().dqn.to_dict(), key: value})
        with pytest.raises(ValueError, match=rf"dqn\.{key}={value!r}: expected "):
            train_dqn(GridMDP(), section)


def test_updates_start_at_the_append_that_fills_the_buffer():
    """The authors' loop appends one transition and then learns when `len(memory) >= buffer_size`. A batched step
    that filled the buffer made an update for each of its k transitions, also those appended before it was full
    (here 3 updates instead of 1 in the step that fills it)."""
    import jax.numpy as jnp

    from trainers import dqn

    cfg = _small_config().dqn
    cfg.update(dict(buffer_size=16, batch_size=4))
    graphdef, state = dqn.init_state(cfg, obs_dim=7, num_actions=5)
    hp = dqn.Hyper.from_config(cfg)
    obs = jnp.asarray(np.random.default_rng(0).uniform(0, 3, size=(8, 7)), jnp.float32)
    size, total = 0, 0
    for active in ([1, 1, 1, 1, 1, 0, 0, 0], [1] * 8, [0, 1, 0, 1, 0, 1, 0, 0], [1] * 8, [1, 0, 1, 0, 1, 1, 1, 0]):
        want = 0
        for _ in range(sum(active)):  # the authors' loop, one append at a time
            size = min(size + 1, 16)
            want += size >= 16
        state, metrics = dqn.observe_and_learn(graphdef, state, obs, jnp.zeros(8, jnp.int32), jnp.ones(8, jnp.float32),
                                               jnp.zeros(8, jnp.float32), obs, jnp.asarray(active, bool), hp=hp)
        total += want
        assert int(metrics["updates"]) == want and int(state.updates) == total and int(state.buf_size) == size
    assert total == 1 + 8 + 5


def _authors_epsilons(start, decay, floor, n):
    """The authors' loop: `self.epsilon = max(min_epsilon, self.epsilon * epsilon_decay)`, then `choose_action`."""
    eps, out = start, []
    for _ in range(n):
        eps = max(floor, eps * decay)
        out.append(eps)
    return out


def test_epsilon_decays_before_each_action_as_the_authors_loop():
    """Transition t (1-based) explores with max(floor, start * decay**t): the first action already uses
    start * decay (an earlier version acted with epsilon before decaying it, one transition late). The active rows
    of a batched step are consecutive transitions in row order."""
    import jax.numpy as jnp

    from trainers import dqn

    masks = ([1, 1, 0, 1], [0, 0, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 0, 0])

    def schedule(**numbers):
        cfg = _small_config().dqn
        cfg.update(numbers)
        hp, steps, used = dqn.Hyper.from_config(cfg), 0, []
        for mask in masks:
            eps, last = dqn.epsilons(hp, jnp.int32(steps), jnp.asarray(mask, bool))
            used += [float(e) for e, a in zip(eps, mask) if a]
            steps += sum(mask)
            assert float(last) == used[-1]
        return used

    # by hand: 1/2, 1/4, 1/8, then the floor 0.1 (exact in float32: powers of two, the floor a float32 constant)
    assert schedule(epsilon_start=1.0, epsilon_decay=0.5, epsilon_floor=0.1) == \
        [0.5, 0.25, 0.125] + [np.float32(0.1).item()] * 8
    # the paper's numbers in float32: d rounds to d (1 + e), |e| <= 2**-24, so d**t is off by t e, and pow itself
    # by a few ulps (4 allowed)
    used = schedule(epsilon_start=1.0, epsilon_decay=0.9995, epsilon_floor=0.0)
    want = _authors_epsilons(1.0, 0.9995, 0.0, len(used))
    assert want[:3] == [0.9995, 0.9995 ** 2, 0.9995 ** 3]
    np.testing.assert_allclose(used, want, rtol=2.0 ** -24 * (len(used) + 4))


def test_the_first_action_uses_the_decayed_epsilon():
    """epsilon_start=1 with decay 1e-9: the authors' first action explores with 1e-9, i.e. is greedy in every row
    (an epsilon applied before its decay made every first action uniformly random)."""
    import jax.numpy as jnp

    from trainers import dqn

    class Recording(GridMDP):
        def step(self, actions):
            self.actions.append(np.asarray(actions).copy())
            return super().step(actions)

    cfg = _small_config().dqn
    cfg.update(dict(epsilon_start=1.0, epsilon_decay=1e-9, epsilon_floor=0.0))
    env = Recording()
    env.actions = []
    graphdef, state = dqn.init_state(cfg, obs_dim=7, num_actions=5)
    reset_obs = env.reset(dqn.begin_batch(state)[1], 8)
    greedy = np.asarray(dqn.q_values(graphdef, state.online, jnp.asarray(reset_obs))).argmax(-1)
    state, _ = dqn.EpisodeSource(env, n=8, max_steps=10, total_steps=1).run_batch(graphdef, state,
                                                                                   dqn.Hyper.from_config(cfg))
    np.testing.assert_array_equal(env.actions[0], greedy)
    assert int(state.env_steps) >= 8 and float(state.epsilon) <= 1e-9 ** 2  # the last transition's rate


def test_a_step_storing_more_than_the_buffer_keeps_the_last_transitions_as_a_fifo():
    """Batched steps of 8 rows into a 3-slot buffer: the buffer equals a plain-Python FIFO fed one transition at a
    time, and no slot is written twice in a step (a scatter's duplicate slots leave the winner unspecified on GPU;
    this CPU happens to keep the last, so the slot check is what sees the duplicates)."""
    import jax.numpy as jnp

    from trainers import dqn

    C = 3
    cfg = _small_config().dqn
    cfg.update(dict(buffer_size=C, batch_size=2))
    graphdef, state = dqn.init_state(cfg, obs_dim=7, num_actions=5)
    hp = dqn.Hyper.from_config(cfg)
    fifo, ptr, serial = [None] * C, 0, 0
    for mask in ([1, 1, 0, 1, 1, 1, 0, 1], [0, 1, 0, 0, 0, 0, 0, 0], [1] * 8, [0, 0, 1, 1, 0, 0, 0, 0], [1] * 7 + [0]):
        active = np.asarray(mask, bool)
        ids = serial + np.arange(8)  # a distinct number per row, stored in every field
        obs = np.repeat(ids[:, None], 7, 1).astype(np.float32)
        slots = np.asarray(dqn.buffer_slots(jnp.int32(ptr), jnp.asarray(active), C))
        written = slots[slots < C]
        assert len(written) == min(int(active.sum()), C) == len(set(written.tolist()))
        for i in np.flatnonzero(active):  # the FIFO reference
            fifo[ptr] = int(ids[i])
            ptr = (ptr + 1) % C
        serial += 8
        state, _ = dqn.observe_and_learn(graphdef, state, jnp.asarray(obs), jnp.asarray(ids, jnp.int32),
                                         jnp.asarray(ids, jnp.float32), jnp.asarray(ids % 2, jnp.float32),
                                         jnp.asarray(obs + 0.5), jnp.asarray(active), hp=hp)
        assert int(state.buf_ptr) == ptr
        assert np.asarray(state.buf_action_C).tolist() == fifo
        assert np.asarray(state.buf_reward_C).tolist() == fifo
        assert np.asarray(state.buf_done_C).tolist() == [f % 2 for f in fifo]
        np.testing.assert_array_equal(np.asarray(state.buf_obs_Cx7), np.repeat(np.asarray(fifo)[:, None], 7, 1))
        np.testing.assert_array_equal(np.asarray(state.buf_next_Cx7), np.asarray(state.buf_obs_Cx7) + 0.5)


def test_the_target_syncs_every_target_sync_every_updates_not_environment_steps():
    """The authors' `learn()` (train_Dueling_DDQN_MATH.py) counts `self.learn_count += 1` and copies the target when
    `learn_count % target_update_interval == 0`; `learn()` runs after an append only once `len(memory) >=
    buffer_size`. Buffer 16, every 4, 40 environment steps of one transition: 25 updates, syncs after transitions
    15 + 4k = 19, 23, ..., 39 (6 of them); a count of environment steps would sync after 20, 24, ..., 40."""
    import jax
    import jax.numpy as jnp

    from trainers import dqn

    cfg = _small_config().dqn
    cfg.update(dict(buffer_size=16, batch_size=4, target_sync_every=4))
    graphdef, state = dqn.init_state(cfg, obs_dim=7, num_actions=5)
    hp, rng = dqn.Hyper.from_config(cfg), np.random.default_rng(0)
    same = lambda a, b: all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))  # noqa: E731
    synced_after, learn_count, want = [], 0, []
    for t in range(1, 41):  # the authors' loop: append, then learn once the buffer is full
        learn_count += t >= 16
        if t >= 16 and learn_count % 4 == 0:
            want.append(t)
        obs = jnp.asarray(rng.uniform(0, 3, size=(1, 7)), jnp.float32)
        target_before = jax.tree.map(np.asarray, state.target)
        state, _ = dqn.observe_and_learn(graphdef, state, obs, jnp.asarray([t % 5], jnp.int32),
                                         jnp.ones(1, jnp.float32), jnp.zeros(1, jnp.float32), obs + 1,
                                         jnp.ones(1, bool), hp=hp)
        if not same(target_before, state.target):
            assert same(state.target, state.online)  # a sync is a copy of the online net after its update
            synced_after.append(t)
    assert int(state.env_steps) == 40 and int(state.updates) == learn_count == 25
    assert synced_after == want == [19, 23, 27, 31, 35, 39]
