"""The PyTorch baseline model: transformers loaded from the same checkpoint as ours, in float32.

Used by `reasoner parity` and the load/forward benchmarks. Needs the `baseline` extra (torch).
"""

from __future__ import annotations

import os


def load_transformers_model(path: str, *, dtype: str = "float32"):
    """`AutoModelForCausalLM` from a GGUF file (dequantized by transformers) or an HF directory."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch_dtype = getattr(torch, dtype)
    if path.endswith(".gguf"):
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                                     gguf_file=os.path.basename(path), dtype=torch_dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    return model.eval()


def transformers_version() -> str:
    import transformers

    return f"transformers {transformers.__version__}"
