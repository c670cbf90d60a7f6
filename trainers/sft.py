"""Supervised fine-tuning on chat completions (A* traces, curated SMT trajectories).

Loss: negative log-likelihood of completion tokens only, averaged over every completion token of
the global batch (all micro-batches together; TRL SFTTrainer's default token mean). Sequences are
packed best-fit-decreasing into `data.seq_len` rows with per-document positions and segment ids.
Each epoch ends with a validation loss (same token mean over the validation split); the checkpoint
with the lowest validation loss is kept in `workdir/best` (A* post-training, App. B.3) and exported.

Reads top to bottom: mesh, data, model, state, step, eval, loop, export.
"""

from __future__ import annotations

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from reasoner.checkpoint import fingerprint
from reasoner.data.pipeline import BatchIterator, eval_batches, prepare_sft, to_global_batch
from trainers import common
from trainers.losses import sft_loss_sum, target_mask
from trainers.loop import LoopResult, run_loop
from trainers.optim import make_optimizer
from trainers.step import jit_train_step, make_train_step


def sft_loss_fn(graphdef):
    """loss_fn(params, frozen, micro_batch, denom) -> (sum NLL / denom, {"tokens": trained targets})."""

    def loss_fn(params, frozen, mb: dict, denom: jax.Array):
        model = nnx.merge(graphdef, params, frozen)
        logp, mask = common.sequence_logprobs(model, tokens=mb["tokens"], positions=mb["positions"],
                                              segment_ids=mb["segment_ids"], loss_mask=mb["loss_mask"])
        return sft_loss_sum(logp, mask) / denom, {"tokens": jnp.sum(mask)}

    return loss_fn


def sft_denominator(batch: dict) -> jax.Array:
    """Trained targets in the whole [A, B, T] batch."""
    flat = lambda x: x.reshape(-1, x.shape[-1])  # noqa: E731
    return jnp.sum(target_mask(flat(batch["loss_mask"]), flat(batch["segment_ids"])))


def build_sft(config, *, workdir, tokenizer=None, splits=None, devices=None) -> dict[str, Any]:
    """Mesh, data, model, state and the jitted step of a run (`devices`: a subset for tests; default all)."""
    # ---- mesh
    from reasoner.sharding import make_mesh

    mesh = make_mesh(config.mesh, devices=devices)

    # ---- data
    from trainers.data_sources import load_splits

    tokenizer = tokenizer or common.load_tokenizer_for(config.model)
    splits = splits if splits is not None else load_splits(config.data, kind="sft", workdir=workdir)
    d = config.data
    rows, stats = prepare_sft(splits["train"], tokenizer, seq_len=d.seq_len, overflow=d.overflow,
                              packing=d.packing, split="train")
    val_rows = None
    if "validation" in splits:
        val_rows, _ = prepare_sft(splits["validation"], tokenizer, seq_len=d.seq_len, overflow=d.overflow,
                                  packing=d.packing, split="validation")
    iterator = BatchIterator(rows, batch_size=config.train.batch_size, grad_accum=config.train.grad_accum,
                             seed=config.seed, num_epochs=config.train.num_epochs)

    # ---- model
    model = common.build_model(config.model, mesh=mesh)
    lora = common.add_lora(model, config.lora)
    graphdef, params, frozen, trainable_state, frozen_state = common.split_trainable(model, lora=lora)

    # ---- state
    optimizer, schedule = make_optimizer(config.optim, total_steps=iterator.total_steps)
    params_sh = common.pure_shardings(trainable_state, mesh)
    frozen_sh = common.pure_shardings(frozen_state, mesh)
    state_sh = common.state_sharding(params_sh, optimizer, params, mesh)
    state = common.init_state(params, optimizer, seed=config.seed, sharding=state_sh)

    # ---- step
    from reasoner.data.pipeline import batch_sharding

    batch_sh = {k: batch_sharding(mesh, ndim=3) for k in rows}
    step = jit_train_step(
        make_train_step(loss_fn=sft_loss_fn(graphdef), optimizer=optimizer, schedule=schedule,
                        denominator=sft_denominator),
        state_sharding=state_sh, frozen_sharding=frozen_sh, batch_sharding=batch_sh,
        metrics_sharding=common.replicated(mesh))
    return dict(mesh=mesh, tokenizer=tokenizer, rows=rows, val_rows=val_rows, stats=stats, iterator=iterator,
                model_cfg=model.cfg, graphdef=graphdef, frozen=frozen, state=state, step=step,
                optimizer=optimizer, schedule=schedule, state_sharding=state_sh, batch_sharding=batch_sh)


def make_eval_fn(parts: dict, *, batch_size: int):
    """state -> {"val_loss": token-mean NLL over the validation rows}."""
    graphdef, mesh, frozen = parts["graphdef"], parts["mesh"], parts["frozen"]
    batches = eval_batches(parts["val_rows"], batch_size=batch_size)

    @jax.jit
    def nll(params, frozen, batch):
        mb = jax.tree.map(lambda x: x[0], batch)
        model = nnx.merge(graphdef, params, frozen)
        logp, mask = common.sequence_logprobs(model, tokens=mb["tokens"], positions=mb["positions"],
                                              segment_ids=mb["segment_ids"], loss_mask=mb["loss_mask"])
        return sft_loss_sum(logp, mask), jnp.sum(mask)

    def eval_fn(state) -> dict[str, float]:
        total, count = 0.0, 0.0
        for b in batches:
            s, n = nll(state.params, frozen, to_global_batch(b, mesh))
            total += float(s)
            count += float(n)
        return {"val_loss": total / max(count, 1.0), "val_tokens": count}

    return eval_fn


def train(config, *, workdir, progress: bool = True, tokenizer=None, splits=None, devices=None) -> LoopResult:
    """Runs (or resumes) SFT in `workdir`; returns the loop result. Exports the best (or last) weights."""
    workdir = pathlib.Path(workdir)
    parts = build_sft(config, workdir=workdir, tokenizer=tokenizer, splits=splits, devices=devices)
    stats = parts["stats"]
    print(f"[sft] train data: {stats.as_dict()}; {parts['iterator'].total_steps} steps", flush=True)
    eval_fn = make_eval_fn(parts, batch_size=config.train.batch_size) if parts["val_rows"] is not None else None
    meta = {"trainer": "sft", "fingerprint": fingerprint(parts["state"]), "data": stats.as_dict()}
    result = run_loop(
        trainer="sft", workdir=workdir, state=parts["state"], frozen=parts["frozen"], step_fn=parts["step"],
        iterator=parts["iterator"], mesh=parts["mesh"], meta=meta, train_cfg=config.train,
        postprocess=lambda m: {**m, "truncated": stats.truncated, "dropped": stats.dropped},
        eval_fn=eval_fn, best_metric="val_loss" if eval_fn is not None else None,
        flops_per_token=common.train_flops_per_token(parts["model_cfg"], seq_len=config.data.seq_len),
        progress=progress)
    if config.get("export_dir"):
        export(parts, result, workdir=workdir, out_dir=config.export_dir)
    return result


def export(parts: dict, result: LoopResult, *, workdir, out_dir) -> str:
    """Writes HF safetensors of the best-validation checkpoint (or the final state without validation)."""
    from reasoner.checkpoint import RunCheckpoints
    from reasoner.models.export import export_hf

    params = result.state.params
    ckpt = RunCheckpoints(workdir, best_metric="val_loss", async_save=False)
    if ckpt.best_step() is not None:
        meta = {"trainer": "sft", "fingerprint": fingerprint(result.state)}
        best_state, _, _ = ckpt.restore(result.state, expected_meta=meta, which="best")
        params = best_state.params
    ckpt.close()
    return export_hf(common.merged_for_export(parts["graphdef"], params, parts["frozen"]), str(out_dir))
