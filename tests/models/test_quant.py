"""NF4 / int8 blockwise quantization (`reasoner.models.quant`) against the QLoRA definition, bitsandbytes' own output,
brute force and float32 error bounds; a tiny decoder with a quantized base + LoRA.

Golden file tests/assets/nf4_bitsandbytes.npz holds bitsandbytes 0.50.2's `quantize_4bit` / `dequantize_4bit`
(CPU, blocksize 64, nf4) on fixed inputs. bitsandbytes is not a project dependency (its wheel is 43 MB of mostly
CUDA/ROCm libraries), so the file is made outside the suite; regenerate with
    pip install --no-deps --target /tmp/bnb bitsandbytes==0.50.2
    PYTHONPATH=.:/tmp/bnb python tests/models/test_quant.py --regenerate

u = 2**-24 is float32's unit roundoff, EPS32 = 2u.
"""

import math
import pathlib
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from reasoner.models import quant
from reasoner.models.lora import apply_lora
import dataclasses

from tests.models_shared import SMALL_VOCAB, random_decoder
from tests.tolerances import EPS32, logits_atol

GOLDEN = pathlib.Path(__file__).parents[1] / "assets" / "nf4_bitsandbytes.npz"
MAX_GAP = float(np.max(np.diff(quant.NF4_CODE.astype(np.float64))))  # -1 -> -0.696: 0.3038


def golden_inputs() -> dict[str, np.ndarray]:
    """Whole blocks (64 x 96), a ragged odd-sized tensor (7 x 13 = 91 values: one full block, one of 27) and a
    block made of every code value and every midpoint between them times its absmax (ties go to the lower code)."""
    rng = np.random.default_rng(0)
    edge = np.concatenate([quant.NF4_CODE, quant.NF4_BOUNDS, -quant.NF4_BOUNDS[::-1], np.zeros(3, np.float32)])
    edge = np.concatenate([edge, rng.uniform(-1, 1, 64 - edge.size)]).astype(np.float32) * np.float32(3.0)
    return {"whole": rng.standard_normal((64, 96)).astype(np.float32) * 0.02,
            "ragged": rng.standard_normal((7, 13)).astype(np.float32),
            "edges": np.stack([edge, np.zeros(64, np.float32)])}


def regenerate() -> None:
    import bitsandbytes
    import bitsandbytes.functional as F
    import torch

    out = {}
    for name, w in golden_inputs().items():
        packed, state = F.quantize_4bit(torch.from_numpy(w), blocksize=64, quant_type="nf4")
        out[f"{name}_input"] = w
        out[f"{name}_packed"] = packed.numpy().reshape(-1)
        out[f"{name}_absmax"] = state.absmax.numpy()
        out[f"{name}_dequantized"] = F.dequantize_4bit(packed, state).numpy()
    np.savez_compressed(GOLDEN, version=np.array(bitsandbytes.__version__), **out)


def test_nf4_table_is_the_papers_normal_float_quantiles():
    # QLoRA eq. (4) with bitsandbytes' `create_normal_map(offset=0.9677083, use_extra_value=True)`: 8 quantiles of
    # N(0, 1) at probabilities linspace(delta, 1/2, 9)[:-1] for the positive half, 7 at linspace(delta, 1/2, 8)[:-1]
    # (negated) for the negative half, an exact 0, all divided by the largest. delta = mean of 1 - 1/(2*15) and
    # 1 - 1/(2*16) (the paper's asymmetric 2^(k-1) / 2^(k-1)-1 split of the 16 levels). bitsandbytes makes the
    # probabilities with torch.linspace in float32, so we do too; the quantiles are float64 in both (scipy there,
    # statistics here, ~1e-15 apart), so the float32 table agrees to within one rounding: 1 ulp.
    delta = np.float32(0.9677083)
    ppf = statistics.NormalDist().inv_cdf
    pos = [ppf(float(p)) for p in np.linspace(delta, 0.5, 9, dtype=np.float32)[:-1]]
    neg = [-ppf(float(p)) for p in np.linspace(delta, 0.5, 8, dtype=np.float32)[:-1]]
    values = np.sort(np.array(pos + [0.0] + neg))
    values /= values.max()
    assert quant.NF4_CODE.shape == (16,) and quant.NF4_CODE[quant.NF4_ZERO] == 0.0
    assert quant.NF4_CODE[0] == -1.0 and quant.NF4_CODE[-1] == 1.0
    np.testing.assert_allclose(quant.NF4_CODE, values, rtol=0, atol=float(np.spacing(np.float32(1.0))))


def test_nf4_matches_bitsandbytes_bit_for_bit():
    golden = np.load(GOLDEN)
    for name in golden_inputs():
        w = golden[f"{name}_input"]
        q = quant.quantize(jnp.asarray(w), kind="nf4")
        packed = golden[f"{name}_packed"]
        # ours pads the ragged last block to whole bytes of code "zero"; bitsandbytes stops at ceil(n / 2) bytes
        np.testing.assert_array_equal(np.asarray(q.codes).reshape(-1)[:packed.size], packed, err_msg=name)
        absmax = golden[f"{name}_absmax"]
        if name == "edges":  # bitsandbytes clamps an all-zero block's absmax to 1e-38 only in a ragged block
            assert absmax[1] == 0.0
        np.testing.assert_array_equal(np.asarray(q.absmax), absmax, err_msg=name)
        np.testing.assert_array_equal(np.asarray(quant.dequantize(q)), golden[f"{name}_dequantized"], err_msg=name)


def _per_element_absmax(w: np.ndarray, block: int = quant.BLOCK_SIZE) -> np.ndarray:
    flat = np.abs(w.reshape(-1)).astype(np.float64)
    pad = np.pad(flat, (0, -flat.size % block)).reshape(-1, block)
    return np.repeat(pad.max(axis=1), block)[:flat.size].reshape(w.shape)


def test_roundtrip_errors_are_within_half_a_code_gap():
    w = np.random.default_rng(1).standard_normal((40, 72)).astype(np.float32)  # 2880 values: 45 blocks
    a = _per_element_absmax(w)
    s = w.astype(np.float64) / a
    # NF4: s = fl(w * fl(1/a)) is within 2u|s| of w/a; the nearest code c is within MAX_GAP/2 of it; fl(c * a) adds
    # u*a. So |w - deq| <= a (MAX_GAP/2 + 3u) <= a (MAX_GAP/2 + 2 EPS32).
    deq = np.asarray(quant.dequantize(quant.quantize(jnp.asarray(w), kind="nf4")), np.float64)
    err = np.abs(w - deq)
    assert np.all(err <= a * (MAX_GAP / 2 + 2 * EPS32))
    # and the code is the nearest one (brute force over the 16 values), up to those roundings
    nearest = np.min(np.abs(s[..., None] - quant.NF4_CODE.astype(np.float64)), axis=-1)
    assert np.all(np.abs(s - deq / a) <= nearest + 4 * EPS32)
    assert err.max() > 0.5 * a.max() * MAX_GAP / 2  # the bound is not vacuous: normal data hits the widest gap
    # int8: t = fl(fl(w / a) * 127) is within 127 * 2u of 127 w/a; |round(t) - t| <= 1/2; fl(fl(q a) / 127) adds
    # 2u a. So |w - deq| <= a/254 + 4u a = a/254 + 2 EPS32 a.
    deq8 = np.asarray(quant.dequantize(quant.quantize(jnp.asarray(w), kind="int8")), np.float64)
    assert np.all(np.abs(w - deq8) <= a / 254 + 2 * EPS32 * a)


@pytest.mark.parametrize("shape,nf4_bytes,int8_bytes", [
    ((64, 96), 64 * 96 // 2 + 96 * 4, 64 * 96 + 96 * 4),   # 96 whole blocks: 4.5 and 8.5 bits per weight
    ((7, 13), 2 * 32 + 2 * 4, 2 * 64 + 2 * 4),              # 91 values: 2 blocks, the second padded
])
def test_packed_storage_size(shape, nf4_bytes, int8_bytes):
    w = jnp.ones(shape, jnp.float32)
    q4, q8 = quant.quantize(w, kind="nf4"), quant.quantize(w, kind="int8")
    assert (q4.codes.dtype, q8.codes.dtype) == (jnp.uint8, jnp.int8)
    assert (q4.nbytes, q8.nbytes) == (nf4_bytes, int8_bytes)


@pytest.mark.parametrize("w_shape,n_in", [((64, 2, 48), 1), ((4, 16, 40), 2)])  # q_proj-like and o_proj-like
def test_quantized_matmul_equals_dense_matmul_of_dequantized(w_shape, n_in):
    rng = np.random.default_rng(2)
    w = rng.standard_normal(w_shape).astype(np.float32)
    x = rng.standard_normal((3, 5) + w_shape[:n_in]).astype(np.float32)
    q = quant.quantize(jnp.asarray(w), kind="nf4")
    k = math.prod(w_shape[:n_in])
    x2 = x.reshape(15, k).astype(np.float64)
    w2 = np.asarray(quant.dequantize(q), np.float64).reshape(k, -1)  # dequantization itself is exact (c * a, once)
    got = np.asarray(quant.quantized_matmul_jit(jnp.asarray(x), q, n_in=n_in)).reshape(15, -1)
    # a float32 dot of k terms: within k * EPS32 * sum|x_i w_ij| of exact in any summation order (tests/tolerances)
    np.testing.assert_array_less(np.abs(got - x2 @ w2), k * EPS32 * (np.abs(x2) @ np.abs(w2)) + 1e-30)
    # the custom VJP: d/dx sum(r * y) = r . W^T, a dot over the output dims
    r = rng.standard_normal(got.shape).astype(np.float32)
    grad = jax.jit(jax.grad(lambda x_: jnp.sum(quant.quantized_matmul(x_, q, n_in=n_in).reshape(15, -1) * r)))(x)
    n_out = w2.shape[1]
    want = r.astype(np.float64) @ w2.T
    bound = n_out * EPS32 * (np.abs(r.astype(np.float64)) @ np.abs(w2).T) + 1e-30
    np.testing.assert_array_less(np.abs(np.asarray(grad).reshape(15, k) - want), bound)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="quantization kind 'nf3'"):
        quant.quantize(jnp.ones((4, 4)), kind="nf3")
    with pytest.raises(ValueError, match="int32"):
        quant.quantize(jnp.ones((4, 4), jnp.int32), kind="nf4")
    with pytest.raises(ValueError, match="disagree"):
        quant.quantized_matmul(jnp.ones((2, 5)), quant.quantize(jnp.ones((4, 3)), kind="int8"))


# ------------------------------------------------------------------------------------------------ tiny QLoRA model
# One layer of SMALL_VOCAB (Qwen3-style, with q/k/v biases, which stay float): the checks are per projection, and one
# layer halves the compile time.
CFG = dataclasses.replace(SMALL_VOCAB, num_layers=1)
TOKENS = jnp.asarray(np.random.default_rng(3).integers(0, CFG.vocab_size, (2, 12)), jnp.int32)
POS = jnp.broadcast_to(jnp.arange(12, dtype=jnp.int32), (2, 12))


def _lora_model():
    """CFG with rank-4 adapters on every projection and nonzero B (a fresh B = 0 would hide the adapter path)."""
    model = random_decoder(CFG, seed=0, scale=30.0)
    apply_lora(model, pattern=r"(attn|mlp)\.\w+_proj", rank=4, alpha=8.0, rngs=nnx.Rngs(1))
    for _, module in nnx.iter_modules(model):
        if isinstance(module, quant.Proj) and module.lora is not None:
            b = module.lora.b
            b.set_value(jnp.asarray(0.02 * np.random.default_rng(b[...].size).standard_normal(b[...].shape),
                                    jnp.float32))
    return model


def _numpy_dequantize(kernel: "quant.QuantizedKernel") -> np.ndarray:
    """NF4 dequantization written out in numpy (high nibble = even element; value = code * block absmax, float32)."""
    codes = np.asarray(kernel.codes[...])
    idx = np.stack([codes >> 4, codes & 15], axis=-1).reshape(codes.shape[0], -1)
    values = quant.NF4_CODE[idx] * np.asarray(kernel.absmax[...])[:, None]
    return values.reshape(-1)[:math.prod(kernel.shape)].reshape(kernel.shape)


def _dequantized_copy(model):
    """The same model with each quantized kernel replaced by a float Param holding dequantize(quantize(W))."""
    graphdef, state = nnx.split(model)
    out = nnx.merge(graphdef, state)
    for _, module in nnx.iter_modules(out):
        if isinstance(module, quant.Proj) and isinstance(module.kernel, quant.QuantizedKernel):
            module.kernel = nnx.Param(jnp.asarray(_numpy_dequantize(module.kernel)),
                                      logical_axes=module.kernel.logical_axes)
    return out


@jax.jit(static_argnums=0)
def _logits(graphdef, state):
    return nnx.merge(graphdef, state)(TOKENS, positions_BxT=POS)[0]


def _run(model):
    """Logits [2, 12, V]: one compile per model structure (graphdef). The gradient through `quantized_matmul` is
    checked per matmul above and run end to end by the training-step test below."""
    return np.asarray(_logits(*nnx.split(model)))


def test_nf4_base_model_equals_model_with_dequantized_weights():
    model = _lora_model()
    float_logits = _run(model)
    paths = quant.quantize_projections(model, kind="nf4")
    assert len(paths) == 7  # q k v o gate up down; embedding, norms, biases and the LM head stay float
    assert model.embed[...].dtype == jnp.float32 and model.layers[0].attn_norm.scale[...].dtype == jnp.float32
    q_logits = _run(model)
    d_logits = _run(_dequantized_copy(model))  # the float model's structure: no new compile
    # the same GEMMs on the same float32 weights (dequantization is exact: one product c * a per weight, the same in
    # both), so only the evaluation order may differ: the decoder-depth float32 bound
    atol = logits_atol(d_logits, CFG, seq_len=12)
    np.testing.assert_allclose(q_logits, d_logits, rtol=0, atol=atol)
    assert np.abs(q_logits - float_logits).max() > 10 * atol  # and NF4 did change the model


def test_qlora_training_step_changes_only_adapters():
    import ml_collections

    from configs import common
    from trainers.run import quantize_base, setup
    from trainers.sft import sft_denominator, sft_loss_fn
    from trainers.step import make_train_step

    config = common.tiny(common.run_config("sft"), {"lora.rank": 4, "lora.quantize_base": "nf4",
                                                    "model.random.vocab_size": 64, "model.random.num_layers": 1})
    config.optim = common.optim(lr=1e-2, schedule="constant")
    run = setup(config, total_steps=1, devices=jax.devices()[:1], tokenizer=object())
    base = run.frozen.base
    codes = base["layers"][0]["mlp"]["up_proj"]["kernel"]["codes"]
    assert codes.dtype == jnp.uint8 and codes.shape == (64 * 128 // 64, 32)  # [n_blocks, 64 / 2]
    assert base["embed"].dtype == jnp.float32 and base["layers"][0]["attn_norm"]["scale"].dtype == jnp.float32
    assert {str(k[-1]) for k, _ in nnx.to_flat_state(nnx.State(run.state.params))} == {"a", "b"}
    batch = {"tokens": TOKENS[None] % 64, "positions": POS[None], "segment_ids": jnp.ones_like(TOKENS)[None],
             "loss_mask": jnp.ones_like(TOKENS)[None]}
    step = jax.jit(make_train_step(loss_fn=sft_loss_fn(run.graphdef), optimizer=run.optimizer, schedule=run.schedule,
                                   denominator=sft_denominator))
    before = jax.tree.map(np.asarray, run.state.params)
    base_before = jax.tree.map(np.asarray, base)
    state, metrics = step(run.state, run.frozen, batch)
    assert np.isfinite(float(metrics["loss"]))
    for (path, old), new in zip(jax.tree_util.tree_leaves_with_path(before), jax.tree.leaves(state.params)):
        moved = not np.array_equal(old, np.asarray(new))
        # B starts at 0, so dL/dA = x^T (dL/dy B^T) = 0 at step 1 and Adam leaves A (0 / (sqrt(0) + eps) = 0); every
        # B has a nonzero gradient (A is random) and moves
        assert moved == (path[-1].key == "b"), path
    assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(jax.tree.leaves(base_before),
                                                                 jax.tree.leaves(run.frozen.base)))
    with pytest.raises(ValueError, match="lora.quantize_base='nf3'"):
        quantize_base(None, ml_collections.ConfigDict(dict(quantize_base="nf3")), lora=True, mesh=run.mesh)
    with pytest.raises(ValueError, match="needs LoRA"):
        quantize_base(None, ml_collections.ConfigDict(dict(quantize_base="nf4")), lora=False, mesh=run.mesh)


if __name__ == "__main__" and "--regenerate" in sys.argv:
    regenerate()
