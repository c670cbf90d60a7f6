"""The training loop shared by SFT and DPO: resume, step, log, evaluate, checkpoint.

`run_loop` drives a jitted `step(state, frozen, batch)` over a `BatchIterator`:
  * resumes from `workdir/checkpoints` when it holds one (state, data-iterator position, metrics log
    truncated to the restored step), so a killed run continues exactly where its checkpoint was;
  * writes `metrics.jsonl` each step (loss, grad_norm, lr, tokens/s, MFU, trainer sums) and shows a
    tqdm bar with loss and tokens/s;
  * evaluates at each epoch end (`eval_fn(state) -> {name: value}`), offers the state to `best/` by
    `best_metric`, then checkpoints; also checkpoints every `checkpoint_every` steps;
  * skips NaN/inf updates (the step reports `skipped`) and stops after `max_nonfinite_steps` in a row;
  * at the end waits for async saves and draws `curves.png`.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import time
from typing import Any, Callable

import jax
import numpy as np

from reasoner.checkpoint import RunCheckpoints, check_workdir
from reasoner.data.pipeline import BatchIterator, to_global_batch
from reasoner.metrics.curves import MetricsWriter, plot_curves
from trainers.common import NonFiniteGuard, peak_flops_per_device
from trainers.state import TrainState


@dataclasses.dataclass
class LoopResult:
    state: TrainState
    last_metrics: dict[str, float]
    eval_history: list[dict[str, float]]
    resumed_from: int | None
    skipped_steps: int


def _host(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(np.asarray(v)) for k, v in jax.device_get(metrics).items()}


def run_loop(
    *,
    trainer: str,
    workdir,
    state: TrainState,
    frozen: Any,
    step_fn: Callable,
    iterator: BatchIterator,
    mesh,
    meta: dict,
    train_cfg,
    postprocess: Callable[[dict[str, float]], dict[str, float]] = lambda m: m,
    eval_fn: Callable[[TrainState], dict[str, float]] | None = None,
    best_metric: str | None = None,
    flops_per_token: float | None = None,
    progress: bool = True,
) -> LoopResult:
    """Runs (or resumes) training to the iterator's end; see the module docstring."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    check_workdir(workdir)
    ckpt = RunCheckpoints(workdir, keep=int(train_cfg.keep_checkpoints), best_metric=best_metric,
                          async_save=bool(train_cfg.async_checkpoint))
    writer = MetricsWriter(workdir / "metrics.jsonl", enabled=jax.process_index() == 0)
    resumed_from = ckpt.latest_step()
    if resumed_from is not None:
        state, data_state, _ = ckpt.restore(state, expected_meta=meta)
        iterator.set_state(data_state)
        writer.truncate_after(int(resumed_from))
    guard = NonFiniteGuard(int(train_cfg.max_nonfinite_steps))
    peak = peak_flops_per_device()
    n_devices = mesh.devices.size
    every = int(train_cfg.checkpoint_every)
    eval_history: list[dict[str, float]] = []
    last: dict[str, float] = {}

    from tqdm import tqdm

    bar = tqdm(total=iterator.total_steps, initial=iterator.step, desc=trainer, unit="step",
               disable=not progress or jax.process_index() != 0, file=sys.stderr, dynamic_ncols=True)
    tick = time.perf_counter()
    try:
        for host_batch in iterator:
            batch = to_global_batch(host_batch, mesh)
            tokens = int(sum(np.count_nonzero(v) for k, v in host_batch.items() if k.endswith("segment_ids")))
            state, metrics = step_fn(state, frozen, batch)
            host = postprocess(_host(metrics))
            seconds = max(time.perf_counter() - tick, 1e-9)
            step = iterator.step
            host["tokens_per_s"] = tokens / seconds
            host["step_seconds"] = seconds
            if peak is not None and flops_per_token is not None:
                host["mfu"] = tokens * flops_per_token / seconds / (peak * n_devices)
            host["epoch"] = (step - 1) // iterator.steps_per_epoch
            writer.write(step, "train", **host)
            last = host
            bar.set_postfix(loss=f"{host['loss']:.4f}", tok_s=f"{host['tokens_per_s']:.0f}", refresh=False)
            bar.update(1)
            guard.update(bool(host["skipped"]), step=step)

            epoch_end = step % iterator.steps_per_epoch == 0
            if epoch_end and eval_fn is not None:
                evals = eval_fn(state)
                evals["epoch"] = step // iterator.steps_per_epoch - 1
                writer.write(step, "eval", **evals)
                eval_history.append({"step": step, **evals})
                bar.write(f"[{trainer}] step {step} eval: " + ", ".join(
                    f"{k}={v:.4f}" for k, v in evals.items() if isinstance(v, float)))
                if best_metric is not None:
                    ckpt.save_best(step, state, data_state=iterator.get_state(), meta={**meta, "step": step},
                                   metrics={best_metric: evals[best_metric]})
            if epoch_end or step % every == 0 or step == iterator.total_steps:
                ckpt.save(step, state, data_state=iterator.get_state(), meta={**meta, "step": step})
            tick = time.perf_counter()  # evaluation and checkpoint saves are not step time
    finally:
        bar.close()
        ckpt.wait()
        ckpt.close()
    if writer.enabled and writer.path.exists():
        plot_curves(writer.path, workdir / "curves.png")
    return LoopResult(state=state, last_metrics=last, eval_history=eval_history, resumed_from=resumed_from,
                      skipped_steps=guard.total)
