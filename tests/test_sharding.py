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
from tests.tolerances import logits_atol  # noqa: E402

from reasoner.models import load_model  # noqa: E402
from reasoner.sharding import (MeshError, ShardingError, device_grid, logical_spec, make_mesh,  # noqa: E402
                               parse_mesh_spec, state_shardings)


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


def test_logical_rules_map_axes_and_skip_size_one_axes():
    mesh = make_mesh("fsdp=4,tensor=2")
    assert logical_spec(("embed", "heads", "head_dim"), (32, 4, 8), mesh) == PartitionSpec("fsdp", "tensor", None)
    mesh = make_mesh("data=2,fsdp=2,tensor=2")
    assert logical_spec(("batch", "seq"), (4, 7), mesh) == PartitionSpec(("data", "fsdp"), None)
    # a size-1 mesh axis never splits anything: SmolLM2's 9 heads load on a mesh without tensor parallelism
    assert logical_spec(("embed", "heads", "head_dim"), (576, 9, 64), make_mesh("fsdp=8")) == \
        PartitionSpec("fsdp", None, None)
    # the rules come from the caller: another table, another layout
    assert logical_spec(("embed", "heads"), (32, 4), mesh, rules=(("embed", None), ("heads", "tensor"))) == \
        PartitionSpec(None, "tensor")


@pytest.mark.parametrize("axes, shape, spec, match", [
    # SmolLM2 has 9 heads: tensor=2 cannot split them, and that is an error, not a silent replication
    (("embed", "heads", "head_dim"), (576, 9, 64), "fsdp=4,tensor=2",
     r"q_proj: dimension 1 \('heads', size 9\) is not divisible by mesh axis 'tensor'"),
    # a batch of 2 rows over data x fsdp = 4: fsdp is the axis that does not fit
    (("batch", "seq"), (2, 7), "data=2,fsdp=2,tensor=2", r"dimension 0 \('batch', size 2\).*mesh axis 'fsdp'"),
    (("batch", "seq"), (3, 7), "data=2,fsdp=2,tensor=2", r"dimension 0 \('batch', size 3\).*mesh axis 'data'"),
])
def test_an_axis_that_does_not_divide_is_an_error_naming_the_value(axes, shape, spec, match):
    with pytest.raises(ShardingError, match=match):
        logical_spec(axes, shape, make_mesh(spec), path="layers.0.attn.q_proj")


def test_state_shardings_error_names_the_parameter_path(tiny_dir):
    graphdef, state = nnx.split(load_model(tiny_dir))
    # the tiny qwen2 has 2 kv heads: tensor=8 does not divide them
    with pytest.raises(ShardingError, match=r"layers\.0\.attn\.k_proj\.bias: dimension 0 \('kv_heads', size 2\)"):
        state_shardings(state, make_mesh("tensor=8"))


def test_unknown_logical_axis_is_named():
    with pytest.raises(KeyError, match="logical axis 'experts' has no entry"):
        logical_spec(("experts",), (8,), make_mesh(None), path="moe.w")


def test_mesh_grid_comes_from_mesh_utils_and_groups_processes():
    """The grid is mesh_utils' layout; across granules (here: fake processes) the slow factor sits on the outer axes."""
    from jax.experimental import mesh_utils

    devices = jax.devices()
    mesh = make_mesh("fsdp=4,tensor=2")
    np.testing.assert_array_equal(mesh.devices, mesh_utils.create_device_mesh((1, 4, 2), devices))

    class Fake:  # a device of a 2-process job: 4 per process
        def __init__(self, dev, process):
            self.dev, self.process_index, self.id = dev, process, dev.id
            self.platform, self.device_kind = dev.platform, dev.device_kind

    fakes = [Fake(d, 1 - i // 4) for i, d in enumerate(devices)]  # enumerated with process 1 first
    grid = device_grid([2, 2, 2], fakes)
    assert [[d.process_index for d in g.ravel()] for g in grid] == [[0, 0, 0, 0], [1, 1, 1, 1]]  # data = DCN
    grid = device_grid([1, 8, 1], fakes)
    assert [d.process_index for d in grid.ravel()] == [0] * 4 + [1] * 4  # one process per contiguous fsdp block
    assert {d.process_index for d in grid[0, :, 0][:4]} == {0}


def test_library_sharding_does_not_import_configs():
    import ast

    tree = ast.parse(pathlib.Path(sys.modules["reasoner.sharding"].__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.split(".")[0] == "configs" for m in imported), imported
    from configs.sharding_rules import RULES
    from reasoner.sharding import DEFAULT_RULES

    assert RULES == DEFAULT_RULES


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
    # sharded matmuls reduce in other orders: the forward's float32 error at this depth, relative to the logits
    np.testing.assert_allclose(_forward(sharded, tokens, mesh), reference,
                               atol=logits_atol(reference, sharded.cfg, seq_len=16), rtol=0)


def test_the_configs_rules_table_lays_out_the_run(tiny_dir):
    # configs/sharding_rules.RULES and config.sharding_rules were read by nothing: every layout used the library's
    # defaults, so mapping a logical axis to None (as the ShardingError advises) changed nothing
    import ml_collections

    from reasoner.sharding import DEFAULT_RULES, active_rules, set_rules
    from trainers.run import use_config_rules

    graphdef, state = nnx.split(load_model(tiny_dir))
    mesh = make_mesh("tensor=8")
    with pytest.raises(ShardingError):  # the tiny qwen2's 2 kv heads on tensor=8
        state_shardings(state, mesh)
    table = tuple((k, None if k in ("heads", "kv_heads") else v) for k, v in DEFAULT_RULES)
    try:
        use_config_rules(ml_collections.ConfigDict({"sharding_rules": table}))
        assert active_rules() == table
        spec = state_shardings(state, mesh)["layers"][0]["attn"]["k_proj"]["bias"].spec
        assert spec == PartitionSpec(None, None) or all(a is None for a in spec)
        with pytest.raises(ValueError, match="sharding rule 'heads' -> 'model'"):
            set_rules((("heads", "model"),))
    finally:
        set_rules(None)
    assert active_rules() == DEFAULT_RULES
