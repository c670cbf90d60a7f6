"""Golden one-step tests of the SFT, DPO, GRPO and DQN updates against numbers stored in tests/assets/golden_*.json.

Each run is the trainer's own update: its loss function and denominator in `trainers.step.make_train_step`, jitted
with shardings and donation by `jit_train_step`, with the optimizer, clip and schedule of the config's `tiny`
variant (`trainers.optim.make_optimizer`), on a random-init float32 decoder (seed 0, 2 layers, D 32, V 64) and fixed
batches of two micro-batches (A = 2, so the global normalisation across micro-batches is exercised). SFT and DPO
run two steps: their tiny schedules warm up from lr 0, so step 0 fills Adam's moments and step 1 moves the weights.
DPO's reference is another random model (seed 1), so its loss is not ln 2 and beta shapes the update. GRPO's tiny
schedule is constant: one step, on fixed completions and rewards packed by the trainer's own `pack` / `advantages` /
reference function (no sampling: the sampler is stochastic and tested elsewhere).

Stored: per step the loss and grad_norm; after the last step, for all params and a few named leaves: the sum of the
initial params, sum(p**2), sum|p - p0| and the update along the last gradient, sum((p - p0) * g).

Tolerances (tests/tolerances.py), computed from this run's own tensors. The worst case of Higham's gamma_n (a
float32 reduction of n terms in any order is within n * EPS32 * sum|terms| of another order) is 4 % of the update
checksum here, too loose to see a 1 % lr change, so the golden bounds use Higham & Mary's probabilistic form
k(n) = 8 sqrt(n) in place of n (`prob_factor`: fails with probability ~ 3e-14 n):
  loss       k(depth + n_tokens) * EPS32 * M, M = what the loss sums: per token |logsumexp| + |target logit|,
             times the loss's slope in that log-prob (1 / tokens for SFT, beta * sigmoid(-margin) / pairs for DPO,
             (|A| + beta) / tokens for GRPO)
  gradient   element i of leaf l: dg_l = k(2 * depth + n_tokens) * EPS32 * max|g_l| (the forward, the transposed
             backward, the sum over tokens of a weight gradient; the terms summed into an element are taken to be
             no larger than the leaf's largest element); grad_norm: the norm of those errors plus k(n_params) / 2
             * EPS32 * norm for the float32 sum of the squares
  update     Adam's direction u = m / (sqrt(v) + eps) has |u| <= sqrt(2) for <= 2 steps (b1 0.9, b2 0.999) and moves
             by <= 3 r_i for a relative gradient error r_i = dg_l / |g_i| + (clip factor's): per element
             lr * min(2 sqrt 2, 3 r_i), plus 5 ulps of |p| (4 for the random init's erf_inv, 1 for p + update).
             sum((p - p0) * g) weighs each element by |g_i|, so elements whose sign is lost in rounding (|g_i| <=
             dg_l) contribute at most lr * 2 sqrt 2 * dg_l: this is the checksum that sees a 1 % lr change.
The gradients g are read back from Adam's first moment (mu_t = b1 mu_{t-1} + (1 - b1) clip_t g_t), so the bound
costs no second compile of the backward pass. `test_golden_detects_perturbation` checks that a 1 % change of the
lr or of the loss normalisation, or a clip that fires (0.5; the tiny configs' 1.0 is above these grad norms, and
one Adam step is invariant to a gradient scale, so GRPO's single step cannot show a clip), fails the comparison.

Regenerate the assets ONLY for an intended change of a trainer's math (loss, normalisation, optimizer, schedule,
clip, init), named in the commit message:  REASONER_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/trainers/test_golden.py
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import pathlib
import types
import unittest.mock
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.tolerances import EPS32, decoder_depth, prob_factor

ASSETS = pathlib.Path(__file__).resolve().parents[1] / "assets"
CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"
REGEN = os.environ.get("REASONER_REGEN_GOLDEN") == "1"
REGEN_CMD = "REASONER_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/trainers/test_golden.py"
DIMS = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
            head_dim=8)
LEAVES = ("embed", "final_norm/scale", "layers/0/attn/q_proj/kernel", "layers/1/mlp/down_proj/kernel")
A, ROWS, SEQ = 2, 4, 24  # micro-batches, rows per micro-batch, tokens per row (SFT / DPO)
U_MAX = 2.0 * math.sqrt(2.0)  # range of Adam's direction over its first two steps (|u| <= sqrt 2)


# ============================================================================================== adapter
# The only code that knows how the trainers build their step; re-point it here when trainers/ moves.
@dataclasses.dataclass
class GoldenRun:
    """One trainer's jitted step with its initial state and fixed batches (one global [A, B, ...] batch per step)."""

    step: Callable  # step(state, frozen, batch) -> (state, metrics), exactly as the trainer jits it
    state: Any  # TrainState at step 0 (its buffers are donated by `step`)
    frozen: Any
    batches: list[dict]
    schedule: Callable  # step -> lr
    optim: Any  # config.optim (b1 and max_grad_norm turn Adam's first moment back into the raw gradient)
    loss_magnitude: Callable[[Any, dict], jax.Array]  # jitted (params, batch) -> M of the loss bound (docstring)
    depth: int  # reduction length from embedding to log-prob (tests.tolerances.decoder_depth)
    n_tokens: int  # tokens in one global batch (the longest post-forward sum)
    magnitude_of_state: bool = False  # loss_magnitude(state, batch) instead of (params, batch): the DQN's batch
    # is drawn from the replay buffer in its state
    leaves: tuple[str, ...] = LEAVES  # named leaves checksummed beside "all"


def _config(name: str, *extra: str):
    from reasoner.config import load_config

    dims = [f"--config.model.random.{k}={v}" for k, v in DIMS.items()]
    return load_config(f"{CONFIGS / name}:tiny", [*dims, *extra])


def _setup(config, mesh, *, total_steps: int):
    """The trainer's own run: model, optimizer (config.optim), schedule, sharded state (trainers.run.setup)."""
    from trainers.run import setup

    return setup(config, total_steps=total_steps, mesh=mesh)


def _token_magnitudes(model, tokens, positions, segment_ids, *, temperature=1.0):
    """[B, T-1]: |logsumexp| + |target logit| per next-token log-prob (what its last reductions sum)."""
    hidden, _ = model.hidden_states(tokens, positions_BxT=positions, segment_ids_BxT=segment_ids)
    logits = model.logits(hidden[:, :-1]).astype(jnp.float32) / temperature
    target = jnp.take_along_axis(logits, tokens[:, 1:, None], axis=-1)[..., 0]
    return jnp.abs(jax.nn.logsumexp(logits, axis=-1)) + jnp.abs(target)


def _random_rows(rng, *, n, seq, vocab, prompt=None):
    tokens = rng.integers(4, vocab, size=(n, seq)).astype(np.int32)
    lengths = rng.integers(seq // 2, seq + 1, size=n)
    idx = np.arange(seq)
    segment_ids = (idx[None, :] < lengths[:, None]).astype(np.int32)
    prompt = rng.integers(2, seq // 2, size=n) if prompt is None else prompt
    loss_mask = ((idx[None, :] >= prompt[:, None]) & (segment_ids == 1)).astype(np.int32)
    positions = (np.broadcast_to(idx, tokens.shape) * segment_ids).astype(np.int32)
    return {"tokens": tokens, "positions": positions, "segment_ids": segment_ids, "loss_mask": loss_mask}, prompt


def _depth(seq_len: int) -> int:
    return decoder_depth(num_layers=DIMS["num_layers"], hidden_size=DIMS["hidden_size"],
                         intermediate_size=DIMS["intermediate_size"], num_heads=DIMS["num_heads"],
                         head_dim=DIMS["head_dim"], seq_len=seq_len, vocab_size=DIMS["vocab_size"])


@contextlib.contextmanager
def _perturbed(config, module, denominator: str, perturb: str | None):
    """One deliberate change of the math (for `test_golden_detects_perturbation`) while the step is built."""
    if perturb == "lr+1%":
        config.optim.lr = float(config.optim.lr) * 1.01
    elif perturb == "clip=0.5":
        config.optim.max_grad_norm = 0.5
    elif perturb not in (None, "denominator+1%"):
        raise ValueError(f"perturb={perturb!r}")
    if perturb != "denominator+1%":
        yield
        return
    original = getattr(module, denominator)
    with unittest.mock.patch.object(module, denominator, lambda batch: original(batch) * 1.01):
        yield


def sft_run(mesh, perturb: str | None = None) -> GoldenRun:
    from reasoner.data.pipeline import to_global_batch
    from trainers import sft
    from trainers.losses import target_mask

    config = _config("sft_astar.py")
    rng = np.random.default_rng(0)
    host = []
    for _ in range(2):
        rows, _ = _random_rows(rng, n=A * ROWS, seq=SEQ, vocab=DIMS["vocab_size"])
        host.append({k: v.reshape(A, ROWS, SEQ) for k, v in rows.items()})
    with _perturbed(config, sft, "sft_denominator", perturb):
        run = _setup(config, mesh, total_steps=10)
        step = sft.make_step(run, host[0])

    @jax.jit
    def magnitude(params, batch):  # loss = sum_t mask * (lse - z_target) / tokens
        flat = {k: v.reshape(-1, SEQ) for k, v in batch.items()}
        mag = _token_magnitudes(run.model(params), flat["tokens"], flat["positions"], flat["segment_ids"])
        mask = target_mask(flat["loss_mask"], flat["segment_ids"])
        return jnp.sum(mag * mask) / jnp.maximum(jnp.sum(mask), 1.0)

    return GoldenRun(step=step, state=run.state, frozen=run.frozen, batches=[to_global_batch(b, mesh) for b in host],
                     schedule=run.schedule, optim=config.optim, loss_magnitude=magnitude, depth=_depth(SEQ),
                     n_tokens=A * ROWS * SEQ)


def dpo_run(mesh, perturb: str | None = None) -> GoldenRun:
    from reasoner.data.pipeline import batch_sharding, to_global_batch
    from trainers import dpo
    from trainers.losses import target_mask
    from trainers.run import Frozen, build_model, split_trainable, with_reference
    from trainers.step import jit_train_step, make_train_step

    config = _config("dpo_smt.py")
    assert config.dpo.precompute_ref  # the tiny config's reference path: log-probs computed before training
    with _perturbed(config, dpo, "pair_denominator", perturb):
        run = _setup(config, mesh, total_steps=10)
        ref_cfg = config.model.copy_and_resolve_references()
        ref_cfg.seed = 1  # a reference other than the start: the loss is not ln 2 and beta shapes the update
        _, ref_params, _, _, _ = split_trainable(build_model(ref_cfg, mesh=mesh), lora=False)
        ref_run = with_reference(run, ref_params)
        rng = np.random.default_rng(1)
        n = 2 * A * ROWS  # pairs of both steps
        chosen, prompt = _random_rows(rng, n=n, seq=SEQ, vocab=DIMS["vocab_size"])
        rejected, _ = _random_rows(rng, n=n, seq=SEQ, vocab=DIMS["vocab_size"], prompt=prompt)
        for i, p in enumerate(prompt):  # a pair shares its prompt
            rejected["tokens"][i, :p] = chosen["tokens"][i, :p]
        rows = {f"{s}_{f}": side[f] for s, side in zip(dpo.SIDES, (chosen, rejected)) for f in dpo.FIELDS}
        rows.update(dpo.reference_logps(ref_run.graphdef, ref_run.frozen, rows, mesh=mesh, batch_size=ROWS))
        half = n // 2
        host = [{k: v[i * half:(i + 1) * half].reshape(A, ROWS, *v.shape[1:]) for k, v in rows.items()}
                for i in range(2)]
        # as trainers.dpo.build_dpo builds its step with precomputed reference log-probs
        batch_sh = {k: batch_sharding(mesh, ndim=v.ndim) for k, v in host[0].items()}
        step = jit_train_step(
            make_train_step(loss_fn=dpo.dpo_loss_fn(run.graphdef, config.dpo, precomputed=True),
                            optimizer=run.optimizer, schedule=run.schedule, denominator=dpo.pair_denominator),
            state_sharding=run.shardings.state, frozen_sharding=run.shardings.frozen, batch_sharding=batch_sh,
            metrics_sharding=run.shardings.replicated)
    assert run.frozen == Frozen(base=run.frozen.base)  # no reference weights in the step
    beta = float(config.dpo.beta)
    assert config.dpo.loss_type == "sigmoid"  # the slope below: |d/d logp| of -log sigmoid(beta * margin)

    @jax.jit
    def magnitude(params, batch):  # per pair beta * sigmoid(-beta * margin) * (sum over 4 sequences of M)
        model = run.model(params)
        seq_mag, seq_logp = {}, {}
        for s in dpo.SIDES:
            flat = {f: batch[f"{s}_{f}"].reshape(-1, SEQ) for f in dpo.FIELDS}
            mag = _token_magnitudes(model, flat["tokens"], flat["positions"], flat["segment_ids"])
            mask = target_mask(flat["loss_mask"], flat["segment_ids"])
            seq_mag[s] = jnp.sum(mag * mask, axis=-1)
            seq_logp[s] = dpo.pair_logps(model, {f"{t}_{f}": batch[f"{t}_{f}"].reshape(-1, SEQ)
                                                 for t in dpo.SIDES for f in dpo.FIELDS})[0 if s == "chosen" else 1]
        margin = ((seq_logp["chosen"] - batch["ref_chosen_logps"].reshape(-1))
                  - (seq_logp["rejected"] - batch["ref_rejected_logps"].reshape(-1)))
        slope = beta * jax.nn.sigmoid(-beta * margin)
        # x 2: the reference log-probs went through the same float32 forward (another CPU may have computed them)
        return jnp.sum(slope * 2.0 * (seq_mag["chosen"] + seq_mag["rejected"])) / margin.shape[0]

    return GoldenRun(step=step, state=run.state, frozen=run.frozen, batches=[to_global_batch(b, mesh) for b in host],
                     schedule=run.schedule, optim=config.optim, loss_magnitude=magnitude, depth=_depth(SEQ),
                     n_tokens=2 * A * ROWS * SEQ)


def grpo_run(mesh, perturb: str | None = None) -> GoldenRun:
    from trainers import grpo
    from trainers.grpo_batch import pack, prompt_bucket

    config = _config("grpo_astar.py", "--config.grpo.grad_accum=2")
    g = config.grpo
    rng = np.random.default_rng(2)
    B, budget = int(g.num_generations) * int(g.prompts_per_step), grpo.completion_budget(config)
    prompts = [list(rng.integers(4, DIMS["vocab_size"], size=rng.integers(5, 12))) for _ in range(g.prompts_per_step)]
    lengths = rng.integers(3, budget + 1, size=B)
    r = grpo.Rollout(prompt_ids=[prompts[b // g.num_generations] for b in range(B)],
                     completion_ids=[rng.integers(4, DIMS["vocab_size"], size=n).astype(np.int32) for n in lengths],
                     tool_mask=[np.ones(n, np.float32) for n in lengths],
                     old_logps=[np.zeros(n, np.float32) for n in lengths], truncated=lengths == budget,
                     completions=[None] * B, examples=[{}] * B)
    rewards = np.array([1.0, 0.0, 0.5, 0.0, 1.0, 0.25, 0.25, 0.0], np.float32)[:B]
    adv, _ = grpo.advantages(rewards, num_generations=int(g.num_generations), scale_rewards=g.scale_rewards)
    prompt_len = prompt_bucket(max(len(p) for p in prompts))
    host = pack(r, adv, prompt_len=prompt_len, budget=budget, grad_accum=int(g.grad_accum), pad_id=0,
                mask_truncated=bool(g.mask_truncated))
    with _perturbed(config, grpo, "loss_token_count", perturb):
        steps = grpo.build_grpo(config, mesh=mesh)
        run = steps.run
        assert steps.loss_cfg.beta > 0  # the tiny config's KL term: reference log-probs from the frozen start
        batch = host.on_mesh(mesh)
        batch = batch.replace(ref_logps=steps.reference(prompt_len)(run.frozen, batch))
        step = steps.update(prompt_len)
    T = host.tokens.shape[-1]
    beta = steps.loss_cfg.beta

    @jax.jit
    def magnitude(params, batch):  # per token -A * ratio (ratio == 1 in value) + beta * k3(ref - logp)
        flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in batch.fields().items()}
        mag = _token_magnitudes(run.model(params), flat["tokens"], flat["positions"], flat["segment_ids"],
                                temperature=float(g.temperature))
        mag = jax.lax.dynamic_slice_in_dim(mag, prompt_len - 1, budget, axis=1)
        slope = jnp.abs(flat["advantages"])[:, None] + beta
        # 1 + 2 M: the advantage term's own rounding, the policy's and the reference's log-prob errors
        return jnp.sum((1.0 + 2.0 * mag) * slope * flat["loss_mask"]) / jnp.maximum(jnp.sum(flat["loss_mask"]), 1.0)

    return GoldenRun(step=step, state=run.state, frozen=run.frozen, batches=[batch], schedule=run.schedule,
                     optim=config.optim, loss_magnitude=magnitude, depth=_depth(T), n_tokens=B * T)


@dataclasses.dataclass
class _DQNStep:
    """What `measure` reads of a train state, for the DQN: its online params, Adam state and update count."""

    params: Any
    opt_state: Any
    step: int
    dqn: Any


def dqn_run(mesh, perturb: str | None = None) -> GoldenRun:
    """The navigator's replay update (`trainers.dqn._one_update`, the body of its jitted learning loop) twice on a
    fixed, full buffer of 32 random transitions, batches of 16 drawn by the state's own rng; configs/rlot.py:tiny.

    Loss magnitude (the `M` of the module docstring) of the squared TD error mean_i (q_i - y_i)^2: each Q-value is
    within k(depth) EPS32 of the sum of the magnitudes of its terms, S = the network run on |weights| and |inputs|
    (ReLU is the identity on those; V + A + mean A, the dueling combination's terms), so the loss moves by
    mean_i 2 |q_i - y_i| (S(s_i) + gamma S_target(s'_i)); plus the loss itself for the mean of the squares."""
    from flax import nnx

    from configs.rlot import get_config
    from trainers import dqn

    cfg = get_config("tiny").dqn
    cfg.update(dict(buffer_size=32, batch_size=16, seed=0))
    if perturb == "lr+1%":
        cfg.lr = float(cfg.lr) * 1.01
    elif perturb is not None:
        raise ValueError(f"perturb={perturb!r}")
    graphdef, state = dqn.init_state(cfg, obs_dim=7, num_actions=5)
    hp = dqn.Hyper.from_config(cfg)
    rng = np.random.default_rng(0)
    C = 32
    state = state.replace(
        buf_obs_Cx7=jnp.asarray(rng.integers(0, 4, (C, 7)), jnp.float32),
        buf_action_C=jnp.asarray(rng.integers(0, 5, C), jnp.int32),
        buf_reward_C=jnp.asarray(rng.normal(size=C), jnp.float32),
        buf_done_C=jnp.asarray(rng.random(C) < 0.3, jnp.float32),
        buf_next_Cx7=jnp.asarray(rng.integers(0, 4, (C, 7)), jnp.float32), buf_size=jnp.asarray(C, jnp.int32))
    one_update = jax.jit(dqn._one_update, static_argnums=(0, 1))

    @jax.jit
    def grad_norm(s):  # the same draw as `_one_update`'s (same rng split), its gradient's norm
        _, key = dqn._split(s.rng)
        idx = jax.random.choice(jax.random.wrap_key_data(key), C, (hp.batch_size,), replace=False)
        grads = jax.grad(dqn._td_loss)(s.online, s.target, graphdef, hp.gamma, s.buf_obs_Cx7[idx],
                                       s.buf_action_C[idx], s.buf_reward_C[idx], s.buf_done_C[idx],
                                       s.buf_next_Cx7[idx])
        return optax.global_norm(grads)

    def step(s: _DQNStep, frozen, batch):
        norm = grad_norm(s.dqn)
        new, loss = one_update(graphdef, hp, s.dqn)
        return _DQNStep(params=new.online, opt_state=new.opt_state, step=s.step + 1, dqn=new), \
            {"loss": loss, "grad_norm": norm}

    def q_and_scale(params, obs):
        net = nnx.merge(graphdef, params)
        q = net(obs)
        x = jnp.abs((obs - 1.5) / 1.5)
        v, a = nnx.merge(graphdef, jax.tree.map(jnp.abs, params)).streams(1.5 + 1.5 * x)
        return q, v + a + jnp.mean(a, axis=-1, keepdims=True)

    @jax.jit
    def loss_magnitude(params, s):  # `batch` is the DQN state (the buffer and the rng live there)
        _, key = dqn._split(s.rng)
        idx = jax.random.choice(jax.random.wrap_key_data(key), C, (hp.batch_size,), replace=False)
        obs, action = s.buf_obs_Cx7[idx], s.buf_action_C[idx]
        q, scale = q_and_scale(params, obs)
        q_next_online, _ = q_and_scale(params, s.buf_next_Cx7[idx])
        q_next, scale_next = q_and_scale(s.target, s.buf_next_Cx7[idx])
        a_next = jnp.argmax(q_next_online, axis=-1)
        pick = lambda m, a: jnp.take_along_axis(m, a[:, None], axis=1)[:, 0]  # noqa: E731
        y = s.buf_reward_C[idx] + hp.gamma * (1.0 - s.buf_done_C[idx]) * pick(q_next, a_next)
        delta = pick(q, action) - y
        return jnp.mean(2 * jnp.abs(delta) * (pick(scale, action) + hp.gamma * pick(scale_next, a_next))) \
            + jnp.mean(delta ** 2)

    start = _DQNStep(params=state.online, opt_state=state.opt_state, step=0, dqn=state)
    run = GoldenRun(step=step, state=start, frozen=None, batches=[None, None], schedule=lambda _: hp.lr,
                    optim=types.SimpleNamespace(b1=hp.adam_b1, max_grad_norm=0.0),
                    loss_magnitude=lambda s, batch: loss_magnitude(s.params, s.dqn),
                    depth=7 + 2 * 32 + 5, n_tokens=hp.batch_size, magnitude_of_state=True,
                    leaves=("trunk/kernel/.value", "adv_out/kernel/.value"))
    return run


RUNS = {"sft": sft_run, "dpo": dpo_run, "grpo": grpo_run, "dqn": dqn_run}


# ============================================================================================== measuring
def _flat(tree) -> dict[str, np.ndarray]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {"/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path): np.asarray(v, np.float64)
            for path, v in leaves}


def _adam_mu(opt_state) -> dict[str, np.ndarray]:
    """Adam's first moment (the `mu` of optax's ScaleByAdamState inside the chain), flattened like the params."""
    found = [node.mu for node in jax.tree.leaves(opt_state, is_leaf=lambda x: hasattr(x, "mu"))
             if hasattr(node, "mu")]
    assert len(found) == 1, "expected one Adam state in the optimizer chain (golden bounds assume Adam/AdamW)"
    return _flat(found[0])


def measure(run: GoldenRun) -> tuple[dict, dict]:
    """(values, tolerances), the same nested keys: per-step loss/grad_norm, per-leaf checksums after the steps."""
    b1, clip = float(run.optim.b1), float(run.optim.max_grad_norm or 0.0)
    p0 = _flat(run.state.params)
    values, tols = {"steps": []}, {"steps": []}
    r_el = {k: np.zeros_like(v) for k, v in p0.items()}  # relative error of each gradient element, max over steps
    dg, lrs, mu = {}, [], {k: np.zeros_like(v) for k, v in p0.items()}
    state = run.state
    for batch in run.batches:
        magnitude = float(run.loss_magnitude(state if run.magnitude_of_state else state.params, batch))
        lrs.append(float(run.schedule(int(state.step))))
        state, m = run.step(state, run.frozen, batch)
        norm = float(m["grad_norm"])
        scale = min(1.0, clip / norm) if clip else 1.0
        new_mu = _adam_mu(state.opt_state)
        grads = {k: (new_mu[k] - b1 * mu[k]) / ((1.0 - b1) * scale) for k in mu}  # this step's raw gradient
        mu = new_mu
        c_g = prob_factor(2 * run.depth + run.n_tokens)
        dg = {k: c_g * EPS32 * np.max(np.abs(g)) for k, g in grads.items()}
        n_params = sum(g.size for g in grads.values())
        norm_tol = (math.sqrt(sum(dg[k] ** 2 * g.size for k, g in grads.items()))
                    + prob_factor(n_params) / 2 * EPS32 * norm)
        for k, g in grads.items():
            r = dg[k] / np.maximum(np.abs(g), 1e-30) + norm_tol / max(norm, 1e-30)
            r_el[k] = np.maximum(r_el[k], np.where(g == 0, 0.0, r))  # structural zeros stay zero in any order
        values["steps"].append({"loss": float(m["loss"]), "grad_norm": norm})
        tols["steps"].append({"loss": prob_factor(run.depth + run.n_tokens) * EPS32 * magnitude, "grad_norm": norm_tol})
    p1 = _flat(state.params)
    lr_sum = sum(lrs)
    values["params"], tols["params"] = {}, {}
    for name in ("all", *run.leaves):
        keys = list(p0) if name == "all" else [name]
        cat = lambda d: np.concatenate([np.asarray(d[k]).ravel() for k in keys])  # noqa: E731
        p, q, g = cat(p0), cat(p1), cat(grads)
        dg_el = cat({k: np.full(p0[k].size, dg[k]) for k in keys})
        e_update = lr_sum * np.minimum(U_MAX, 3.0 * cat(r_el)) + EPS32 * np.abs(q)
        e_param = e_update + 4 * EPS32 * np.abs(p)
        values["params"][name] = {"init_sum": float(p.sum()), "sumsq": float((q * q).sum()),
                                  "update_abs_sum": float(np.abs(q - p).sum()),
                                  "update_dot_grad": float(((q - p) * g).sum())}
        tols["params"][name] = {"init_sum": float(4 * EPS32 * np.abs(p).sum()),
                                "sumsq": float((2 * np.abs(q) * e_param + e_param ** 2).sum()),
                                "update_abs_sum": float(e_update.sum()),
                                "update_dot_grad": float((e_update * np.abs(g) + np.abs(q - p) * dg_el).sum())}
    return values, tols


def mismatches(values: dict, golden: dict, tols: dict, prefix: str = "") -> list[str]:
    """Every key whose value is off the golden one by more than its tolerance (or missing)."""
    out = []
    for key, want in golden.items():
        got, tol, name = values.get(key) if isinstance(values, dict) else None, tols.get(key), f"{prefix}{key}"
        if isinstance(want, dict):
            out += mismatches(got or {}, want, tol or {}, f"{name}.")
        elif isinstance(want, list):
            out += [m for i, w in enumerate(want)
                    for m in mismatches(got[i] if got and i < len(got) else {}, w, tol[i] if tol else {},
                                        f"{name}[{i}].")]
        elif got is None or tol is None or not abs(got - want) <= tol:
            out.append(f"{name}: got {got!r}, golden {want!r}, tolerance {tol!r}")
    return out


@pytest.fixture(scope="module")
def mesh():
    from reasoner.sharding import make_mesh

    return make_mesh("fsdp=-1", devices=jax.devices()[:1])


# ============================================================================================== tests
@pytest.mark.parametrize("trainer", sorted(RUNS))
def test_golden_one_step(trainer, mesh):
    values, tols = measure(RUNS[trainer](mesh))
    path = ASSETS / f"golden_{trainer}.json"
    if REGEN:
        if os.environ.get("CI") == "true":
            pytest.fail("REASONER_REGEN_GOLDEN=1 under CI=true: regenerate locally and commit the assets")
        ASSETS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"values": values, "tolerances_when_written": tols, "cpu": _cpu(),
                                    "jax": jax.__version__}, indent=1) + "\n")
        return
    assert path.exists(), f"{path} missing; generate it with `{REGEN_CMD}`"
    bad = mismatches(values, json.loads(path.read_text())["values"], tols)
    assert not bad, (f"{trainer}'s one-step update moved off {path.name}:\n  " + "\n  ".join(bad) +
                     f"\nIf (and only if) the trainer's math changed on purpose (loss, normalisation, optimizer, "
                     f"schedule, clip, init), regenerate with `{REGEN_CMD}` and name the change in the commit.")


# One perturbation per trainer keeps the suite short (each is a fresh compile); all nine were checked by hand.
@pytest.mark.parametrize("trainer,perturb", [("sft", "lr+1%"), ("dpo", "clip=0.5"), ("grpo", "denominator+1%"),
                                             ("dqn", "lr+1%")])
def test_golden_detects_perturbation(trainer, perturb, mesh):
    """The tolerances are tight enough to see a 1 % change of the lr or of the normalisation, or a clip that fires."""
    if REGEN:
        pytest.skip("assets being regenerated")
    values, tols = measure(RUNS[trainer](mesh, perturb))
    assert mismatches(values, json.loads((ASSETS / f"golden_{trainer}.json").read_text())["values"], tols)


def _cpu() -> str:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines() if pathlib.Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"
