"""Export a `Decoder` as a complete Hugging Face checkpoint directory, and its LoRA adapters in PEFT's format.

`export_hf(model, out_dir, tokenizer=tok)` writes

  config.json              the architecture (`ModelConfig.to_hf_dict`)
  model.safetensors        every weight under its HF name, float32 (or `dtype=`); LoRA adapters folded in
  generation_config.json   bos / eos (the tokenizer's end-of-turn ids and the config's EOS ids) / pad ids
  tokenizer files          `tokenizer.save_pretrained`: tokenizer.json, tokenizer_config.json, chat template
  adapter/                 only when the model carries LoRA adapters: PEFT's `adapter_config.json` and
                           `adapter_model.safetensors` (keys `base_model.model.<hf module>.lora_A.weight` [r, in]
                           and `.lora_B.weight` [out, r]), loadable with `peft.PeftModel.from_pretrained(base,
                           out_dir / "adapter")` onto the base model the run started from, or alone with
                           `peft.AutoPeftModelForCausalLM.from_pretrained(out_dir / "adapter")` when
                           `base_model_name_or_path=` named that base (a GGUF base, the embedded preset's too,
                           also needs `gguf_file=`: `adapter/README.md` gives the exact call)

so that `transformers.AutoModelForCausalLM.from_pretrained(out_dir)` and `AutoTokenizer.from_pretrained(out_dir)`
load it with nothing else (the adapter lives in a sub-directory: an `adapter_config.json` at the top would make
transformers load the base model named in it instead). Our `load_model(out_dir)` reads it too.

Adapters may be merged (`merge_lora`) or not: the exported weights are W + (alpha/rank) A.B either way, and
the adapter file holds A and B. Sharded parameters are gathered one tensor at a time; in a multi-process job
every process must call `export_hf` (the gather is collective) and only process 0 writes files.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy for dtype="bfloat16"
import numpy as np
from flax import nnx

from reasoner.models.checkpoint_names import weight_map

ADAPTER_DIR = "adapter"


def _host(value) -> np.ndarray:
    """A (possibly sharded, possibly multi-process) array as one numpy array on every process."""
    if isinstance(value, jax.Array) and not value.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(value, tiled=True))
    return np.asarray(jax.device_get(value))


def _module_at(model, path: tuple):
    node = model
    for key in path:
        node = node[key] if isinstance(key, int) else getattr(node, key)
    return node


def _lora_of(model, kernel_path: tuple):
    """The projection's LoRA module for a `(..., "kernel")` path, or None."""
    if kernel_path[-1] != "kernel":
        return None
    return getattr(_module_at(model, kernel_path[:-1]), "lora", None)


def hf_tensors(model, *, dtype: str = "float32") -> dict[str, np.ndarray]:
    """{hf_name: numpy array in HF layout} for every weight of `model`; unmerged LoRA updates are added."""
    from reasoner.models.quant import QuantizedKernel

    flat = {path: var for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    out = {}
    for path, spec in weight_map(model.cfg).items():
        if path in flat:
            value = _host(flat[path][...])
        else:  # a QLoRA base's projection without an adapter stays quantized after merge_lora: export it dequantized
            kernel = getattr(_module_at(model, path[:-1]), path[-1], None)
            if not isinstance(kernel, QuantizedKernel):
                raise KeyError(f"export: the model has no weight at {'.'.join(map(str, path))} ({spec.hf_name})")
            value = _host(kernel.dequantize_param()[...])
        lora = _lora_of(model, path)
        if lora is not None and not lora.merged:
            value = (value.astype(np.float32) + _host(lora.delta_kernel())).astype(value.dtype)
        out[spec.hf_name] = np.ascontiguousarray(spec.to_hf(value).astype(np.dtype(dtype)))
    return out


def lora_modules(model) -> list[tuple[str, Any, Any]]:
    """[(hf module name, projection, LoRA)] for every adapted projection, e.g. "model.layers.0.self_attn.q_proj"."""
    found = []
    for path, spec in weight_map(model.cfg).items():
        lora = _lora_of(model, path)
        if lora is not None:
            found.append((spec.hf_name.removesuffix(".weight"), _module_at(model, path[:-1]), lora))
    return found


def peft_tensors(model, *, dtype: str = "float32") -> dict[str, np.ndarray]:
    """PEFT's adapter tensors: lora_A [r, prod(in)], lora_B [prod(out), r] with W' = W + (alpha/r) B.A in HF's
    [out, in] orientation; ours is A [in..., r], B [r, out...] with the kernel [in..., out...]."""
    out = {}
    for name, proj, lora in lora_modules(model):
        n_in = int(np.prod(proj.in_shape))
        a, b = _host(lora.a[...]), _host(lora.b[...])
        rank = a.shape[-1]
        out[f"base_model.model.{name}.lora_A.weight"] = np.ascontiguousarray(a.reshape(n_in, rank).T.astype(dtype))
        out[f"base_model.model.{name}.lora_B.weight"] = np.ascontiguousarray(b.reshape(rank, -1).T.astype(dtype))
    return out


def peft_config(model, *, base_model_name_or_path: str | None = None) -> dict[str, Any]:
    """PEFT's `adapter_config.json` for the model's adapters (one rank, alpha and dropout for all of them)."""
    modules = lora_modules(model)
    if not modules:
        raise ValueError("peft_config: the model has no LoRA adapters (apply_lora first)")
    ranks = {int(lora.a[...].shape[-1]) for _, _, lora in modules}
    alphas = {float(lora.scale * lora.a[...].shape[-1]) for _, _, lora in modules}
    dropouts = {float(lora.dropout.rate) if lora.dropout is not None else 0.0 for _, _, lora in modules}
    if len(ranks) != 1 or len(alphas) != 1 or len(dropouts) != 1:
        raise ValueError(f"peft_config: adapters differ in rank {ranks}, alpha {alphas} or dropout {dropouts}; "
                         f"expected one setting for all (as apply_lora makes)")
    return {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model_name_or_path,
        "r": ranks.pop(), "lora_alpha": alphas.pop(), "lora_dropout": dropouts.pop(),
        "target_modules": sorted(name for name, _, _ in modules), "bias": "none", "fan_in_fan_out": False,
        "inference_mode": True, "modules_to_save": None, "use_rslora": False, "use_dora": False,
        "init_lora_weights": True,
    }


def generation_config(model, tokenizer=None) -> dict[str, Any]:
    """bos / eos / pad ids for `generation_config.json`. eos: every end-of-turn id of the tokenizer, then every EOS id
    of the model's config.json not among them (a list, as `transformers.GenerationConfig.from_model_config` keeps it:
    generation stops on any)."""
    cfg = model.cfg
    if tokenizer is not None:
        from reasoner.tokenization import stop_token_ids

        eos = list(stop_token_ids(tokenizer))
        pad = tokenizer.pad_token_id
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else cfg.bos_token_id
    else:
        eos, pad, bos = [], None, cfg.bos_token_id
    eos += [i for i in cfg.eos_token_ids if i not in eos]
    out = {"bos_token_id": bos, "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
           "pad_token_id": pad if pad is not None else (eos[0] if eos else None)}
    return {k: v for k, v in out.items() if v is not None}


def _write_json(path: str, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


def base_model_reference(name_or_path: str | None) -> tuple[str | None, str | None]:
    """(what `adapter_config.json` records as the base, the GGUF file name to pass as `gguf_file=` or None).

    A local file or directory is recorded as its absolute path (PEFT resolves a relative one against the loading
    process's working directory); anything else (a Hub id) unchanged. A preset resolves to its checkpoint first.
    A GGUF file is recorded as its directory with its name apart: transformers opens GGUF only as
    `from_pretrained(directory, gguf_file=name)`, and `AutoPeftModelForCausalLM.from_pretrained(adapter_dir,
    gguf_file=name)` passes that on to the base (the adapters were trained on the dequantized GGUF weights, which
    is what transformers loads; the Hub checkpoint it was quantized from differs from them)."""
    from reasoner.models.presets import PRESETS, resolve

    if not name_or_path:
        return None, None
    path = resolve(name_or_path) if name_or_path in PRESETS else str(name_or_path)
    if not os.path.exists(path):
        return path, None
    path = os.path.abspath(path)
    if os.path.isfile(path) and path.lower().endswith(".gguf"):
        return os.path.dirname(path), os.path.basename(path)
    return path, None


def _loading_note(base: str | None, gguf_file: str | None) -> str:
    """`adapter/README.md`: how to load this adapter with PEFT, with the exact call for its base."""
    if base is None:
        return ("# LoRA adapter\n\nThe run did not record its base model: load the base yourself, then\n"
                "`peft.PeftModel.from_pretrained(base_model, this_directory)`.\n")
    extra = f", gguf_file={gguf_file!r}" if gguf_file else ""
    return (f"# LoRA adapter\n\nBase model: `{base}`" + (f" (GGUF file `{gguf_file}`)" if gguf_file else "")
            + "\n\n```python\nfrom peft import AutoPeftModelForCausalLM\n\n"
            + f"model = AutoPeftModelForCausalLM.from_pretrained(this_directory{extra})\n```\n")


def export_peft_adapter(model, out_dir: str, *, base_model_name_or_path: str | None = None,
                        dtype: str = "float32") -> str:
    """Writes `out_dir/adapter_config.json`, `out_dir/adapter_model.safetensors` and `out_dir/README.md` (how to
    load it); returns out_dir.

    base_model_name_or_path: the checkpoint the adapters were trained on (`config.model.name`), so that
      `peft.AutoPeftModelForCausalLM.from_pretrained(out_dir)` finds it (`gguf_file=` too for a GGUF base, see
      `base_model_reference`); None writes null (load the base yourself).
    """
    from safetensors.numpy import save_file

    from reasoner.distributed import is_primary

    base, gguf_file = base_model_reference(base_model_name_or_path)
    tensors, config = peft_tensors(model, dtype=dtype), peft_config(model, base_model_name_or_path=base)
    if is_primary():
        os.makedirs(out_dir, exist_ok=True)
        save_file(tensors, os.path.join(out_dir, "adapter_model.safetensors"), metadata={"format": "pt"})
        _write_json(os.path.join(out_dir, "adapter_config.json"), config)
        with open(os.path.join(out_dir, "README.md"), "w", encoding="utf-8") as f:
            f.write(_loading_note(base, gguf_file))
    return out_dir


def _remove_stale_weights(out_dir: str) -> None:
    """Removes what an earlier export or `save_pretrained` into `out_dir` left that this one would not overwrite:
    a sharded index and its shards (loaders would read them instead of the new `model.safetensors`) and a LoRA
    adapter (it would describe another model)."""
    import glob
    import shutil

    stale = glob.glob(os.path.join(out_dir, "model-*-of-*.safetensors"))
    stale += [os.path.join(out_dir, "model.safetensors.index.json")]
    for path in stale:
        if os.path.isfile(path):
            os.remove(path)
    shutil.rmtree(os.path.join(out_dir, ADAPTER_DIR), ignore_errors=True)


def export_hf(model, out_dir: str, *, tokenizer=None, dtype: str = "float32",
              base_model_name_or_path: str | None = None) -> str:
    """Writes a complete HF checkpoint of `model` into `out_dir` (see the module docstring); returns out_dir.

    tokenizer: the run's tokenizer (its files and chat template are saved); without it the directory holds
      the model only and `AutoTokenizer.from_pretrained(out_dir)` cannot load.
    base_model_name_or_path: the base checkpoint (HF directory or Hub id) the LoRA adapters were trained on,
      recorded in `adapter/adapter_config.json` (`base_model_reference`); the trainers pass `config.model.name`.
    """
    from safetensors.numpy import save_file

    from reasoner.distributed import is_primary

    config = model.cfg.to_hf_dict()
    config["torch_dtype"] = dtype
    tensors = hf_tensors(model, dtype=dtype)  # collective gather: every process takes part
    if is_primary():
        os.makedirs(out_dir, exist_ok=True)
        _remove_stale_weights(out_dir)
        save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
        _write_json(os.path.join(out_dir, "config.json"), config)
        _write_json(os.path.join(out_dir, "generation_config.json"), generation_config(model, tokenizer))
        if tokenizer is not None:
            tokenizer.save_pretrained(out_dir)
    if lora_modules(model):
        export_peft_adapter(model, os.path.join(out_dir, ADAPTER_DIR), dtype=dtype,
                            base_model_name_or_path=base_model_name_or_path)
    return out_dir
