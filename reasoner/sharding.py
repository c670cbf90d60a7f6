"""Meshes and logical-axis shardings.

`make_mesh(spec)` builds a `jax.sharding.Mesh` with axes `data, fsdp, tensor` from
`[(name, size), ...]` or `"fsdp=4,tensor=2"`; one size may be -1 (the rest of the devices);
axes left out get size 1; no spec means `fsdp=-1`. `logical_sharding(axes, shape, mesh)` turns logical axis names (see
`configs/sharding_rules.py`) into a `NamedSharding`; `state_shardings(state, mesh)` does it for every
`nnx.Param` carrying `logical_axes` metadata (what `reasoner.models` creates).
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from configs.sharding_rules import MESH_AXES, RULES


class MeshError(ValueError):
    """The requested mesh cannot be laid out on the available devices."""


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
    grid = np.asarray(devices, dtype=object).reshape([s for _, s in pairs])
    return Mesh(grid, tuple(n for n, _ in pairs))


def logical_spec(axes: Sequence[str | None], shape: Sequence[int], mesh: Mesh, rules=RULES) -> PartitionSpec:
    """PartitionSpec for a value with logical `axes`; skips size-1 axes, axes already used, and
    mesh axes that do not divide the dimension (replicating it instead)."""
    table = dict(rules)
    used: set[str] = set()
    out = []
    for name, dim in zip(axes, shape):
        target = table.get(name) if name is not None else None
        if name is not None and name not in table:
            raise KeyError(f"logical axis {name!r} has no entry in configs/sharding_rules.py RULES")
        mesh_axes = [target] if isinstance(target, str) else list(target or ())
        chosen = []
        for ax in mesh_axes:
            size = mesh.shape[ax]
            if size == 1 or ax in used:
                continue
            if dim % (math.prod(mesh.shape[a] for a in chosen) * size):
                continue
            chosen.append(ax)
        used.update(chosen)
        out.append(None if not chosen else chosen[0] if len(chosen) == 1 else tuple(chosen))
    return PartitionSpec(*out)


def logical_sharding(axes, shape, mesh: Mesh, rules=RULES) -> NamedSharding:
    return NamedSharding(mesh, logical_spec(axes, shape, mesh, rules))


def state_shardings(state, mesh: Mesh, rules=RULES):
    """A pytree like `state` (an nnx.State of Variables) with a NamedSharding per leaf;
    leaves without `logical_axes` metadata are replicated."""
    from flax import nnx

    def one(var):
        axes = var.get_metadata().get("logical_axes") if isinstance(var, nnx.Variable) else None
        shape = var.shape if hasattr(var, "shape") else var[...].shape
        if axes is None:
            return NamedSharding(mesh, PartitionSpec())
        return logical_sharding(axes, shape, mesh, rules)

    return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())
