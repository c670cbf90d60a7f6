"""The record every A* dataset stores (DeepRD and ProofWriter alike), and the figures computed over records.

A record is one (program, goal) pair with a provable goal:
  id, context (theory text), question (goal statement text), program (JSON, see `program_json`), goal (JSON atom),
  depth (w*_G, shortest proof depth), pushes[3] and pops[3] of host A* per heuristic in `HEURISTICS` order
  (zero, dependency, true), source (JSON object with dataset-specific fields: lookahead and branches for DeepRD;
  theory id, answer and QDep for ProofWriter), rule_texts (JSON list: each rule's sentence in the theory, in rule
  order, for `search.verbalize.Verbalizer(rule_texts=...)`).
Text fields come back from TFDS as bytes; `decode_record` turns a stored record into Python values.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping

from reasoner.data.program_json import atom_to_json, program_to_json
from reasoner.data.solving import HEURISTICS, heuristic_counts
from search.hypergraph import Hypergraph
from search.logic import Atom

__all__ = ["make_record", "decode_record", "record_features", "figures", "format_figures", "HEURISTICS"]


def make_record(*, qid: str, context: str, question: str, hg: Hypergraph, goal: Atom, depth: int,
                source: Mapping, rule_texts: Iterable[str] = (), cost: str = "max") -> dict:
    rule_texts = list(rule_texts)
    if rule_texts and len(rule_texts) != len(hg.program.rules):
        raise ValueError(f"record {qid}: {len(rule_texts)} rule texts for {len(hg.program.rules)} rules")
    counts = heuristic_counts(hg, goal, cost=cost)  # pushes/pops under `cost`; `depth` stays the max-cost depth
    if cost != "max":
        source = {**source, "cost": cost}
    return {
        "id": qid, "context": context, "question": question, "program": program_to_json(hg.program),
        "goal": atom_to_json(goal), "depth": int(depth),
        "pushes": [counts[h][0] for h in HEURISTICS], "pops": [counts[h][1] for h in HEURISTICS],
        "source": json.dumps(dict(source), sort_keys=True),
        "rule_texts": json.dumps(rule_texts),
    }


def decode_record(raw: Mapping) -> dict:
    """A stored record (bytes, numpy) -> str/int/list values; `source` and `rule_texts` parsed from JSON.
    `program` and `goal` stay JSON strings (what `program_json` and the reward cache take)."""
    out = {}
    for key, value in raw.items():
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        elif hasattr(value, "tolist"):
            value = value.tolist()
        out[key] = value
    for key in ("source", "rule_texts"):
        if isinstance(out.get(key), str):
            out[key] = json.loads(out[key])
    return out


def record_features():
    """TFDS FeaturesDict for `make_record` (imports tensorflow_datasets, which runs without TensorFlow)."""
    import numpy as np
    import tensorflow_datasets as tfds

    text = tfds.features.Text
    return tfds.features.FeaturesDict({
        "id": text(), "context": text(), "question": text(), "program": text(), "goal": text(),
        "depth": np.int32,
        "pushes": tfds.features.Tensor(shape=(len(HEURISTICS),), dtype=np.int32),
        "pops": tfds.features.Tensor(shape=(len(HEURISTICS),), dtype=np.int32),
        "source": text(), "rule_texts": text(),
    })


def figures(splits: Mapping[str, Iterable[Mapping]]) -> dict:
    """Split sizes, mean/median pushes and pops per heuristic, and push histograms (paper Figs. 5-6) per split."""
    out = {}
    for name, records in splits.items():
        pushes = {h: [] for h in HEURISTICS}
        pops = {h: [] for h in HEURISTICS}
        depths = []
        for rec in records:
            depths.append(int(rec["depth"]))
            for i, h in enumerate(HEURISTICS):
                pushes[h].append(int(rec["pushes"][i]))
                pops[h].append(int(rec["pops"][i]))
        n = len(depths)
        out[name] = {
            "size": n,
            "mean_depth": round(statistics.fmean(depths), 3) if n else None,
            "mean_pushes": {h: round(statistics.fmean(v), 3) if n else None for h, v in pushes.items()},
            "median_pushes": {h: statistics.median(v) if n else None for h, v in pushes.items()},
            "mean_pops": {h: round(statistics.fmean(v), 3) if n else None for h, v in pops.items()},
            "push_histogram": {h: _histogram(v) for h, v in pushes.items()},
        }
    return out


def _histogram(values: list[int], bins: int = 10) -> dict[str, int]:
    if not values:
        return {}
    lo, hi = min(values), max(values)
    width = max(1, -(-(hi - lo + 1) // bins))
    hist: dict[str, int] = {}
    for v in values:
        b = lo + (v - lo) // width * width
        key = f"{b}-{b + width - 1}"
        hist[key] = hist.get(key, 0) + 1
    return dict(sorted(hist.items(), key=lambda kv: int(kv[0].split("-")[0])))


def format_figures(figs: Mapping) -> str:
    """A short text table: split, size, mean pushes per heuristic."""
    lines = [f"{'split':<12}{'size':>7}" + "".join(f"{'pushes[' + h + ']':>22}" for h in HEURISTICS)]
    for name, f in figs.items():
        means = f["mean_pushes"]
        lines.append(f"{name:<12}{f['size']:>7}" + "".join(
            f"{(means[h] if means[h] is not None else float('nan')):>22.2f}" for h in HEURISTICS))
    return "\n".join(lines)
