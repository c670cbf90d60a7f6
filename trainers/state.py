"""`TrainState`: the whole mutable state of a training run, a frozen dataclass pytree.

`params` are the trainable parameters only (a pure dict from `nnx.to_pure_dict`; with LoRA just the
adapters), kept
in float32 as master weights; frozen parameters (the base model under LoRA, the DPO reference)
live outside the state and are passed to the step separately. `opt_state` is optax's state for
exactly `params`. `rng` is a raw `jax.random` key (uint32[2]) so it checkpoints as a plain array.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct


@struct.dataclass(frozen=True)
class TrainState:
    """step: int32 scalar (optimizer updates attempted, skipped ones included); params, opt_state, rng."""

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array


def create_state(params: Any, optimizer: optax.GradientTransformation, *, seed: int) -> TrainState:
    """A fresh state at step 0 with f32 master copies of `params` and optax's initial state."""
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=optimizer.init(params),
        rng=jax.random.key_data(jax.random.key(seed)),
    )
