"""Meshes from specs, logical-axis rules, and sharded forward == unsharded forward on 8 CPU devices."""

import sys
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from tests.models.tiny_checkpoints import make_hf_model, save_hf  # noqa: E402

from reasoner.models import load_model  # noqa: E402
from reasoner.sharding import MeshError, logical_spec, make_mesh, parse_mesh_spec  # noqa: E402


def test_mesh_from_pairs_and_strings():
    assert jax.device_count() == 8
    mesh = make_mesh([("fsdp", -1), ("tensor", 2)])
    assert dict(mesh.shape) == {"data": 1, "fsdp": 4, "tensor": 2}
    assert dict(make_mesh("data=2,fsdp=2,tensor=2").shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert dict(make_mesh(None).shape) == {"data": 1, "fsdp": 8, "tensor": 1}
    assert parse_mesh_spec("tensor=2") == [("data", 1), ("fsdp", 1), ("tensor", 2)]


@pytest.mark.parametrize("spec, match", [
    ("fsdp=3", "needs 3 devices but 8"),
    ("fsdp=4,tensor=4", "needs 16 devices but 8"),
    ([("fsdp", 3), ("data", -1)], "do not divide the 8 devices"),
    ("model=8", "axes must be distinct names"),
    ("fsdp=four", "not an integer"),
    ("fsdp=-1,tensor=-1", "at most one -1"),
])
def test_bad_mesh_raises_clear_error(spec, match):
    with pytest.raises(MeshError, match=match):
        make_mesh(spec)


def test_logical_rules_skip_axes_that_do_not_divide():
    mesh = make_mesh("fsdp=4,tensor=2")
    assert logical_spec(("embed", "heads", "head_dim"), (32, 4, 8), mesh) == PartitionSpec("fsdp", "tensor", None)
    # SmolLM2 has 9 heads: tensor=2 cannot split them, so that dim is replicated
    assert logical_spec(("embed", "heads", "head_dim"), (576, 9, 64), mesh) == PartitionSpec("fsdp", None, None)
    mesh = make_mesh("data=2,fsdp=2,tensor=2")
    assert logical_spec(("batch", "seq"), (4, 7), mesh) == PartitionSpec(("data", "fsdp"), None)
    assert logical_spec(("batch", "seq"), (2, 7), mesh) == PartitionSpec("data", None)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    hf = make_hf_model("qwen2", seed=7, tie_word_embeddings=False)
    return save_hf(hf, str(tmp_path_factory.mktemp("qwen2")))


def _forward(model, tokens, mesh=None):
    graphdef, state = nnx.split(model)

    def run(state, tokens):
        logits, _ = nnx.merge(graphdef, state)(tokens, positions_BxT=jnp.broadcast_to(jnp.arange(tokens.shape[1]),
                                                                                       tokens.shape))
        return logits

    if mesh is not None:
        tokens = jax.device_put(tokens, NamedSharding(mesh, PartitionSpec(("data", "fsdp"), None)))
    return np.asarray(jax.jit(run)(state, tokens))


@pytest.mark.parametrize("spec", ["fsdp=4,tensor=2", "data=2,fsdp=2,tensor=2"])
def test_sharded_forward_equals_unsharded(tiny_dir, spec):
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 96, (4, 16)))
    reference = _forward(load_model(tiny_dir), tokens)
    mesh = make_mesh(spec)
    sharded = load_model(tiny_dir, mesh=mesh)
    q = sharded.layers[0].attn.q_proj.kernel[...]
    assert q.sharding.spec == PartitionSpec("fsdp", "tensor", None)
    # each device holds only its slice, not a full copy
    assert {s.data.shape for s in q.addressable_shards} == {(32 // mesh.shape["fsdp"], 2, 8)}
    assert sharded.lm_head[...].sharding.spec == PartitionSpec("fsdp", "tensor")
    np.testing.assert_allclose(_forward(sharded, tokens, mesh), reference, atol=1e-5, rtol=0)
