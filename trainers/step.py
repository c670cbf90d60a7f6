"""The shared update step: gradient accumulation, global normalisation, NaN/inf guard, optimizer.

`make_train_step(loss_fn=..., optimizer=..., schedule=...)` returns the pure function
`step(state, frozen, batch) -> (state, metrics)`:

* `batch` leaves are [A, B, ...]: A micro-batches of B rows each (A = gradient accumulation).
* `loss_fn(params, frozen, micro_batch, denom) -> (loss, sums)` returns the micro-batch's share of
  the global loss (already divided by `denom`, which `denominator(batch)` computes once over the
  whole [A, B] batch) and a dict of metric sums. Gradients and sums are added over micro-batches,
  so the loss is exactly the global-batch mean (TRL's `num_items_in_batch` normalisation).
* A non-finite loss or gradient norm leaves params and optimizer state untouched and reports
  `skipped = 1`; the step counter still advances (the batch was consumed). The schedule, like Adam's bias
  correction, counts applied updates (optax's own count in the optimizer state, which a skipped step leaves as
  it was: what PyTorch's GradScaler does to its scheduler too), so after k skipped steps the run applies the
  rate of k steps earlier; the logged `lr` is the rate this step applied (or would have, if skipped), read
  from that count, never `schedule(state.step)`.

`jit_train_step` jits it once with explicit in/out shardings and the state donated.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from trainers.optim import schedule_count
from trainers.state import TrainState

LossFn = Callable[[Any, Any, dict, jax.Array], tuple[jax.Array, dict[str, jax.Array]]]


def make_train_step(
    *,
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    schedule: optax.Schedule,
    denominator: Callable[[dict], jax.Array],
):
    """Builds the pure step function described in the module docstring."""

    def step(state: TrainState, frozen: Any, batch: dict) -> tuple[TrainState, dict[str, jax.Array]]:
        denom = jnp.maximum(denominator(batch).astype(jnp.float32), 1.0)
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        first = jax.tree.map(lambda x: x[0], batch)
        if jax.tree.leaves(batch)[0].shape[0] == 1:
            # No accumulation: no zero-filled gradient tree and no add pass over every parameter.
            (loss, sums), grads = grad_fn(state.params, frozen, first, denom)
        else:
            def micro(carry, micro_batch):
                grads_acc, loss_acc, sums_acc = carry
                (loss, sums), grads = grad_fn(state.params, frozen, micro_batch, denom)
                grads_acc = jax.tree.map(jnp.add, grads_acc, grads)
                sums_acc = jax.tree.map(jnp.add, sums_acc, sums)
                return (grads_acc, loss_acc + loss, sums_acc), None

            sums_shape = jax.eval_shape(lambda: loss_fn(state.params, frozen, first, denom)[1])
            zeros_sums = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), sums_shape)
            zeros_grads = jax.tree.map(jnp.zeros_like, state.params)
            (grads, loss, sums), _ = jax.lax.scan(micro, (zeros_grads, jnp.zeros((), jnp.float32), zeros_sums),
                                                  batch)

        grad_norm = optax.global_norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

        def update(operands):
            grads, params, opt_state = operands
            updates, new_opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), new_opt_state

        def skip(operands):
            return operands[1], operands[2]

        # A branch, not a select: a finite step costs no extra pass over params and optimizer state.
        new_params, new_opt_state = jax.lax.cond(finite, update, skip, (grads, state.params, state.opt_state))
        new_state = TrainState(
            step=state.step + 1,
            params=new_params,
            opt_state=new_opt_state,
        )
        metrics = {
            "loss": loss,
            "grad_norm": grad_norm,
            "lr": schedule(schedule_count(state.opt_state, state.step)),
            "skipped": (~finite).astype(jnp.int32),
            "denom": denom,
            **sums,
        }
        return new_state, metrics

    return step


def jit_train_step(step, *, state_sharding, frozen_sharding, batch_sharding, metrics_sharding, donate: bool = True):
    """jax.jit with explicit shardings (metrics replicated); the state buffers are donated (updated in place)."""
    return jax.jit(
        step,
        in_shardings=(state_sharding, frozen_sharding, batch_sharding),
        out_shardings=(state_sharding, metrics_sharding),
        donate_argnums=(0,) if donate else (),
    )
