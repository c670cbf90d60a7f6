"""Teacher-forced scoring: log-probabilities of each next token under the model.

`token_logprobs(model, tokens_BxT, *, positions_BxT=None, segment_ids_BxT=None, chunk=128) -> logp_BxT`
where `logp[b, t] = log p(tokens[b, t+1] | tokens[b, :t+1])` in float32 and the last column is 0.
The vocabulary projection runs `chunk` positions at a time, so the [B, T, V] logits (800 MB for
8 x 512 x 49k in f32) never exist at once. Used by `reasoner bench forward` and as a reference
for the trainers' log-prob code.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def token_logprobs(model, tokens_BxT, *, positions_BxT=None, segment_ids_BxT=None, chunk: int = 128) -> jax.Array:
    tokens_BxT = jnp.asarray(tokens_BxT, jnp.int32)
    B, T = tokens_BxT.shape
    if positions_BxT is None:
        positions_BxT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    hidden_BxTxD, _ = model.hidden_states(tokens_BxT, positions_BxT=positions_BxT, segment_ids_BxT=segment_ids_BxT)
    targets_BxT = jnp.pad(tokens_BxT[:, 1:], ((0, 0), (0, 1)))
    chunk = min(chunk, T)
    n = -(-T // chunk)
    pad = n * chunk - T
    h = jnp.pad(hidden_BxTxD, ((0, 0), (0, pad), (0, 0))).reshape(B, n, chunk, -1).swapaxes(0, 1)
    y = jnp.pad(targets_BxT, ((0, 0), (0, pad))).reshape(B, n, chunk).swapaxes(0, 1)

    def one(args):
        h_BxCxD, y_BxC = args
        logits = model.logits(h_BxCxD)
        picked = jnp.take_along_axis(logits, y_BxC[..., None], axis=-1)[..., 0]
        return picked - jax.nn.logsumexp(logits, axis=-1)

    logp = jax.lax.map(one, (h, y)).swapaxes(0, 1).reshape(B, n * chunk)[:, :T]
    return logp.at[:, -1].set(0.0)
