"""Will a generation batch fit? An estimate made on the host before anything is compiled.

Counts the KV cache of all rows, the prefill's activations (hidden states, MLP, attention
scores) and per-row decode buffers; compares against a budget (by default the memory free
right now: the devices' own `memory_stats` where they report one, else the host's MemAvailable).
"""

from __future__ import annotations

import jax
import numpy as np

from reasoner import allocator

GIB = 1 << 30


def free_memory_bytes() -> int:
    """Free memory of the default backend: devices' reported headroom, or the host's MemAvailable plus what this
    process's malloc heap holds free (`allocator.heap_free_bytes`: under the `reasoner` command's malloc settings
    freed memory stays there, reusable by the next batch)."""
    stats = None
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # CPU backends may not implement memory_stats
        stats = None
    if stats and "bytes_limit" in stats:
        per_device = stats["bytes_limit"] - stats.get("bytes_in_use", 0)
        return int(per_device) * jax.device_count()
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 + allocator.heap_free_bytes()
    except OSError:
        pass
    return 1 << 62  # unknown: do not block


def estimate_bytes(cfg, *, batch: int, prompts: int, prompt_bucket: int, alloc_len: int, max_new: int) -> dict:
    """Bytes by component for B=`batch` rows of `alloc_len` slots and a prefill of P x T tokens."""
    act = np.dtype(cfg.dtype).itemsize
    per_slot = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * act
    P, T = prompts, prompt_bucket
    widest = max(cfg.hidden_size, cfg.intermediate_size * 2, cfg.num_heads * cfg.head_dim * 2)
    return {
        "kv_cache": batch * alloc_len * per_slot,
        "prefill_cache": P * T * per_slot,
        # a few live [P, T, width] activations plus one layer's attention scores (f32)
        "prefill_activations": 4 * P * T * widest * 4 + P * cfg.num_heads * T * T * 4 * 2,
        "logits": 3 * batch * cfg.vocab_size * 4,
        "lm_head_copy": cfg.vocab_size * cfg.hidden_size * act if cfg.tie_embeddings else 0,
        "outputs": 3 * batch * max_new * 4,
    }


def check_fits(cfg, *, batch: int, prompts: int, prompt_bucket: int, alloc_len: int, max_new: int,
               limit_bytes: int | None = None) -> int:
    """Raises MemoryError naming the batch and what it needs when the estimate exceeds the budget;
    returns the estimate in bytes."""
    parts = estimate_bytes(cfg, batch=batch, prompts=prompts, prompt_bucket=prompt_bucket, alloc_len=alloc_len,
                           max_new=max_new)
    need = sum(parts.values())
    budget = free_memory_bytes() if limit_bytes is None else int(limit_bytes)
    if need > budget:
        detail = ", ".join(f"{k} {v / GIB:.2f} GiB" for k, v in parts.items())
        raise MemoryError(
            f"batch of {batch} rows x {alloc_len} cache slots (prefill {prompts} x {prompt_bucket}) needs about "
            f"{need / GIB:.2f} GiB ({detail}) but only {budget / GIB:.2f} GiB is available; "
            f"lower the number of prompts, n, or max_len"
        )
    return need
