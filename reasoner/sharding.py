"""Meshes and logical-axis shardings.

`make_mesh(spec)` builds a `jax.sharding.Mesh` with axes `data, fsdp, tensor` from
`[(name, size), ...]` or `"fsdp=4,tensor=2"`; one size may be -1 (the rest of the devices);
axes left out get size 1; no spec means `fsdp=-1`. The device grid comes from
`jax.experimental.mesh_utils`: `create_device_mesh` on one process/slice (axes follow the TPU
torus or the GPU numbering), `create_hybrid_device_mesh` when the devices span several slices
(TPU multislice) or several processes (multi-host GPU/CPU), with the slow (DCN) factor put on
the outermost axes (`data`, then `fsdp`) so `tensor` stays inside one host.

`logical_spec(axes, shape, mesh, rules=...)` turns logical axis names into a `PartitionSpec`
through a rules table `((logical, mesh_axes), ...)`; `state_shardings(state, mesh, rules=...)`
does it for every `nnx.Param` carrying `logical_axes` metadata (what `reasoner.models` creates).
A mesh axis of size > 1 that does not divide its dimension is a `ShardingError` naming the
value's path, the dimension and the axis: nothing is replicated silently (choose another mesh,
or map that logical axis to None in the table).

The rules come from the caller: the project's table is `configs/sharding_rules.RULES` (a config
may carry its own as `config.sharding_rules`); this module never imports `configs`. A call with
`rules=None` uses the process's active table: `DEFAULT_RULES` (that table's starting point) until
a run installs its config's with `set_rules` (`trainers.run.use_config_rules`, called by `setup`
and by every `reasoner` command that reads a config), so the model loaders, the samplers and the
step functions all lay values out by the table the config names.
"""

from __future__ import annotations

import collections
import math
from typing import Sequence

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")  # outermost (least communication) to innermost

Rules = Sequence[tuple[str, "str | tuple[str, ...] | None"]]
DEFAULT_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    ("batch", ("data", "fsdp")),
    ("seq", None),
    ("cache_seq", None),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
    ("lora_rank", None),
)


_active_rules: tuple = DEFAULT_RULES


def set_rules(rules: Rules | None) -> None:
    """Installs `rules` as the table of every call that passes none (None: back to DEFAULT_RULES). A table is
    checked here: pairs of (logical name, mesh axis / tuple of mesh axes / None) over MESH_AXES."""
    global _active_rules
    table = DEFAULT_RULES if rules is None else tuple((str(k), v) for k, v in rules)
    for name, target in table:
        axes = () if target is None else (target,) if isinstance(target, str) else tuple(target)
        if any(a not in MESH_AXES for a in axes):
            raise ValueError(f"sharding rule {name!r} -> {target!r}: expected None, a mesh axis or a tuple of "
                             f"mesh axes among {MESH_AXES}")
    _active_rules = table


def active_rules() -> tuple:
    """The table calls without `rules` use now (`set_rules`)."""
    return _active_rules


class MeshError(ValueError):
    """The requested mesh cannot be laid out on the available devices."""


class ShardingError(ValueError):
    """A mesh axis does not divide the dimension a rule maps it to."""


def parse_mesh_spec(spec: str | Sequence[tuple[str, int]] | None) -> list[tuple[str, int]]:
    """`"fsdp=4,tensor=2"` or `[("fsdp", 4), ...]` -> [(name, size)] with every axis of MESH_AXES."""
    if spec is None or spec == "" or spec == []:
        pairs: list[tuple[str, int]] = [("fsdp", -1)]  # default: fully sharded data parallel
    elif isinstance(spec, str):
        pairs = []
        for part in spec.split(","):
            name, sep, size = part.strip().partition("=")
            if not sep:
                raise MeshError(f"mesh spec {spec!r}: expected comma-separated name=size, e.g. fsdp=4,tensor=2")
            try:
                pairs.append((name.strip(), int(size)))
            except ValueError:
                raise MeshError(f"mesh spec {spec!r}: size {size!r} of axis {name!r} is not an integer") from None
    else:
        pairs = [(str(n), int(s)) for n, s in spec]
    names = [n for n, _ in pairs]
    unknown = [n for n in names if n not in MESH_AXES]
    if unknown or len(set(names)) != len(names):
        raise MeshError(f"mesh spec {spec!r}: axes must be distinct names from {MESH_AXES}, got {names}")
    if sum(s == -1 for _, s in pairs) > 1 or any(s == 0 or s < -1 for _, s in pairs):
        raise MeshError(f"mesh spec {spec!r}: sizes must be positive, with at most one -1")
    given = dict(pairs)
    return [(name, given.get(name, 1)) for name in MESH_AXES]


def _granules(devices: Sequence[jax.Device]) -> tuple[str | None, int]:
    """('slice_index' | 'process_index' | None, count): the slow-network units the devices fall into."""
    for attr in ("slice_index", "process_index"):
        keys = {getattr(d, attr, None) for d in devices}
        if None not in keys and len(keys) > 1:
            return attr, len(keys)
    return None, 1


def _dcn_split(sizes: Sequence[int], granules: int) -> list[int] | None:
    """Per-axis DCN factors (product `granules`), taken from the outermost axes first; None if impossible."""
    dcn, left = [], granules
    for size in sizes:
        factor = math.gcd(size, left)
        dcn.append(factor)
        left //= factor
    return dcn if left == 1 else None


def device_grid(sizes: Sequence[int], devices: Sequence[jax.Device]) -> np.ndarray:
    """Devices laid out as an array of shape `sizes`, topology-aware (see the module docstring)."""
    attr, count = _granules(devices)
    dcn = _dcn_split(sizes, count) if attr else None
    if dcn is not None:
        ici = [s // d for s, d in zip(sizes, dcn)]
        per_granule = collections.Counter(getattr(d, attr) for d in devices)
        if len(set(per_granule.values())) == 1:
            return mesh_utils.create_hybrid_device_mesh(
                ici, dcn, devices, process_is_granule=attr == "process_index", allow_split_physical_axes=True)
    return mesh_utils.create_device_mesh(sizes, devices, allow_split_physical_axes=True)


def make_mesh(spec=None, *, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A mesh over all (or the given) devices; the product of sizes must equal the device count."""
    devices = list(devices if devices is not None else jax.devices())
    pairs = parse_mesh_spec(spec)
    known = math.prod(s for _, s in pairs if s != -1)
    if any(s == -1 for _, s in pairs):
        if len(devices) % known:
            raise MeshError(f"mesh {pairs}: fixed axes (product {known}) do not divide the {len(devices)} devices")
        pairs = [(n, len(devices) // known if s == -1 else s) for n, s in pairs]
    total = math.prod(s for _, s in pairs)
    if total != len(devices):
        raise MeshError(
            f"mesh {dict(pairs)} needs {total} devices but {len(devices)} are available; "
            f"sizes must multiply to the device count (use -1 for one axis to take the rest)"
        )
    grid = device_grid([s for _, s in pairs], devices)
    return Mesh(grid, tuple(n for n, _ in pairs))


def logical_spec(axes: Sequence[str | None], shape: Sequence[int], mesh: Mesh, rules: Rules | None = None, *,
                 path: str = "value") -> PartitionSpec:
    """PartitionSpec for a value of `shape` whose dimensions carry logical `axes`.

    Each logical name maps through `rules` to mesh axes; size-1 mesh axes and axes an earlier
    dimension already took are skipped. Raises ShardingError naming `path` when a remaining mesh
    axis does not divide its dimension, and KeyError for a logical name the table lacks.
    """
    table = dict(_active_rules if rules is None else rules)
    if len(axes) != len(shape):
        raise ShardingError(f"{path}: {len(axes)} logical axes {tuple(axes)} for a value of shape {tuple(shape)}")
    used: set[str] = set()
    out = []
    for i, (name, dim) in enumerate(zip(axes, shape)):
        if name is not None and name not in table:
            raise KeyError(f"{path}: logical axis {name!r} has no entry in the sharding rules "
                           f"(config.sharding_rules, else configs/sharding_rules.py RULES); known: {sorted(table)}")
        target = table.get(name) if name is not None else None
        mesh_axes = [target] if isinstance(target, str) else list(target or ())
        chosen = [ax for ax in mesh_axes if mesh.shape[ax] > 1 and ax not in used]
        split = math.prod(mesh.shape[a] for a in chosen)
        if dim % split:
            bad = next(a for a in chosen if dim % math.prod(mesh.shape[b] for b in chosen[:chosen.index(a) + 1]))
            raise ShardingError(
                f"{path}: dimension {i} ({name!r}, size {dim}) is not divisible by mesh axis {bad!r} "
                f"(mesh {dict(mesh.shape)}, {name!r} -> {'x'.join(chosen)} = {split}); choose a mesh whose "
                f"{bad!r} size divides {dim}, or map {name!r} to None in the sharding rules (config.sharding_rules, "
                f"else configs/sharding_rules.py RULES)")
        used.update(chosen)
        out.append(None if not chosen else chosen[0] if len(chosen) == 1 else tuple(chosen))
    return PartitionSpec(*out)


def logical_sharding(axes, shape, mesh: Mesh, rules: Rules | None = None, *, path: str = "value") -> NamedSharding:
    return NamedSharding(mesh, logical_spec(axes, shape, mesh, rules, path=path))


def state_shardings(state, mesh: Mesh, rules: Rules | None = None):
    """A pytree like `state` (an nnx.State of Variables) with a NamedSharding per leaf;
    leaves without `logical_axes` metadata are replicated. Errors name the parameter's path."""
    from flax import nnx

    def one(path, var):
        axes = var.get_metadata().get("logical_axes") if isinstance(var, nnx.Variable) else None
        shape = var.shape if hasattr(var, "shape") else var[...].shape
        if axes is None:
            return NamedSharding(mesh, PartitionSpec())
        return logical_sharding(axes, shape, mesh, rules, path=jax.tree_util.keystr(path, simple=True, separator="."))

    return jax.tree_util.tree_map_with_path(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())
