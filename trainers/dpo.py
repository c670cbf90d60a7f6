"""Direct Preference Optimization on chosen/rejected completion pairs (Sequent-Prover's DPO stage).

Sequence log-prob = sum of completion-token log-probs. Loss types (TRL 1.16 formulas, see
`trainers.losses.dpo_per_pair_loss`): sigmoid (beta 0.1 default; label_smoothing > 0 gives
conservative DPO), robust (label-smoothed, unbiased), ipo, hinge; averaged over the pairs of the
global batch. Reference-free: orpo (odds ratio of average log-probs, weight `dpo.beta`, plus the NLL of the
chosen completion tokens; TRL's ORPO also counts prompt tokens in that NLL, we train completions only, as SFT
does) and simpo (`dpo.beta`, margin `dpo.simpo_gamma`; TRL CPOTrainer loss_type="simpo", cpo_alpha 0): with them
no reference model is built or run, and rewards/* and logps/* are TRL's beta x / plain average log-probs
(ORPO also logs nll_loss). Otherwise the reference model stays outside the optimizer: either its log-probs are
computed once before training (`dpo.precompute_ref`, cached in `workdir/ref_logps.npz`) or on the fly in
the step under `stop_gradient`. Logged: loss and TRL's rewards/chosen, rewards/rejected,
rewards/accuracies, rewards/margins (means over pairs), plus logps/chosen and logps/rejected.
Pairs are not packed: chosen and rejected rows run as one [2B, T] forward.

Reads top to bottom: loss, data, reference, setup and step, eval, train (setup -> run_loop).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from reasoner.checkpoint import fingerprint
from reasoner.data.pipeline import batch_sharding, eval_batches, prepare_dpo, to_global_batch
from reasoner.models.scoring import sequence_logps
from trainers.losses import (PAIR_LOSS_TYPES, REFERENCE_FREE_LOSS_TYPES, dpo_per_pair_loss, dpo_reward_sums,
                             orpo_nll, orpo_per_pair_loss, simpo_per_pair_loss)
from trainers.loop import LoopResult, run_loop, train_flops_per_token
from trainers.data import batch_iterator
from trainers.run import (Frozen, Run, RowsRun, export_run, load_tokenizer_for, rows_update, setup_rows,
                          with_reference)
from trainers.step import jit_train_step, make_train_step

SIDES = ("chosen", "rejected")
FIELDS = ("tokens", "positions", "segment_ids", "loss_mask")


def pair_logps(model, mb: dict) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(chosen_logps [B], rejected_logps [B], chosen_lengths [B], rejected_lengths [B]) in one [2B, T] forward."""
    both = {f: jnp.concatenate([mb[f"chosen_{f}"], mb[f"rejected_{f}"]], axis=0) for f in FIELDS}
    logp, mask = sequence_logps(model, both)
    seq = jnp.sum(logp * mask, axis=-1)
    lengths = jnp.sum(mask, axis=-1)
    b = mb["chosen_tokens"].shape[0]
    return seq[:b], seq[b:], lengths[:b], lengths[b:]


def reference_free(dpo_cfg) -> bool:
    """Whether `dpo.loss_type` needs no reference model (orpo, simpo); raises on an unknown loss type."""
    if dpo_cfg.loss_type not in PAIR_LOSS_TYPES:
        raise ValueError(f"dpo.loss_type={dpo_cfg.loss_type!r}: expected one of {PAIR_LOSS_TYPES} (KTO trains on "
                         "unpaired data with its own trainer: trainer='kto', configs/kto.py)")
    return dpo_cfg.loss_type in REFERENCE_FREE_LOSS_TYPES


def free_terms(dpo_cfg, *, policy, lengths):
    """(per-pair loss [B], metric sums) of a reference-free loss from average completion log-probs."""
    ac, ar = (x / jnp.maximum(n, 1.0) for x, n in zip(policy, lengths))
    if dpo_cfg.loss_type == "orpo":
        per_pair, _ = orpo_per_pair_loss(chosen_avg_logps=ac, rejected_avg_logps=ar, beta=dpo_cfg.beta)
    else:
        per_pair = simpo_per_pair_loss(chosen_avg_logps=ac, rejected_avg_logps=ar, beta=dpo_cfg.beta,
                                       gamma=float(dpo_cfg.get("simpo_gamma", 0.5)),
                                       label_smoothing=dpo_cfg.label_smoothing)
    zeros = jnp.zeros_like(ac)
    sums = dpo_reward_sums(chosen_logps=ac, rejected_logps=ar, ref_chosen_logps=zeros, ref_rejected_logps=zeros,
                           beta=dpo_cfg.beta)
    sums["logps/chosen"] = jnp.sum(jax.lax.stop_gradient(ac))
    sums["logps/rejected"] = jnp.sum(jax.lax.stop_gradient(ar))
    return per_pair, sums


def dpo_terms(dpo_cfg, *, policy, ref, lengths):
    """(per-pair loss [B], metric sums) from policy and reference (chosen, rejected) log-probs (ref unused and
    may be None for the reference-free losses)."""
    if reference_free(dpo_cfg):
        return free_terms(dpo_cfg, policy=policy, lengths=lengths)
    pc, pr = policy
    rc, rr = ref
    per_pair = dpo_per_pair_loss(chosen_logps=pc, rejected_logps=pr, ref_chosen_logps=rc, ref_rejected_logps=rr,
                                 beta=dpo_cfg.beta, loss_type=dpo_cfg.loss_type,
                                 label_smoothing=dpo_cfg.label_smoothing,
                                 chosen_lengths=lengths[0], rejected_lengths=lengths[1])
    sums = dpo_reward_sums(chosen_logps=pc, rejected_logps=pr, ref_chosen_logps=rc, ref_rejected_logps=rr,
                           beta=dpo_cfg.beta)
    sums["logps/chosen"] = jnp.sum(jax.lax.stop_gradient(pc))
    sums["logps/rejected"] = jnp.sum(jax.lax.stop_gradient(pr))
    return per_pair, sums


def dpo_loss_fn(graphdef, dpo_cfg, *, precomputed: bool):
    """loss_fn(params, frozen: Frozen, mb, denom); the reference's log-probs come precomputed in `mb` or from
    `frozen.reference` under stop_gradient."""

    def loss_fn(params, frozen: Frozen, mb: dict, denom: jax.Array):
        model = nnx.merge(graphdef, params, frozen.base)
        pc, pr, lc, lr = pair_logps(model, mb)
        if reference_free(dpo_cfg):
            per_pair, sums = free_terms(dpo_cfg, policy=(pc, pr), lengths=(lc, lr))
            if dpo_cfg.loss_type != "orpo":
                return jnp.sum(per_pair) / denom, sums
            # + ORPO's NLL: TRL's token mean of each micro-batch, averaged over the denom / B micro-batches
            nll = orpo_nll(pc, lc)
            sums["nll_loss"] = jax.lax.stop_gradient(nll) * pc.shape[0]
            return (jnp.sum(per_pair) + nll * pc.shape[0]) / denom, sums
        if precomputed:
            rc, rr = mb["ref_chosen_logps"], mb["ref_rejected_logps"]
        else:
            ref_model = nnx.merge(graphdef, frozen.reference, frozen.base)
            rc, rr, _, _ = jax.tree.map(jax.lax.stop_gradient, pair_logps(ref_model, mb))
        per_pair, sums = dpo_terms(dpo_cfg, policy=(pc, pr), ref=(rc, rr), lengths=(lc, lr))
        return jnp.sum(per_pair) / denom, sums

    return loss_fn


def pair_denominator(batch: dict) -> jax.Array:
    """Pairs in the [A, B, T] batch."""
    a, b = batch["chosen_tokens"].shape[:2]
    return jnp.asarray(a * b, jnp.float32)


def mean_metrics(m: dict[str, float]) -> dict[str, float]:
    """Turns the step's metric sums into TRL's per-pair means."""
    pairs = m["denom"]
    out = dict(m)
    for key in ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
                "logps/chosen", "logps/rejected", "nll_loss"):
        if key in m:
            out[key] = m[key] / pairs
    return out


def reference_logps(graphdef, frozen: Frozen, rows: dict, *, mesh, batch_size: int) -> dict[str, np.ndarray]:
    """One pass of `frozen.reference` over every pair: {"ref_chosen_logps": [P], "ref_rejected_logps": [P]}."""

    def one(frozen, batch):
        mb = jax.tree.map(lambda x: x[0], batch)
        c, r, _, _ = pair_logps(nnx.merge(graphdef, frozen.reference, frozen.base), mb)
        return c, r

    # replicated outputs: every process reads all pairs' values (a row-sharded array spans other processes)
    whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    one = jax.jit(one, out_shardings=(whole, whole))

    keys = [f"{s}_{f}" for s in SIDES for f in FIELDS]
    chosen, rejected = [], []
    for b in eval_batches({k: rows[k] for k in keys}, batch_size=batch_size):
        c, r = one(frozen, to_global_batch(b, mesh))
        chosen.append(np.asarray(c))
        rejected.append(np.asarray(r))
    n = len(rows["chosen_tokens"])
    return {"ref_chosen_logps": np.concatenate(chosen)[:n].astype(np.float32),
            "ref_rejected_logps": np.concatenate(rejected)[:n].astype(np.float32)}


def _cached_reference(path: pathlib.Path, key: str, compute) -> dict[str, np.ndarray]:
    """Loads the reference log-probs cached under `key` or computes and stores them."""
    if path.exists():
        with np.load(path) as z:
            if str(z["key"]) == key:
                return {k: z[k] for k in ("ref_chosen_logps", "ref_rejected_logps")}
    values = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.tmp.{os.getpid()}.npz")  # one per process: writers of a job never interleave
    np.savez(tmp, key=key, **values)
    tmp.replace(path)
    return values


def load_rows(config, *, tokenizer, workdir, splits=None):
    """(train rows, validation rows or None, stats) of `config.data`: chosen_* / rejected_* arrays [P, T]."""
    from trainers.data import load_prepared

    return load_prepared(config, kind="dpo", prepare=prepare_dpo, tokenizer=tokenizer, workdir=workdir,
                         splits=splits)


def dpo_reference(run: Run, *, section: str = "dpo") -> Run:
    """`run` with its frozen reference: `reference_params` (the starting policy; under LoRA the adapter-free base),
    or the model `<section>.ref_model` names (section "dpo", or "kto" for trainers.kto)."""
    config = run.config
    ref_model = config[section].ref_model
    if not ref_model:
        return with_reference(run)
    if run.lora:
        raise ValueError(f"{section}.ref_model with LoRA: the reference is the adapter-free base; leave "
                         f"{section}.ref_model empty")
    from trainers.run import build_model, split_trainable

    ref_cfg = config.model.copy_and_resolve_references()
    ref_cfg.name = ref_model
    _, ref_params, _, _, _ = split_trainable(build_model(ref_cfg, mesh=run.mesh), lora=False)
    return with_reference(run, ref_params)


def with_reference_logps(run: Run, rows: dict, *, workdir, stats, batch_size: int) -> dict:
    """`rows` plus the reference's log-probs of every pair, cached in `workdir/ref_logps.npz` under a key of the
    reference weights, data and model config (an explicit stage: one forward pass over the dataset)."""
    key = hashlib.sha256((fingerprint(run.frozen.reference) + str(sorted(stats.as_dict().items()))
                          + str(run.config.model.to_dict()) + str(run.config.data.to_dict())).encode()).hexdigest()[:16]

    def compute():
        return reference_logps(run.graphdef, run.frozen, rows, mesh=run.mesh, batch_size=batch_size)

    return {**rows, **_cached_reference(pathlib.Path(workdir) / "ref_logps.npz", key, compute)}


def build_dpo(config, *, workdir, tokenizer=None, splits=None, devices=None) -> RowsRun:
    """Data, run, reference and step of `config` (`devices`: a subset for tests; default all). With
    `dpo.precompute_ref` the rows carry the reference log-probs and `run.frozen.reference` is None."""
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer_for(config.model)
    free = reference_free(config.dpo)  # orpo / simpo: no reference model at all
    rows, val_rows, stats = load_rows(config, tokenizer=tokenizer, workdir=workdir, splits=splits)
    iterator, run = setup_rows(config, rows, tokenizer=tokenizer, devices=devices)
    run = run if free else dpo_reference(run)
    precomputed = bool(config.dpo.precompute_ref) and not free
    batch_size = int(config.train.batch_size)
    if val_rows is not None and not free:  # evaluation always reads the reference's log-probs from the rows
        val_rows = {**val_rows, **reference_logps(run.graphdef, run.frozen, val_rows, mesh=run.mesh,
                                                  batch_size=batch_size)}
    if precomputed:
        rows = with_reference_logps(run, rows, workdir=workdir, stats=stats, batch_size=batch_size)
        run = run.replace(frozen=Frozen(base=run.frozen.base),
                          shardings=dataclasses.replace(run.shardings, frozen=Frozen(base=run.shardings.frozen.base)))
        iterator = batch_iterator(config, rows)
    batch_sh = {k: batch_sharding(run.mesh, ndim=v.ndim + 1) for k, v in rows.items()}
    step = jit_train_step(
        make_train_step(loss_fn=dpo_loss_fn(run.graphdef, config.dpo, precomputed=precomputed),
                        optimizer=run.optimizer, schedule=run.schedule, denominator=pair_denominator),
        state_sharding=run.shardings.state, frozen_sharding=run.shardings.frozen, batch_sharding=batch_sh,
        metrics_sharding=run.shardings.replicated)
    return RowsRun(run=run, rows=rows, val_rows=val_rows, stats=stats, iterator=iterator, step=step)


def make_eval_fn(s: RowsRun, dpo_cfg, *, batch_size: int):
    """state -> validation {"val_loss", "val_rewards/accuracies", "val_rewards/margins", ...} (means over pairs)."""
    run, val_rows = s.run, s.val_rows
    free = reference_free(dpo_cfg)
    n = len(val_rows["chosen_tokens"])
    batches = eval_batches(val_rows, batch_size=batch_size)

    @jax.jit
    def one(params, frozen, batch):
        mb = jax.tree.map(lambda x: x[0], batch)
        pc, pr, lc, lr = pair_logps(nnx.merge(run.graphdef, params, frozen.base), mb)
        valid = (lc > 0).astype(jnp.float32)  # filler rows have no completion tokens
        if free:  # TRL's rewards of ORPO / SimPO: beta x average log-probs; ORPO's NLL added in eval_fn
            per_pair, _ = free_terms(dpo_cfg, policy=(pc, pr), lengths=(lc, lr))
            chosen, rejected = dpo_cfg.beta * pc / jnp.maximum(lc, 1.0), dpo_cfg.beta * pr / jnp.maximum(lr, 1.0)
        else:
            per_pair, _ = dpo_terms(dpo_cfg, policy=(pc, pr),
                                    ref=(mb["ref_chosen_logps"], mb["ref_rejected_logps"]), lengths=(lc, lr))
            chosen = dpo_cfg.beta * (pc - mb["ref_chosen_logps"])
            rejected = dpo_cfg.beta * (pr - mb["ref_rejected_logps"])
        return {"val_loss": jnp.sum(per_pair * valid), "val_rewards/chosen": jnp.sum(chosen * valid),
                "nll_sum": -jnp.sum(pc * valid), "nll_tokens": jnp.sum(lc * valid),
                "val_rewards/rejected": jnp.sum(rejected * valid),
                "val_rewards/accuracies": jnp.sum((chosen > rejected) * valid),
                "val_rewards/margins": jnp.sum((chosen - rejected) * valid)}

    def eval_fn(state) -> dict[str, float]:
        totals: dict[str, float] = {}
        for b in batches:
            for k, v in one(state.params, run.frozen, to_global_batch(b, run.mesh)).items():
                totals[k] = totals.get(k, 0.0) + float(v)
        nll_sum, nll_tokens = totals.pop("nll_sum"), totals.pop("nll_tokens")
        out = {k: v / n for k, v in totals.items()}
        if dpo_cfg.loss_type == "orpo":  # + the chosen-token NLL, a token mean over the validation pairs
            out["val_loss"] += nll_sum / max(nll_tokens, 1.0)
        return out

    return eval_fn


def make_update(s: RowsRun):
    """`update(state, host_batch) -> (state, host metrics as TRL's per-pair means)` for `run_loop`."""
    return rows_update(s, reduce=mean_metrics, token_keys=("chosen_segment_ids", "rejected_segment_ids"))


def train(config, *, workdir, progress: bool = True, tokenizer=None, splits=None, devices=None) -> LoopResult:
    """Runs (or resumes) DPO in `workdir`; exports the final weights when `export_dir` is set."""
    workdir = pathlib.Path(workdir)
    s = build_dpo(config, workdir=workdir, tokenizer=tokenizer, splits=splits, devices=devices)
    print(f"[dpo] train pairs: {s.stats.as_dict()}; {s.iterator.total_steps} steps", flush=True)
    eval_fn = (make_eval_fn(s, config.dpo, batch_size=config.train.batch_size)
               if s.val_rows is not None else None)
    meta = {"trainer": "dpo", "fingerprint": fingerprint(s.run.state), "data": s.stats.as_dict()}
    result = run_loop(
        s.run, source=s.iterator, update=make_update(s), workdir=workdir, trainer="dpo", meta=meta,
        eval_fn=eval_fn, eval_every=s.iterator.steps_per_epoch,
        # policy forward+backward (3 passes) plus the reference forward when it is not precomputed
        flops_per_token=train_flops_per_token(s.run.model_cfg, seq_len=config.data.seq_len,
                                              passes=3.0 if config.dpo.precompute_ref or reference_free(
                                                  config.dpo) else 4.0),
        progress=progress)
    if config.get("export_dir") and not result.preempted:
        export_run(s.run, result.state.params, config.export_dir)
    return result
