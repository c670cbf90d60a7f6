"""The mapping between our parameter paths and HF tensor names, with the layout transforms.

HF stores linear weights as [out, in]; ours are [in..., out...] (e.g. q_proj [embed, heads,
head_dim]) so that heads stay a separate axis for sharding and GQA grouping.
`weight_map(cfg)` -> {our_path (tuple of str/int): TensorSpec}; `TensorSpec.to_ours(hf_array)`
and `TensorSpec.to_hf(our_array)` convert between numpy layouts.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from reasoner.models.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    hf_name: str
    hf_shape: tuple[int, ...]
    to_ours: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


def _linear(in_shape: tuple[int, ...], out_shape: tuple[int, ...]):
    """HF [prod(out), prod(in)] <-> ours in_shape + out_shape."""
    n_in, n_out = int(np.prod(in_shape)), int(np.prod(out_shape))
    to_ours = lambda a: np.ascontiguousarray(a.T).reshape(in_shape + out_shape)  # noqa: E731
    to_hf = lambda a: np.ascontiguousarray(a.reshape(n_in, n_out).T)  # noqa: E731
    return (n_out, n_in), to_ours, to_hf


def weight_map(cfg: ModelConfig) -> dict[tuple, TensorSpec]:
    D, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    H, KV, Dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    m: dict[tuple, TensorSpec] = {}

    def add(path, name, hf_shape, to_ours=None, to_hf=None):
        m[path] = TensorSpec(name, tuple(hf_shape), to_ours or (lambda a: a), to_hf or (lambda a: a))

    def linear(path, name, in_shape, out_shape):
        hf_shape, to_ours, to_hf = _linear(in_shape, out_shape)
        add(path, name, hf_shape, to_ours, to_hf)

    add(("embed",), "model.embed_tokens.weight", (V, D))
    add(("final_norm", "scale"), "model.norm.weight", (D,))
    if not cfg.tie_embeddings:
        add(("lm_head",), "lm_head.weight", (V, D), lambda a: np.ascontiguousarray(a.T),
            lambda a: np.ascontiguousarray(a.T))
    for i in range(cfg.num_layers):
        p, n = ("layers", i), f"model.layers.{i}."
        add(p + ("attn_norm", "scale"), n + "input_layernorm.weight", (D,))
        add(p + ("mlp_norm", "scale"), n + "post_attention_layernorm.weight", (D,))
        a = p + ("attn",)
        linear(a + ("q_proj", "kernel"), n + "self_attn.q_proj.weight", (D,), (H, Dh))
        linear(a + ("k_proj", "kernel"), n + "self_attn.k_proj.weight", (D,), (KV, Dh))
        linear(a + ("v_proj", "kernel"), n + "self_attn.v_proj.weight", (D,), (KV, Dh))
        linear(a + ("o_proj", "kernel"), n + "self_attn.o_proj.weight", (H, Dh), (D,))
        if cfg.qkv_bias:
            for proj, heads in (("q_proj", H), ("k_proj", KV), ("v_proj", KV)):
                add(a + (proj, "bias"), n + f"self_attn.{proj}.bias", (heads * Dh,),
                    lambda x, h=heads: x.reshape(h, Dh), lambda x: x.reshape(-1))
        if cfg.o_bias:
            add(a + ("o_proj", "bias"), n + "self_attn.o_proj.bias", (D,))
        if cfg.qk_norm:
            add(a + ("q_norm", "scale"), n + "self_attn.q_norm.weight", (Dh,))
            add(a + ("k_norm", "scale"), n + "self_attn.k_norm.weight", (Dh,))
        mp = p + ("mlp",)
        linear(mp + ("gate_proj", "kernel"), n + "mlp.gate_proj.weight", (D,), (I,))
        linear(mp + ("up_proj", "kernel"), n + "mlp.up_proj.weight", (D,), (I,))
        linear(mp + ("down_proj", "kernel"), n + "mlp.down_proj.weight", (I,), (D,))
    return m
