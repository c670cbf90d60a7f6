"""GGUF checkpoints (llama.cpp): config from metadata and dequantized tensors under HF names.

`open_gguf(path) -> (ModelConfig, GGUFSource)`. The source answers HF tensor names
(`model.layers.0.self_attn.q_proj.weight`, ...) with float32 arrays in HF layout: it maps names,
dequantizes with `gguf.quants.dequantize`, and for the `llama` architecture undoes the row
permutation llama.cpp's converter applies to Q and K (its RoPE pairs adjacent elements; HF pairs
the two halves of each head).
"""

from __future__ import annotations

import os

import numpy as np

from reasoner.models.config import HF_DEFAULTS, ModelConfig, UnsupportedModelError
from reasoner.models.sources import CheckpointError

ARCHITECTURES = ("llama", "qwen2", "qwen3")

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}


def hf_name(gguf_name: str) -> str | None:
    """HF tensor name of a GGUF tensor name, or None if we do not use it."""
    if gguf_name in _TOP_NAMES:
        return _TOP_NAMES[gguf_name]
    if gguf_name.startswith("blk."):
        _, layer, rest = gguf_name.split(".", 2)
        if rest in _LAYER_NAMES:
            return f"model.layers.{layer}.{_LAYER_NAMES[rest]}"
    return None


def gguf_name(hf: str) -> str:
    """Inverse of `hf_name` (used by the tiny-GGUF writer in tests and tools)."""
    for g, h in _TOP_NAMES.items():
        if h == hf:
            return g
    parts = hf.split(".", 3)  # model, layers, i, rest
    for g, h in _LAYER_NAMES.items():
        if h == parts[3]:
            return f"blk.{parts[2]}.{g}"
    raise KeyError(hf)


def permute_llama_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF -> llama.cpp row order for Q/K (what convert_hf_to_gguf does)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_llama_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp -> HF row order for Q/K."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def config_from_gguf(file, *, source: str, has_output: bool, **overrides) -> ModelConfig:
    """`file` is a `reasoner.models.gguf_file.GGUFFile`."""
    meta = file.metadata
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise UnsupportedModelError(f"{source}: unsupported GGUF architecture {arch!r}; expected one of {ARCHITECTURES}")

    def need(key):
        value = meta.get(f"{arch}.{key}")
        if value is None:
            raise CheckpointError(f"{source}: GGUF metadata key {arch}.{key} is missing")
        return value

    heads = int(need("attention.head_count"))
    hidden = int(need("embedding_length"))
    vocab = meta.get(f"{arch}.vocab_size")
    if vocab is None:
        vocab = len(meta.get("tokenizer.ggml.tokens", ()))
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    rope_type, rope_scaling = "default", ()
    if scaling == "linear":
        rope_type, rope_scaling = "linear", (("factor", float(need("rope.scaling.factor"))),)
    elif scaling not in ("none", None):
        raise UnsupportedModelError(f"{source}: unsupported GGUF rope scaling {scaling!r}")
    if "rope_freqs.weight" in file.tensors:
        raise UnsupportedModelError(f"{source}: GGUF rope_freqs (Llama-3 RoPE factors) are not supported; "
                                    f"load the HF safetensors checkpoint instead")
    cfg = dict(
        family=arch,
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(need("feed_forward_length")),
        num_layers=int(need("block_count")),
        num_heads=heads,
        num_kv_heads=int(meta.get(f"{arch}.attention.head_count_kv", heads)),
        head_dim=int(meta.get(f"{arch}.attention.key_length", hidden // heads)),
        rope_theta=float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        rope_type=rope_type,
        rope_scaling=rope_scaling,
        rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        tie_embeddings=not has_output,
        # biases where the file has them (a llama-architecture GGUF may carry attention biases, as HF's
        # attention_bias; dropping them loaded a wrong model without a word)
        qkv_bias=arch == "qwen2" or "blk.0.attn_q.bias" in file.tensors,
        o_bias="blk.0.attn_output.bias" in file.tensors,
        qk_norm=arch == "qwen3",
        # absent: the family's transformers default, as transformers' own GGUF loader leaves it (llama 2048)
        max_position_embeddings=int(meta.get(f"{arch}.context_length",
                                             HF_DEFAULTS[arch]["max_position_embeddings"])),
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta.get("tokenizer.ggml.eos_token_id"),
    )
    cfg.update(overrides)
    return ModelConfig(**cfg)


class GGUFSource:
    """Dequantized float32 tensors of a GGUF file, addressed by HF names."""

    def __init__(self, path: str, file, cfg: ModelConfig):
        self.path, self.file, self.cfg = path, file, cfg
        self.tensors = {}
        for t in file.tensors.values():
            name = hf_name(t.name)
            if name is not None:
                self.tensors[name] = t

    def describe(self, name: str) -> str:
        t = self.tensors.get(name)
        return f"{self.path} (tensor {t.name})" if t is not None else self.path

    def names(self) -> list[str]:
        return list(self.tensors)

    def get(self, name: str) -> np.ndarray:
        import gguf

        from reasoner.models.gguf_file import dequantize

        t = self.tensors[name]
        try:
            raw = self.file.raw(t.name)
            w = dequantize(raw, self.file.type_name(t))
            if w is None:
                w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t.type_id))
        except NotImplementedError:
            raise CheckpointError(
                f"{self.path}: tensor {t.name} has GGUF type {self.file.type_name(t)}, which the gguf package cannot "
                f"dequantize; expected F32/F16/BF16 or a supported quantization (Q8_0, Q4_0, Q4_1, Q4_K, ...)"
            ) from None
        w = np.asarray(w, dtype=np.float32)
        if self.cfg.family == "llama" and name.endswith(("q_proj.weight", "k_proj.weight", "q_proj.bias",
                                                         "k_proj.bias")):  # llama.cpp permutes the biases too
            n_head = self.cfg.num_heads if ".q_proj." in name else self.cfg.num_kv_heads
            w = unpermute_llama_qk(w, n_head)
        return w


def open_gguf(path: str, **overrides) -> tuple[ModelConfig, GGUFSource]:
    from reasoner.models.gguf_file import GGUFFile

    file = GGUFFile(path)
    cfg = config_from_gguf(file, source=path, has_output="output.weight" in file.tensors, **overrides)
    return cfg, GGUFSource(path, file, cfg)
