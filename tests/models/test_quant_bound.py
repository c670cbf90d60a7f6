"""QLoRA's first-step loss against the unquantized base (issue 22 item 6): a stated bound, checked, and shown to
fail for a wrong dequantization.

Setting: the configs' tiny random decoder (2 layers, D 64, V 64) with its final-norm scale raised to 8, so its
logits are as peaked as a trained model's (a random init's near-uniform logits hardly move with any weight); LoRA
rank 4 (B = 0: at the first step the adapters add exactly nothing, so the loss is the base's); the SFT trainer's own
step (`make_train_step` with `sft_loss_fn`) on a fixed batch of 8 x 32 tokens; float32 compute. "The bf16 base" is
the model whose projection kernels are rounded to bfloat16 (what a bf16 checkpoint loads as: our trainers keep
float32 master weights and quantize those, so NF4 / int8 are quantized from it); "the f32 base" is the same model
before the rounding.

W: the 14 projection kernels; Q(W): their NF4 / int8 values, dequantized here in numpy from the codes and scales
the trainer stores (the format's definition, independent of `reasoner.models.quant`'s kernels); D = Q(W) - W; G(t):
the gradient of the first-step loss in the kernels at W + t D.

Stated bound (a priori: the quantization's per-element error bound propagated through the layers to first order).
Each element's error is at most e = a (MAX_GAP / 2 + 2 EPS32) for NF4 and a (1/254 + 2 EPS32) for int8, a its
block's absmax (the round-trip bounds proven in tests/models/test_quant.py; checked here on the stored codes). By
the mean value theorem L(Q(W)) - L(W) = <G(t*), D> for some t* in [0, 1], so, with g = max over t in {0, 1/2, 1} of
|G(t)| elementwise (the gradient moves a few percent along the segment):

    worst case      |L_quant - L_base| <= B   = sum_ij g_ij e_ij
    probabilistic   |L_quant - L_base| <= B_p = lambda sqrt(sum_ij (g_ij e_ij)^2),  lambda = PROB_LAMBDA (8)

plus both losses' float32 error (k(depth + n_tokens) EPS32 |L|, test_golden's convention). B_p treats the
elements' errors as independent with mean zero (Hoeffding; Higham & Mary's model of rounding errors, which
tests/tolerances.py uses for float32): it holds with probability >= 1 - 2 exp(-lambda^2 / 2) under that model.

The sharp statement (what makes the bound falsifiable): the loss moves by what the quantization error itself
predicts. Simpson's rule on t -> L(W + t D) gives S = <G(0) + 4 G(1/2) + G(1), D> / 6; the trapezoid
T = <G(0) + G(1), D> / 2 differs from it by R = |S - T|, the usual estimate of the trapezoid's third-order error,
which bounds Simpson's fifth-order one here. So

    |(L_quant - L_base) - S| <= R + both losses' float32 error + e_dot

(e_dot: S's error from the gradients' float32 error, k(2 depth + n_tokens) EPS32 max|G| per element of a kernel).
Against the f32 base the bf16 rounding (each element within 2^-8 |w|) is a first segment W32 -> W of its own.

Measured (Intel Sapphire Rapids CPU, this model; loss 8.0007 on the bf16 base):
  NF4   change -0.010848, predicted S -0.010846 (allowance 1.5e-3); B_p 1.03, B 13.1 (worst case: 1200 x)
  int8  change -0.002514, predicted S -0.002515 (allowance 6.3e-4); B_p 0.026, B 0.31
  vs f32: the bf16 rounding adds a predicted -0.000045 (NF4 -0.010890 in all, int8 -0.002556)
A dequantization bug moves the loss far off S: absmax x 1.1 by -0.70 (NF4 and int8), each block read with its
neighbour's scale by -0.23 / -0.26, NF4's nibbles swapped by +0.008 instead of -0.011 (0.019 off: 13 x the
allowance). The a-priori bounds alone do not see the NF4 bugs (NF4's own error is that large), but they see int8's.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reasoner.models import quant
from tests.models.test_quant import MAX_GAP, _per_element_absmax
from tests.tolerances import EPS32, PROB_LAMBDA, model_depth, prob_factor

SHARPEN = 8.0  # the final norm's scale: logits as peaked as a trained model's
ROWS, SEQ, VOCAB = 8, 32, 64
BF16_U = 2.0 ** -8  # bfloat16's unit roundoff: 8 significant bits


def _config(kind: str):
    from configs import common

    config = common.tiny(common.run_config("sft"), {"lora.rank": 4, "lora.quantize_base": kind,
                                                    "model.random.vocab_size": VOCAB})
    config.optim = common.optim(lr=1e-3, schedule="constant")
    return config


def _kernel_paths(pure: dict) -> list[tuple]:
    """Paths (in a pure dict of the base) of every projection kernel, float or quantized."""
    out = []

    def walk(node, path):
        if isinstance(node, dict):
            if "kernel" in node and path and str(path[-1]).endswith("_proj"):
                out.append(path + ("kernel",))
            for k, v in node.items():
                if k != "kernel":
                    walk(v, path + (k,))

    walk(pure, ())
    return sorted(out, key=str)


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def _with(tree, path, value):
    """A copy of the nested dict `tree` whose leaf at `path` is `value`."""
    if not path:
        return value
    return {**tree, path[0]: _with(tree[path[0]], path[1:], value)}


def spec_dequantize(codes: np.ndarray, absmax: np.ndarray, *, kind: str, shape) -> np.ndarray:
    """The format's definition in numpy: NF4 value = NF4_CODE[nibble] * absmax (even element in the high nibble),
    int8 value = code * absmax / 127; blocks of 64 in row-major order."""
    absmax = np.asarray(absmax, np.float32)[:, None]
    if kind == "nf4":
        codes = np.asarray(codes)
        idx = np.stack([codes >> 4, codes & 15], axis=-1).reshape(codes.shape[0], -1)
        values = quant.NF4_CODE[idx] * absmax
    else:
        values = np.asarray(codes, np.float32) * absmax / np.float32(127.0)
    return values.reshape(-1)[:math.prod(shape)].reshape(shape)


class Setting:
    """The tiny model, the batch, the trainer's first step of each base and the loss's gradient in the kernels."""

    def __init__(self):
        from reasoner.sharding import make_mesh

        self.mesh = make_mesh("fsdp=-1", devices=jax.devices()[:1])
        tokens = np.random.default_rng(0).integers(0, VOCAB, (1, ROWS, SEQ)).astype(np.int32)
        self.batch = {"tokens": jnp.asarray(tokens),
                      "positions": jnp.broadcast_to(jnp.arange(SEQ, dtype=jnp.int32), tokens.shape),
                      "segment_ids": jnp.ones(tokens.shape, jnp.int32), "loss_mask": jnp.ones(tokens.shape, jnp.int32)}
        self.runs = {kind: self._run(kind) for kind in ("none", "nf4", "int8")}
        self.f32_run = self._run("none", bf16=False)
        self.steps: dict = {}
        self.paths = _kernel_paths(self.runs["none"].frozen.base)
        assert len(self.paths) == 14  # q k v o gate up down, two layers
        self.W = self.kernels(self.runs["none"].frozen.base)  # the bf16 base
        self.W32 = self.kernels(self.f32_run.frozen.base)  # the f32 base
        self._value_and_grad = jax.jit(jax.value_and_grad(self._loss))
        cfg = self.runs["none"].model_cfg
        self.depth = model_depth(cfg, seq_len=SEQ)

    def _run(self, kind: str, *, bf16: bool = True):
        from flax import nnx

        from reasoner.models.layers import Proj
        from trainers.run import build_model, setup

        model = build_model(_config(kind).model, mesh=self.mesh)
        model.final_norm.scale.set_value(model.final_norm.scale[...] * SHARPEN)
        if bf16:
            for _, module in nnx.iter_modules(model):
                if isinstance(module, Proj):
                    module.kernel.set_value(module.kernel[...].astype(jnp.bfloat16).astype(jnp.float32))
        return setup(_config(kind), total_steps=1, model=model, mesh=self.mesh, tokenizer=object())

    def first_step_loss(self, kind: str, base=None) -> float:
        """The loss the trainer's own step reports for the run of `kind` (its base, or `base` in its place)."""
        from trainers.run import Frozen
        from trainers.sft import sft_denominator, sft_loss_fn
        from trainers.step import make_train_step

        run = self.runs[kind] if kind != "f32" else self.f32_run
        if kind not in self.steps:
            self.steps[kind] = jax.jit(make_train_step(loss_fn=sft_loss_fn(run.graphdef), optimizer=run.optimizer,
                                                       schedule=run.schedule, denominator=sft_denominator))
        frozen = run.frozen if base is None else Frozen(base=base)
        _, metrics = self.steps[kind](jax.tree.map(jnp.copy, run.state), frozen, self.batch)
        return float(metrics["loss"])

    def kernels(self, base) -> list[np.ndarray]:
        return [np.asarray(_get(base, p), np.float64) for p in self.paths]

    def spec_kernels(self, kind: str, base=None) -> list[np.ndarray]:
        """Q(W): the quantized run's stored codes and scales, dequantized by the specification."""
        base = self.runs[kind].frozen.base if base is None else base
        return [spec_dequantize(_get(base, p)["codes"], _get(base, p)["absmax"], kind=kind, shape=w.shape).astype(
            np.float64) for p, w in zip(self.paths, self.W)]

    def _loss(self, base, batch):
        from trainers.run import Frozen
        from trainers.sft import sft_denominator, sft_loss_fn

        run = self.runs["none"]
        loss, _ = sft_loss_fn(run.graphdef)(run.state.params, Frozen(base=base), jax.tree.map(lambda x: x[0], batch),
                                            sft_denominator(batch))
        return loss

    def grad_at(self, kernels: list[np.ndarray]) -> list[np.ndarray]:
        """d loss / d kernels of the float run with its kernels set to `kernels` (float32)."""
        base = self.runs["none"].frozen.base
        for p, k in zip(self.paths, kernels):
            base = _with(base, p, jnp.asarray(k.astype(np.float32)))
        _, grads = self._value_and_grad(base, self.batch)
        return self.kernels(grads)

    def loss_error(self, loss: float) -> float:
        """A first-step loss's float32 error: k(depth + n_tokens) EPS32 times the mean of |logp_t| (the decoder's
        reductions, then the mean over n tokens; test_golden's convention); all log-probs are negative, so that mean
        is the loss."""
        return prob_factor(self.depth + ROWS * SEQ) * EPS32 * abs(loss)


@dataclasses.dataclass(frozen=True)
class Segment:
    """The loss along W + t D, t in [0, 1]: Simpson's S, the trapezoid's difference R, the float32 error of S
    (e_dot) and the gradient's largest magnitude along the segment per element (for the a-priori bound)."""

    S: float
    R: float
    e_dot: float
    g_max: list


def segment(setting: Setting, start: list[np.ndarray], delta: list[np.ndarray]) -> Segment:
    grads = [setting.grad_at([w + t * d for w, d in zip(start, delta)]) for t in (0.0, 0.5, 1.0)]
    dots = [sum(float(np.sum(g * d)) for g, d in zip(gs, delta)) for gs in grads]
    S = (dots[0] + 4.0 * dots[1] + dots[2]) / 6.0
    T = (dots[0] + dots[2]) / 2.0
    # each gradient element within k(2 depth + n_tokens) EPS32 max|g| of its leaf (tests/trainers/test_golden.py's
    # convention: the forward, the transposed backward and the sum over tokens); S weighs the three by 1/6, 4/6, 1/6
    k = prob_factor(2 * setting.depth + ROWS * SEQ)
    e_dot = max(sum(k * EPS32 * float(np.max(np.abs(g))) * float(np.sum(np.abs(d))) for g, d in zip(gs, delta))
                for gs in grads)
    g_max = [np.maximum.reduce([np.abs(gs[i]) for gs in grads]) for i in range(len(delta))]
    return Segment(S=S, R=abs(S - T), e_dot=e_dot, g_max=g_max)


def element_bound(kind: str, w: np.ndarray) -> np.ndarray:
    """The per-element error bound of `kind` at each element of `w` (test_quant's proven round-trip bounds)."""
    if kind == "bf16":
        return BF16_U * np.abs(w)
    return _per_element_absmax(w) * ((MAX_GAP / 2 if kind == "nf4" else 1 / 254) + 2 * EPS32)


def a_priori(seg: Segment, bounds: list[np.ndarray]) -> tuple[float, float]:
    """(worst case B = sum max_t|G| e, probabilistic B_p = lambda sqrt(sum (max_t|G| e)^2)) of a segment whose
    per-element errors are within `bounds`."""
    terms = [g * e for g, e in zip(seg.g_max, bounds)]
    worst = sum(float(np.sum(t)) for t in terms)
    return worst, PROB_LAMBDA * math.sqrt(sum(float(np.sum(t * t)) for t in terms))


@pytest.fixture(scope="module")
def setting():
    return Setting()


@pytest.mark.parametrize("kind", ["nf4", "int8"])
def test_first_step_loss_is_within_the_stated_bound_of_the_bf16_base(setting, kind):
    base_loss, quant_loss = setting.first_step_loss("none"), setting.first_step_loss(kind)
    Q = setting.spec_kernels(kind)
    D = [q - w for q, w in zip(Q, setting.W)]
    e = [element_bound(kind, w) for w in setting.W]
    assert all(np.all(np.abs(d) <= ee) for d, ee in zip(D, e))  # the stored codes honour the per-element bound
    seg = segment(setting, setting.W, D)
    worst, likely = a_priori(seg, e)
    floats = setting.loss_error(base_loss) + setting.loss_error(quant_loss)
    change = quant_loss - base_loss
    assert abs(change) <= worst + floats and abs(change) <= likely + floats
    assert abs(change - seg.S) <= seg.R + floats + seg.e_dot
    assert abs(change) > 3 * (seg.R + floats + seg.e_dot)  # the quantization's effect is resolved, not noise


@pytest.mark.parametrize("kind", ["nf4", "int8"])
def test_first_step_loss_is_within_the_stated_bound_of_the_f32_base(setting, kind):
    """The same against the f32 base: the bf16 rounding (each element within 2^-8 |w|) is a first segment W32 -> W,
    the quantization a second one W -> Q(W); the bounds and the predictions add."""
    f32_loss, quant_loss = setting.first_step_loss("f32"), setting.first_step_loss(kind)
    D_bf = [w - w32 for w, w32 in zip(setting.W, setting.W32)]
    e_bf = [element_bound("bf16", w32) for w32 in setting.W32]
    assert all(np.all(np.abs(d) <= ee) for d, ee in zip(D_bf, e_bf))
    D = [q - w for q, w in zip(setting.spec_kernels(kind), setting.W)]
    rounding, quantization = segment(setting, setting.W32, D_bf), segment(setting, setting.W, D)
    worst = a_priori(rounding, e_bf)[0] + a_priori(quantization, [element_bound(kind, w) for w in setting.W])[0]
    floats = setting.loss_error(f32_loss) + setting.loss_error(quant_loss)
    change = quant_loss - f32_loss
    assert abs(change) <= worst + floats
    assert abs(change - rounding.S - quantization.S) <= (rounding.R + quantization.R + rounding.e_dot
                                                          + quantization.e_dot + floats)


WRONG = {  # what a dequantization bug does to the stored codes / scales of one kernel
    "absmax x1.1": lambda codes, absmax: (codes, absmax * 1.1),
    "absmax of the next block": lambda codes, absmax: (codes, jnp.roll(absmax, 1)),
    "nibbles swapped": lambda codes, absmax: ((codes & 15) << 4 | codes >> 4, absmax),
}


@pytest.mark.parametrize("kind,wrong", [("nf4", "absmax x1.1"), ("nf4", "absmax of the next block"),
                                        ("nf4", "nibbles swapped"), ("int8", "absmax x1.1"),
                                        ("int8", "absmax of the next block")])
def test_a_wrong_dequantization_fails_the_bound(setting, kind, wrong):
    """The trainer's step on a quantized base whose dequantized values are off the specification's (the bugs of
    WRONG: a 10 % scale error, each block read with its neighbour's scale, NF4 nibbles in the wrong order) moves
    the loss away from the prediction S of the correct quantization by many times the allowance; an int8 scale
    error breaks even the worst-case a-priori bound, a neighbour's scale the probabilistic one."""
    base = setting.runs[kind].frozen.base
    for p in setting.paths:
        codes, absmax = WRONG[wrong](_get(base, p)["codes"], _get(base, p)["absmax"])
        base = _with(base, p, {"codes": codes, "absmax": absmax})
    base_loss, wrong_loss = setting.first_step_loss("none"), setting.first_step_loss(kind, base)
    D = [q - w for q, w in zip(setting.spec_kernels(kind), setting.W)]
    seg = segment(setting, setting.W, D)
    allowance = seg.R + setting.loss_error(base_loss) + setting.loss_error(wrong_loss) + seg.e_dot
    assert abs(wrong_loss - base_loss - seg.S) > 10 * allowance, (wrong_loss - base_loss, seg.S, allowance)
    if kind == "int8":  # int8's own error is small enough for the a-priori bounds to see these bugs too
        worst, likely = a_priori(seg, [element_bound(kind, w) for w in setting.W])
        assert abs(wrong_loss - base_loss) > (worst if wrong == "absmax x1.1" else likely)
