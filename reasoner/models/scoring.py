"""Teacher-forced scoring: log-probabilities of each next token under the model.

`token_logprobs(model, tokens_BxT, *, positions_BxT=None, segment_ids_BxT=None) -> logp_BxT`
where `logp[b, t] = log p(tokens[b, t+1] | tokens[b, :t+1])` in float32 and the last column is 0.
Used by `reasoner bench forward` and as the reference for trainers' log-prob code.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def token_logprobs(model, tokens_BxT, *, positions_BxT=None, segment_ids_BxT=None) -> jax.Array:
    tokens_BxT = jnp.asarray(tokens_BxT, jnp.int32)
    B, T = tokens_BxT.shape
    if positions_BxT is None:
        positions_BxT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    logits_BxTxV, _ = model(tokens_BxT, positions_BxT=positions_BxT, segment_ids_BxT=segment_ids_BxT)
    logits_BxTxV = logits_BxTxV[:, :-1]
    targets = tokens_BxT[:, 1:]
    picked = jnp.take_along_axis(logits_BxTxV, targets[..., None], axis=-1)[..., 0]
    logp = picked - jax.nn.logsumexp(logits_BxTxV, axis=-1)
    return jnp.pad(logp, ((0, 0), (0, 1)))
