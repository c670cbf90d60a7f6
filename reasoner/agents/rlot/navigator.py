"""The RL-of-Thoughts navigator: a Dueling MLP from the 7 self-evaluation scores to 5 Q-values.

    obs_Nx7 (scores 0..3)  --(x - 1.5) / 1.5-->  [-1, 1]
    trunk      Linear(7 -> 32) + ReLU                                   256 parameters
    value      Linear(32 -> 32) + ReLU -> Linear(32 -> 1)               1,056 + 33
    advantage  Linear(32 -> 32) + ReLU -> Linear(32 -> 5)               1,056 + 165
    Q_Nx5 = V_Nx1 + A_Nx5 - mean(A_Nx5, axis=-1)                        2,566 in all

Subtracting the mean advantage makes V identifiable (Wang et al., Dueling DQN); the paper's navigator
has "fewer than 3K" parameters and this is exactly the layout of the authors' code.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

NUM_SCORES = 7
NUM_ACTIONS = 5
HIDDEN = 32


class Navigator(nnx.Module):
    """Dueling Q-network; `__call__(obs_Nx7) -> q_Nx5` (float32)."""

    def __init__(self, *, rngs: nnx.Rngs, num_inputs: int = NUM_SCORES, num_actions: int = NUM_ACTIONS,
                 hidden: int = HIDDEN):
        self.trunk = nnx.Linear(num_inputs, hidden, rngs=rngs)
        self.value_hidden = nnx.Linear(hidden, hidden, rngs=rngs)
        self.value_out = nnx.Linear(hidden, 1, rngs=rngs)
        self.adv_hidden = nnx.Linear(hidden, hidden, rngs=rngs)
        self.adv_out = nnx.Linear(hidden, num_actions, rngs=rngs)

    def streams(self, obs_NxS: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(V_Nx1, A_NxK) before they are combined."""
        x = (jnp.asarray(obs_NxS, jnp.float32) - 1.5) / 1.5
        h = jax.nn.relu(self.trunk(x))
        value = self.value_out(jax.nn.relu(self.value_hidden(h)))
        advantage = self.adv_out(jax.nn.relu(self.adv_hidden(h)))
        return value, advantage

    def __call__(self, obs_NxS: jax.Array) -> jax.Array:
        value, advantage = self.streams(obs_NxS)
        return value + advantage - jnp.mean(advantage, axis=-1, keepdims=True)


def num_params(module: nnx.Module) -> int:
    """Number of scalar parameters (nnx.Param leaves) of a module."""
    return int(sum(x.size for x in jax.tree.leaves(nnx.state(module, nnx.Param))))


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _q(graphdef, params, obs_NxS):
    return nnx.merge(graphdef, params)(obs_NxS)


class GreedyNavigator:
    """The greedy policy of a navigator held as `graphdef` and `online_params` (a trained DQN's result,
    `trainers.dqn.DQNResult`, or one read back from its checkpoints, `reasoner.agents.rlot.transfer`)."""

    graphdef: object

    @property
    def online_params(self):
        raise NotImplementedError

    def q_values(self, obs_NxS) -> np.ndarray:
        """float32[n, num_actions] from the online network."""
        return np.asarray(_q(self.graphdef, self.online_params, jnp.asarray(obs_NxS, jnp.float32)))

    def act(self, obs_NxS) -> np.ndarray:
        """Greedy actions int32[n]."""
        return np.argmax(self.q_values(obs_NxS), axis=-1).astype(np.int32)

    @property
    def num_params(self) -> int:
        return num_params(nnx.merge(self.graphdef, self.online_params))
