"""CEDAR-GRPO evaluation (`reasoner cedar eval`, the demo's before/after stages) over mixture rows.

    report = evaluate_cedar(model, tokenizer, rows, judge=judge, settings=CedarEvalSettings(), label="base")

rows: examples of `reasoner.data.cedar_mixture` (source, prompt, gold fields). Each prompt is completed greedily
through the jitted sampler, `batch_size` prompts per device call (`reasoner.judges.SamplerJudge` is the batched
greedy chat generator: one compiled shape for every batch); then per source:
  correctness     Table 8 verifier of the first `<answer>` span (`cedar_verify.score`, code in the sandbox):
                  successes / n with a 95% Wilson interval;
  coverage        mean of the coverage judge's r_cov (Eq. 6), 95% percentile-bootstrap interval over problems
                  (one greedy completion per row: a row is a problem; rows sharing a uid are resampled together);
  directionality  mean of the directionality judge's r_dir (Eq. 7), bootstrap interval;
  judge           valid / invalid / failed judgements (an invalid or failed one scores 0, as in training);
  process         mean per-trace counts of the App. E text-only proxies (`reasoner.metrics.cedar_process`).
`judge=None` skips coverage and directionality. The judges see the policy's user message and the `<think>` span,
as in training. The paper's validation samples at temperature 0.7 / top-p 0.95; this is greedy (reproducible).

Held-out rows (`reasoner.data.cedar_heldout.HeldoutExample.row()`, marked `heldout`) are scored by their dataset's
task-native checker (accuracy, Wilson 95%) and reported under `report["heldout"][dataset]` with the process
proxies; coverage and directionality are not judged for them (their rubric notes, App. D.4.3, cover the training
sources only). `sources` and `overall` summarise the training-source rows (`overall` is None without any).

`judged_process=True` (needs a judge) also asks the judge for App. E's five counting metrics of every trace, held-out
ones included (`reasoner.judges.process`): each summary then has `process_judged[metric]` = {mean over the valid
judgements, valid, n} and `report["judge"]["process"]` the counters; a malformed reply counts nothing and is
counted as invalid. `process` (the text proxies) is reported either way.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import numpy as np

from reasoner.data import cedar_heldout
from reasoner.judges import JudgeCounters, SamplerJudge, judge_messages, score_traces, think_span
from reasoner.judges.process import METRICS as PROCESS_METRICS
from reasoner.judges.process import judged_process_counts
from reasoner.metrics.cedar_process import LEXICONS, count_markers
from reasoner.metrics.intervals import cluster_bootstrap_interval, format_interval, wilson_interval
from reasoner.rewards.judged import policy_user_message
from reasoner.tasks.cedar_verify import record_of, score

JUDGED = ("coverage", "directionality")


@dataclasses.dataclass(frozen=True)
class CedarEvalSettings:
    """Greedy policy generation: `max_new_tokens` per completion, `batch_size` prompts per sampler call."""

    max_new_tokens: int = 256
    batch_size: int = 8
    max_len: int | None = None  # cache length; None = the longest prompt's bucket + max_new_tokens

    def __post_init__(self):
        for name in ("max_new_tokens", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"cedar eval {name}={value!r}: expected an int >= 1")


@dataclasses.dataclass
class CedarEvalResult:
    """report: the JSON-ready summary (per source and overall); rows: one dict per evaluated example."""

    label: str
    report: dict
    rows: list[dict]


def _interval(values: Sequence[float], uids: Sequence | None = None) -> dict:
    """Mean of a judged score with its 95% percentile-bootstrap interval over problems. Each row is one problem with
    one greedy completion, so resampling rows is resampling problems; rows that share a uid (the same problem given
    twice) are resampled together (`intervals.cluster_bootstrap_interval`), so a repeated problem cannot narrow the
    interval. A row without uid is its own problem."""
    if len(set(values)) <= 1:  # a constant sample: the bootstrap interval is that value
        v = float(values[0])
        return {"estimate": v, "low": v, "high": v, "confidence": 0.95, "method": "constant", "n": len(values)}
    keys = [("uid", u) if u is not None else ("row", i) for i, u in enumerate(uids or [None] * len(values))]
    index = {k: j for j, k in enumerate(dict.fromkeys(keys))}
    return cluster_bootstrap_interval(np.asarray(values, np.float64), [index[k] for k in keys], n_resamples=2000,
                                      seed=0).as_dict()


def summarise(rows: Sequence[Mapping], *, judged: bool, metric: str = "correctness") -> dict:
    """Correctness (Wilson; named `metric`, "accuracy" for held-out sets), coverage / directionality (bootstrap)
    and process means over `rows`."""
    n = len(rows)
    correct = int(sum(r["correct"] for r in rows))
    out = {"n": n, "correct": correct, metric: wilson_interval(correct, n).as_dict()}
    if judged:
        for kind in JUDGED:
            out[kind] = _interval([r[kind] for r in rows], [r.get("uid") for r in rows])
            out[f"{kind}_valid"] = int(sum(r[f"{kind}_valid"] for r in rows))
    out["process"] = {k: float(np.mean([r["process"][k] for r in rows])) for k in LEXICONS}
    if any("process_judged" in r for r in rows):
        out["process_judged"] = {}
        for name in PROCESS_METRICS:  # not `metric`: that names the correctness entry above
            valid = [r["process_judged"][name] for r in rows if r["process_judged"][name] is not None]
            out["process_judged"][name] = {"mean": float(np.mean(valid)) if valid else None, "valid": len(valid),
                                           "n": n}
    return out


def evaluate_cedar(model, tokenizer, rows: Sequence[Mapping], *, judge=None,
                   settings: CedarEvalSettings = CedarEvalSettings(), label: str = "model",
                   log=print, judged_process: bool = False) -> CedarEvalResult:
    """Generates, verifies and judges every row (module docstring)."""
    if judged_process and judge is None:
        raise ValueError("cedar eval: judged process metrics need a judge (give one, or leave them off for the "
                         "text-only proxies)")
    if not rows:
        raise ValueError("cedar eval: no rows to evaluate (expected mixture examples with source and prompt)")
    # A malformed row is an error before any generation; held-out rows carry their own options and gold.
    scorers = [(lambda text, r=r: cedar_heldout.score(r, text)) if r.get("heldout") else
               (lambda text, rec=record_of(r): score(rec, text)) for r in rows]
    generator = SamplerJudge(model, tokenizer, judge_id=label, max_new_tokens=settings.max_new_tokens,
                             batch_size=settings.batch_size, max_len=settings.max_len)
    t0 = time.perf_counter()
    texts = generator.reply([list(r["prompt"]) for r in rows])
    t1 = time.perf_counter()
    log(f"[cedar eval] {label}: {len(rows)} completions in {t1 - t0:.1f} s")
    out = [{"uid": r.get("uid", r.get("id")), "source": r["source"], "heldout": bool(r.get("heldout")),
            "completion": text or "", "correct": scorer(text or ""), "process": count_markers(think_span(text or ""))}
           for r, scorer, text in zip(rows, scorers, texts)]
    counters = {kind: JudgeCounters() for kind in JUDGED}
    trained = [(r, o) for r, o in zip(rows, out) if not o["heldout"]]
    if judge is not None:
        for kind in JUDGED:
            prompts = [judge_messages(kind, source=r["source"], observation=policy_user_message(r["prompt"]),
                                      reasoning=think_span(o["completion"])) for r, o in trained]
            for (_, o), j in zip(trained, score_traces(judge, kind, prompts, counters[kind])):
                o[kind], o[f"{kind}_valid"] = j.score, j.valid
    process_counters = {m: JudgeCounters() for m in PROCESS_METRICS} if judged_process else {}
    if judged_process:
        items = [(o["source"], think_span(o["completion"])) for o in out]
        for o, counts in zip(out, judged_process_counts(judge, items, process_counters)):
            o["process_judged"] = counts
    if judge is not None:
        log(f"[cedar eval] {label}: judged in {time.perf_counter() - t1:.1f} s")
    t2 = time.perf_counter()
    judged = judge is not None
    train_out = [o for _, o in trained]
    by_source = {s: [o for o in out if o["source"] == s] for s in sorted({o["source"] for o in out})}
    report = {
        "label": label,
        "sources": {s: summarise(v, judged=judged) for s, v in by_source.items() if not v[0]["heldout"]},
        "overall": summarise(train_out, judged=judged) if train_out else None,
        "heldout": {s: summarise(v, judged=False, metric="accuracy") for s, v in by_source.items() if v[0]["heldout"]},
        "judge": ({kind: dataclasses.asdict(c) for kind, c in counters.items()} | {"id": judge.judge_id}
                  | ({"process": {m: dataclasses.asdict(c) for m, c in process_counters.items()}}
                     if judged_process else {})
                  if judge is not None else None),
        "seconds": {"generate": round(t1 - t0, 1), "judge": round(t2 - t1, 1)},
        "settings": dataclasses.asdict(settings),
    }
    return CedarEvalResult(label, report, out)


def _cell(summary: Mapping, key: str) -> str:
    return format_interval(summary.get(key))


def format_table(results: Sequence[CedarEvalResult]) -> str:
    """Markdown: one row per (source, model), correctness / coverage / directionality with 95% intervals; held-out
    sets as `heldout:NAME` rows whose correctness cell is their task-native accuracy."""
    head = ("source", "model", "n", "correctness", "coverage", "directionality")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sources = sorted({s for r in results for s in r.report["sources"]}) + ["overall"]
    heldout = sorted({s for r in results for s in r.report.get("heldout", {})})
    for s in sources + [f"heldout:{h}" for h in heldout]:
        for r in results:
            if s.startswith("heldout:"):
                summary = r.report["heldout"].get(s[len("heldout:"):])
                summary = summary and {**summary, "correctness": summary["accuracy"]}
            else:
                summary = r.report["overall"] if s == "overall" else r.report["sources"].get(s)
            if summary is None:
                continue
            lines.append(f"| {s} | {r.label} | {summary['n']} | {_cell(summary, 'correctness')} | "
                         f"{_cell(summary, 'coverage')} | {_cell(summary, 'directionality')} |")
    return "\n".join(lines)
