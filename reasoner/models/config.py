"""`ModelConfig`: the one description of a decoder, read from HF `config.json` or GGUF metadata.

Families: `llama` (incl. Llama-3.x RoPE scaling, SmolLM2), `qwen2` (q/k/v bias), `qwen3`
(per-head q/k RMSNorm), `mistral` (Llama's layout with sliding-window attention in every layer).
`ModelConfig.from_hf_dict(d)` reads a `config.json` dict (both the transformers-5 `rope_parameters`
form and the older top-level `rope_theta` / `rope_scaling`; a key it leaves out takes the default of transformers'
config class of that family, `HF_DEFAULTS`); `reasoner.models.gguf.config_from_gguf(reader)`
reads GGUF metadata; `to_hf_dict()` writes a `config.json` that `transformers.AutoModelForCausalLM` accepts.

Sliding-window attention (`sliding_window` W > 0, in the layers `sliding_layers`): a query at slot i attends
to the keys at slots j with i - W < j <= i (W keys, itself included), the convention of transformers 5's
`masking_utils.sliding_window_overlay` (`kv_idx > q_idx - sliding_window`). Mistral applies it in every layer
(`sliding_window: null` in its config.json means none); Qwen2/Qwen3 only when `use_sliding_window` is true, in
the layers `layer_types` marks "sliding_attention" (by default those from `max_window_layers` on).
`config_from_gguf` reads no window (Mistral GGUFs are written as llama.cpp's `llama` architecture).

`param_dtype` is the storage dtype of the weights, `dtype` the compute dtype of matmuls;
norms, RoPE and softmax always run in float32. `remat=True` rematerialises each layer in the
backward pass.
"""

from __future__ import annotations

import dataclasses
from typing import Any

FAMILIES = ("llama", "qwen2", "qwen3", "mistral")
ROPE_TYPES = ("default", "linear", "llama3")
# What transformers 5's config classes (LlamaConfig, Qwen2Config, Qwen3Config, MistralConfig) give a key that a
# config.json leaves out, so a hand-written config.json builds the model transformers builds from it. They differ
# by family: Qwen2/Qwen3 default num_key_value_heads to 32 and Mistral to 8 (not num_attention_heads), Qwen3
# head_dim to 128 (not hidden_size // num_attention_heads). None: derived (num_key_value_heads =
# num_attention_heads, head_dim = hidden_size // num_attention_heads), as transformers derives a null value too.
# The sizes (vocab_size, hidden_size, ...) have no default here: transformers' are a 7B model's, never what a
# hand-written config meant, so their absence stays an error naming the file.
HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"num_key_value_heads": None, "head_dim": None, "max_position_embeddings": 2048,
              "bos_token_id": 1, "eos_token_id": 2},
    "qwen2": {"num_key_value_heads": 32, "head_dim": None, "max_position_embeddings": 32768,
              "bos_token_id": None, "eos_token_id": None, "sliding_window": 4096},
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128, "max_position_embeddings": 32768,
              "bos_token_id": None, "eos_token_id": None, "sliding_window": 4096},
    "mistral": {"num_key_value_heads": 8, "head_dim": None, "max_position_embeddings": 4096 * 32,
                "bos_token_id": 1, "eos_token_id": 2, "sliding_window": 4096},
}


class UnsupportedModelError(ValueError):
    """The checkpoint describes an architecture or option this decoder does not implement."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of a decoder-only transformer (all sizes in elements, not bytes)."""

    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_type: str = "default"
    # For "linear": {"factor"}; for "llama3": {"factor", "low_freq_factor", "high_freq_factor",
    # "original_max_position_embeddings"}. Stored as sorted (key, value) pairs to stay hashable.
    rope_scaling: tuple[tuple[str, float], ...] = ()
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    max_position_embeddings: int = 8192
    bos_token_id: int | None = None
    eos_token_id: int | None = None  # the first EOS id (what single-id callers read)
    # Every EOS id (config.json may list several; transformers' generation stops on any). Normalised to include
    # eos_token_id (prepended when missing); eos_token_id defaults to its first entry.
    eos_token_ids: tuple[int, ...] = ()
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: bool = False
    # "auto": query-blocked attention (`blocked_attention.py`) on CPU for sequences of at least
    # 128 tokens without a cache, dense otherwise; "dense" / "blocked" force one.
    attention: str = "auto"
    # Sliding-window attention: 0 = none; else the keys a query sees (itself included) in the layers listed
    # in `sliding_layers` (None = every layer; normalised to the tuple of indices).
    sliding_window: int = 0
    sliding_layers: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise UnsupportedModelError(f"unsupported model family {self.family!r}; expected one of {FAMILIES}")
        if self.rope_type not in ROPE_TYPES:
            raise UnsupportedModelError(f"unsupported RoPE type {self.rope_type!r}; expected one of {ROPE_TYPES}")
        if self.attention not in ("auto", "dense", "blocked"):
            raise ValueError(f"attention={self.attention!r}; expected 'auto', 'dense' or 'blocked'")
        if self.num_heads % self.num_kv_heads:
            raise UnsupportedModelError(
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
            )
        if self.head_dim % 2:
            raise UnsupportedModelError(f"head_dim={self.head_dim} must be even for RoPE")
        if isinstance(self.sliding_window, bool) or not isinstance(self.sliding_window, int) or self.sliding_window < 0:
            raise ValueError(f"sliding_window={self.sliding_window!r}; expected an int >= 0 (0 = no window)")
        layers = self.sliding_layers
        if layers is None:
            layers = tuple(range(self.num_layers)) if self.sliding_window else ()
        layers = tuple(sorted(int(i) for i in layers))
        if any(not 0 <= i < self.num_layers for i in layers) or len(set(layers)) != len(layers):
            raise ValueError(f"sliding_layers={self.sliding_layers!r}; expected distinct layer indices in "
                             f"[0, {self.num_layers})")
        if layers and not self.sliding_window:
            raise ValueError(f"sliding_layers={layers} without a sliding_window; expected sliding_window > 0")
        object.__setattr__(self, "sliding_layers", layers)
        eos_ids = tuple(int(i) for i in self.eos_token_ids)
        if self.eos_token_id is None:
            object.__setattr__(self, "eos_token_id", eos_ids[0] if eos_ids else None)
        elif int(self.eos_token_id) not in eos_ids:
            eos_ids = (int(self.eos_token_id),) + eos_ids
        object.__setattr__(self, "eos_token_ids", eos_ids)

    def layer_window(self, layer: int) -> int:
        """The attention window of layer `layer`: `sliding_window`, or 0 (full causal attention)."""
        return self.sliding_window if layer in self.sliding_layers else 0

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (GQA)."""
        return self.num_heads // self.num_kv_heads

    @property
    def rope_scaling_dict(self) -> dict[str, float]:
        return dict(self.rope_scaling)

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ HF config.json
    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], *, source: str = "config.json", **overrides: Any) -> "ModelConfig":
        """Builds a config from a HF `config.json` dict; `overrides` set dtype/remat etc."""
        model_type = d.get("model_type")
        archs = d.get("architectures") or []
        family = model_type if model_type in FAMILIES else None
        if family is None:
            raise UnsupportedModelError(
                f"{source}: unsupported model_type {model_type!r} (architectures={archs}); "
                f"expected one of {', '.join(FAMILIES)}"
            )
        if family == "llama" and d.get("mlp_bias"):  # only LlamaMLP reads it: the others build no MLP bias
            raise UnsupportedModelError(f"{source}: mlp_bias=true is not supported")
        if d.get("hidden_act", "silu") not in ("silu", "swish"):  # transformers' ACT2FN: "swish" is SiLU too
            raise UnsupportedModelError(f"{source}: hidden_act={d.get('hidden_act')!r}; expected 'silu'")
        heads = int(d["num_attention_heads"])
        num_layers = int(d["num_hidden_layers"])
        kv_absent = "num_key_value_heads" not in d
        d = {**HF_DEFAULTS[family], **d}  # a key written as null keeps its null (derived below), as in transformers
        kv_heads = int(d["num_key_value_heads"] or heads)
        if heads % kv_heads:
            raise UnsupportedModelError(
                f"{source}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}"
                + (f" (the key is absent: transformers' {family} default); expected num_key_value_heads in "
                   "config.json" if kv_absent else ""))
        window, window_layers = _sliding_window(d, family, num_layers, source)
        rope = dict(d.get("rope_parameters") or d.get("rope_scaling") or {})
        theta = float(rope.pop("rope_theta", d.get("rope_theta", 10000.0)))
        rope_type = rope.pop("rope_type", rope.pop("type", "default")) or "default"
        keep = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                                                  "original_max_position_embeddings")}.get(rope_type, ())
        if rope_type not in ROPE_TYPES:
            raise UnsupportedModelError(f"{source}: unsupported rope_type {rope_type!r}; expected one of {ROPE_TYPES}")
        missing = [k for k in keep if k not in rope]
        if missing:
            raise UnsupportedModelError(f"{source}: rope_type {rope_type!r} needs {missing}")
        eos = d.get("eos_token_id")
        eos_ids = tuple(int(i) for i in eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        # the biases each family's attention builds: Llama's and Qwen3's from attention_bias, Qwen2's q/k/v always,
        # Mistral's never (MistralAttention ignores attention_bias)
        attention_bias = family in ("llama", "qwen3") and bool(d.get("attention_bias", False))
        cfg = dict(
            family=family,
            vocab_size=int(d["vocab_size"]),
            hidden_size=int(d["hidden_size"]),
            intermediate_size=int(d["intermediate_size"]),
            num_layers=num_layers,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=int(d.get("head_dim") or int(d["hidden_size"]) // heads),
            rope_theta=theta,
            rope_type=rope_type,
            rope_scaling=tuple(sorted((k, float(rope[k])) for k in keep)),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            # a config.json without the key is untied, as every transformers config class defaults it
            tie_embeddings=bool(d.get("tie_word_embeddings", False)),
            qkv_bias=True if family == "qwen2" else attention_bias,
            o_bias=False if family == "qwen2" else attention_bias,
            qk_norm=family == "qwen3",
            max_position_embeddings=int(d["max_position_embeddings"]),
            bos_token_id=d.get("bos_token_id"),
            eos_token_id=eos_ids[0] if eos_ids else None,
            eos_token_ids=eos_ids,
            sliding_window=window,
            sliding_layers=window_layers,
        )
        cfg.update(overrides)
        return cls(**cfg)

    def to_hf_dict(self) -> dict[str, Any]:
        """A `config.json` dict that transformers' `AutoConfig`/`AutoModelForCausalLM` load."""
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                "mistral": "MistralForCausalLM"}[self.family]
        rope = {"rope_type": self.rope_type, "rope_theta": self.rope_theta, **self.rope_scaling_dict}
        if "original_max_position_embeddings" in rope:
            rope["original_max_position_embeddings"] = int(rope["original_max_position_embeddings"])
        d: dict[str, Any] = {
            "architectures": [arch],
            "model_type": self.family,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_parameters": rope,
            # Older transformers read these two top-level keys.
            "rope_theta": self.rope_theta,
            "rope_scaling": None if self.rope_type == "default" else dict(rope),
            "tie_word_embeddings": self.tie_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids) if len(self.eos_token_ids) > 1 else self.eos_token_id,
            "torch_dtype": "float32",
        }
        if self.family in ("qwen2", "qwen3"):
            d["use_sliding_window"] = bool(self.sliding_window)
            if self.sliding_window:
                d["sliding_window"] = self.sliding_window
                d["layer_types"] = ["sliding_attention" if self.layer_window(i) else "full_attention"
                                    for i in range(self.num_layers)]
        if self.family == "mistral":
            # transformers' Mistral has one window for all layers (None = full attention)
            d["sliding_window"] = self.sliding_window or None
        if self.family != "qwen2":
            d["attention_bias"] = self.qkv_bias
        if self.family == "llama":
            d["mlp_bias"] = False
        return d


def _sliding_window(d: dict[str, Any], family: str, num_layers: int, source: str) -> tuple[int, tuple[int, ...]]:
    """(window, layers using it) from a config.json dict with `HF_DEFAULTS` filled in, as transformers 5 reads it
    (module docstring)."""
    if family == "mistral":
        # transformers' MistralAttention windows every layer even when a config lists layer_types; so do we.
        window = d["sliding_window"]  # absent: MistralConfig's default (HF_DEFAULTS); null: none
        return (0, ()) if window is None else (_window_size(window, source), tuple(range(num_layers)))
    if family in ("qwen2", "qwen3"):
        if not d.get("use_sliding_window") or d.get("sliding_window") is None:
            return 0, ()
        window = _window_size(d["sliding_window"], source)
        types = d.get("layer_types")
        if types is not None:
            if len(types) != num_layers or any(t not in ("full_attention", "sliding_attention") for t in types):
                raise UnsupportedModelError(f"{source}: layer_types={types!r}; expected {num_layers} entries of "
                                            f"'full_attention' / 'sliding_attention'")
            return window, tuple(i for i, t in enumerate(types) if t == "sliding_attention")
        first = int(d.get("max_window_layers", 28))
        return window, tuple(range(min(first, num_layers), num_layers))
    if d.get("use_sliding_window") or d.get("sliding_window"):
        raise UnsupportedModelError(f"{source}: sliding-window attention in a {family} config is not supported")
    return 0, ()


def _window_size(value: Any, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UnsupportedModelError(f"{source}: sliding_window={value!r}; expected a positive int or null")
    return value
