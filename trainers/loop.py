"""`run_loop(run, *, source, update, ...)`: the one training loop under every trainer (SFT, DPO, GRPO, DQN).

    result = run_loop(run, source=iterator, update=update, workdir=workdir, trainer="sft", meta=meta)

`source` is any checkpointable iterator: it yields one item per optimizer step (a host batch, a list of prompt
indices, ...) and has `step` (items taken so far), `total_steps`, `get_state()` and `set_state(state)` (the SFT/DPO
`BatchIterator`, GRPO's `PromptStream`, the DQN's `EpisodeSource`). `update(state, item) -> (state, metrics)` does
one step (SFT/DPO: the jitted step on the global batch; GRPO: rollout, rewards and updates; DQN: a batch of
episodes with their replay updates); its metrics are host floats (`loss` and `skipped` at least), and a
`batch_tokens` entry (tokens the step read) turns into `tokens_per_s` and MFU. The loop owns:
  * resume from `workdir/checkpoints` (state, source position, metrics log truncated to the restored step), so a
    killed run continues exactly where its checkpoint was;
  * `metrics.jsonl` (process 0 only), a tqdm bar, `eval_fn(state) -> {name: value}` every `eval_every` steps and at
    the end, the best checkpoint by `best_metric`, a checkpoint every `train.checkpoint_every` steps, after each
    evaluation and at the end;
  * the non-finite guard: the step reports `skipped`; `train.max_nonfinite_steps` in a row stop the run;
  * preemption: SIGTERM (what SLURM and TPU preemption send) or a first SIGINT lets the current step (and its
    evaluation, if one is due) finish, writes a checkpoint at that step, flushes metrics and returns with
    `preempted=True` (the CLI then exits 0); the next start resumes exactly. A second SIGINT stops at once
    (KeyboardInterrupt, no checkpoint).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import signal
import sys
import threading
import time
from typing import Any, Callable, Protocol

import jax

from reasoner.checkpoint import RunCheckpoints, check_workdir
from reasoner.metrics.curves import plot_curves
from reasoner.metrics.writers import flatten_config, open_writers
from trainers.state import TrainState


class LoopRun(Protocol):
    """What the loop reads of a run: `trainers.run.Run` (SFT, DPO, GRPO) or the DQN's own small run.

    config: with a `train` section (checkpoint_every, keep_checkpoints, async_checkpoint, max_nonfinite_steps)
    and optionally `log` (metric writers); state: the checkpointed pytree; mesh: its device mesh (None: one
    device, nothing sharded)."""

    config: Any
    state: Any
    mesh: Any


class NonFiniteLossError(RuntimeError):
    """Too many consecutive steps had a NaN/inf loss or gradient."""


class Source(Protocol):
    step: int
    total_steps: int

    def __iter__(self): ...

    def __next__(self): ...

    def get_state(self) -> dict: ...

    def set_state(self, state: dict) -> None: ...


@dataclasses.dataclass
class LoopResult:
    state: TrainState
    last_metrics: dict[str, float]
    history: list[dict[str, float]]
    eval_history: list[dict[str, float]]
    resumed_from: int | None
    skipped_steps: int
    preempted: bool = False


@dataclasses.dataclass
class NonFiniteGuard:
    """Counts consecutive skipped steps; raises after `max_in_a_row`."""

    max_in_a_row: int
    in_a_row: int = 0
    total: int = 0

    def update(self, skipped: bool, *, step: int) -> None:
        if not skipped:
            self.in_a_row = 0
            return
        self.in_a_row += 1
        self.total += 1
        if self.in_a_row >= self.max_in_a_row:
            raise NonFiniteLossError(
                f"step {step}: loss or gradient was NaN/inf for {self.in_a_row} steps in a row "
                f"(train.max_nonfinite_steps={self.max_in_a_row}); stopping. Lower the learning rate or check the data")


class Preemption:
    """SIGTERM / first SIGINT set `requested`; a second SIGINT raises KeyboardInterrupt. Handlers are installed only
    in the main thread (signals are delivered there) and restored on exit."""

    def __init__(self, log: Callable[[str], None]):
        self.requested: str | None = None
        self._log = log
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, _frame) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGINT and self.requested is not None:
            raise KeyboardInterrupt(f"second {name}: stopping without a checkpoint")
        self.requested = name
        self._log(f"{name} received: finishing the current step, then checkpoint and exit "
                  f"(a second SIGINT stops at once)")

    def __enter__(self) -> Preemption:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------------------------------------- MFU
# Dense bf16 peak FLOP/s per chip (vendor datasheets); unknown kinds (CPU) report no MFU.
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "TPU v5 lite": 197e12, "TPU v5e": 197e12,
              "TPU v5p": 459e12, "TPU v4": 275e12, "TPU v6 lite": 918e12, "TPU v6e": 918e12}


def peak_flops_per_device() -> float | None:
    kind = jax.devices()[0].device_kind
    for name, flops in PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return flops
    return None


def train_flops_per_token(model_cfg, *, seq_len: int, passes: float = 3.0) -> float:
    """FLOPs per trained token: `passes` x 2 x (matmul params + attention). 3 = forward + backward
    (PaLM appendix B: 6N + 12 L H Dh T for training; attention counted over the full T, causal halves it
    in practice but the convention counts it whole)."""
    c = model_cfg
    attn_proj = c.hidden_size * c.head_dim * (2 * c.num_heads + 2 * c.num_kv_heads)
    mlp = 3 * c.hidden_size * c.intermediate_size
    head = c.hidden_size * c.vocab_size
    matmul_params = c.num_layers * (attn_proj + mlp) + head
    attention = 2 * c.num_layers * c.num_heads * c.head_dim * seq_len
    return passes * 2.0 * (matmul_params + attention)


def is_primary() -> bool:
    """Whether this process writes metrics and reports (process 0)."""
    try:
        from reasoner.distributed import is_primary as primary
    except ImportError:
        return jax.process_index() == 0
    return primary()


# Settings a resume may change: how long and how often (a longer run, other checkpoint cadence), where the logs
# go, the mesh (a restart on other devices), memory trade-offs. Any other difference would continue one run with
# another's data, optimizer or model: refused (`RunCheckpoints` compares the rest).
RESUMABLE_SETTINGS = ("train.num_steps", "train.num_epochs", "train.checkpoint_every", "train.keep_checkpoints",
                      "train.async_checkpoint", "train.max_nonfinite_steps", "train.eval_every", "log.", "mesh",
                      "single_device", "model.remat", "export_dir", "dqn.num_episodes", "dqn.checkpoint_every",
                      "dqn.max_nonfinite_steps")


def resume_settings(config) -> dict:
    """The flattened config a checkpoint records, less RESUMABLE_SETTINGS, as JSON values (what orbax keeps)."""
    import json

    flat = flatten_config(config)
    kept = {k: v for k, v in flat.items()
            if not any(k == r or (r.endswith(".") and k.startswith(r)) for r in RESUMABLE_SETTINGS)}
    return json.loads(json.dumps(kept, default=str))


# ---------------------------------------------------------------------------------------------- loop
def run_loop(run: LoopRun, *, source: Source, update: Callable[[TrainState, Any], tuple[TrainState, dict]], workdir,
             trainer: str, meta: dict, eval_fn: Callable[[TrainState], dict[str, float]] | None = None,
             eval_every: int = 0, best_metric: str | None = None, best_mode: str = "min",
             flops_per_token: float | None = None, progress: bool = True,
             on_close: Callable[[], None] | None = None) -> LoopResult:
    """Runs (or resumes) `update` over `source` to its end; see the module docstring. `best_mode`: "min" (a
    loss, SFT) or "max" (a reward, GRPO); an evaluation whose best metric is NaN/inf is not offered to `best/`."""
    train_cfg = run.config.train
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    check_workdir(workdir)
    ckpt = RunCheckpoints(workdir, keep=int(train_cfg.keep_checkpoints), best_metric=best_metric,
                          best_mode=best_mode, async_save=bool(train_cfg.async_checkpoint))
    writer = open_writers(workdir, log=run.config.get("log"), enabled=is_primary())  # config.log.writers
    meta = {**meta, "config": resume_settings(run.config)}
    state = run.state
    resumed_from = ckpt.latest_step()
    if resumed_from is not None:
        state, data_state, restored = ckpt.restore(state, expected_meta=meta)
        resumed_from = int(restored["step"])  # the newest intact one: damaged newer checkpoints are skipped
        source.set_state(data_state)
        writer.truncate_after(int(resumed_from))
    writer.hparams(flatten_config(run.config))  # after the restore: a refused resume leaves the run's record
    guard = NonFiniteGuard(int(train_cfg.max_nonfinite_steps))
    peak = peak_flops_per_device()
    n_devices = 1 if run.mesh is None else run.mesh.devices.size
    every = int(train_cfg.checkpoint_every)  # 0: only at evaluations, the end and a preemption
    if every < 0:
        raise ValueError(f"train.checkpoint_every={every}: expected >= 0 (0: no periodic checkpoints)")
    total = int(source.total_steps)
    history: list[dict[str, float]] = []
    eval_history: list[dict[str, float]] = []

    from tqdm import tqdm

    bar = tqdm(total=total, initial=source.step, desc=trainer, unit="step", file=sys.stderr, dynamic_ncols=True,
               disable=not progress or not writer.enabled)
    log = lambda msg: bar.write(f"[{trainer}] {msg}", file=sys.stdout)  # noqa: E731
    preemption = Preemption(log)
    saved_at = resumed_from
    tick = time.perf_counter()
    try:
        with preemption:
            for item in source:
                state, host = update(state, item)
                seconds = max(time.perf_counter() - tick, 1e-9)
                step = int(source.step)
                host["step_seconds"] = seconds
                tokens = host.pop("batch_tokens", None)
                if tokens is not None:
                    host["tokens_per_s"] = tokens / seconds
                    if peak is not None and flops_per_token is not None:
                        host["mfu"] = tokens * flops_per_token / seconds / (peak * n_devices)
                for name, rows in (host.pop("tables", None) or {}).items():  # e.g. GRPO's sample completions
                    writer.table(step, name, rows)
                writer.write(step, "train", **host)
                history.append({"step": step, **host})
                bar.set_postfix(loss=f"{host['loss']:.4f}", refresh=False)
                bar.update(1)
                guard.update(bool(host["skipped"]), step=step)

                evaluated = eval_fn is not None and eval_every > 0 and (step % eval_every == 0 or step == total)
                if evaluated:
                    evals = eval_fn(state)
                    writer.write(step, "eval", **evals)
                    eval_history.append({"step": step, **evals})
                    log(f"step {step} eval: " + ", ".join(f"{k}={v:.4f}" for k, v in evals.items()
                                                          if isinstance(v, float)))
                    if best_metric is not None and math.isfinite(evals[best_metric]):
                        ckpt.save_best(step, state, data_state=source.get_state(), meta={**meta, "step": step},
                                       metrics={best_metric: evals[best_metric]})
                if evaluated or (every and step % every == 0) or step == total or preemption.requested:
                    ckpt.save(step, state, data_state=source.get_state(), meta={**meta, "step": step})
                    saved_at = step
                if preemption.requested:
                    log(f"preempted ({preemption.requested}) at step {step}: checkpoint written; "
                        "start the same command again to resume")
                    break
                tick = time.perf_counter()  # evaluation and checkpoint saves are not step time
    finally:
        bar.close()
        ckpt.wait()
        ckpt.close()
        if on_close is not None:
            on_close()
        writer.close()
    if writer.enabled and writer.path.exists() and not preemption.requested:
        plot_curves(writer.path, workdir / "curves.png")
    return LoopResult(state=state, last_metrics=history[-1] if history else {}, history=history,
                      eval_history=eval_history, resumed_from=resumed_from, skipped_steps=guard.total,
                      preempted=preemption.requested is not None and saved_at is not None)
