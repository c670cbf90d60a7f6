"""LoRA against the explicit formula W' = W + (alpha / rank) * B @ A (PEFT's orientation: W [out, in],
A [rank, in], B [out, rank]) with alpha != rank, merged and unmerged; zero-B adapters leave the model unchanged;
merge/unmerge round trip; only adapters get gradients.

Float32 error bounds used below (u = eps32 / 2 is the unit roundoff; a float32 dot product of n terms is within
n * u * sum|terms| of the exact value whatever the summation order, Higham's gamma_n):
  * projection: ours computes x.W + s (x.A).B (unmerged) or x.fl(W + s A.B) (merged); both are within
    (n_in + rank + 2) * u * (|x| . (|W| + s |A| |B|)) of the exact x.W'; we allow twice that (eps instead of u).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from reasoner.models import Decoder, ModelConfig
from reasoner.models.lora import BASE_PARAMS, apply_lora, merge_lora, unmerge_lora

CFG = ModelConfig(family="llama", vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8)
TOKENS = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 10)))
POS = jnp.broadcast_to(jnp.arange(10), (2, 10))
EPS32 = float(np.finfo(np.float32).eps)
RANK, ALPHA = 4, 16.0  # scale alpha / rank = 4: neither 1 (alpha == rank) nor alpha itself
ALL = r"attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj"
# Logits bound for the whole decoder: each of its 2 x 7 projections adds at most (48 + RANK + 2) eps of relative
# error (the largest fan-in is 48), the head one more; RMSNorm rescales every layer's input to unit RMS, so these
# first-order terms add up rather than compound: 15 * 54 eps relative to the largest logit.
MODEL_REL_TOL = 15 * (CFG.intermediate_size + RANK + 2) * EPS32


@jax.jit(static_argnums=0)
def _forward(graphdef, state):
    return nnx.merge(graphdef, state)(TOKENS, positions_BxT=POS)[0]


@jax.jit(static_argnums=0)
def _project_all(graphdef, state, xs):
    """Every adapted projection applied to its input xs[path], in one compiled program."""
    return {path: proj(xs[path]) for path, proj in projections(nnx.merge(graphdef, state))}


def logits(model):
    """Logits [2, 10, 64]; one compile per model structure (graphdef), shared by the tests."""
    return np.asarray(_forward(*nnx.split(model)))


def assert_logits_close(got, want, what):
    tol = MODEL_REL_TOL * np.abs(want).max()
    err = np.abs(got - want).max()
    assert err <= tol, f"{what}: max |diff| {err:.3g} > {tol:.3g}"


def projections(model):
    for path, module in nnx.iter_modules(model):
        if getattr(module, "lora", None) is not None:
            yield ".".join(str(p) for p in path), module


def randomize_adapters(model, seed: int) -> None:
    """Non-zero A and B (B starts at zero), large enough that the update moves logits by O(10%)."""
    rng = np.random.default_rng(seed)  # NumPy: eager jax.random would compile once per adapter shape
    for _, proj in projections(model):
        proj.lora.a.set_value(jnp.asarray(0.3 * rng.normal(size=proj.lora.a[...].shape), jnp.float32))
        proj.lora.b.set_value(jnp.asarray(0.1 * rng.normal(size=proj.lora.b[...].shape), jnp.float32))


def peft_matrices(proj):
    """(W [out, in], A [rank, in], B [out, rank]) in float64, PEFT's orientation, from our kernel-shaped arrays."""
    n_in = int(np.prod(proj.in_shape))
    w = np.asarray(proj.kernel[...], np.float64).reshape(n_in, -1).T
    a = np.asarray(proj.lora.a[...], np.float64).reshape(n_in, RANK).T
    b = np.asarray(proj.lora.b[...], np.float64).reshape(RANK, -1).T
    return w, a, b


def formula_kernel(proj) -> np.ndarray:
    """W + (alpha / rank) * B @ A in float64, back in our kernel layout (in_shape + out_shape)."""
    w, a, b = peft_matrices(proj)
    return (w + (ALPHA / RANK) * b @ a).T.reshape(proj.in_shape + proj.out_shape)


def projection_bound(w, a, b, x_flat: np.ndarray) -> np.ndarray:
    terms = np.abs(x_flat) @ (np.abs(w) + (ALPHA / RANK) * np.abs(b) @ np.abs(a)).T
    return (x_flat.shape[-1] + RANK + 2) * EPS32 * terms


@pytest.fixture(scope="module")
def base_logits():
    return logits(Decoder(CFG, rngs=nnx.Rngs(0)))


def test_regex_selects_projections_and_zero_b_equals_base(base_logits):
    model = Decoder(CFG, rngs=nnx.Rngs(0))
    paths = apply_lora(model, pattern=r"attn\.(q|v)_proj|mlp\.down_proj", rank=4, alpha=8, rngs=nnx.Rngs(1))
    assert sorted(paths) == sorted(f"layers.{i}.{p}" for i in range(2)
                                   for p in ("attn.q_proj", "attn.v_proj", "mlp.down_proj"))
    assert model.layers[0].attn.k_proj.lora is None
    lora = nnx.state(model, nnx.LoRAParam)
    assert len(jax.tree.leaves(lora)) == 2 * len(paths)
    assert model.layers[0].attn.q_proj.lora.a[...].shape == (32, 4)
    assert model.layers[0].attn.q_proj.lora.b[...].shape == (4, 4, 8)
    # B = 0: the adapter adds exact zeros; only the (differently compiled) base computation's rounding remains
    assert_logits_close(logits(model), base_logits, "zero-B adapters")


def projection_errors(merged: bool, *, scale: float | None = None) -> dict[str, tuple[float, np.ndarray]]:
    """Every adapted projection of a rank-4/alpha-16 model on random inputs against x . (W + alpha/rank B A)^T in
    float64: {path: (max |ours - formula| / bound, |update| / bound)}, bound = 2 `projection_bound` (module
    docstring). `scale` replaces the adapters' own alpha / rank (a deliberately wrong implementation)."""
    model = Decoder(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, pattern=ALL, rank=RANK, alpha=ALPHA, rngs=nnx.Rngs(1))
    randomize_adapters(model, seed=2)
    matrices = {path: peft_matrices(proj) for path, proj in projections(model)}  # W before any merge
    if scale is not None:
        for _, proj in projections(model):
            proj.lora.scale = scale
    if merged:
        merge_lora(model)
    rng = np.random.default_rng(3)
    xs = {path: rng.normal(size=(5,) + proj.in_shape).astype(np.float32) for path, proj in projections(model)}
    outputs = _project_all(*nnx.split(model), xs)
    errors = {}
    for path, proj in projections(model):
        x_flat = xs[path].reshape(5, -1).astype(np.float64)
        w, a, b = matrices[path]
        want = x_flat @ (w + (ALPHA / RANK) * b @ a).T
        got = np.asarray(outputs[path], np.float64).reshape(5, -1)
        bound = 2 * projection_bound(w, a, b, x_flat)
        delta = x_flat @ ((ALPHA / RANK) * b @ a).T
        errors[path] = (float(np.max(np.abs(got - want) / bound)), np.abs(delta) / bound)
    return errors


@pytest.mark.parametrize("merged", [False, True], ids=["unmerged", "merged"])
def test_projection_equals_explicit_formula(merged):
    """Every adapted projection kind (q: [32] -> [4, 8], o: [4, 8] -> [32], down: [48] -> [32], ...) on random
    inputs equals x . (W + alpha/rank B A)^T computed in float64, within the float32 bound in the module docstring."""
    errors = projection_errors(merged)
    for path, (err, update) in errors.items():
        assert err <= 1.0, (path, err)
        assert np.median(update) > 1e3, path  # the update is far above the bound: a wrong scale cannot hide
    assert {path.split(".", 2)[2] for path in errors} == {"attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj",
                                                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}


@pytest.mark.parametrize("wrong", ["alpha", "1", "rank/alpha"])
def test_a_wrong_scale_fails_the_formula_comparison(wrong):
    """The comparison has power: the adapters scaled by alpha (the /rank forgotten), by 1 (as if alpha == rank) or
    by rank/alpha (inverted) miss the formula by far more than the bound on every projection, merged or not."""
    scale = {"alpha": ALPHA, "1": 1.0, "rank/alpha": RANK / ALPHA}[wrong]
    for merged in (False, True):
        errors = projection_errors(merged, scale=scale)
        assert min(err for err, _ in errors.values()) > 10.0, (wrong, merged, errors)


def test_merged_kernel_is_the_explicit_formula():
    """merge_lora stores fl32(W + alpha/rank A.B): within (rank + 1) u (|W| + s |A| |B|) of the float64 formula."""
    model = Decoder(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, pattern=ALL, rank=RANK, alpha=ALPHA, rngs=nnx.Rngs(1))
    randomize_adapters(model, seed=4)
    want = {path: formula_kernel(proj) for path, proj in projections(model)}
    bounds = {}
    for path, proj in projections(model):
        w, a, b = peft_matrices(proj)
        bounds[path] = ((RANK + 1) * EPS32 * (np.abs(w) + (ALPHA / RANK) * np.abs(b) @ np.abs(a))).T.reshape(
            want[path].shape)
    merge_lora(model)
    for path, proj in projections(model):
        err = np.abs(np.asarray(proj.kernel[...], np.float64) - want[path])
        assert (err <= bounds[path]).all(), (path, err.max())


@pytest.mark.parametrize("merged", [False, True], ids=["unmerged", "merged"])
def test_decoder_with_adapters_equals_decoder_with_formula_kernels(merged):
    """The whole decoder with rank-4/alpha-16 adapters gives the logits of a plain decoder (no LoRA) whose kernels
    were replaced by W + alpha/rank B A (float64, rounded once); the adapters move the logits far more than the
    bound, so a wrong scale fails."""
    model = Decoder(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, pattern=ALL, rank=RANK, alpha=ALPHA, rngs=nnx.Rngs(1))
    randomize_adapters(model, seed=5)
    reference = Decoder(CFG, rngs=nnx.Rngs(0))
    ref_modules = dict((".".join(str(p) for p in path), m) for path, m in nnx.iter_modules(reference))
    for path, proj in projections(model):
        ref_modules[path].kernel.set_value(jnp.asarray(formula_kernel(proj), jnp.float32))
    want = logits(reference)
    base = logits(Decoder(CFG, rngs=nnx.Rngs(0)))
    assert np.abs(want - base).max() > 1e3 * MODEL_REL_TOL * np.abs(want).max()  # the adapters really act
    if merged:
        merge_lora(model)
    assert_logits_close(logits(model), want, "merged" if merged else "unmerged")


def test_merge_then_unmerge_restores_kernel_and_outputs():
    model = Decoder(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, pattern=ALL, rank=RANK, alpha=ALPHA, rngs=nnx.Rngs(2))
    randomize_adapters(model, seed=6)
    proj = model.layers[1].attn.o_proj
    kernel0 = np.asarray(proj.kernel[...], np.float64)
    delta = np.abs(np.asarray(proj.lora.delta_kernel(), np.float64))
    unmerged = logits(model)
    merge_lora(model)
    assert np.abs(np.asarray(proj.kernel[...]) - kernel0).max() > 1e3 * EPS32 * np.abs(kernel0).max()
    assert_logits_close(logits(model), unmerged, "merged vs unmerged")
    unmerge_lora(model)
    # fl(fl(k + d) - d) is within 2 u (|k| + |d|) of k (two roundings); eps = 2 u
    err = np.abs(np.asarray(proj.kernel[...], np.float64) - kernel0)
    assert (err <= EPS32 * (np.abs(kernel0) + delta)).all(), err.max()
    assert_logits_close(logits(model), unmerged, "unmerged again")


def test_only_adapters_are_trained_when_splitting_by_lora_param():
    model = Decoder(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, pattern=r"q_proj", rank=2, alpha=2, dropout=0.1, rngs=nnx.Rngs(3))
    graphdef, lora, rest = nnx.split(model, nnx.LoRAParam, ...)
    base = nnx.state(model, BASE_PARAMS)
    assert not any(p[-1] in ("a", "b") for p, _ in nnx.to_flat_state(base))

    def loss(lora, rest):
        rest = jax.tree.map(lambda x: x, rest)  # see reasoner/models/lora.py: dropout RNG under grad
        m = nnx.merge(graphdef, lora, rest)
        return jax.nn.log_softmax(m(TOKENS, positions_BxT=POS)[0])[..., 3].mean(), nnx.state(m, nnx.RngState)

    grads, rng_state = jax.jit(jax.grad(loss, has_aux=True))(lora, rest)
    counts = [int(v[...]) for p, v in nnx.to_flat_state(rng_state) if p[-1] == "count"]
    assert counts and all(c == 1 for c in counts)  # dropout drew one key per adapter
    flat = {p: np.asarray(v[...]) for p, v in nnx.to_flat_state(grads)}
    assert set(p[-1] for p in flat) == {"a", "b"}
    # with B = 0 only B receives gradient at the first step: dL/dA = x^T (dL/dy) B^T is exactly 0
    assert all(np.abs(g).max() > 0 for p, g in flat.items() if p[-1] == "b")
    assert all(np.abs(g).max() == 0 for p, g in flat.items() if p[-1] == "a")


def test_pattern_matching_nothing_is_an_error():
    with pytest.raises(ValueError, match="matches no projection"):
        apply_lora(Decoder(CFG, rngs=nnx.Rngs(0)), pattern=r"nonexistent", rank=2, alpha=2)
