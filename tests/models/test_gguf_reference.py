"""Our GGUF reader and dequantizer against the `gguf` package's own, bit for bit.

References, all independent of our code:
  * `gguf.quants.dequantize` (the llama.cpp project's NumPy dequantizer) for the block formats;
  * `gguf.GGUFReader` (its container reader) for tensor bytes, types and shapes of the embedded file;
  * transformers' `LlamaTensorProcessor` (its GGUF loader) for undoing llama.cpp's Q/K row permutation.

Bit for bit means equal float32 bit patterns (`view(uint32)`), so -0.0 vs 0.0 or one ulp of rounding fails too:
both sides compute d * q (+ m) on the same float16-decoded scales, which is exactly rounded once per element.
"""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")  # a core dependency of the project; importorskip only for a clear message

from reasoner.models.gguf import hf_name, open_gguf  # noqa: E402
from reasoner.models.gguf_file import GGUFFile, dequantize  # noqa: E402

Q = gguf.GGMLQuantizationType
FAST_TYPES = (Q.Q4_0, Q.Q4_1, Q.Q8_0)  # the formats our whole-tensor dequantizer handles itself
# bytes per 32-element block and the byte offsets of the float16 scale fields (d, and m for Q4_1)
LAYOUT = {Q.Q4_0: (18, (0,)), Q.Q4_1: (20, (0, 2)), Q.Q8_0: (34, (0,))}


def assert_bits_equal(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.dtype == np.float32 and ref.dtype == np.float32, (what, ours.dtype, ref.dtype)
    assert ours.shape == ref.shape, (what, ours.shape, ref.shape)
    diff = ours.view(np.uint32) != ref.view(np.uint32)
    assert not diff.any(), (f"{what}: {int(diff.sum())} of {diff.size} elements differ in bits, "
                            f"first at {np.argwhere(diff)[0].tolist()}: ours {ours[diff][0]!r}, gguf {ref[diff][0]!r}")


# ------------------------------------------------------------------------------------------ synthetic blocks


@pytest.mark.parametrize("qtype", FAST_TYPES, ids=lambda q: q.name)
def test_quantized_by_gguf_then_dequantized_equals_gguf(qtype):
    """Rows quantized by gguf's own quantizer (scales spanning 1e-3..1e2 and a constant row, so d = 0 occurs)."""
    rng = np.random.default_rng(qtype.value)
    rows = rng.normal(size=(24, 256)).astype(np.float32) * np.logspace(-3, 2, 24, dtype=np.float32)[:, None]
    rows[5] = 0.25  # Q4_1: max == min -> d = 0, every element is m; Q4_0/Q8_0: d = max / -8 (or 127)
    rows[7] = 0.0
    raw = gguf.quants.quantize(rows, qtype)
    assert raw.dtype == np.uint8 and raw.shape == (24, 256 // 32 * LAYOUT[qtype][0])
    ours = dequantize(raw, qtype.name)
    assert ours is not None, f"our fast path no longer handles {qtype.name}: the test would compare gguf to itself"
    assert_bits_equal(ours, gguf.quants.dequantize(raw, qtype), qtype.name)


@pytest.mark.parametrize("qtype", FAST_TYPES, ids=lambda q: q.name)
def test_hand_built_blocks_cover_every_quant_value(qtype):
    """Random bytes for the quants (every nibble / int8 value occurs many times) and hand-picked float16 scales:
    negative, subnormal, +-0 and large, so sign handling and the float16 decode are exercised too."""
    block_bytes, scale_offsets = LAYOUT[qtype]
    rng = np.random.default_rng(100 + qtype.value)
    n_blocks = 4096
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    special = np.array([0.0, -0.0, 6e-8, -6e-8, 1.0, -1.0, 0.0123, 65504.0, -65504.0, 3.1e-5], np.float16)
    for off in scale_offsets:
        scales = rng.normal(0, 0.05, size=n_blocks).astype(np.float16)
        scales[: special.size] = special
        scales[special.size: 2 * special.size] = special[::-1]
        blocks[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    raw = blocks.reshape(16, -1)  # 16 rows of 256 blocks
    ours = dequantize(raw, qtype.name)
    assert ours is not None and ours.shape == (16, 256 * 32)
    assert_bits_equal(ours, gguf.quants.dequantize(raw, qtype), qtype.name)


# Unpacking byte j of a 4-bit block in another order is a fixed permutation of the block's 32 outputs (the scale and
# offset act elementwise): the high nibble first (j <-> j + 16), or the two nibbles of byte j as elements 2j, 2j + 1
# (the "natural" packing; ggml's is j and j + 16).
WRONG_NIBBLE_ORDERS = {"high-first": np.r_[16:32, 0:16],
                       "interleaved": np.stack([np.arange(16), np.arange(16) + 16], axis=1).ravel()}


@pytest.mark.parametrize("qtype", (Q.Q4_0, Q.Q4_1), ids=lambda q: q.name)
@pytest.mark.parametrize("order", sorted(WRONG_NIBBLE_ORDERS))
def test_a_wrong_nibble_order_fails_the_bit_comparison(qtype, order):
    """The comparison has power: our dequantizer with the nibbles unpacked in another order differs from gguf's in
    most elements, on gguf-quantized rows and on hand-built blocks alike."""
    rng = np.random.default_rng(7)
    quantized = gguf.quants.quantize(rng.normal(size=(8, 256)).astype(np.float32), qtype)
    random_blocks = rng.integers(0, 256, size=(8, 8 * LAYOUT[qtype][0]), dtype=np.uint8)
    for off in LAYOUT[qtype][1]:  # finite scales (d = 0.5, m = 0.5): random bytes there could be NaN or inf
        random_blocks.reshape(8, 8, -1)[:, :, off:off + 2] = np.array([0.5], np.float16).view(np.uint8)
    for raw in (quantized, random_blocks):
        ours = dequantize(raw, qtype.name)
        ref = gguf.quants.dequantize(raw, qtype)
        assert_bits_equal(ours, ref, qtype.name)  # the right order passes
        wrong = ours.reshape(-1, 32)[:, WRONG_NIBBLE_ORDERS[order]].reshape(ours.shape)
        with pytest.raises(AssertionError, match="elements differ in bits") as failure:
            assert_bits_equal(wrong, ref, f"{qtype.name} {order}")
        differing = int(str(failure.value).split(":")[1].split()[0])
        assert differing > ref.size / 2, (order, differing)


def test_other_types_are_left_to_gguf():
    """Only the three block formats take our fast path; anything else returns None (the caller uses gguf)."""
    assert dequantize(np.zeros((2, 144), np.uint8), "Q4_K") is None
    assert dequantize(np.zeros((2, 8), np.uint8), "F32") is None


# ------------------------------------------------------------------------------------ the embedded SmolLM2 file


@pytest.fixture(scope="module")
def embedded():
    from reasoner.models.presets import resolve

    path = resolve("smollm2-135m-instruct")
    return path, gguf.GGUFReader(path), GGUFFile(path)


@pytest.mark.slow
def test_every_tensor_of_the_embedded_model_is_read_and_dequantized_as_gguf_does(embedded):
    """ALL 272 tensors of the embedded Q4_1 file (types Q4_1, Q8_0 and F32): our container reader gives the same
    bytes, type and shape as `gguf.GGUFReader`, and our dequantization equals `gguf.quants.dequantize` of gguf's
    bytes bit for bit (F32 tensors: our memory-mapped view equals gguf's)."""
    _, reader, ours_file = embedded
    seen: dict[str, int] = {}
    for rt in reader.tensors:
        qtype = Q(int(rt.tensor_type))
        seen[qtype.name] = seen.get(qtype.name, 0) + 1
        info = ours_file.tensors[rt.name]
        assert (info.type_id, info.dims) == (qtype.value, tuple(int(d) for d in rt.shape)), rt.name
        raw = ours_file.raw(rt.name)
        np.testing.assert_array_equal(raw.reshape(-1).view(np.uint8), np.asarray(rt.data).reshape(-1).view(np.uint8),
                                      err_msg=f"{rt.name}: bytes differ from gguf.GGUFReader's")
        ref = gguf.quants.dequantize(np.asarray(rt.data), qtype).reshape(info.shape)
        mine = dequantize(raw, qtype.name)
        if qtype in FAST_TYPES:
            assert mine is not None, rt.name
        else:  # F32 (and F16): our reader's raw view is the value
            assert mine is None, rt.name
            mine = raw.astype(np.float32)
        assert_bits_equal(mine.reshape(info.shape), ref, rt.name)
    # the embedded file's types, so a new type in a future release is noticed (and covered by the loop above)
    assert seen == {"Q4_1": 210, "Q8_0": 1, "F32": 61}, seen


@pytest.mark.slow
def test_source_tensors_equal_gguf_dequantized_and_transformers_unpermuted(embedded):
    """`GGUFSource.get` (the loader's path: HF names, dequantize, undo llama.cpp's Q/K permutation) against
    gguf's dequantization followed by transformers' own `LlamaTensorProcessor` (its GGUF loader), bit for bit."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    path, reader, _ = embedded
    cfg, source = open_gguf(path)
    processor = LlamaTensorProcessor(config={"num_attention_heads": cfg.num_heads,
                                             "num_key_value_heads": cfg.num_kv_heads})
    checked = 0
    for rt in reader.tensors:
        name = hf_name(rt.name)
        assert name is not None, f"{rt.name} has no HF name: the loader would drop it"
        ref = gguf.quants.dequantize(np.asarray(rt.data), Q(int(rt.tensor_type)))
        ref = np.asarray(processor.process(ref.reshape(tuple(reversed([int(d) for d in rt.shape]))),
                                           rt.name).weights, np.float32)
        assert_bits_equal(source.get(name), ref, rt.name)
        checked += 1
    assert checked == len(reader.tensors) == 272
