"""The shared update step: accumulation == one big batch, NaN/inf guard, schedules, LoRA-only training."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tests.tolerances import EPS32, logits_atol
from tests.trainers.conftest import tiny_config


def _toy_loss(params, frozen, mb, denom):
    pred = mb["x"] @ params["w"]
    return jnp.sum((pred - mb["y"]) ** 2) / denom, {"rows": jnp.asarray(mb["x"].shape[0], jnp.float32)}


def _rows(batch):
    return jnp.asarray(batch["x"].shape[0] * batch["x"].shape[1], jnp.float32)


def test_gradient_accumulation_equals_one_global_batch():
    from trainers.state import create_state
    from trainers.step import make_train_step

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=(8, 2)).astype(np.float32)
    params = {"w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32)}
    opt = optax.adamw(1e-2)
    step = jax.jit(make_train_step(loss_fn=_toy_loss, optimizer=opt, schedule=lambda s: 1e-2, denominator=_rows))
    one, m1 = step(create_state(params, opt), None, {"x": x[None], "y": y[None]})
    four, m4 = step(create_state(params, opt), None, {"x": x.reshape(4, 2, 3), "y": y.reshape(4, 2, 2)})
    # Same terms summed in another order. loss: 16 squared residuals (dots of 3) summed, all terms >= 0, so
    # (3 + 16 + 2) roundings of |loss|. gradient 2 x^T r / 8: a sum over 8 rows of terms |x||r| (plus 3 for r),
    # whose error bounds the norm's. params: AdamW's first step moves by -lr * g / (|g| + eps) = -lr * sign(g)
    # (no element is near 0 here), so only a few roundings of w - lr * (u + wd * w) differ.
    np.testing.assert_allclose(float(m1["loss"]), float(m4["loss"]), rtol=21 * EPS32)
    r = x @ np.asarray(params["w"], np.float64) - y
    grad_terms = 2 * np.abs(x).T @ np.abs(r) / 8
    assert np.abs(2 * x.T @ r / 8).min() > 10 * 13 * EPS32 * grad_terms.max()  # no sign near a rounding flip
    np.testing.assert_allclose(float(m1["grad_norm"]), float(m4["grad_norm"]),
                               atol=13 * EPS32 * float(np.linalg.norm(grad_terms)) + 8 * EPS32 * float(m1["grad_norm"]))
    np.testing.assert_allclose(np.asarray(one.params["w"]), np.asarray(four.params["w"]), rtol=4 * EPS32)
    assert float(m4["rows"]) == 8 and int(four.step) == 1


def test_nonfinite_loss_skips_the_update_and_stops_after_a_run():
    from trainers.loop import NonFiniteGuard, NonFiniteLossError
    from trainers.state import create_state
    from trainers.step import make_train_step

    params = {"w": jnp.ones((3, 2))}
    opt = optax.adam(1e-1)
    step = jax.jit(make_train_step(loss_fn=_toy_loss, optimizer=opt, schedule=lambda s: 0.1, denominator=_rows))
    state = create_state(params, opt)
    bad = {"x": jnp.full((1, 2, 3), jnp.nan), "y": jnp.zeros((1, 2, 2))}
    new, metrics = step(state, None, bad)
    assert int(metrics["skipped"]) == 1 and int(new.step) == 1
    np.testing.assert_array_equal(np.asarray(new.params["w"]), np.ones((3, 2)))
    assert all(np.isfinite(np.asarray(v)).all() for v in jax.tree.leaves(new.opt_state))
    good = {"x": jnp.ones((1, 2, 3)), "y": jnp.zeros((1, 2, 2))}
    after, metrics = step(new, None, good)
    assert int(metrics["skipped"]) == 0 and not np.allclose(np.asarray(after.params["w"]), 1.0)

    guard = NonFiniteGuard(max_in_a_row=3)
    for i, skipped in enumerate([True, True, False, True, True]):
        guard.update(skipped, step=i)
    with pytest.raises(NonFiniteLossError, match="3 steps in a row"):
        guard.update(True, step=5)
    assert guard.total == 5


@pytest.mark.parametrize("kind", ["cosine", "constant", "linear"])
def test_schedules_match_transformers(kind):
    import ml_collections
    import torch
    from transformers import get_cosine_schedule_with_warmup, get_constant_schedule_with_warmup, \
        get_linear_schedule_with_warmup

    from trainers.optim import make_schedule, warmup_steps

    total, ratio, lr = 40, 0.1, 2e-5
    cfg = ml_collections.ConfigDict(dict(schedule=kind, lr=lr, warmup_ratio=ratio, min_lr_ratio=0.0))
    ours = make_schedule(cfg, total_steps=total)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    warm = warmup_steps(warmup_ratio=ratio, total_steps=total)
    make = {"cosine": lambda: get_cosine_schedule_with_warmup(opt, warm, total),
            "linear": lambda: get_linear_schedule_with_warmup(opt, warm, total),
            "constant": lambda: get_constant_schedule_with_warmup(opt, warm)}[kind]
    sched = make()
    for s in range(total):
        # float32 schedule vs torch's float64: <= 8 roundings (step / warm, progress, pi * p, cos, 1 +, 0.5 *, peak *,
        # floor +), each relative to lr
        assert abs(float(ours(s)) - sched.get_last_lr()[0]) <= 8 * EPS32 * lr, (s, float(ours(s)))
        opt.step()
        sched.step()
    assert warm == math.ceil(ratio * total)
    with pytest.raises(ValueError, match="optim.schedule='warmup_stable'"):
        make_schedule(ml_collections.ConfigDict(dict(schedule="warmup_stable", lr=1.0, warmup_ratio=0.0)),
                      total_steps=10)


def test_lora_trains_only_adapters_and_exports_merged(sft_data, tmp_path):
    from reasoner.data.pipeline import to_global_batch
    from reasoner.models import load_model
    from reasoner.models.export import export_hf
    from trainers.run import merged_for_export
    from trainers.sft import build_sft

    config = tiny_config("sft", sft_data, "--config.lora.rank=4", "--config.lora.alpha=8.0",
                         f"--config.data.tfds_dir={tmp_path / 'tfds'}")
    s = build_sft(config, workdir=tmp_path, devices=jax.devices()[:1])
    run = s.run
    names = {str(k[-1]) for k, _ in nnx.to_flat_state(nnx.State(run.state.params))}
    assert names == {"a", "b"}, names  # the optimizer sees adapters only
    base_before = jax.tree.map(np.asarray, run.frozen.base)
    state = run.state
    for _ in range(2):
        state, metrics = s.step(state, run.frozen, to_global_batch(next(s.iterator), run.mesh))
    assert all(np.array_equal(a, np.asarray(b)) for a, b in
               zip(jax.tree.leaves(base_before), jax.tree.leaves(run.frozen.base)))
    assert float(np.abs(np.asarray(state.params["layers"][0]["attn"]["q_proj"]["lora"]["b"])).max()) > 0

    model = run.model(state.params)
    tokens = jnp.asarray(s.rows["tokens"][:2, :48])
    positions = jnp.broadcast_to(jnp.arange(48), tokens.shape)
    with_adapters = np.asarray(model(tokens, positions_BxT=positions)[0])
    out = export_hf(merged_for_export(run, state.params), str(tmp_path / "hf"))
    reloaded = load_model(out)
    # merged W + s B A vs the unmerged path: one more rounding per kernel element and the forward's own error
    atol = logits_atol(with_adapters, run.model_cfg, seq_len=48)
    np.testing.assert_allclose(np.asarray(reloaded(tokens, positions_BxT=positions)[0]), with_adapters,
                               rtol=0, atol=atol)
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        hf_logits = hf(input_ids=torch.from_numpy(np.asarray(tokens, np.int64))).logits.numpy()
    np.testing.assert_allclose(hf_logits, with_adapters, rtol=0, atol=atol)  # PyTorch kernels: the same bound


def test_logged_lr_is_the_rate_applied_after_a_skipped_step():
    """A skipped (non-finite) step leaves optax's own count, so the schedule goes on from the last applied update
    (as Adam's bias correction does); the logged lr is the rate each step applied, measured on plain SGD."""
    import ml_collections

    from trainers.optim import make_optimizer
    from trainers.state import create_state
    from trainers.step import make_train_step

    optim = ml_collections.ConfigDict(dict(name="sgd", lr=1.0, weight_decay=0.0, max_grad_norm=0.0,
                                           schedule="linear", warmup_steps=0, warmup_ratio=0.0, min_lr_ratio=0.0))
    opt, schedule = make_optimizer(optim, total_steps=4)

    def loss_fn(params, frozen, mb, denom):  # gradient = x
        return jnp.sum(params["w"] * mb["x"]), {}

    step = jax.jit(make_train_step(loss_fn=loss_fn, optimizer=opt, schedule=schedule,
                                   denominator=lambda b: jnp.ones(())))
    state = create_state({"w": jnp.zeros(())}, opt)
    logged, applied = [], []
    for x in [jnp.nan, 1.0, 1.0, 1.0]:
        before = float(state.params["w"])
        state, metrics = step(state, None, {"x": jnp.full((1,), x)})
        logged.append(float(metrics["lr"]))
        applied.append(before - float(state.params["w"]))
    assert applied == [0.0, 1.0, 0.75, 0.5]  # the linear schedule 1, 0.75, 0.5 from the first applied update
    assert logged == [1.0, 1.0, 0.75, 0.5]  # the skipped step logs the rate it would have applied


def test_a_section_without_weight_decay_means_none():
    # adamw read optim.weight_decay directly (AttributeError) where adam and sgd took a missing key as 0
    import ml_collections

    from trainers.optim import make_optimizer

    params, grad = {"w": jnp.arange(4.0)}, {"w": jnp.ones(4)}
    for name in ("adamw", "adam", "sgd"):
        base = dict(name=name, lr=0.1, b1=0.9, b2=0.999, eps=1e-8, max_grad_norm=0.0, schedule="constant")
        outs = []
        for optim in (base, {**base, "weight_decay": 0.0}):
            tx, _ = make_optimizer(ml_collections.ConfigDict(optim), total_steps=3)
            outs.append(np.asarray(tx.update(grad, tx.init(params), params)[0]["w"]))
        np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("name", ["adam", "sgd", "adamw"])
def test_weight_decay_as_torch_optimizers(name):
    """weight_decay is an L2 gradient term for adam and sgd (torch.optim.Adam / SGD) and decoupled for adamw
    (torch.optim.AdamW): three steps with clipping, against torch's own optimizers."""
    import ml_collections
    import torch

    from trainers.optim import make_optimizer

    rng = np.random.default_rng(3)
    w0 = rng.normal(size=(5,)).astype(np.float32)
    grads = rng.normal(size=(3, 5)).astype(np.float32)
    lr, wd = 0.05, 0.3
    optim = ml_collections.ConfigDict(dict(name=name, lr=lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=wd,
                                           max_grad_norm=1.0, schedule="constant", warmup_steps=0,
                                           warmup_ratio=0.0, min_lr_ratio=0.0))
    opt, _ = make_optimizer(optim, total_steps=3)
    params = {"w": jnp.asarray(w0)}
    state = opt.init(params)
    p = torch.nn.Parameter(torch.tensor(w0))
    cls = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[name]
    extra = {} if name == "sgd" else {"betas": (0.9, 0.999), "eps": 1e-8}
    torch_opt = cls([p], lr=lr, weight_decay=wd, **extra)
    for g in grads:
        updates, state = opt.update({"w": jnp.asarray(g)}, state, params)
        params = optax.apply_updates(params, updates)
        p.grad = torch.tensor(g)
        torch.nn.utils.clip_grad_norm_([p], 1.0)
        torch_opt.step()
    # three steps of a few roundings each per element, relative to the parameters' scale (Adam's normalised step
    # is at most lr per element, well away from eps)
    np.testing.assert_allclose(np.asarray(params["w"]), p.detach().numpy(), rtol=0, atol=64 * EPS32 * np.abs(w0).max())
    if name != "adamw":  # and the decay really acts: without it the result differs by far more than that
        plain, _ = make_optimizer(ml_collections.ConfigDict({**optim.to_dict(), "weight_decay": 0.0}), total_steps=3)
        q, s = {"w": jnp.asarray(w0)}, plain.init({"w": jnp.asarray(w0)})
        for g in grads:
            u, s = plain.update({"w": jnp.asarray(g)}, s, q)
            q = optax.apply_updates(q, u)
        assert np.abs(np.asarray(q["w"]) - np.asarray(params["w"])).max() > 1e3 * EPS32 * np.abs(w0).max()
