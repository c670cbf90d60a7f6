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

import jax
import jax.numpy as jnp
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
