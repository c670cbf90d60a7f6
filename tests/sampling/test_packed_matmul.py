"""The native small-row matmul over packed weights (`native.packed_matmul`, `packed_weights`) against a float64
brute force and XLA's dot, and the rollout engine's packed copy of a model: what it packs, what it leaves alone, and
that new weights reach it."""

import numpy as np
import pytest
from flax import nnx

from reasoner.sampling import native, packed_weights

EPS = np.finfo(np.float32).eps


@pytest.fixture(scope="module")
def kernel(native_kernels):
    return native_kernels.packed_matmul


def bound(x, w):
    """float32 error bound of each output of x [M, K] . w [K, N] summed in any order: gamma_K = K * eps times the sum
    of the terms' magnitudes (Higham, Accuracy and Stability of Numerical Algorithms, eq. 3.5), plus the rounding of
    the inputs' products."""
    K = x.shape[1]
    return (K + 1) * EPS * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64))


@pytest.mark.parametrize("M,K,N", [(1, 64, 32), (5, 100, 70), (12, 48, 96), (13, 33, 33), (16, 576, 192),
                                   (32, 40, 1000)])
def test_packed_matmul_is_the_product_within_float32_rounding(kernel, M, K, N):
    """Row counts below, at and past one register tile (12 rows with AVX-512, 3 otherwise), a last panel with
    1..31 of its 32 columns, an odd K: every output within gamma_K of the float64 product, and not bit-equal to
    something else (the bound is tight enough that a dropped k or a column shifted by one fails it)."""
    import jax

    rng = np.random.default_rng(M * 1000 + N)
    x = rng.standard_normal((M, K), np.float32)
    w = rng.standard_normal((K, N), np.float32)
    y = np.asarray(jax.jit(kernel, static_argnums=2)(x, native.pack(w), N))
    exact = x.astype(np.float64) @ w.astype(np.float64)
    assert y.shape == (M, N)
    assert np.all(np.abs(y - exact) <= bound(x, w))
    dropped = exact - x[:, -1:].astype(np.float64) * w[-1:].astype(np.float64)  # the last k left out
    assert np.any(np.abs(dropped - exact) > bound(x, w))


def test_pack_lays_columns_in_panels_and_unpack_inverts_it():
    w = np.arange(5 * 70, dtype=np.float32).reshape(5, 70)
    panels = np.asarray(native.pack(w))
    assert panels.shape == (3, 5, 32)
    assert panels[1, 2, 3] == w[2, 35]  # panel j, row k, column c holds w[k, 32 j + c]
    assert np.all(panels[2, :, 6:] == 0)  # past N: zeros
    assert np.array_equal(np.asarray(native.unpack(panels, 70)), w)


def test_packed_matmul_refuses_mismatched_shapes(kernel):
    import jax

    x = np.ones((2, 8), np.float32)
    with pytest.raises(Exception, match="mismatched shapes"):
        np.asarray(jax.jit(kernel, static_argnums=2)(x, native.pack(np.ones((9, 40), np.float32)), 40))
    with pytest.raises(Exception, match="mismatched shapes"):  # N beyond the packed columns
        np.asarray(jax.jit(kernel, static_argnums=2)(x, native.pack(np.ones((8, 40), np.float32)), 70))


@pytest.mark.parametrize("transposed", [False, True])
def test_packed_kernel_matches_xla_below_and_above_the_row_limit(kernel, transposed):
    """`PackedKernel` on a [heads, head_dim, embed] kernel (two contracted dims, like o_proj) and on a tied head
    stored [V, D]: the native call for up to MAX_ROWS rows, XLA's dot beyond, both equal to the float64 product."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(3)
    if transposed:
        w = rng.standard_normal((50, 24), np.float32)  # [V, D]
        dense, n_in, K = w.T, 1, 24
    else:
        w = rng.standard_normal((4, 6, 40), np.float32)  # [H, Dh, D]
        dense, n_in, K = w.reshape(24, 40), 2, 24
    packed = packed_weights.PackedKernel(nnx.Param(jnp.asarray(w)), n_in=n_in, transposed=transposed)
    for rows in (3, packed_weights.MAX_ROWS, packed_weights.MAX_ROWS + 1):
        x = rng.standard_normal((rows, 1) + ((K,) if n_in == 1 else (4, 6)), np.float32)
        call = jax.jit(lambda x: packed(x, n_in=n_in))
        y = np.asarray(call(x))
        flat = x.reshape(rows, K)
        assert y.shape == (rows, 1, dense.shape[1])
        assert np.all(np.abs(y.reshape(rows, -1) - flat.astype(np.float64) @ dense) <= bound(flat, dense))
        native_call = native.MATMUL in call.lower(x).as_text()
        assert native_call == (rows <= packed_weights.MAX_ROWS)


def test_for_decode_packs_a_copy_and_leaves_the_callers_model_alone(kernel, small_vocab_model, monkeypatch):
    """In the copy every layer's q | k | v and gate | up are fused panels, o and down projections get their own, and
    so does the head (untied here, stored [D, V]); the fused projections keep their float kernels; the caller's
    graph and arrays are unchanged and shared; REASONER_NATIVE=0 packs nothing."""
    from reasoner.models.layers import Proj

    graphdef, state = nnx.split(small_vocab_model)
    packed_def, packed_state = packed_weights.for_decode(graphdef, state)
    model = nnx.merge(packed_def, packed_state)
    for block in model.layers:
        attn, mlp = block.attn, block.mlp
        assert isinstance(attn.packed_qkv, packed_weights.FusedPacked) and attn.packed_qkv.sizes == (32, 16, 16)
        assert isinstance(mlp.packed_gate_up, packed_weights.FusedPacked) and mlp.packed_gate_up.sizes == (48, 48)
        assert attn.packed_qkv.panels[...].shape == (2, 32, 32)  # 64 columns, K = 32
        assert all(isinstance(p.kernel, nnx.Param) for p in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj,
                                                              mlp.up_proj))
        assert all(isinstance(p.kernel, packed_weights.PackedKernel) for p in (attn.o_proj, mlp.down_proj))
    assert isinstance(model.packed_head, packed_weights.PackedKernel) and not model.packed_head.transposed
    assert model.packed_head.dense[...] is small_vocab_model.lm_head[...]
    originals = [m for _, m in nnx.iter_modules(small_vocab_model) if isinstance(m, Proj)]
    assert all(isinstance(p.kernel, nnx.Param) for p in originals)
    assert not hasattr(small_vocab_model.layers[0].attn, "packed_qkv")
    assert model.layers[0].attn.q_proj.kernel[...] is small_vocab_model.layers[0].attn.q_proj.kernel[...]
    assert model.layers[0].attn.o_proj.kernel.dense[...] is small_vocab_model.layers[0].attn.o_proj.kernel[...]
    monkeypatch.setenv("REASONER_NATIVE", "0")
    assert packed_weights.for_decode(graphdef, state) == (graphdef, state)


def test_fused_projections_equal_each_projection_with_its_bias_and_lora(kernel, small_vocab_model):
    """`packed_weights.qkv` and `swiglu` on the packed copy against the caller's own modules (q/k/v biases, and
    LoRA adapters with nonzero B on q, v and up so their updates count): equal within float32 rounding, one native
    call each for up to MAX_ROWS rows, and no native call beyond (the projections' XLA dots)."""
    import jax
    import jax.numpy as jnp

    from reasoner.models.lora import apply_lora

    model = nnx.clone(small_vocab_model)
    apply_lora(model, pattern=r"(q_proj|v_proj|up_proj)$", rank=2, alpha=4.0)
    rng = np.random.default_rng(5)
    for _, m in nnx.iter_modules(model):
        if getattr(m, "lora", None) is not None:
            m.lora.b.set_value(jnp.asarray(rng.standard_normal(m.lora.b[...].shape, np.float32)))
        if getattr(m, "bias", None) is not None:
            m.bias.set_value(jnp.asarray(rng.standard_normal(m.bias[...].shape, np.float32)))
    packed = nnx.merge(*packed_weights.for_decode(*nnx.split(model)))
    attn, mlp = model.layers[1].attn, model.layers[1].mlp
    fused_attn, fused_mlp = packed.layers[1].attn, packed.layers[1].mlp
    for rows in (3, packed_weights.MAX_ROWS, packed_weights.MAX_ROWS + 1):
        h = jnp.asarray(rng.standard_normal((rows, 1, 32), np.float32))
        call = jax.jit(lambda h: (packed_weights.qkv(fused_attn, h), packed_weights.swiglu(fused_mlp, h)))
        (q, k, v), out = call(h)
        want = (attn.q_proj(h), attn.k_proj(h), attn.v_proj(h), mlp(h))
        for got, ref in zip((q, k, v, out), want):
            assert got.shape == ref.shape
            # only the summation order differs: sums of <= 48 products, twice through the MLP, so within
            # 2 * 2 * gamma_48 of the terms' magnitudes; 200 eps of the largest output (+1) covers that and is far
            # below a dropped bias, LoRA update or shifted column (each O(1) here)
            atol = 200 * EPS * (float(jnp.max(jnp.abs(ref))) + 1)
            np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=0, atol=atol)
        assert float(jnp.min(jnp.max(jnp.abs(attn.v_proj.lora(h, n_in=1)), axis=-1))) > 1e3 * atol  # LoRA counts
        text = call.lower(h).as_text()
        assert text.count(native.MATMUL) == (3 if rows <= packed_weights.MAX_ROWS else 0)  # qkv, gate|up, down


def test_the_engine_decodes_through_packed_weights_and_follows_new_ones(kernel, small_vocab_model, monkeypatch):
    """Decode steps call the packed matmul; greedy tokens equal those of the XLA path (REASONER_NATIVE=0); and
    assigning `engine.params` (as GRPO does after an update) repacks: the engine then draws the new model's tokens."""
    import jax

    from reasoner.sampling import SamplingParams
    from reasoner.sampling.rollout_engine import RolloutEngine
    from tests.models_shared import SMALL_VOCAB, random_decoder

    prompts = [[5, 17, 9, 23, 2, 11, 7], [12, 3], [7]]
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0, eos_ids=())
    calls = []
    traced = native.packed_matmul
    monkeypatch.setattr(native, "packed_matmul", lambda x, *a: calls.append(x.shape[0]) or traced(x, *a))

    def tokens(engine):
        return [list(c.tokens) for c in engine.generate(prompts, greedy)]

    engine = RolloutEngine(small_vocab_model, slots=3, block_size=4, chunk_steps=4)
    packed = tokens(engine)
    assert calls and max(calls) <= packed_weights.MAX_ROWS
    other = random_decoder(SMALL_VOCAB, seed=7, scale=30.0)
    engine.params = nnx.state(other)
    moved = tokens(engine)
    monkeypatch.setenv("REASONER_NATIVE", "0")
    jax.clear_caches()  # nothing traced with the kernels is reused
    calls.clear()
    assert tokens(RolloutEngine(small_vocab_model, slots=3, block_size=4, chunk_steps=4)) == packed
    assert tokens(RolloutEngine(other, slots=3, block_size=4, chunk_steps=4)) == moved != packed
    assert not calls
