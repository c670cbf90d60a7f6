"""Supervised fine-tuning on chat completions (A* traces, curated SMT trajectories).

Loss: negative log-likelihood of completion tokens only, averaged over every completion token of
the global batch (all micro-batches together; TRL SFTTrainer's default token mean). Sequences are
packed best-fit-decreasing into `data.seq_len` rows with per-document positions and segment ids.
Each epoch ends with a validation loss (same token mean over the validation split); the checkpoint
with the lowest validation loss is kept in `workdir/best` (A* post-training, App. B.3) and exported.

Reads top to bottom: loss, data, step, eval, train (setup -> run_loop), export.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
from flax import nnx

from reasoner.checkpoint import fingerprint
from reasoner.data.pipeline import batch_sharding, eval_batches, prepare_sft, to_global_batch
from reasoner.models.scoring import sequence_logps
from trainers.losses import sft_loss_sum, target_mask
from trainers.loop import LoopResult, run_loop, train_flops_per_token
from trainers.run import (Frozen, Run, RowsRun, best_params, export_run, load_tokenizer_for,
                          rows_update, setup_rows)
from trainers.step import jit_train_step, make_train_step


def sft_loss_fn(graphdef):
    """loss_fn(params, frozen: Frozen, micro_batch, denom) -> (sum NLL / denom, {"tokens": trained targets})."""

    def loss_fn(params, frozen: Frozen, mb: dict, denom: jax.Array):
        logp, mask = sequence_logps(nnx.merge(graphdef, params, frozen.base), mb)
        return sft_loss_sum(logp, mask) / denom, {"tokens": jnp.sum(mask)}

    return loss_fn


def sft_denominator(batch: dict) -> jax.Array:
    """Trained targets in the whole [A, B, T] batch."""
    flat = lambda x: x.reshape(-1, x.shape[-1])  # noqa: E731
    return jnp.sum(target_mask(flat(batch["loss_mask"]), flat(batch["segment_ids"])))


# ============================================================================================== data
def load_rows(config, *, tokenizer, workdir, splits=None):
    """(train rows, validation rows or None, packing stats) of `config.data`, tokenized and packed."""
    from trainers.data import load_prepared

    return load_prepared(config, kind="sft", prepare=prepare_sft, tokenizer=tokenizer, workdir=workdir,
                         splits=splits, packing=config.data.packing)


# ============================================================================================== step
def make_step(run: Run, rows: dict):
    """The jitted `step(state, frozen, batch) -> (state, metrics)` with explicit shardings, state donated."""
    batch_sh = {k: batch_sharding(run.mesh, ndim=3) for k in rows}
    return jit_train_step(
        make_train_step(loss_fn=sft_loss_fn(run.graphdef), optimizer=run.optimizer, schedule=run.schedule,
                        denominator=sft_denominator),
        state_sharding=run.shardings.state, frozen_sharding=run.shardings.frozen, batch_sharding=batch_sh,
        metrics_sharding=run.shardings.replicated)


def make_update(s: RowsRun):
    """`update(state, host_batch) -> (state, host metrics)` for `run_loop` (`trainers.run.rows_update`)."""
    return rows_update(s)


# ============================================================================================== eval
def make_eval_fn(run: Run, val_rows: dict, *, batch_size: int):
    """state -> {"val_loss": token-mean NLL over the validation rows, "val_tokens"}."""
    batches = eval_batches(val_rows, batch_size=batch_size)

    @jax.jit
    def nll(params, frozen, batch):
        mb = jax.tree.map(lambda x: x[0], batch)
        logp, mask = sequence_logps(nnx.merge(run.graphdef, params, frozen.base), mb)
        return sft_loss_sum(logp, mask), jnp.sum(mask)

    def eval_fn(state) -> dict[str, float]:
        total, count = 0.0, 0.0
        for b in batches:
            s, n = nll(state.params, run.frozen, to_global_batch(b, run.mesh))
            total += float(s)
            count += float(n)
        return {"val_loss": total / max(count, 1.0), "val_tokens": count}

    return eval_fn


# ============================================================================================== train
def build_sft(config, *, workdir, tokenizer=None, splits=None, devices=None) -> RowsRun:
    """Data, run and step of `config` (`devices`: a subset for tests; default all)."""
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer_for(config.model)
    rows, val_rows, stats = load_rows(config, tokenizer=tokenizer, workdir=workdir, splits=splits)
    iterator, run = setup_rows(config, rows, tokenizer=tokenizer, devices=devices)
    return RowsRun(run=run, rows=rows, val_rows=val_rows, stats=stats, iterator=iterator, step=make_step(run, rows))


def train(config, *, workdir, progress: bool = True, tokenizer=None, splits=None, devices=None) -> LoopResult:
    """Runs (or resumes) SFT in `workdir`; returns the loop result. Exports the best (or last) weights."""
    workdir = pathlib.Path(workdir)
    s = build_sft(config, workdir=workdir, tokenizer=tokenizer, splits=splits, devices=devices)
    run, iterator = s.run, s.iterator
    print(f"[sft] train data: {s.stats.as_dict()}; {iterator.total_steps} steps", flush=True)
    eval_fn = make_eval_fn(run, s.val_rows, batch_size=config.train.batch_size) if s.val_rows is not None else None
    meta = {"trainer": "sft", "fingerprint": fingerprint(run.state), "data": s.stats.as_dict()}
    result = run_loop(
        run, source=iterator, update=make_update(s), workdir=workdir,
        trainer="sft", meta=meta, eval_fn=eval_fn, eval_every=iterator.steps_per_epoch,
        best_metric="val_loss" if eval_fn is not None else None,
        flops_per_token=train_flops_per_token(run.model_cfg, seq_len=config.data.seq_len), progress=progress)
    if config.get("export_dir") and not result.preempted:
        export(run, result, workdir=workdir, out_dir=config.export_dir)
    return result


def export(run: Run, result: LoopResult, *, workdir, out_dir) -> str:
    """Writes HF safetensors of the best-validation checkpoint (or the final state without validation)."""
    params, _ = best_params(result, workdir=workdir, best_metric="val_loss",
                            meta={"trainer": "sft", "fingerprint": fingerprint(result.state)})
    return export_run(run, params, out_dir)
