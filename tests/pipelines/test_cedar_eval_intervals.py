"""CEDAR eval's judged-score intervals resample problems: one greedy completion per row, rows of one uid together."""

import numpy as np

from reasoner.metrics.intervals import bootstrap_interval, cluster_bootstrap_interval
from reasoner.pipelines.cedar_eval import summarise


def _rows(scores, uids):
    return [{"uid": u, "correct": 1.0, "coverage": s, "coverage_valid": True, "directionality": 1.0 - s,
             "directionality_valid": True, "process": {"uncertainty_markers": 0, "backtracking": 0, "branchiness": 0}}
            for s, u in zip(scores, uids)]


def test_one_row_per_problem_is_the_plain_bootstrap():
    scores = [0.1, 0.4, 0.4, 0.9, 0.7, 0.2, 1.0, 0.5]
    out = summarise(_rows(scores, [f"s/g/{i}" for i in range(8)]), judged=True)
    ref = bootstrap_interval(np.array(scores), n_resamples=2000, seed=0)
    assert (out["coverage"]["estimate"], out["coverage"]["low"], out["coverage"]["high"]) == (
        ref.estimate, ref.low, ref.high)
    assert out["coverage"]["clusters"] == 8 and out["coverage_valid"] == 8


def test_rows_of_one_problem_are_resampled_together():
    """The same problem given five times (greedy: five identical completions and judgements) is one unit of the
    resampling, not five independent ones."""
    scores = [0.0] * 5 + [0.6, 0.8, 1.0, 0.9]
    uids = ["s/g/0"] * 5 + ["s/g/1", "s/g/2", "s/g/3", "s/g/4"]
    got = summarise(_rows(scores, uids), judged=True)["coverage"]
    ref = cluster_bootstrap_interval(np.array(scores), [0] * 5 + [1, 2, 3, 4], n_resamples=2000, seed=0)
    assert (got["estimate"], got["low"], got["high"], got["clusters"]) == (ref.estimate, ref.low, ref.high, 5)
    per_row = bootstrap_interval(np.array(scores), n_resamples=2000, seed=0)
    assert got["high"] - got["low"] > per_row.high - per_row.low
    # rows without a uid are problems of their own; a constant score keeps the full interval schema
    const = summarise(_rows([0.5, 0.5], [None, None]), judged=True)["coverage"]
    assert const == {"estimate": 0.5, "low": 0.5, "high": 0.5, "confidence": 0.95, "method": "constant", "n": 2}
