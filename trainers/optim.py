"""Optimizer and learning-rate schedules from a config section.

`config.optim` fields: name ('adamw' | 'adam' | 'sgd'), lr, b1, b2, eps (Adam's), weight_decay (decoupled for
adamw, an L2 term in the gradient for adam and sgd, as torch.optim.AdamW / Adam / SGD),
max_grad_norm (0 disables clipping), schedule ('cosine' | 'constant' | 'linear'),
warmup_steps (an int count; > 0 wins over the ratio), warmup_ratio (fraction of total steps, TRL's
`warmup_ratio`), min_lr_ratio (cosine floor). The cosine schedule is TRL/transformers'
`get_cosine_schedule_with_warmup`: linear warm-up from 0 over W steps, then half a cosine to min_lr over the
remaining total - W steps; W = warmup_steps when > 0, else ceil(warmup_ratio * total) (transformers'
`TrainingArguments.get_warmup_steps`: its `warmup_steps` >= 1 is a count and wins, as here; its float < 1 form
of a ratio is our separate `warmup_ratio`). A W beyond the run's length keeps the whole run in warm-up, as in
transformers.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import optax

SCHEDULES = ("cosine", "constant", "linear")
OPTIMIZERS = ("adamw", "adam", "sgd")


def warmup_steps(*, warmup_ratio: float, total_steps: int, steps: int = 0) -> int:
    """Warm-up length W: `steps` when > 0 (a count), else transformers' rule ceil(ratio * total).

    Raises ValueError for a negative or fractional `steps` or a ratio outside [0, 1] (it names the setting)."""
    if isinstance(steps, bool) or not isinstance(steps, (int, float)) or not float(steps).is_integer() or steps < 0:
        raise ValueError(f"optim.warmup_steps={steps!r}; expected an int >= 0 (0 = use optim.warmup_ratio)")
    if not 0.0 <= warmup_ratio <= 1.0:
        raise ValueError(f"optim.warmup_ratio={warmup_ratio!r}; expected a fraction in [0, 1]")
    if steps > 0:
        return int(steps)
    return int(math.ceil(warmup_ratio * total_steps))


def make_schedule(optim, *, total_steps: int) -> optax.Schedule:
    """The lr at each optimizer step (0-based), as transformers computes it."""
    if optim.schedule not in SCHEDULES:
        raise ValueError(f"optim.schedule={optim.schedule!r}; expected one of {SCHEDULES}")
    if total_steps < 1:
        raise ValueError(f"total_steps={total_steps}; expected >= 1 (is the dataset empty?)")
    peak = float(optim.lr)
    warm = warmup_steps(warmup_ratio=float(optim.get("warmup_ratio", 0.0)), total_steps=total_steps,
                        steps=optim.get("warmup_steps", 0))
    floor = peak * float(optim.get("min_lr_ratio", 0.0))
    decay = max(total_steps - warm, 1)

    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        warm_lr = peak * step / max(warm, 1)
        progress = jnp.clip((step - warm) / decay, 0.0, 1.0)
        if optim.schedule == "cosine":
            after = floor + (peak - floor) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
        elif optim.schedule == "linear":
            after = floor + (peak - floor) * (1.0 - progress)
        else:
            after = jnp.full_like(step, peak)
        return jnp.where(step < warm, warm_lr, after)

    return schedule


def schedule_count(opt_state, default):
    """The schedule's own step count inside an optimizer state made by `make_optimizer` (optax's
    `ScaleByScheduleState.count`: the updates applied so far); `default` where the state holds none."""
    return optax.tree_utils.tree_get(
        opt_state, "count", default,
        filtering=lambda path, _: getattr(path[-1], "tuple_name", None) == "ScaleByScheduleState")


def make_optimizer(optim, *, total_steps: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """(optimizer, schedule): clipping by global norm (optional) then AdamW/Adam/SGD with the schedule."""
    if optim.name not in OPTIMIZERS:
        raise ValueError(f"optim.name={optim.name!r}; expected one of {OPTIMIZERS}")
    schedule = make_schedule(optim, total_steps=total_steps)
    # adam and sgd take weight_decay as torch.optim.Adam / SGD do: an L2 term wd * param added to the (clipped)
    # gradient before the moments; adamw decays the weights apart from them (decoupled, torch.optim.AdamW)
    decay = float(optim.get("weight_decay", 0.0))
    if optim.name == "adamw":
        core = optax.adamw(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps, weight_decay=decay)
    elif optim.name == "adam":
        core = optax.adam(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps)
    else:
        core = optax.sgd(schedule)  # plain SGD: no momentum (b1 is Adam's)
    if decay and optim.name != "adamw":  # only then: without it the state keeps the structure checkpoints hold
        core = optax.chain(optax.add_decayed_weights(decay), core)
    parts = [optax.clip_by_global_norm(optim.max_grad_norm)] if optim.max_grad_norm else []
    return optax.chain(*parts, core), schedule
