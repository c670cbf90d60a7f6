"""Shared pieces of the SFT/DPO training benchmarks: our jitted step on SmolLM2 and TRL step timing.

Both sides train the same model (SmolLM2-135M-Instruct: ours dequantized from the GGUF, the baseline
from our safetensors export of exactly those weights), in float32, with AdamW (weight decay 0,
clipping at 1.0, constant lr), the same batch, sequence length and gradient-checkpointing setting.
Throughput is trained tokens per second (rows x seq_len per step), the median over measured steps
after one warm-up step (compilation on our side, allocator warm-up on theirs).

Order: the baseline trains first, then ours, so the baseline never runs in a process where XLA's
thread pool and buffers are already live (with ours first, TRL's SFT steps measured 5.6-6.5 s in
three runs against 5.1-5.2 s alone; ours measured the same either way). Five measured steps each.
"""

from __future__ import annotations

import statistics
import time

LR = 1e-6


def optim_config():
    import ml_collections

    return ml_collections.ConfigDict(dict(name="adamw", lr=LR, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0,
                                          max_grad_norm=1.0, schedule="constant", warmup_ratio=0.0,
                                          min_lr_ratio=0.0))


def load_ours(*, remat: bool):
    from reasoner.models import load_model
    from reasoner.sharding import make_mesh

    mesh = make_mesh("fsdp=-1")
    return load_model("smollm2-135m-instruct", mesh=mesh, remat=remat), mesh


def build_our_step(model, mesh, *, loss_fn_factory, denominator, example_batch, total_steps: int):
    """(jitted step, state, frozen) for `model` with the benchmark optimizer."""
    from reasoner.data.pipeline import batch_sharding
    from trainers import common
    from trainers.optim import make_optimizer
    from trainers.step import jit_train_step, make_train_step

    graphdef, params, frozen, trainable_state, frozen_state = common.split_trainable(model, lora=False)
    optimizer, schedule = make_optimizer(optim_config(), total_steps=total_steps)
    params_sh = common.pure_shardings(trainable_state, mesh)
    state_sh = common.state_sharding(params_sh, optimizer, params, mesh)
    state = common.init_state(params, optimizer, seed=0, sharding=state_sh)
    frozen_sh = common.pure_shardings(frozen_state, mesh)
    # the factory may extend the frozen inputs (DPO adds the reference parameters)
    extra = loss_fn_factory(graphdef=graphdef, params=params, frozen=frozen, params_sharding=params_sh,
                            frozen_sharding=frozen_sh)
    frozen_all = extra.get("frozen", frozen)
    frozen_all_sh = extra.get("frozen_sharding", frozen_sh)
    step = jit_train_step(
        make_train_step(loss_fn=extra["loss_fn"], optimizer=optimizer, schedule=schedule, denominator=denominator),
        state_sharding=state_sh, frozen_sharding=frozen_all_sh,
        batch_sharding={k: batch_sharding(mesh, ndim=v.ndim) for k, v in example_batch.items()},
        metrics_sharding=common.replicated(mesh))
    return step, state, frozen_all


def time_ours(step, state, frozen, batch, *, steps: int, mesh) -> tuple[list[float], float]:
    """(seconds per measured step, first loss); one warm-up (compile) step first."""
    import jax

    from reasoner.data.pipeline import to_global_batch

    device_batch = to_global_batch(batch, mesh)
    state, metrics = step(state, frozen, device_batch)
    first_loss = float(metrics["loss"])
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        state, metrics = step(state, frozen, device_batch)
        jax.block_until_ready(metrics["loss"])
        times.append(time.perf_counter() - t)
    return times, first_loss


def step_timer_callback():
    """A transformers TrainerCallback recording the wall time of every optimizer step."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self._start)

    return StepTimer()


def trl_common_args(out_dir: str, *, batch: int, steps: int, remat: bool) -> dict:
    return dict(output_dir=out_dir, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
                learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
                optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
                max_steps=steps + 1, logging_steps=1, save_strategy="no", report_to=[],
                gradient_checkpointing=remat, bf16=False, fp16=False, use_cpu=True, dataloader_num_workers=0,
                seed=0, disable_tqdm=True)


def export_baseline_model(model, out_dir: str):
    """Our weights as an HF directory, loaded by transformers in float32 (it refuses to train GGUF models)."""
    import torch
    from transformers import AutoModelForCausalLM

    from reasoner.models.export import export_hf

    export_hf(model, out_dir)
    return AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)


def summary(*, ours_times, base_times, tokens_per_step: int, extra: dict) -> dict:
    ours = tokens_per_step / statistics.median(ours_times)
    base = tokens_per_step / statistics.median(base_times)
    return {"ours_tok_s": round(ours, 2), "baseline_tok_s": round(base, 2), "ratio": round(ours / base, 3),
            "ours_step_s": [round(t, 3) for t in ours_times], "baseline_step_s": [round(t, 3) for t in base_times],
            **extra}
