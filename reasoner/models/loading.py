"""Load checkpoints into the NNX `Decoder`, placed straight onto their target shardings.

`load_model(name_or_path, *, mesh=None, param_dtype="float32", dtype="float32", remat=False)`
accepts a preset name (`smollm2-135m-instruct`), a `.gguf` file, or an HF directory with
`config.json` and `model.safetensors` / `model.safetensors.index.json`. With a mesh, every
parameter becomes a global array sharded by its logical axes (`configs/sharding_rules.py`): each
device receives only its own slice via `jax.make_array_from_callback` (the host holds one
memory-mapped or dequantized copy per tensor, never one per device). Without a mesh, the
parameters go to the first device. Tensors are all read and checked before the model is
assembled, so an error never leaves a half-loaded model behind.
"""

from __future__ import annotations

import json
import os

import jax
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)
import numpy as np
from flax import nnx
from jax.sharding import SingleDeviceSharding

from reasoner.models.checkpoint_names import weight_map
from reasoner.models.config import ModelConfig, UnsupportedModelError
from reasoner.models.decoder import Decoder
from reasoner.models.sources import CheckpointError, SafetensorsSource


def open_checkpoint(path: str, **overrides):
    """(ModelConfig, tensor source) of a GGUF file or HF directory."""
    if path.endswith(".gguf") and os.path.isdir(path):
        raise CheckpointError(f"checkpoint file {path} is a directory, expected a GGUF file")
    if path.endswith(".gguf"):
        from reasoner.models.gguf import open_gguf

        return open_gguf(path, **overrides)
    if os.path.isfile(path) and path.endswith(".safetensors"):
        path = os.path.dirname(path) or "."
    if not os.path.isdir(path):
        raise CheckpointError(f"checkpoint {path} does not exist (expected a preset name, a .gguf file or an HF directory)")
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise CheckpointError(f"{path}: config.json is missing")
    try:
        with open(config_path) as f:
            raw_config = json.load(f)
    except ValueError as err:
        raise CheckpointError(f"{config_path} is not valid JSON: {err}") from None
    if not isinstance(raw_config, dict):
        raise CheckpointError(f"{config_path}: expected a JSON object, got {type(raw_config).__name__}")
    try:
        cfg = ModelConfig.from_hf_dict(raw_config, source=config_path, **overrides)
    except (CheckpointError, UnsupportedModelError):
        raise
    except (KeyError, TypeError, ValueError) as err:  # a missing or mistyped field of a hand-written config
        detail = f"missing key {err}" if isinstance(err, KeyError) else str(err)
        raise CheckpointError(f"{config_path}: {detail}") from None
    check_index(path)
    return cfg, SafetensorsSource(path)


def check_index(directory: str) -> None:
    """A `model.safetensors.index.json`, if present, is JSON with a {tensor: file} `weight_map` whose
    files all lie inside `directory`; else a CheckpointError naming the index and the entry."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.isfile(index):
        return
    try:
        with open(index) as f:
            weight_map = json.load(f).get("weight_map")
    except (ValueError, AttributeError) as err:
        raise CheckpointError(f"{index} is not a JSON object with a weight_map: {err}") from None
    if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in weight_map.items()):
        raise CheckpointError(f"{index}: weight_map must map tensor names to file names (strings)")
    root = os.path.realpath(directory)
    for name, fname in weight_map.items():
        target = os.path.realpath(os.path.join(root, fname))
        if os.path.dirname(target) != root and not target.startswith(root + os.sep):
            raise CheckpointError(f"{index}: tensor {name!r} points outside the checkpoint directory ({fname!r})")


def abstract_model(cfg: ModelConfig):
    """(graphdef, abstract state) without allocating any weights."""
    from reasoner.models.layers import abstract_params

    with abstract_params():
        return nnx.split(Decoder(cfg, rngs=nnx.Rngs(0)))


def _place(array: np.ndarray, sharding) -> jax.Array:
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def load_into_state(cfg: ModelConfig, source, *, mesh=None):
    """Reads every tensor of `weight_map(cfg)` from `source` into a sharded nnx.State."""
    from reasoner.sharding import state_shardings

    graphdef, state = abstract_model(cfg)
    if mesh is not None:
        shardings = state_shardings(state, mesh)
    else:
        device = jax.devices()[0]
        shardings = jax.tree.map(lambda _: SingleDeviceSharding(device), state,
                                 is_leaf=lambda x: isinstance(x, nnx.Variable))
    flat_shardings = dict(nnx.to_flat_state(shardings))
    available = set(source.names())
    np_dtype = np.dtype(cfg.param_dtype)
    describe = getattr(source, "describe", lambda name: "checkpoint")
    loaded = {}
    for path, spec in weight_map(cfg).items():
        if spec.hf_name not in available:
            raise CheckpointError(f"{describe(spec.hf_name)}: tensor {spec.hf_name!r} is missing "
                                  f"(expected shape {spec.hf_shape} for {cfg.family})")
        hf = source.get(spec.hf_name)
        if tuple(hf.shape) != spec.hf_shape:
            raise CheckpointError(f"{describe(spec.hf_name)}: tensor {spec.hf_name!r} has shape {tuple(hf.shape)}, "
                                  f"expected {spec.hf_shape}")
        ours = np.asarray(spec.to_ours(hf), dtype=np_dtype)
        sharding = flat_shardings[path]
        sharding = sharding.sharding if isinstance(sharding, nnx.Variable) else sharding
        loaded[path] = _place(ours, sharding)
    expected = {p for p, _ in nnx.to_flat_state(state)}
    if expected != set(loaded):
        raise CheckpointError(f"internal: parameters without a checkpoint name: {sorted(expected - set(loaded))}")
    for path, var in nnx.to_flat_state(state):
        var.set_value(loaded[path]) if hasattr(var, "set_value") else setattr(var, "value", loaded[path])
    return graphdef, state


def load_model(name_or_path: str, *, mesh=None, param_dtype: str = "float32", dtype: str = "float32",
               remat: bool = False) -> Decoder:
    """A ready `Decoder` from a preset, GGUF file or HF directory (see module docstring)."""
    from reasoner.models.presets import resolve

    cfg, source = open_checkpoint(resolve(name_or_path), param_dtype=param_dtype, dtype=dtype, remat=remat)
    graphdef, state = load_into_state(cfg, source, mesh=mesh)
    return nnx.merge(graphdef, state)
