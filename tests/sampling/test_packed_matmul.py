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
    """Every f32 projection (with qkv biases: Proj adds the bias after the packed product) and the head (untied
    here, stored [D, V]) get panels in the copy; the caller's graph and arrays are unchanged and shared; REASONER_NATIVE=0 packs nothing."""
    from reasoner.models.layers import Proj

    graphdef, state = nnx.split(small_vocab_model)
    packed_def, packed_state = packed_weights.for_decode(graphdef, state)
    model = nnx.merge(packed_def, packed_state)
    projs = [m for _, m in nnx.iter_modules(model) if isinstance(m, Proj)]
    assert projs and all(isinstance(p.kernel, packed_weights.PackedKernel) for p in projs)
    assert isinstance(model.packed_head, packed_weights.PackedKernel) and not model.packed_head.transposed
    assert model.packed_head.dense[...] is small_vocab_model.lm_head[...]
    originals = [m for _, m in nnx.iter_modules(small_vocab_model) if isinstance(m, Proj)]
    assert all(isinstance(p.kernel, nnx.Param) for p in originals)
    assert projs[0].kernel.dense[...] is originals[0].kernel[...]  # shared, not copied
    monkeypatch.setenv("REASONER_NATIVE", "0")
    assert packed_weights.for_decode(graphdef, state) == (graphdef, state)


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
