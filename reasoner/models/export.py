"""Export a `Decoder` to an HF checkpoint directory (`config.json` + `model.safetensors`).

`export_hf(model, out_dir)` writes float32 (or `dtype=`) tensors under HF names; the directory loads
with `transformers.AutoModelForCausalLM.from_pretrained(out_dir)` and with our `load_model`.
LoRA updates are not exported; call `reasoner.models.lora.merge_lora` first to include them.
Sharded parameters are gathered to the host one tensor at a time.
"""

from __future__ import annotations

import json
import os

import jax
import ml_dtypes  # noqa: F401
import numpy as np
from flax import nnx

from reasoner.models.checkpoint_names import weight_map


def hf_tensors(model, *, dtype: str = "float32") -> dict[str, np.ndarray]:
    """{hf_name: numpy array in HF layout} for every weight of `model`."""
    flat = {path: var for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    out = {}
    for path, spec in weight_map(model.cfg).items():
        value = np.asarray(jax.device_get(flat[path][...]))
        out[spec.hf_name] = np.ascontiguousarray(spec.to_hf(value).astype(np.dtype(dtype)))
    return out


def export_hf(model, out_dir: str, *, dtype: str = "float32") -> str:
    """Writes `out_dir/config.json` and `out_dir/model.safetensors`; returns out_dir."""
    from safetensors.numpy import save_file

    os.makedirs(out_dir, exist_ok=True)
    config = model.cfg.to_hf_dict()
    config["torch_dtype"] = dtype
    tensors = hf_tensors(model, dtype=dtype)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return out_dir
