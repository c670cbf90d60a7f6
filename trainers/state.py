"""`TrainState`: the whole mutable state of a training run, a frozen dataclass pytree.

`params` are the trainable parameters only (a pure dict from `nnx.to_pure_dict`; with LoRA just the
adapters), kept
in float32 as master weights; frozen parameters (the base model under LoRA, the DPO reference)
live outside the state and are passed to the step separately. `opt_state` is optax's state for
exactly `params`. There is no rng: no trainer's step draws random numbers (sampling keys come from the config's
seed and the step number; LoRA adapter dropout, which would need one, is refused by `trainers.run.add_lora`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct


@struct.dataclass(frozen=True)
class TrainState:
    """step: int32 scalar (optimizer updates attempted, skipped ones included); params, opt_state."""

    step: jax.Array
    params: Any
    opt_state: Any


def create_state(params: Any, optimizer: optax.GradientTransformation) -> TrainState:
    """A fresh state at step 0 with f32 master copies of `params` and optax's initial state."""
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=optimizer.init(params),
    )
