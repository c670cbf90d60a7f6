"""Teacher-forced log-probabilities: the one log-prob module (one spelling, `logps`) of the library and trainers.

Conventions: token arrays are [B, T]; the log-prob of token t+1 comes from the logits at position t, so the
targets of a [B, T] batch are tokens[:, 1:] and per-token log-probs of a whole sequence are [B, T-1].

* `picked_logps(logits_BxNxV, targets_BxN)` -> [B, N] float32 log_softmax(logits)[target], logits already
  aligned with their targets (position n predicts target n).
* `target_mask(loss_mask_BxT, segment_ids_BxT)` -> [B, T-1]: which targets a loss trains (packed documents never
  predict across their boundary).
* `sequence_logps(model, batch)` -> ([B, T-1] log-probs, [B, T-1] target mask) of a padded / packed batch with
  `tokens`, `positions`, `segment_ids`, `loss_mask` (SFT and DPO).
* `token_logps(model, tokens_BxT, ...)` -> [B, T] with `logp[b, t] = log p(tokens[b, t+1] | tokens[b, :t+1])` and
  the last column 0, projecting `chunk` positions at a time so the [B, T, V] logits (800 MB for 8 x 512 x 49k in
  f32) never exist at once (`reasoner bench forward`, evaluation).
* `logps_and_entropy(logits_BxNxV, ids_BxN, temperature=)` -> ([B, N] log-probs, [B, N] entropies) at a sampling
  temperature (TRL's GRPO convention), and `completion_logps(model, tokens_BxT, ...)` -> both for the N completion
  tokens after a left-padded prompt of `prompt_len`, projected `chunk` positions at a time under `jax.checkpoint`.
"""

from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp


def picked_logps(logits_BxNxV: jax.Array, targets_BxN: jax.Array) -> jax.Array:
    """[B, N] float32 log_softmax(logits)[target]; position n of `logits` predicts `targets[:, n]`."""
    logits = logits_BxNxV.astype(jnp.float32)
    picked = jnp.take_along_axis(logits, targets_BxN[..., None], axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def target_mask(loss_mask_BxT: jax.Array, segment_ids_BxT: jax.Array) -> jax.Array:
    """[B, T-1] float32: 1 where token t+1 is trained and sits in the same (non-padding) segment as token t."""
    same = (segment_ids_BxT[:, 1:] == segment_ids_BxT[:, :-1]) & (segment_ids_BxT[:, 1:] != 0)
    return (loss_mask_BxT[:, 1:].astype(bool) & same).astype(jnp.float32)


def sequence_logps(model, batch: Mapping[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """(per-token log-probs [B, T-1], trained-target mask [B, T-1]) of `model` on a padded/packed batch."""
    tokens, segment_ids = batch["tokens"], batch["segment_ids"]
    hidden, _ = model.hidden_states(tokens, positions_BxT=batch["positions"], segment_ids_BxT=segment_ids)
    # the last position predicts nothing: drop it before the vocabulary projection, not after (a [B, T, V] copy)
    logits = model.logits(hidden[:, :-1])
    return picked_logps(logits, tokens[:, 1:]), target_mask(batch["loss_mask"], segment_ids)


def token_logps(model, tokens_BxT, *, positions_BxT=None, segment_ids_BxT=None, chunk: int = 128) -> jax.Array:
    """[B, T] float32 next-token log-probs (last column 0), `chunk` positions projected at a time."""
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
        return picked_logps(model.logits(h_BxCxD), y_BxC)

    logp = jax.lax.map(one, (h, y)).swapaxes(0, 1).reshape(B, n * chunk)[:, :T]
    return logp.at[:, -1].set(0.0)


def logps_and_entropy(logits_BxTxV, token_ids_BxT, *, temperature: float = 1.0):
    """Per-token log-probs of `token_ids_BxT` and the entropy (nats) of each position, from temperature-scaled logits.

    logits_BxTxV[:, t] must be the logits that predict token_ids_BxT[:, t] (for a prompt of P tokens followed by
    the completion, the model's logits at positions P-1 .. P+T-2). TRL scales by the sampling temperature before
    the softmax (its fused LM head), so the policy, old and reference log-probs must all use the same temperature.
    Computed in float32 whatever the logits dtype.
    """
    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: expected > 0")
    if logits_BxTxV.shape[:2] != token_ids_BxT.shape:
        raise ValueError(f"logits_BxTxV {logits_BxTxV.shape} and token_ids_BxT {token_ids_BxT.shape}: "
                         "expected the same [B, T]")
    logp_BxTxV = jax.nn.log_softmax(logits_BxTxV.astype(jnp.float32) / temperature, axis=-1)
    logps_BxT = jnp.take_along_axis(logp_BxTxV, token_ids_BxT[..., None].astype(jnp.int32), axis=-1)[..., 0]
    # Entries masked to -inf (e.g. by a logits processor) contribute 0, not 0 * -inf = NaN; the inner where keeps
    # the gradient finite too.
    p_BxTxV = jnp.exp(logp_BxTxV)
    entropy_BxT = -jnp.sum(p_BxTxV * jnp.where(p_BxTxV > 0, logp_BxTxV, 0.0), axis=-1)
    return logps_BxT, entropy_BxT


LOGITS_CHUNK = 32  # completion positions projected to the vocabulary at a time


def completion_logps(model, tokens_BxT, *, positions_BxT, segment_ids_BxT, completion_ids_BxN, prompt_len: int,
                     temperature: float, chunk: int | None = None) -> tuple[jax.Array, jax.Array]:
    """(log-probs, entropies) [B, N] of the completion tokens under `model` at the sampling temperature.

    Only the N positions that predict completion tokens are projected to the vocabulary, `chunk` positions at a
    time under `jax.checkpoint`, so neither the forward nor the backward pass holds [B, N, V] logits at once.
    """
    ids_BxN = completion_ids_BxN
    B, N = ids_BxN.shape
    T = tokens_BxT.shape[1]
    # positions prompt_len - 1 .. prompt_len + N - 2 predict the completion; dynamic_slice would clamp a window
    # that leaves the sequence and silently score the wrong positions
    if prompt_len < 1 or prompt_len + N - 1 > T:
        raise ValueError(f"completion_logps: prompt_len={prompt_len} and {N} completion tokens need positions "
                         f"{prompt_len - 1}..{prompt_len + N - 2} of tokens_BxT, which has {T}; expected "
                         f"1 <= prompt_len <= {T - N + 1}")
    hidden, _ = model.hidden_states(tokens_BxT, positions_BxT=positions_BxT, segment_ids_BxT=segment_ids_BxT)
    h_BxNxD = jax.lax.dynamic_slice_in_dim(hidden, prompt_len - 1, N, axis=1)
    C = min(chunk or LOGITS_CHUNK, N)
    n = -(-N // C)
    pad = n * C - N
    h = jnp.pad(h_BxNxD, ((0, 0), (0, pad), (0, 0))).reshape(B, n, C, -1).swapaxes(0, 1)
    y = jnp.pad(ids_BxN, ((0, 0), (0, pad))).reshape(B, n, C).swapaxes(0, 1)

    @jax.checkpoint
    def one(args):
        h_BxCxD, y_BxC = args
        return logps_and_entropy(model.logits(h_BxCxD), y_BxC, temperature=temperature)

    logps, entropy = jax.lax.map(one, (h, y))
    unchunk = lambda x: x.swapaxes(0, 1).reshape(B, n * C)[:, :N]  # noqa: E731
    return unchunk(logps), unchunk(entropy)
