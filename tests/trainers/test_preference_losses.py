"""ORPO, SimPO and KTO (issue 22, item 5) against TRL 1.16's own code on the same random inputs, and one tiny DPO
trainer step with loss_type orpo and simpo.

ORPO and SimPO run the whole chain from logits: TRL's `ORPOTrainer.get_batch_loss_metrics` / `CPOTrainer.
get_batch_loss_metrics` (loss_type="simpo", cpo_alpha 0) with their own `concatenated_forward` on a stand-in `self`
whose model returns fixed logits, so the log-softmax, the masks, the averaging and the loss are TRL's line for line;
ours takes the same logits through `reasoner.models.scoring.picked_logps` and `trainers.losses`. KTO calls
`KTOTrainer._compute_loss` with a model returning fixed per-token log-probs (precomputed reference log-probs, KL
pairs included), as tests/trainers/test_dpo_trl.py does for DPO.

Float32 bound (tests/tolerances.py: a float32 sum of n terms is within n EPS32 sum|terms| of exact, two evaluation
orders included). A token log-prob z_y - logsumexp(z) sums V exponentials: e_tok = (V + 4) EPS32 (max|z| + log V).
An average over n_i completion tokens adds its sum: e_avg_i = e_tok + T EPS32 mean|logp| + EPS32 |a_i|. A pair
loss L(a_c, a_r) with |dL/da| <= lip_i moves by <= lip_i (e_avg_c + e_avg_r), plus its own few roundings
(8 EPS32 (1 + |L|)); the mean over P pairs adds P EPS32 mean|L|. Gradients wrt logits are products of the
loss's derivative (same relative error, amplified by the same lip) and softmax entries ((V + 2) EPS32), so they
agree to (V + T + 16) lip EPS32 max|grad| entrywise.
"""

from __future__ import annotations

import types
from collections import defaultdict
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from trl.experimental.cpo import CPOTrainer
from trl.experimental.orpo import ORPOTrainer
from trl.trainer.kto_trainer import KTOTrainer

from reasoner.models.scoring import picked_logps
from tests.tolerances import EPS32
from tests.trainers.test_dpo_trl import right_padded_masks
from trainers import losses

P, T, V = 8, 16, 11  # pairs, sequence length (prompt + completion), vocabulary


def make_pairs(seed: int):
    """Chosen rows then rejected rows [2P, T]: prompts of 3-6 tokens, completions to ends of 9-T (right padding)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, V, size=(2 * P, T))
    attention, completion = right_padded_masks(rng, rows=2 * P, length=T, prompt=(3, 7), end=(9, T + 1))
    ids = ids * attention  # pad id 0
    logits = rng.normal(0, 2.0, size=(2 * P, T, V)).astype(np.float32)
    return dict(ids=ids, attention=attention, completion=completion, logits=logits)


def trl_pair_loss(trainer_cls, batch, **settings):
    """(loss, d loss / d logits, metrics) from TRL's `get_batch_loss_metrics` on fixed logits."""
    logits = torch.tensor(batch["logits"], requires_grad=True)
    labels = np.where(batch["completion"] > 0, batch["ids"], -100)
    inputs = {}
    for side, rows in (("chosen", slice(0, P)), ("rejected", slice(P, 2 * P))):
        inputs[f"{side}_input_ids"] = torch.tensor(batch["ids"][rows])
        inputs[f"{side}_attention_mask"] = torch.tensor(batch["attention"][rows])
        inputs[f"{side}_labels"] = torch.tensor(labels[rows])
    stub = SimpleNamespace(is_encoder_decoder=False, padding_value=0, pad_token_id=0, aux_loss_enabled=False,
                           accelerator=SimpleNamespace(device="cpu", gather_for_metrics=lambda x: x),
                           concatenated_inputs=trainer_cls.concatenated_inputs,
                           get_batch_logps=trainer_cls.get_batch_logps,
                           **settings)
    for name in ("concatenated_forward", "odds_ratio_loss", "cpo_loss"):
        if hasattr(trainer_cls, name):
            setattr(stub, name, types.MethodType(getattr(trainer_cls, name), stub))
    model = lambda ids, attention_mask=None, use_cache=False: SimpleNamespace(logits=logits)  # noqa: E731
    loss, metrics = trainer_cls.get_batch_loss_metrics(stub, model, inputs)
    loss.backward()
    return float(loss), logits.grad.numpy(), metrics


def ours_pair_loss(batch, *, loss_type, beta, gamma=0.5, label_smoothing=0.0):
    """(loss, d loss / d logits, average log-probs [2P], per-pair losses) through our functions."""
    targets = jnp.asarray(batch["ids"][:, 1:])
    completion = jnp.asarray(batch["completion"][:, 1:], jnp.float32)
    prompt_and_completion = jnp.asarray(batch["attention"][:, 1:], jnp.float32)  # TRL ORPO's NLL tokens

    def loss_fn(logits):
        logp = picked_logps(logits[:, :-1], targets)
        avg = jnp.sum(logp * completion, 1) / jnp.sum(completion, 1)
        if loss_type == "orpo":
            per_pair, _ = losses.orpo_per_pair_loss(chosen_avg_logps=avg[:P], rejected_avg_logps=avg[P:], beta=beta)
            nll = losses.orpo_nll(jnp.sum(logp[:P] * prompt_and_completion[:P], 1), prompt_and_completion[:P])
            return nll + jnp.mean(per_pair), (avg, per_pair)
        per_pair = losses.simpo_per_pair_loss(chosen_avg_logps=avg[:P], rejected_avg_logps=avg[P:], beta=beta,
                                              gamma=gamma, label_smoothing=label_smoothing)
        return jnp.mean(per_pair), (avg, per_pair)

    (loss, (avg, per_pair)), grad = jax.value_and_grad(loss_fn, has_aux=True)(jnp.asarray(batch["logits"]))
    return float(loss), np.asarray(grad), np.asarray(avg, np.float64), np.asarray(per_pair, np.float64)


def bounds(batch, avg, per_pair, lip):
    """(loss bound, entrywise gradient-bound factor) of the module docstring; lip: [P] or [P, 2] |dL/da|."""
    z = np.abs(batch["logits"]).max()
    e_tok = (V + 4) * EPS32 * (z + np.log(V))
    e_avg = e_tok + T * EPS32 * np.abs(avg) + EPS32 * np.abs(avg)
    lip = np.broadcast_to(np.asarray(lip, np.float64).reshape(P, -1), (P, 2))
    e_pair = lip[:, 0] * e_avg[:P] + lip[:, 1] * e_avg[P:] + 8 * EPS32 * (1 + np.abs(per_pair))
    return float(np.mean(e_pair) + P * EPS32 * np.mean(np.abs(per_pair))), (V + T + 16) * float(lip.max()) * EPS32


@pytest.mark.baseline
def test_orpo_matches_trl():
    batch = make_pairs(1)
    beta = 0.1
    trl_loss, trl_grad, trl_metrics = trl_pair_loss(ORPOTrainer, batch, beta=beta)
    loss, grad, avg, per_pair = ours_pair_loss(batch, loss_type="orpo", beta=beta)
    # d term / d a = -beta sigmoid(-log_odds) d log_odds / d a, |d log_odds / d a| = 1 / (1 - e^a) on either side
    lip = beta / (1 - np.exp(np.stack([avg[:P], avg[P:]], 1)))
    loss_bound, grad_factor = bounds(batch, avg, per_pair, lip)
    n_nll = batch["attention"][:P, 1:].sum()
    loss_bound += (V + 4) * EPS32 * (np.abs(batch["logits"]).max() + np.log(V)) + n_nll * EPS32 * abs(trl_loss)
    assert abs(loss - trl_loss) <= loss_bound, (loss, trl_loss, loss_bound)
    assert np.all(np.abs(grad - trl_grad) <= grad_factor * np.abs(trl_grad).max())
    # TRL's logged rewards are beta x average log-probs
    np.testing.assert_allclose(beta * avg[:P].mean(), trl_metrics["rewards/chosen"], rtol=0,
                               atol=beta * (T + P) * EPS32 * np.abs(avg).max())
    # power: a 10% larger beta (the odds-ratio term is ~2% of a loss dominated by the NLL), or SimPO on the same
    # data, misses TRL's ORPO loss by far more than the bound
    assert abs(ours_pair_loss(batch, loss_type="orpo", beta=1.1 * beta)[0] - trl_loss) > 50 * loss_bound
    assert abs(ours_pair_loss(batch, loss_type="simpo", beta=beta)[0] - trl_loss) > 100 * loss_bound


@pytest.mark.baseline
@pytest.mark.parametrize("beta,gamma,label_smoothing", [(2.0, 0.5, 0.0), (0.5, 1.0, 0.1)])
def test_simpo_matches_trl_cpo_simpo(beta, gamma, label_smoothing):
    batch = make_pairs(2)
    trl_loss, trl_grad, _ = trl_pair_loss(CPOTrainer, batch, beta=beta, loss_type="simpo", simpo_gamma=gamma,
                                          label_smoothing=label_smoothing, cpo_alpha=0.0, alpha=0.0)
    loss, grad, avg, per_pair = ours_pair_loss(batch, loss_type="simpo", beta=beta, gamma=gamma,
                                               label_smoothing=label_smoothing)
    lip = np.full(P, beta)  # |d/dz log sigmoid| <= 1 for each smoothing term, dz/da = +-beta
    loss_bound, grad_factor = bounds(batch, avg, per_pair, lip)
    assert abs(loss - trl_loss) <= loss_bound, (loss, trl_loss, loss_bound)
    assert np.all(np.abs(grad - trl_grad) <= grad_factor * np.abs(trl_grad).max())
    # power: the margin gamma matters (a 5% change is far outside the bound); the sign of the margin too
    assert abs(ours_pair_loss(batch, loss_type="simpo", beta=beta, gamma=1.05 * gamma,
                              label_smoothing=label_smoothing)[0] - trl_loss) > 50 * loss_bound
    assert abs(ours_pair_loss(batch, loss_type="simpo", beta=beta, gamma=-gamma,
                              label_smoothing=label_smoothing)[0] - trl_loss) > 100 * loss_bound


def test_log1mexp_is_stable_with_finite_gradients():
    x = jnp.asarray([-50.0, -3.0, -0.6931472, -0.5, -1e-6, 0.0])
    got = np.asarray(jax.jit(losses.log1mexp)(x), np.float64)  # jitted: one compile, not one per eager op
    x64 = np.asarray(x, np.float64)
    with np.errstate(divide="ignore"):  # float64 reference, accurate on both sides (Maechler 2012), x = 0: -inf
        want = np.where(x64 < -np.log(2), np.log1p(-np.exp(x64)), np.log(-np.expm1(x64)))
    np.testing.assert_allclose(got[:-1], want[:-1], rtol=4 * EPS32)
    assert np.isfinite(got[-1])  # probability 1 is capped, not -inf
    assert np.all(np.isfinite(np.asarray(jax.jit(jax.grad(lambda v: jnp.sum(losses.log1mexp(v))))(x))))


# --------------------------------------------------------------------------------------------- KTO

B = 12


def make_unpaired(seed: int):
    rng = np.random.default_rng(seed)
    completion = np.zeros((B, T), np.int64)
    kl_completion = np.zeros((B, T), np.int64)
    for row in range(B):
        completion[row, rng.integers(3, 7):rng.integers(9, T + 1)] = 1
        kl_completion[row, rng.integers(3, 7):rng.integers(9, T + 1)] = 1
    shift, kl_shift = completion[:, 1:].astype(np.float32), kl_completion[:, 1:].astype(np.float32)
    logps = (-rng.uniform(0.05, 2.0, size=(B, T - 1)) * shift).astype(np.float32)
    kl_logps = (-rng.uniform(0.05, 2.0, size=(B, T - 1)) * kl_shift).astype(np.float32)
    # references near the policy (the rewards straddle the KL estimate), KL pairs drifted upward so z0 > 0
    ref = (logps.astype(np.float64).sum(1) + rng.normal(0, 2.0, size=B)).astype(np.float32)
    ref_kl = (kl_logps.astype(np.float64).sum(1) - rng.uniform(2.0, 6.0, size=B)).astype(np.float32)
    labels = np.array([True, True, False] * (B // 3))  # unbalanced, so z0 does not cancel between the two sides
    rng.shuffle(labels)
    return dict(logps=logps, kl_logps=kl_logps, completion=completion, kl_completion=kl_completion, shift=shift,
                kl_shift=kl_shift, ref=ref, ref_kl=ref_kl, labels=labels)


def trl_kto(batch, *, beta, desirable_weight, undesirable_weight):
    log_probs = torch.tensor(batch["logps"], requires_grad=True)
    inputs = {"input_ids": torch.zeros((B, T), dtype=torch.long), "attention_mask": torch.ones((B, T)),
              "completion_mask": torch.tensor(batch["completion"]),
              "KL_input_ids": torch.ones((B, T), dtype=torch.long), "KL_attention_mask": torch.ones((B, T)),
              "KL_completion_mask": torch.tensor(batch["kl_completion"]), "label": torch.tensor(batch["labels"]),
              "ref_logps": torch.tensor(batch["ref"]), "ref_KL_logps": torch.tensor(batch["ref_kl"])}

    def model(**kw):  # the KL forward (mismatched pairs) and the policy forward, told apart by their input ids
        out = torch.tensor(batch["kl_logps"]) if kw["input_ids"] is inputs["KL_input_ids"] else log_probs
        return SimpleNamespace(log_probs=out, entropy=torch.zeros(B, T - 1), mean_logits=torch.zeros(B, T - 1))

    stub = SimpleNamespace(model=SimpleNamespace(training=True), calculate_KL=True, precompute_ref_logps=True,
                           loss_type="kto", beta=beta, desirable_weight=desirable_weight,
                           undesirable_weight=undesirable_weight, aux_loss_enabled=False, _tp_size=1,
                           _total_train_tokens=0, _metrics={"train": defaultdict(list)},
                           accelerator=SimpleNamespace(device="cpu", gather_for_metrics=lambda x: x))
    stub._compute_kl_logps = types.MethodType(KTOTrainer._compute_kl_logps, stub)
    loss = KTOTrainer._compute_loss(stub, model, inputs, return_outputs=False)
    loss.backward()
    return float(loss), log_probs.grad.numpy(), {k: v[-1] for k, v in stub._metrics["train"].items()}


def ours_kto(batch, **kw):
    def loss_fn(logps):
        per_example, z0 = losses.kto_losses(
            logps=jnp.sum(logps * batch["shift"], 1), ref_logps=jnp.asarray(batch["ref"]),
            kl_logps=jnp.sum(jnp.asarray(batch["kl_logps"]) * batch["kl_shift"], 1),
            ref_kl_logps=jnp.asarray(batch["ref_kl"]), labels=jnp.asarray(batch["labels"]), **kw)
        return jnp.mean(per_example), (z0, per_example)

    (loss, (z0, per)), grad = jax.value_and_grad(loss_fn, has_aux=True)(jnp.asarray(batch["logps"]))
    return float(loss), np.asarray(grad), float(z0), np.asarray(per, np.float64)


@pytest.mark.baseline
@pytest.mark.parametrize("beta,desirable_weight,undesirable_weight", [(0.1, 1.0, 1.0), (0.5, 1.0, 1.33)])
def test_kto_matches_trl(beta, desirable_weight, undesirable_weight):
    batch = make_unpaired(3)
    kw = dict(beta=beta, desirable_weight=desirable_weight, undesirable_weight=undesirable_weight)
    trl_loss, trl_grad, trl_metrics = trl_kto(batch, **kw)
    loss, grad, z0, per = ours_kto(batch, **kw)
    # r_i = sum of T log-probs - ref: e_r = (T + 2) EPS32 (sum|logp_i| + |ref_i|); z0 = mean over B of such
    # differences; |dL/dr| <= w beta / 4 (sigmoid' <= 1/4) on r and on z0, plus evaluation and the mean over B.
    s = np.abs(batch["logps"]).sum(1) + np.abs(batch["ref"])
    s_kl = np.abs(batch["kl_logps"]).sum(1) + np.abs(batch["ref_kl"])
    e_r, e_z0 = (T + 2) * EPS32 * s, (T + B + 2) * EPS32 * s_kl.mean()
    w = max(desirable_weight, undesirable_weight)
    bound = np.mean(w * beta / 4 * (e_r + e_z0) + 8 * EPS32 * (1 + per)) + B * EPS32 * np.mean(per)
    assert abs(loss - trl_loss) <= bound, (loss, trl_loss, bound)
    assert abs(z0 - trl_metrics["kl"]) <= e_z0 and z0 > 0
    # gradient: w beta sigmoid' / B on completion tokens; sigmoid'' <= 1/10 bounds its change over e_r + e_z0
    on = batch["shift"] > 0
    grad_bound = w * beta ** 2 / 10 / B * (e_r + e_z0)[:, None] + 8 * EPS32 * np.abs(trl_grad)
    assert np.all(np.abs(np.where(on, grad - trl_grad, 0.0)) <= grad_bound + EPS32 * np.abs(trl_grad).max())
    # power: a 10% larger beta, or the KL estimate dropped (z0 = 0), misses TRL by far more than the bound
    assert abs(ours_kto(batch, **{**kw, "beta": 1.1 * beta})[0] - trl_loss) > 50 * bound
    no_kl = {**batch, "ref_kl": (batch["kl_logps"] * batch["kl_shift"]).sum(1) + 50.0}  # z0 clamps to 0
    assert abs(ours_kto(no_kl, **kw)[0] - trl_loss) > 50 * bound


# --------------------------------------------------------------------------------------------- the DPO trainer


def test_tiny_dpo_steps_orpo_and_simpo(dpo_data, tmp_path):
    """One compiled DPO step per reference-free loss (one build: the simpo step is jitted on the same run, as
    `build_dpo` jits its own): no reference model is built or run, the loss equals ORPO's / SimPO's formula by hand
    on the pair log-probs of the same weights, and the step is taken (finite gradient, not skipped)."""
    from flax import nnx

    from reasoner.data.pipeline import batch_sharding, to_global_batch
    from tests.tolerances import model_depth, prob_factor
    from tests.trainers.conftest import tiny_config
    from trainers.dpo import build_dpo, dpo_loss_fn, pair_denominator, pair_logps
    from trainers.step import jit_train_step, make_train_step

    # seq_len 127: the dense attention path (128+ runs by query blocks, a larger program to compile); 20 of the 64
    # pairs fit, a batch needs 4
    config = tiny_config("dpo", dpo_data, "--config.dpo.loss_type=orpo", "--config.mesh=fsdp=1",
                         "--config.train.batch_size=4", "--config.data.seq_len=127",
                         "--config.model.random.num_layers=1")
    s = build_dpo(config, workdir=tmp_path, devices=jax.devices()[:1])
    run = s.run
    assert run.frozen.reference is None and "ref_chosen_logps" not in s.rows
    batch = to_global_batch(next(iter(s.iterator)), run.mesh)
    mb = jax.tree.map(lambda x: x[0], batch)

    def forward(params):  # the pair log-probs of these weights, and the largest logit (for the error bound)
        model = nnx.merge(run.graphdef, params, run.frozen.base)
        hidden, _ = model.hidden_states(mb["chosen_tokens"], positions_BxT=mb["chosen_positions"],
                                        segment_ids_BxT=mb["chosen_segment_ids"])
        return pair_logps(model, mb), jnp.max(jnp.abs(model.logits(hidden)))

    (pc, pr, lc, lr), zmax = jax.jit(forward)(run.state.params)
    pc, pr, lc, lr = (np.asarray(x, np.float64) for x in (pc, pr, lc, lr))
    ac, ar, d = pc / lc, pr / lr, config.dpo
    log_odds = (ac - ar) - (np.log(-np.expm1(ac)) - np.log(-np.expm1(ar)))
    want = {"orpo": -pc.sum() / lc.sum() + np.mean(d.beta * np.logaddexp(0, -log_odds)),  # NLL + -beta log s(.)
            "simpo": np.mean(np.logaddexp(0, -(d.beta * (ac - ar) - d.simpo_gamma)))}  # -log s(beta dA - gamma)
    # The step's float32 forward vs the same forward jitted alone (another program, another evaluation order):
    # each token log-prob within prob_factor(depth) EPS32 (2 max|z| + log V) (tests/tolerances.py), each average
    # and the NLL too, plus T EPS32 of their sums; the losses are Lipschitz in the averages with constant
    # <= 2 beta / (1 - e^a) + 1 (ORPO, the 1 for the NLL) or 2 beta (SimPO).
    seq = mb["chosen_tokens"].shape[1]
    e_avg = prob_factor(model_depth(run.model_cfg, seq_len=seq)) * EPS32 * (
        2 * float(zmax) + np.log(run.model_cfg.vocab_size)) + seq * EPS32 * np.abs(np.r_[ac, ar]).max()
    lip = {"orpo": 2 * d.beta / (1 - np.exp(max(ac.max(), ar.max()))) + 1, "simpo": 2 * d.beta}

    simpo = config.copy_and_resolve_references()
    simpo.dpo.loss_type = "simpo"
    batch_sh = {k: batch_sharding(run.mesh, ndim=v.ndim + 1) for k, v in s.rows.items()}
    simpo_step = jit_train_step(
        make_train_step(loss_fn=dpo_loss_fn(run.graphdef, simpo.dpo, precomputed=False), optimizer=run.optimizer,
                        schedule=run.schedule, denominator=pair_denominator),
        state_sharding=run.shardings.state, frozen_sharding=run.shardings.frozen, batch_sharding=batch_sh,
        metrics_sharding=run.shardings.replicated, donate=False)
    _, m_simpo = simpo_step(run.state, run.frozen, batch)  # first: the orpo step below donates the state
    state, m_orpo = s.step(run.state, run.frozen, batch)
    for name, m in (("orpo", m_orpo), ("simpo", m_simpo)):
        bound = lip[name] * e_avg + 16 * EPS32 * (1 + abs(want[name]))
        assert abs(float(m["loss"]) - want[name]) <= bound, (name, float(m["loss"]), want[name], bound)
        assert int(m["skipped"]) == 0 and 0 < float(m["grad_norm"]) < np.inf
    nll = float(m_orpo["nll_loss"]) / float(m_orpo["denom"])  # a sum over pairs, as `dpo.mean_metrics` reads it
    assert int(state.step) == 1 and abs(nll - (-pc.sum() / lc.sum())) <= e_avg
