"""Speculative decoding by prompt lookup: drafts from the row's own tokens, verified in one forward pass.

A decode step reads every weight of the model to produce one token per row; at small batches that read is the
whole cost (the step is memory-bound), so feeding a row C tokens at once costs little more than feeding one.
Prompt lookup (the n-gram drafter of vLLM and SGLang, transformers' `prompt_lookup_num_tokens`) guesses those
tokens for free: reasoning outputs copy spans of their prompt (a proof restates the facts and rules it uses) and
of themselves (lists, repeated clauses), so the tokens that followed the last earlier occurrence of the row's
last n tokens are a good guess of what comes next.

The scheme, per row and step (`paged_device._verify_step`):
  1. `propose`: the latest earlier position where the row's last g tokens occur (g from `ngram_max` down to
     `ngram_min`, the longest that matches wins; 3 and 2 by default, as single tokens recur too often to predict
     much); the up to k tokens that followed it are the draft.
  2. The pending token and the draft go through the model at positions L .. L+k in one multi-token paged forward
     (`paged_device.paged_forward`, causal): the logits at position L+c are those a plain step would compute once
     the row's first c draft tokens were accepted.
  3. At every position the token is drawn exactly as a plain step draws it (`choose_tokens` with
     `fold_in(row key, position)`): t_c. Draft token c+1 is accepted when it equals t_c; the row keeps
     t_0 .. t_m, m the number of leading accepted draft tokens (so 1 to k+1 tokens a step).

Why this is exact, for sampling too: t_c depends only on the logits at position L+c and the row's key at that
position, and those logits depend only on the tokens before it, which are the row's true tokens as long as every
earlier draft token was accepted. So the kept tokens are the tokens a plain decode would draw, one by one, with
the same keys (the same text for greedy rows, the same draws for sampled ones); no rejection-sampling correction
is needed because the draft is never sampled from. What changes is only float32 rounding: the verification
forward computes C positions in one matrix product instead of C products of one row, so logits differ in their
last bits (a near-tie can flip, as between any two implementations).

When it pays: at batch 1 on a CPU, C tokens cost about what one does up to C ~ 8; at large batches the step is
compute-bound and a rejected draft costs real work, so the engine speculates only when asked (`speculate=k`).
"""

from __future__ import annotations

import jax.numpy as jnp


def propose(context_AxW, length_A, *, k: int, ngram_min: int = 2, ngram_max: int = 3):
    """Drafts by prompt lookup: (draft_AxK int32, count_A int32).

    context_AxW: each row's tokens by position (`SlotState.context_SxW`); length_A: the position of the row's
    pending token (its last known token, `context[a, length]`). The row's suffix is its tokens at
    `length-g+1 .. length`; an earlier occurrence ends at j <= length-1, and the draft is `context[j+1 .. j+k]`,
    of which only the `min(k, length - j)` known tokens count. count is 0 where no n-gram matches, or where the row
    is longer than the context's W positions (its tokens there were not kept).
    """
    A, W = context_AxW.shape
    L = length_A[:, None]
    ends = jnp.arange(W, dtype=jnp.int32)[None, :]
    # agree[g-1][a, end]: the g tokens ending at `end` equal the row's last g tokens (one comparison per offset i,
    # shared by every n-gram size: agree for g is agree for g-1 and the comparison at offset g-1)
    agree, both = [], jnp.ones((A, W), bool)
    for i in range(ngram_max):
        last = jnp.take_along_axis(context_AxW, jnp.clip(L - i, 0, W - 1), axis=1)  # [A, 1]
        shifted = jnp.pad(context_AxW[:, :W - i], ((0, 0), (i, 0)), constant_values=-1)  # token at end - i
        both = both & (shifted == last)
        agree.append(both)
    best = jnp.full((A,), -1, jnp.int32)
    for g in range(ngram_max, ngram_min - 1, -1):
        match = agree[g - 1] & (ends < L) & (ends >= g - 1) & (L >= g - 1)
        end = jnp.max(jnp.where(match, ends, -1), axis=1)
        best = jnp.where((best < 0) & (end >= 0), end, best)
    cols = jnp.clip(best[:, None] + 1 + jnp.arange(k, dtype=jnp.int32)[None, :], 0, W - 1)
    draft = jnp.take_along_axis(context_AxW, cols, axis=1)
    count = jnp.where((best >= 0) & (length_A < W), jnp.minimum(k, length_A - best), 0)
    return draft.astype(jnp.int32), count.astype(jnp.int32)
