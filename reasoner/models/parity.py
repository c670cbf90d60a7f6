"""Logit parity of our decoder against transformers on chat prompts (what `reasoner parity` prints).

`run_parity(model, *, mesh_spec=None)` renders `PARITY_CHATS` with the checkpoint's chat template,
runs ours (jitted, one right-padded batch; f32) and transformers (one prompt at a time, f32, same
checkpoint), and returns {"max_abs_logit_diff", "top1_agreement", "tokens", "reference", ...} over
every real token position, with `float32_bound`, the difference two float32 evaluations of the same decoder may
show (`logit_bound`), which `reasoner parity` uses as its default tolerance.
"""

from __future__ import annotations

import importlib.resources
import json
import math
import time

EPS32 = 2.0 ** -23  # float32 machine epsilon
PROB_LAMBDA = 8.0  # Higham & Mary's confidence parameter: the bound fails with probability <= 2 n exp(-32)


def logit_bound(cfg, *, seq_len: int, max_abs_logit: float) -> float:
    """|ours - transformers| bound for float32 logits: lambda * sqrt(n) * EPS32 * max|logit|.

    Both sides compute the same decoder in float32 with other kernels (summation orders). A sum of n terms in any
    order is within lambda sqrt(n) u sum|terms| of exact with probability >= 1 - 2 n exp(-lambda^2 / 2) (Higham &
    Mary, SIAM J. Sci. Comput. 41, 2019, Thm 3.1), so two orders differ by <= lambda sqrt(n) EPS32 (EPS32 = 2u).
    n is the sum of the reduction lengths on the path from the embedding to a logit: per layer two RMSNorms (D
    each), q/k/v (D), scores (Dh), softmax and values (T keys), output projection (H Dh), gate/up (D), down (I);
    then the final norm and the head (D each) and the vocabulary (V). RMSNorm and the residual stream keep each
    stage's values O(1), so the relative errors add along the chain, and the largest logit stands in for the
    scale. Same derivation as tests/tolerances.py `logits_atol`; it depends on the model and the values, not on
    the CPU, so a fixed constant (this command's old 2e-3) neither fails a large model spuriously nor hides a
    real mismatch on a small one.
    """
    d, dh = cfg.hidden_size, cfg.head_dim
    per_layer = 2 * d + d + dh + seq_len + cfg.num_heads * dh + d + cfg.intermediate_size
    depth = cfg.num_layers * per_layer + 2 * d + cfg.vocab_size
    return PROB_LAMBDA * math.sqrt(depth) * EPS32 * float(max_abs_logit)


PARITY_CHATS: list[list[dict[str, str]]] = json.loads(
    importlib.resources.files(__package__).joinpath("parity_chats.json").read_text(encoding="utf-8"))
"""Ten chats (system, multi-turn, code, logic, arithmetic), shipped beside this module as data."""


def run_parity(model_name: str, *, mesh_spec: str | None = None) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    from reasoner.models.loading import load_model
    from reasoner.models.presets import resolve
    from reasoner.models.reference import load_transformers_model, transformers_version
    from reasoner.sharding import logical_sharding, make_mesh
    from reasoner.tokenization import chat_ids, load_tokenizer

    path = resolve(model_name)
    tokenizer = load_tokenizer(path)
    prompts = [chat_ids(tokenizer, chat, add_generation_prompt=True) for chat in PARITY_CHATS]
    mesh = make_mesh(mesh_spec) if mesh_spec else None
    model = load_model(path, mesh=mesh)
    B, T = len(prompts), max(len(p) for p in prompts)
    if mesh is not None:  # empty rows (segment 0) up to a multiple of the batch axes: they must divide the batch
        from reasoner.data.pipeline import batch_axes

        split = int(np.prod([mesh.shape[a] for a in batch_axes(mesh)]))
        B = -(-B // split) * split
    tokens = np.zeros((B, T), np.int32)
    segments = np.zeros((B, T), np.int32)
    for i, p in enumerate(prompts):
        tokens[i, :len(p)] = p
        segments[i, :len(p)] = 1
    positions = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T))
    graphdef, state = nnx.split(model)

    def forward(state, tokens, positions, segments):
        return nnx.merge(graphdef, state)(tokens, positions_BxT=positions, segment_ids_BxT=segments)[0]

    arrays = (tokens, positions, segments)
    if mesh is not None:
        sharding = logical_sharding(("batch", "seq"), (B, T), mesh)
        arrays = tuple(jax.device_put(a, sharding) for a in arrays)
        out_sharding = NamedSharding(mesh, PartitionSpec())
    else:
        out_sharding = None
    start = time.perf_counter()
    ours = np.asarray(jax.jit(forward, out_shardings=out_sharding)(state, *map(jnp.asarray, arrays)))
    ours_s = time.perf_counter() - start

    reference = load_transformers_model(path)
    max_diff, max_logit, agree, count = 0.0, 0.0, 0, 0
    with torch.no_grad():
        for i, p in enumerate(prompts):
            ref = reference(torch.tensor([p])).logits[0].float().numpy()
            mine = ours[i, :len(p)]
            max_diff = max(max_diff, float(np.abs(mine - ref).max()))
            max_logit = max(max_logit, float(np.abs(ref).max()))
            agree += int((mine.argmax(-1) == ref.argmax(-1)).sum())
            count += len(p)
    longest = max(len(p) for p in prompts)
    return {
        "max_abs_logit_diff": max_diff,
        "float32_bound": logit_bound(model.cfg, seq_len=longest, max_abs_logit=max_logit),
        "max_abs_logit": max_logit,
        "seq_len": longest,
        "top1_agreement": agree / count,
        "tokens": count,
        "reference": transformers_version(),
        "model": model_name,
        "prompts": len(prompts),
        "mesh": {k: int(v) for k, v in mesh.shape.items()} if mesh is not None else None,
        "devices": jax.device_count(),
        "ours_forward_s_incl_compile": round(ours_s, 3),
    }
