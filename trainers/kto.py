"""Kahneman-Tversky Optimization on unpaired preference data (Ethayarajh et al. 2024; TRL 1.16's KTOTrainer).

Data: TRL's unpaired rows {prompt, completion, label} (label true = desirable), or paired {prompt, chosen, rejected}
rows unpaired as TRL does (`reasoner.data.unpaired`), one example per row. Loss (`trainers.losses.kto_losses`, TRL's
loss_type "kto"), per example with r = log pi(y|x) - log ref(y|x) (sums over completion tokens):
    desirable   w_d (1 - sigmoid(beta (r - z0)))        undesirable   w_u (1 - sigmoid(beta (z0 - r)))
averaged over the examples of the global batch (TRL: each micro-batch's mean, divided by the accumulation steps;
the same number for equal micro-batches). z0 = max(0, mean over the micro-batch of log pi(y'|x) - log ref(y'|x)) is
KTO's KL estimate from mismatched pairs: row i's prompt with row i-1's completion (TRL's rotation by one), held
constant (no gradient), like TRL's `kl`, which is per micro-batch and averaged over its devices. One deliberate
difference, for multi-device batches: TRL rotates within each device's rows, we rotate within the global
micro-batch (the same on one device; an estimate of the same expectation otherwise), and the rotation happens after
shuffling (TRL must sample sequentially to keep its precomputed pairing). The reference is frozen outside the
optimizer: the starting policy (under LoRA the adapter-free base) or the model `kto.ref_model` names; its
log-probs are computed in the step under stop_gradient (no `precompute_ref`: the KL pairs exist only once a batch
is drawn). TRL needs a micro-batch of at least 2 rows for the KL estimate; so does this trainer.

Logged (TRL's names): loss, kl (mean over the step's micro-batches), rewards/chosen, rewards/rejected (means of
beta r over the desirable / undesirable examples, present when the step has any), rewards/margins (their
difference, when it has both), logps/chosen, logps/rejected. Each epoch ends with the same on the validation split
(val_*). Like TRL, a warning names the recommended weights when desirable and undesirable examples are unbalanced
(KTO paper, Eq. 8).

Reads top to bottom: loss, data, setup and step, eval, train (setup -> run_loop).
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from reasoner.checkpoint import fingerprint
from reasoner.data.pipeline import batch_sharding, eval_batches, to_global_batch
from reasoner.data.unpaired import KL_FIELDS, ROW_FIELDS, KLBatches, prepare_kto, with_kl_rows
from reasoner.models.scoring import sequence_logps
from trainers.loop import LoopResult, run_loop, train_flops_per_token
from trainers.losses import kto_losses
from trainers.run import Frozen, RowsRun, export_run, load_tokenizer_for, rows_update, setup_rows

SIDES = ("chosen", "rejected")  # TRL's metric names for desirable / undesirable examples


# ============================================================================================== loss
def completion_logps(model, mb: dict, *, prefix: str = "") -> jax.Array:
    """[B] summed completion log-probs of the rows `prefix`tokens/... ("" the examples, "kl_" the mismatched pairs)."""
    logp, mask = sequence_logps(model, {f: mb[f"{prefix}{f}"] for f in ROW_FIELDS})
    return jnp.sum(logp * mask, axis=-1)


def kto_terms(kto_cfg, *, logps, ref_logps, kl_logps, ref_kl_logps, labels, valid=None):
    """(per-example losses [B], metric sums) of one micro-batch; `valid` [B] excludes filler rows (evaluation)."""
    per, z0 = kto_losses(logps=logps, ref_logps=ref_logps, kl_logps=kl_logps, ref_kl_logps=ref_kl_logps,
                         labels=labels, beta=float(kto_cfg.beta), desirable_weight=float(kto_cfg.desirable_weight),
                         undesirable_weight=float(kto_cfg.undesirable_weight), valid=valid)
    valid = jnp.ones_like(labels) if valid is None else valid
    rewards = float(kto_cfg.beta) * jax.lax.stop_gradient(logps - ref_logps)
    sums = {"kl": z0, "micro_batches": jnp.float32(1.0)}
    for side, weight in zip(SIDES, (labels * valid, (1.0 - labels) * valid)):
        sums[f"rewards/{side}"] = jnp.sum(rewards * weight)
        sums[f"logps/{side}"] = jnp.sum(jax.lax.stop_gradient(logps) * weight)
        sums[f"count/{side}"] = jnp.sum(weight)
    return per * valid, sums


def forward_terms(graphdef, kto_cfg, params, frozen: Frozen, mb: dict, *, valid=None):
    """(per-example losses [B], sums) of micro-batch `mb`: the policy on the examples (with gradient) and on the KL
    pairs (without), the reference on both in one [2B, T] forward under stop_gradient."""
    model = nnx.merge(graphdef, params, frozen.base)
    logps = completion_logps(model, mb)
    kl_logps = jax.lax.stop_gradient(completion_logps(model, mb, prefix="kl_"))
    both = {f: jnp.concatenate([mb[f], mb[f"kl_{f}"]], axis=0) for f in ROW_FIELDS}
    ref_both = jax.lax.stop_gradient(completion_logps(nnx.merge(graphdef, frozen.reference, frozen.base), both))
    b = logps.shape[0]
    return kto_terms(kto_cfg, logps=logps, ref_logps=ref_both[:b], kl_logps=kl_logps, ref_kl_logps=ref_both[b:],
                     labels=mb["label"].astype(jnp.float32), valid=valid)


def kto_loss_fn(graphdef, kto_cfg):
    """loss_fn(params, frozen: Frozen, mb, denom) -> (sum of the micro-batch's example losses / denom, sums)."""

    def loss_fn(params, frozen: Frozen, mb: dict, denom: jax.Array):
        per, sums = forward_terms(graphdef, kto_cfg, params, frozen, mb)
        return jnp.sum(per) / denom, sums

    return loss_fn


def example_denominator(batch: dict) -> jax.Array:
    """Examples in the [A, B] batch."""
    a, b = batch["label"].shape[:2]
    return jnp.asarray(a * b, jnp.float32)


def host_means(sums: dict[str, float], *, prefix: str = "") -> dict[str, float]:
    """TRL's logged values from the summed metrics: kl averaged over micro-batches, rewards and log-probs over the
    examples of each side (absent when the side has none), margins when both sides are present."""
    out = {k: v for k, v in sums.items() if k.split("/")[0] not in ("rewards", "logps", "count", "kl", "micro_batches")}
    out[f"{prefix}kl"] = sums["kl"] / max(sums["micro_batches"], 1.0)
    for side in SIDES:
        if sums[f"count/{side}"] > 0:
            out[f"{prefix}rewards/{side}"] = sums[f"rewards/{side}"] / sums[f"count/{side}"]
            out[f"{prefix}logps/{side}"] = sums[f"logps/{side}"] / sums[f"count/{side}"]
    if all(f"{prefix}rewards/{side}" in out for side in SIDES):
        out[f"{prefix}rewards/margins"] = out[f"{prefix}rewards/chosen"] - out[f"{prefix}rewards/rejected"]
    return out


# ============================================================================================== data
def check_config(config) -> None:
    """One-line errors for settings KTO cannot train with."""
    k = config.kto
    if int(config.train.batch_size) < 2:
        raise ValueError(f"train.batch_size={config.train.batch_size}: KTO's KL estimate pairs each prompt with "
                         "another row's completion, so a micro-batch needs at least 2 rows (TRL requires the same)")
    for name in ("beta", "desirable_weight", "undesirable_weight"):
        if not float(k[name]) > 0:
            raise ValueError(f"kto.{name}={k[name]}: expected a positive number")


def weight_advice(labels: np.ndarray, kto_cfg) -> str | None:
    """TRL's warning when desirable and undesirable examples are unbalanced and neither weight lies in the KTO paper's
    recommended range (Eq. 8: w_d n_d / (w_u n_u) in [1, 4/3]); None when the weights are fine."""
    w_d, w_u = float(kto_cfg.desirable_weight), float(kto_cfg.undesirable_weight)
    n_d = max(int(np.sum(labels > 0)), 1)
    n_u = max(len(labels) - n_d, 1)
    if n_d == n_u:
        return None
    d_lo, d_hi = round(n_u * w_u / n_d, 2), round(n_u * w_u / n_d * 1.33, 2)
    u_lo, u_hi = round(n_d * w_d / n_u / 1.33, 2), round(n_d * w_d / n_u, 2)
    if d_lo <= w_d <= d_hi or u_lo <= w_u <= u_hi:
        return None
    return (f"{n_d} desirable and {n_u} undesirable examples: the KTO paper (Eq. 8) recommends EITHER "
            f"kto.desirable_weight in [{d_lo}, {d_hi}] OR kto.undesirable_weight in [{u_lo}, {u_hi}] (not both)")


def load_rows(config, *, tokenizer, workdir, splits=None):
    """(train rows, validation rows or None, stats) of `config.data` (`reasoner.data.unpaired.prepare_kto`)."""
    from trainers.data import load_prepared

    return load_prepared(config, kind="kto", prepare=prepare_kto, tokenizer=tokenizer, workdir=workdir,
                         splits=splits)


# ============================================================================================== setup and step
def build_kto(config, *, workdir, tokenizer=None, splits=None, devices=None) -> RowsRun:
    """Data, run, reference and step of `config` (`devices`: a subset for tests; default all). `iterator` is a
    `KLBatches`: its batches carry the KL rows."""
    from trainers.dpo import dpo_reference
    from trainers.step import jit_train_step, make_train_step

    check_config(config)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer_for(config.model)
    rows, val_rows, stats = load_rows(config, tokenizer=tokenizer, workdir=workdir, splits=splits)
    advice = weight_advice(rows["label"], config.kto)
    if advice:
        print(f"[kto] warning: {advice}", flush=True)
    iterator, run = setup_rows(config, rows, tokenizer=tokenizer, devices=devices)
    run = dpo_reference(run, section="kto")
    batch_sh = {k: batch_sharding(run.mesh, ndim=3) for k in (*ROW_FIELDS, *KL_FIELDS)}
    batch_sh.update({k: batch_sharding(run.mesh, ndim=2) for k in ("label", "index")})
    step = jit_train_step(
        make_train_step(loss_fn=kto_loss_fn(run.graphdef, config.kto), optimizer=run.optimizer,
                        schedule=run.schedule, denominator=example_denominator),
        state_sharding=run.shardings.state, frozen_sharding=run.shardings.frozen, batch_sharding=batch_sh,
        metrics_sharding=run.shardings.replicated)
    pad_id = int(tokenizer.pad_token_id or 0)
    return RowsRun(run=run, rows=rows, val_rows=val_rows, stats=stats, iterator=KLBatches(iterator, pad_id=pad_id),
                   step=step)


def make_update(s: RowsRun):
    """`update(state, host_batch) -> (state, host metrics)` for `run_loop` (TRL's means: `host_means`)."""
    return rows_update(s, reduce=host_means)


# ============================================================================================== eval
def make_eval_fn(s: RowsRun, kto_cfg, *, batch_size: int):
    """state -> {"val_loss" (mean over the validation examples), "val_kl" (mean of the batches' z0),
    "val_rewards/chosen", ...}: each batch of `batch_size` examples pairs its own rows for the KL estimate."""
    run = s.run
    pad_id = int(getattr(run.tokenizer, "pad_token_id", 0) or 0)
    batches = [with_kl_rows(b, pad_id=pad_id) for b in eval_batches(s.val_rows, batch_size=batch_size)]
    n = len(s.val_rows["label"])

    @jax.jit
    def one(params, frozen, batch):
        mb = jax.tree.map(lambda x: x[0], batch)
        valid = jnp.any(mb["segment_ids"] > 0, axis=-1).astype(jnp.float32)  # filler rows hold no tokens
        per, sums = forward_terms(run.graphdef, kto_cfg, params, frozen, mb, valid=valid)
        return {"loss": jnp.sum(per), **sums}

    def eval_fn(state) -> dict[str, float]:
        totals: dict[str, float] = {}
        for b in batches:
            for k, v in one(state.params, run.frozen, to_global_batch(b, run.mesh)).items():
                totals[k] = totals.get(k, 0.0) + float(v)
        out = host_means(totals, prefix="val_")
        out["val_loss"] = out.pop("loss") / n
        return out

    return eval_fn


# ============================================================================================== train
def train(config, *, workdir, progress: bool = True, tokenizer=None, splits=None, devices=None) -> LoopResult:
    """Runs (or resumes) KTO in `workdir`; exports the final weights when `export_dir` is set."""
    workdir = pathlib.Path(workdir)
    s = build_kto(config, workdir=workdir, tokenizer=tokenizer, splits=splits, devices=devices)
    labels = s.rows["label"]
    print(f"[kto] train examples: {s.stats.as_dict()} ({int(labels.sum())} desirable, "
          f"{int(len(labels) - labels.sum())} undesirable); {s.iterator.total_steps} steps", flush=True)
    eval_fn = make_eval_fn(s, config.kto, batch_size=config.train.batch_size) if s.val_rows is not None else None
    meta = {"trainer": "kto", "fingerprint": fingerprint(s.run.state), "data": s.stats.as_dict()}
    result = run_loop(
        s.run, source=s.iterator, update=make_update(s), workdir=workdir, trainer="kto", meta=meta, eval_fn=eval_fn,
        eval_every=s.iterator.steps_per_epoch,
        # per example token: policy forward + backward (3 passes), the policy's forward of the KL row and the
        # reference's of both (3 more; a KL row is as long as an example's row on average)
        flops_per_token=train_flops_per_token(s.run.model_cfg, seq_len=config.data.seq_len, passes=6.0),
        progress=progress)
    if config.get("export_dir") and not result.preempted:
        export_run(s.run, result.state.params, config.export_dir)
    return result
