"""Rotary position embeddings (RoPE) as in HF transformers: `rotate_half` layout, f32 angles.

`inverse_frequencies(cfg)` -> [head_dim/2] float32 (default, linear or Llama-3 scaling);
`rope_tables(positions_BxT, inv_freq)` -> (cos_BxTxK, sin_BxTxK) with K = head_dim/2, computed
once per forward and shared by all layers; `apply_rope(x_BxTxHxD, cos, sin)`.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from reasoner.models.config import ModelConfig


def inverse_frequencies(cfg: ModelConfig) -> np.ndarray:
    """Per-pair rotation frequencies, computed in float32 like transformers' `ROPE_INIT_FUNCTIONS`."""
    dim = cfg.head_dim
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv_freq = (np.float32(1.0) / (np.float32(cfg.rope_theta) ** exponents)).astype(np.float32)
    s = cfg.rope_scaling_dict
    if cfg.rope_type == "linear":
        inv_freq = inv_freq / np.float32(s["factor"])
    elif cfg.rope_type == "llama3":
        factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old_len = s["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv_freq = np.where(medium, smoothed, scaled).astype(np.float32)
    return inv_freq


def rope_tables(positions_BxT: jnp.ndarray, inv_freq: np.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """cos/sin of `position * inv_freq`, each [B, T, head_dim/2] float32."""
    angles = positions_BxT.astype(jnp.float32)[..., None] * jnp.asarray(np.asarray(inv_freq, np.float32))
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x_BxTxHxD: jnp.ndarray, cos_BxTxK: jnp.ndarray, sin_BxTxK: jnp.ndarray) -> jnp.ndarray:
    """Rotates the two halves of the head dimension (HF `rotate_half` convention) in float32."""
    dtype = x_BxTxHxD.dtype
    x = x_BxTxHxD.astype(jnp.float32)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos_BxTxK[:, :, None, :], sin_BxTxK[:, :, None, :]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(dtype)
