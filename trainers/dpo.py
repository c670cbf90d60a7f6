"""Direct Preference Optimization on chosen/rejected completion pairs (Sequent-Prover's DPO stage).

Sequence log-prob = sum of completion-token log-probs. Loss types (TRL 1.16 formulas, see
`trainers.losses.dpo_per_pair_loss`): sigmoid (beta 0.1 default; label_smoothing > 0 gives
conservative DPO), robust (label-smoothed, unbiased), ipo, hinge; averaged over the pairs of the
global batch. The reference model stays outside the optimizer: either its log-probs are computed
once before training (`dpo.precompute_ref`, cached in `workdir/ref_logps.npz`) or on the fly in
the step under `stop_gradient`. Logged: loss and TRL's rewards/chosen, rewards/rejected,
rewards/accuracies, rewards/margins (means over pairs), plus logps/chosen and logps/rejected.
Pairs are not packed: chosen and rejected rows run as one [2B, T] forward.

Reads top to bottom: mesh, data, model, reference, state, step, eval, loop.
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from reasoner.checkpoint import fingerprint
from reasoner.data.pipeline import BatchIterator, batch_sharding, eval_batches, prepare_dpo, to_global_batch
from trainers import common
from trainers.losses import dpo_per_pair_loss, dpo_reward_sums
from trainers.loop import LoopResult, run_loop
from trainers.optim import make_optimizer
from trainers.step import jit_train_step, make_train_step

SIDES = ("chosen", "rejected")
FIELDS = ("tokens", "positions", "segment_ids", "loss_mask")


def pair_logps(model, mb: dict) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(chosen_logps [B], rejected_logps [B], chosen_lengths [B], rejected_lengths [B]) in one [2B, T] forward."""
    both = {f: jnp.concatenate([mb[f"chosen_{f}"], mb[f"rejected_{f}"]], axis=0) for f in FIELDS}
    logp, mask = common.sequence_logprobs(model, tokens=both["tokens"], positions=both["positions"],
                                          segment_ids=both["segment_ids"], loss_mask=both["loss_mask"])
    seq = jnp.sum(logp * mask, axis=-1)
    lengths = jnp.sum(mask, axis=-1)
    b = mb["chosen_tokens"].shape[0]
    return seq[:b], seq[b:], lengths[:b], lengths[b:]


def dpo_terms(dpo_cfg, *, policy, ref, lengths):
    """(per-pair loss [B], metric sums) from policy and reference (chosen, rejected) log-probs."""
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
    """loss_fn(params, frozen, mb, denom); frozen = {"rest": non-trainable, "ref": reference params or {}}."""

    def loss_fn(params, frozen, mb: dict, denom: jax.Array):
        model = nnx.merge(graphdef, params, frozen["rest"])
        pc, pr, lc, lr = pair_logps(model, mb)
        if precomputed:
            rc, rr = mb["ref_chosen_logps"], mb["ref_rejected_logps"]
        else:
            ref_model = nnx.merge(graphdef, frozen["ref"], frozen["rest"])
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
                "logps/chosen", "logps/rejected"):
        out[key] = m[key] / pairs
    return out


def reference_logps(graphdef, ref_params, rest, rows: dict, *, mesh, batch_size: int) -> dict[str, np.ndarray]:
    """One pass of the reference over every pair: {"ref_chosen_logps": [P], "ref_rejected_logps": [P]}."""

    @jax.jit
    def one(ref_params, rest, batch):
        mb = jax.tree.map(lambda x: x[0], batch)
        c, r, _, _ = pair_logps(nnx.merge(graphdef, ref_params, rest), mb)
        return c, r

    keys = [f"{s}_{f}" for s in SIDES for f in FIELDS]
    chosen, rejected = [], []
    for b in eval_batches({k: rows[k] for k in keys}, batch_size=batch_size):
        c, r = one(ref_params, rest, to_global_batch(b, mesh))
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
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, key=key, **values)
    tmp.replace(path)
    return values


def build_dpo(config, *, workdir, tokenizer=None, splits=None, devices=None) -> dict[str, Any]:
    """Mesh, data, model, state and the jitted step of a run (`devices`: a subset for tests; default all)."""
    # ---- mesh
    from reasoner.sharding import make_mesh

    mesh = make_mesh(config.mesh, devices=devices)

    # ---- data
    from trainers.data_sources import load_splits

    tokenizer = tokenizer or common.load_tokenizer_for(config.model)
    splits = splits if splits is not None else load_splits(config.data, kind="dpo", workdir=workdir)
    d = config.data
    rows, stats = prepare_dpo(splits["train"], tokenizer, seq_len=d.seq_len, overflow=d.overflow, split="train")
    val_rows = None
    if "validation" in splits:
        val_rows, _ = prepare_dpo(splits["validation"], tokenizer, seq_len=d.seq_len, overflow=d.overflow,
                                  split="validation")

    # ---- model (the policy starts from the reference weights unless dpo.ref_model names another)
    model = common.build_model(config.model, mesh=mesh)
    lora = common.add_lora(model, config.lora)
    graphdef, params, rest, trainable_state, rest_state = common.split_trainable(model, lora=lora)
    params_sh = common.pure_shardings(trainable_state, mesh)
    rest_sh = common.pure_shardings(rest_state, mesh)
    if config.dpo.ref_model and lora:
        raise ValueError("dpo.ref_model with LoRA: the reference is the adapter-free base; leave dpo.ref_model empty")
    if config.dpo.ref_model:
        ref_cfg = config.model.copy_and_resolve_references()
        ref_cfg.name = config.dpo.ref_model
        _, ref_params, _, _, _ = common.split_trainable(common.build_model(ref_cfg, mesh=mesh), lora=False)
    else:
        # the starting policy (with LoRA: fresh adapters, B = 0, i.e. exactly the base model); a separate
        # buffer because the policy's is donated each step
        ref_params = jax.tree.map(jnp.copy, params)

    # ---- reference log-probs
    precomputed = bool(config.dpo.precompute_ref)
    if precomputed:
        def compute_for(r):
            return lambda: reference_logps(graphdef, ref_params, rest, r, mesh=mesh,
                                           batch_size=config.train.batch_size)

        key = hashlib.sha256((fingerprint(ref_params) + str(sorted(stats.as_dict().items()))
                              + str(config.model.to_dict()) + str(d.to_dict())).encode()).hexdigest()[:16]
        rows = {**rows, **_cached_reference(pathlib.Path(workdir) / "ref_logps.npz", key, compute_for(rows))}
        if val_rows is not None:
            val_rows = {**val_rows, **compute_for(val_rows)()}
        frozen = {"rest": rest, "ref": {}}
        frozen_sh = {"rest": rest_sh, "ref": {}}
    else:
        frozen = {"rest": rest, "ref": ref_params}
        frozen_sh = {"rest": rest_sh, "ref": params_sh}
    iterator = BatchIterator(rows, batch_size=config.train.batch_size, grad_accum=config.train.grad_accum,
                             seed=config.seed, num_epochs=config.train.num_epochs)

    # ---- state
    optimizer, schedule = make_optimizer(config.optim, total_steps=iterator.total_steps)
    state_sh = common.state_sharding(params_sh, optimizer, params, mesh)
    state = common.init_state(params, optimizer, seed=config.seed, sharding=state_sh)

    # ---- step
    batch_sh = {k: batch_sharding(mesh, ndim=v.ndim + 1) for k, v in rows.items()}
    step = jit_train_step(
        make_train_step(loss_fn=dpo_loss_fn(graphdef, config.dpo, precomputed=precomputed), optimizer=optimizer,
                        schedule=schedule, denominator=pair_denominator),
        state_sharding=state_sh, frozen_sharding=frozen_sh, batch_sharding=batch_sh,
        metrics_sharding=common.replicated(mesh))
    return dict(mesh=mesh, tokenizer=tokenizer, rows=rows, val_rows=val_rows, stats=stats, iterator=iterator,
                model_cfg=model.cfg, graphdef=graphdef, frozen=frozen, state=state, step=step,
                precomputed=precomputed, ref_params=ref_params, rest=rest)


def make_eval_fn(parts: dict, dpo_cfg, *, batch_size: int):
    """state -> validation {"val_loss", "val_rewards/accuracies", "val_rewards/margins", ...} (means over pairs)."""
    graphdef, mesh = parts["graphdef"], parts["mesh"]
    val_rows = parts["val_rows"]
    n = len(val_rows["chosen_tokens"])
    if not parts["precomputed"]:
        val_rows = {**val_rows, **reference_logps(graphdef, parts["ref_params"], parts["rest"], val_rows,
                                                  mesh=mesh, batch_size=batch_size)}
    batches = eval_batches(val_rows, batch_size=batch_size)

    @jax.jit
    def one(params, rest, batch):
        mb = jax.tree.map(lambda x: x[0], batch)
        pc, pr, lc, lr = pair_logps(nnx.merge(graphdef, params, rest), mb)
        valid = (lc > 0).astype(jnp.float32)  # filler rows have no completion tokens
        per_pair, _ = dpo_terms(dpo_cfg, policy=(pc, pr), ref=(mb["ref_chosen_logps"], mb["ref_rejected_logps"]),
                                lengths=(lc, lr))
        chosen = dpo_cfg.beta * (pc - mb["ref_chosen_logps"])
        rejected = dpo_cfg.beta * (pr - mb["ref_rejected_logps"])
        return {"val_loss": jnp.sum(per_pair * valid), "val_rewards/chosen": jnp.sum(chosen * valid),
                "val_rewards/rejected": jnp.sum(rejected * valid),
                "val_rewards/accuracies": jnp.sum((chosen > rejected) * valid),
                "val_rewards/margins": jnp.sum((chosen - rejected) * valid)}

    def eval_fn(state) -> dict[str, float]:
        totals: dict[str, float] = {}
        for b in batches:
            for k, v in one(state.params, parts["rest"], to_global_batch(b, mesh)).items():
                totals[k] = totals.get(k, 0.0) + float(v)
        return {k: v / n for k, v in totals.items()}

    return eval_fn


def train(config, *, workdir, progress: bool = True, tokenizer=None, splits=None, devices=None) -> LoopResult:
    """Runs (or resumes) DPO in `workdir`; exports the final weights when `export_dir` is set."""
    workdir = pathlib.Path(workdir)
    parts = build_dpo(config, workdir=workdir, tokenizer=tokenizer, splits=splits, devices=devices)
    stats = parts["stats"]
    print(f"[dpo] train pairs: {stats.as_dict()}; {parts['iterator'].total_steps} steps", flush=True)
    eval_fn = (make_eval_fn(parts, config.dpo, batch_size=config.train.batch_size)
               if parts["val_rows"] is not None else None)
    meta = {"trainer": "dpo", "fingerprint": fingerprint(parts["state"]), "data": stats.as_dict()}
    result = run_loop(
        trainer="dpo", workdir=workdir, state=parts["state"], frozen=parts["frozen"], step_fn=parts["step"],
        iterator=parts["iterator"], mesh=parts["mesh"], meta=meta, train_cfg=config.train,
        postprocess=lambda m: {**mean_metrics(m), "truncated": stats.truncated, "dropped": stats.dropped},
        eval_fn=eval_fn, best_metric=None,
        # policy forward+backward (3 passes) plus the reference forward when it is not precomputed
        flops_per_token=common.train_flops_per_token(
            parts["model_cfg"], seq_len=config.data.seq_len, passes=3.0 if parts["precomputed"] else 4.0),
        progress=progress)
    if config.get("export_dir"):
        from reasoner.models.export import export_hf

        export_hf(common.merged_for_export(parts["graphdef"], result.state.params, parts["rest"]),
                  str(config.export_dir))
    return result
