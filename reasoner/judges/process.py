"""App. E's five counting process metrics through an LLM judge: uncertainty markers, branchiness, backtracking,
differential elimination and prior invocation, each the number of `{excerpt, explanation}` items the judge lists.

    counters = {m: JudgeCounters() for m in METRICS}
    counts = judged_process_counts(judge, [("musr_murder", trace), ...], counters)   # [{metric: int | None}]

Per metric and trace, the judge gets the E.4 system prompt with the dataset's Table 11 note and the user template
with the trace (`process_prompts`). The value is len(examples) of the reply's JSON object (E.1: "the total number
of extracted instances"); the object is found as the coverage judge's is (`parse._find_object`: the last balanced
object holding the key, prose and code fences around it allowed, trailing commas forgiven). A reply without such
an object, with `examples` not a list, or with an item that is not an object with a string `excerpt` counts
NOTHING (None, not 0: a malformed reply is not evidence of zero occurrences) and is counted as invalid in the
metric's `JudgeCounters`; a failed call (None reply) is counted as failed. Nothing here raises for any reply.
The text-only proxies (`reasoner.metrics.cedar_process`) stay the default where no judge is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from reasoner.judges.judge import Judge, JudgeCounters, Messages, ask_judge
from reasoner.judges.parse import _find_object
from reasoner.judges.process_prompts import METRICS, NOTES, SYSTEM, TRACE, USER
from reasoner.judges.prompts import DATASET_NOTES

# Our dataset names -> (name shown to the judge, Table 11 row); e-CARE borrows B-COPA's row (process_prompts).
HELDOUT_NOTES = {"ecare": ("e-CARE", "B-COPA"), "defeasible_nli": ("DefNLI", "DefNLI"),
                 **{f"musr_{d}": ("MuSR", "MuSR") for d in ("murder", "object", "team")}}


def note_for(metric: str, dataset: str) -> tuple[str, str]:
    """(dataset name, Table 11 note) for one of our datasets; training sources and unknown names have no row in
    Table 11 and get a note saying so."""
    if metric not in METRICS:
        raise ValueError(f"process metric {metric!r}: expected one of {', '.join(METRICS)}")
    if dataset in HELDOUT_NOTES:
        name, row = HELDOUT_NOTES[dataset]
        return name, NOTES[row][metric]
    name = DATASET_NOTES[dataset].name if dataset in DATASET_NOTES else dataset
    return name, f"(none: {name} has no dataset-specific note for this metric)"


def process_messages(metric: str, *, dataset: str, trace: str) -> Messages:
    """The E.4 [system, user] messages asking for `metric`'s items in `trace` (a reasoning trace)."""
    name, note = note_for(metric, dataset)
    system = SYSTEM[metric].replace("{dataset_specific_note}", note)
    user = USER[metric].replace("{dataset}", name) + TRACE.replace("{text}", trace)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_count(text) -> tuple[int | None, str]:
    """(number of listed items, "") for a valid reply; (None, why) otherwise. Never raises."""
    if not isinstance(text, str) or not text.strip():
        return None, "empty reply" if isinstance(text, str) else f"reply is {type(text).__name__}, expected text"
    try:
        obj = _find_object(text, "examples")
    except Exception as err:  # noqa: BLE001 - a judge reply must never stop an evaluation
        return None, f"unreadable reply: {type(err).__name__}: {err}"
    if obj is None:
        return None, f"no JSON object with 'examples' in the reply ({len(text)} chars)"
    items = obj["examples"]
    if not isinstance(items, list):
        return None, f"examples is {type(items).__name__}, expected a list"
    for k, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("excerpt"), str):
            return None, f"examples[{k}] is not an object with a string 'excerpt'"
    return len(items), ""


def count_traces(judge: Judge, metric: str, prompts: Sequence[Messages],
                 counters: JudgeCounters | None = None) -> list[int | None]:
    """One count (None when the call failed or the reply was malformed) per prompt of `metric`."""
    def parse(text, _messages):
        count, why = parse_count(text)
        return count, count is not None, why

    return ask_judge(judge, prompts, parse, failed=None, counters=counters)


def judged_process_counts(judge: Judge, items: Sequence[tuple[str, str]],
                          counters: dict[str, JudgeCounters] | None = None) -> list[dict[str, int | None]]:
    """{metric: count | None} per (dataset, trace) item, one batched judge call per metric."""
    out: list[dict[str, int | None]] = [{} for _ in items]
    for metric in METRICS:
        prompts = [process_messages(metric, dataset=d, trace=t) for d, t in items]
        for row, count in zip(out, count_traces(judge, metric, prompts, (counters or {}).get(metric))):
            row[metric] = count
    return out
