"""NumPy references shared by the sampler tests."""

import numpy as np


def log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def reference_distribution(logits, *, temperature, top_k=0, top_p=1.0):
    """NumPy transcription of transformers' warpers: temperature, top-k, top-p (TopPLogitsWarper)."""
    x = np.asarray(logits, np.float64) / temperature
    if top_k:
        kth = np.sort(x)[::-1][top_k - 1]
        x = np.where(x < kth, -np.inf, x)
    if top_p < 1.0:
        order = np.argsort(x, kind="stable")  # ascending, as transformers sorts
        probs = np.exp(x[order] - x[order].max())
        probs /= probs.sum()
        cum = np.cumsum(probs)
        remove = cum <= 1 - top_p
        remove[-1] = False  # keep at least one
        x = x.copy()
        x[order[remove]] = -np.inf
    p = np.exp(x - x.max())
    return p / p.sum()
