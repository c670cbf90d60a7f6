"""Every DPO loss variant against TRL 1.16's own code: `DPOTrainer._compute_loss` runs on a stand-in `self` whose
model forward returns our fixed per-token log-probs (precomputed reference log-probs, as `precompute_ref_log_probs`),
so the loss, its gradient and the logged rewards come from TRL's source line for line (the pattern of
tests/trainers/grpo_loss_reference.py). Ours: `trainers.losses.dpo_per_pair_loss` / `dpo_reward_sums`, the functions
`trainers.dpo` calls, on the same log-probs.

Float32 bound (u = eps32 / 2; a float32 sum of n terms is within n u sum|terms| of the exact sum): each side sums
T per-token log-probs and makes 3 subtractions, so delta = (pi_c - ref_c) - (pi_r - ref_r) is within
e_delta = 2 (T + 3) u S of the exact value on BOTH sides together, with S = sum|logp_c| + sum|logp_r| + |ref_c| +
|ref_r| (we write eps = 2 u, so e_delta = (T + 3) eps S). A per-pair loss with |dL/d delta| <= lip then differs by
<= lip e_delta plus its own evaluation (log-sigmoid, square: <= 8 eps (1 + |L|)); the mean over P pairs adds P eps
mean|L|. Gradients: |d2L/d delta2| <= lip2 bounds their change, the same evaluation slack on top.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from trl.trainer.dpo_trainer import DPOTrainer

from trainers.losses import dpo_per_pair_loss, dpo_reward_sums

P, T = 16, 24  # pairs, sequence length (prompt + completion)
EPS32 = float(np.finfo(np.float32).eps)

CASES = [
    ("sigmoid", 0.1, 0.0), ("sigmoid", 0.5, 0.0),
    ("robust", 0.1, 0.0), ("robust", 0.1, 0.1), ("robust", 0.5, 0.3),
    ("ipo", 0.1, 0.0), ("ipo", 0.5, 0.0),
    ("hinge", 0.1, 0.0), ("hinge", 0.5, 0.0),
]


def right_padded_masks(rng, *, rows: int, length: int, prompt: tuple[int, int], end: tuple[int, int]):
    """(attention, completion) int64 masks [rows, length] of right-padded rows: row r holds `end_r` tokens, the
    last `end_r - prompt_r` of them its completion; per row `prompt_r` is drawn from range(*prompt), then `end_r`
    from range(*end)."""
    attention = np.zeros((rows, length), np.int64)
    completion = np.zeros((rows, length), np.int64)
    for row in range(rows):
        prompt_len, end_len = rng.integers(*prompt), rng.integers(*end)
        attention[row, :end_len] = 1
        completion[row, prompt_len:end_len] = 1
    return attention, completion


def make_batch(seed: int):
    """P pairs: prompts of 4-8 tokens, completions to the end of rows of varying length (right padding)."""
    rng = np.random.default_rng(seed)
    attention_mask, completion_mask = right_padded_masks(rng, rows=2 * P, length=T, prompt=(4, 9), end=(12, T + 1))
    shift_mask = completion_mask[:, 1:].astype(np.float32)
    logps = (-rng.uniform(0.05, 3.0, size=(2 * P, T - 1)) * shift_mask).astype(np.float32)
    seq = logps.astype(np.float64).sum(1)
    # references near the policy, so that beta * delta spans both signs and both sides of hinge's kink at 1
    ref = (seq + rng.normal(0, 4.0, size=2 * P)).astype(np.float32)
    return dict(logps=logps, shift_mask=shift_mask, completion_mask=completion_mask, attention_mask=attention_mask,
                ref_chosen=ref[:P], ref_rejected=ref[P:])


def trl_dpo(batch, *, loss_type, beta, label_smoothing):
    """TRL's `_compute_loss` on our log-probs: (loss, d loss / d per-token log-probs [2P, T-1], metrics)."""
    log_probs = torch.tensor(batch["logps"], requires_grad=True)
    model_output = SimpleNamespace(log_probs=log_probs, entropy=torch.zeros(2 * P, T - 1),
                                   mean_logits=torch.zeros(2 * P, T - 1),
                                   is_top1=torch.zeros(2 * P, T - 1, dtype=torch.bool))
    accelerator = SimpleNamespace(device="cpu", gather=lambda x: x, gather_for_metrics=lambda x: x)
    stub = SimpleNamespace(
        model=SimpleNamespace(training=True), accelerator=accelerator, aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=[loss_type], loss_weights=[1.0],
        beta=beta, label_smoothing=label_smoothing, use_weighting=False, _metrics={"train": defaultdict(list)},
        _total_train_tokens=0, _tp_size=1,
    )
    inputs = {
        "input_ids": torch.zeros((2 * P, T), dtype=torch.long),
        "attention_mask": torch.tensor(batch["attention_mask"]),
        "completion_mask": torch.tensor(batch["completion_mask"]),
        "ref_chosen_logps": torch.tensor(batch["ref_chosen"]),
        "ref_rejected_logps": torch.tensor(batch["ref_rejected"]),
    }
    loss = DPOTrainer._compute_loss(stub, lambda **kw: model_output, inputs, return_outputs=False)
    loss.backward()
    return float(loss), log_probs.grad.numpy(), {k: v[-1] for k, v in stub._metrics["train"].items()}


def ours(batch, *, loss_type, beta, label_smoothing):
    """(mean loss, d loss / d per-token log-probs, reward means) with our functions, float32."""
    lengths = jnp.asarray(batch["shift_mask"].sum(1))

    def mean_loss(logps):
        seq = jnp.sum(logps * batch["shift_mask"], axis=1)
        per_pair = dpo_per_pair_loss(chosen_logps=seq[:P], rejected_logps=seq[P:],
                                     ref_chosen_logps=jnp.asarray(batch["ref_chosen"]),
                                     ref_rejected_logps=jnp.asarray(batch["ref_rejected"]), beta=beta,
                                     loss_type=loss_type, label_smoothing=label_smoothing,
                                     chosen_lengths=lengths[:P], rejected_lengths=lengths[P:])
        return jnp.mean(per_pair), (per_pair, seq)

    (loss, (per_pair, seq)), grad = jax.value_and_grad(mean_loss, has_aux=True)(jnp.asarray(batch["logps"]))
    sums = dpo_reward_sums(chosen_logps=seq[:P], rejected_logps=seq[P:],
                           ref_chosen_logps=jnp.asarray(batch["ref_chosen"]),
                           ref_rejected_logps=jnp.asarray(batch["ref_rejected"]), beta=beta)
    means = {k: float(v) / P for k, v in sums.items()}
    return float(loss), np.asarray(grad), np.asarray(per_pair), np.asarray(seq), means


def derivative_bounds(loss_type, beta, ls, *, ipo_delta, min_len):
    """(|dL/d score| per pair, |d2L/d score2|) upper bounds of one pair's loss, scores = pi - ref of either side.
    IPO: L = (c/len_c - r/len_r - 1/(2 beta))^2, so dL/dc = 2 (ipo_delta - 1/(2 beta)) / len_c (two sides: x 2)."""
    if loss_type == "ipo":
        return 4 * (np.abs(ipo_delta) + 1 / (2 * beta)) / min_len, 4 / min_len ** 2
    scale = 1 / (1 - 2 * ls) if loss_type == "robust" else 1.0
    return beta * scale, beta ** 2 * scale  # sigmoid'' <= 1/4 < 1; hinge: 0 away from the kink


@pytest.mark.baseline
@pytest.mark.parametrize("loss_type,beta,label_smoothing", CASES)
def test_loss_gradient_and_rewards_match_trl(loss_type, beta, label_smoothing):
    batch = make_batch(seed=zlib.crc32(f"{loss_type} {beta} {label_smoothing}".encode()))
    trl_loss, trl_grad, trl_metrics = trl_dpo(batch, loss_type=loss_type, beta=beta,
                                              label_smoothing=label_smoothing)
    loss, grad, per_pair, seq, means = ours(batch, loss_type=loss_type, beta=beta, label_smoothing=label_smoothing)

    abs_logps = np.abs(batch["logps"]).sum(1)
    s = abs_logps[:P] + abs_logps[P:] + np.abs(batch["ref_chosen"]) + np.abs(batch["ref_rejected"])
    e_delta = (T + 3) * EPS32 * s  # per pair, see the module docstring
    delta = (seq[:P] - batch["ref_chosen"]) - (seq[P:] - batch["ref_rejected"])
    if loss_type == "hinge":  # hinge is not differentiable at beta delta = 1: keep the data away from the kink
        assert np.min(np.abs(beta * delta - 1)) > beta * e_delta.max()
        assert (beta * delta > 1).any() and (beta * delta < 1).any()  # both sides of the kink occur
    lengths = batch["shift_mask"].sum(1)
    ipo_delta = (seq[:P] - batch["ref_chosen"]) / lengths[:P] - (seq[P:] - batch["ref_rejected"]) / lengths[P:]
    lip, lip2 = derivative_bounds(loss_type, beta, label_smoothing, ipo_delta=ipo_delta, min_len=lengths.min())
    loss_bound = np.mean(lip * e_delta + 8 * EPS32 * (1 + np.abs(per_pair))) + P * EPS32 * np.mean(np.abs(per_pair))
    assert abs(loss - trl_loss) <= loss_bound, (loss, trl_loss, loss_bound)

    # d mean-loss / d token log-prob = L'(delta_i) / P on every completion token of pair i. (TRL sums the model's
    # per-token log-probs over the whole row, relying on the model to return 0 off the completion, so its gradient
    # there is not 0; we compare on completion tokens, the only ones a real forward makes depend on the weights.)
    on = batch["shift_mask"] > 0
    grad, trl_grad = np.where(on, grad, 0.0), np.where(on, trl_grad, 0.0)
    grad_bound = (lip2 * np.concatenate([e_delta, e_delta]) / P)[:, None] + 8 * EPS32 * np.abs(trl_grad)
    assert (np.abs(grad - trl_grad) <= grad_bound + EPS32 * np.abs(trl_grad).max()).all()

    # TRL's logged reward means: beta (pi - ref), their margin and accuracy
    e_reward = beta * (T + 2) * EPS32 * np.mean(np.concatenate([abs_logps, np.abs(batch["ref_chosen"]),
                                                                np.abs(batch["ref_rejected"])]))
    for name in ("rewards/chosen", "rewards/rejected", "rewards/margins"):
        assert abs(means[name] - trl_metrics[name]) <= 2 * e_reward + P * EPS32 * abs(trl_metrics[name]), name
    assert np.min(np.abs(beta * delta)) > 2 * beta * e_delta.max()  # no pair's accuracy is decided by rounding
    assert means["rewards/accuracies"] == trl_metrics["rewards/accuracies"]


@pytest.mark.baseline
def test_a_wrong_beta_or_loss_type_is_detected():
    """The comparison has power: a 1% wrong beta, or another loss type, misses TRL's loss by far more than the bound."""
    batch = make_batch(seed=7)
    trl_loss, _, _ = trl_dpo(batch, loss_type="sigmoid", beta=0.1, label_smoothing=0.0)
    assert abs(ours(batch, loss_type="sigmoid", beta=0.101, label_smoothing=0.0)[0] - trl_loss) > 1e3 * EPS32
    for other in ("robust", "hinge", "ipo"):
        assert abs(ours(batch, loss_type=other, beta=0.1, label_smoothing=0.1)[0] - trl_loss) > 1e3 * EPS32, other


def _swapped(batch):
    """The same pairs with chosen and rejected exchanged (delta -> -delta)."""
    out = dict(batch)
    for key in ("logps", "attention_mask", "completion_mask", "shift_mask"):
        out[key] = np.concatenate([batch[key][P:], batch[key][:P]])
    out["ref_chosen"], out["ref_rejected"] = batch["ref_rejected"], batch["ref_chosen"]
    return out


@pytest.mark.baseline
@pytest.mark.parametrize("label_smoothing", [0.1, 0.3])
def test_sigmoid_label_smoothing_is_cdpo_composed_from_trls_sigmoid(label_smoothing):
    """A deliberate difference, kept: our "sigmoid" with label smoothing ls > 0 is conservative DPO (cDPO, Mitchell
    2023; what TRL computed before 1.0), while TRL 1.16's "sigmoid" ignores ls (only robust and exo_pair use it).
    The reference is TRL's own ls = 0 sigmoid composed: (1 - ls) L(chosen, rejected) + ls L(rejected, chosen)."""
    batch = make_batch(seed=11)
    beta = 0.1
    plain, _, _ = trl_dpo(batch, loss_type="sigmoid", beta=beta, label_smoothing=0.0)
    flipped, _, _ = trl_dpo(_swapped(batch), loss_type="sigmoid", beta=beta, label_smoothing=0.0)
    want = (1 - label_smoothing) * plain + label_smoothing * flipped
    loss, _, per_pair, _, _ = ours(batch, loss_type="sigmoid", beta=beta, label_smoothing=label_smoothing)
    abs_logps = np.abs(batch["logps"]).sum(1)
    e_delta = (T + 3) * EPS32 * (abs_logps[:P] + abs_logps[P:] + np.abs(batch["ref_chosen"]) +
                                 np.abs(batch["ref_rejected"]))
    bound = np.mean(beta * e_delta + 16 * EPS32 * (1 + np.abs(per_pair))) + 2 * P * EPS32 * np.mean(np.abs(per_pair))
    assert abs(loss - want) <= bound, (loss, want, bound)
    assert abs(loss - plain) > 100 * bound  # and it is not TRL 1.16's sigmoid, which would ignore ls
