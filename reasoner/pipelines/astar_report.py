"""`reasoner report astar RUN...`: the A* paper's figures from the reports of several runs.

Each RUN is a workdir of the A* pipeline (`reasoner demo`, `reasoner train --config configs/astar_*.py:...`), whose
`report/astar.json` lists every model it evaluated, or that JSON file itself. Written to `--out`:

  astar_combined.png     Figs. 2-4: one row per dataset, one panel per efficiency measure (pushes, pops): every
                         model of every run with its 95% intervals (Wilson for accuracy, bootstrap for efficiency, as
                         each run reported them), the accuracy-efficiency Pareto front ringed and joined, and the
                         efficiency of the search algorithms themselves as dashed lines (Fig. 2's).
  astar_proof_steps.png  Figs. 5/6: per dataset, the histogram of proof steps (the pushes of the host A* trace, what
                         a model is trained to verbalize) under each search order (Dijkstra, A* with the dependency
                         heuristic, A* with the true cost-to-go) over the runs' training problems
                         (`<run>/data/records/train.jsonl`; a run without that file adds no problem).
  astar_combined.md      the table of every model (accuracy, efficiency by pushes and by pops, with intervals).
  astar_combined.json    the same rows, the Pareto fronts per dataset and the histogram counts.

Choices where the paper is silent: a model is labelled `<run>: <label>` (the run's directory name; runs of the same
name are told apart by their parent directories); the base model of runs of one dataset is drawn once when their
reports agree (same accuracy over the same examples), since each run evaluates the same base; the reference lines of a
dataset come from its first run (the table notes it when the runs' lines differ: their test sets differ).

Partial runs. The A* pipeline rewrites `report/astar.json` after each evaluation with `"complete": false` and only
its last write says `"complete": true`, so a run preempted (SIGTERM: the trainer checkpoints and the pipeline
returns) or failed part-way leaves a report with only its first models. Such a run is accepted, since its finished
evaluations are real, but never shown as a whole run: its models are labelled `<run> (partial run): <label>` in the
table, the JSON and the figure (where they are drawn with open markers), the table names each partial run and the
evaluations it is missing (from the run's config and finished stages), the JSON marks it (`runs[i].complete`,
`.partial`), and the command warns on stderr; `--require-complete` refuses such runs instead. A report without the
flag (not written by a finished pipeline) counts as partial. A model entry is refused, with the file, the model and
what is missing, when it lacks a field the pipeline always writes (`examples`, `accuracy` with estimate / low /
high, `efficiency_pushes` and `efficiency_pops`, each an interval or null for "no correct proof") or holds a number
that is not finite and in [0, 1]: a truncated or hand-edited entry would otherwise be drawn without its interval or
at a made-up position.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from collections.abc import Sequence

from reasoner.metrics.pareto import ModelPoint

SEARCH_ORDERS = {"zero": "Dijkstra", "dependency": "A* dependency", "true": "A* true cost-to-go"}


EFFICIENCY_KEYS = ("pushes", "pops")


@dataclasses.dataclass(frozen=True)
class RunReport:
    """One run's report: its name, dataset, model reports (as `astar.json` holds them) and reference lines; `partial`
    says why the run is not known to be whole (None: its report says complete) and `missing` which evaluations
    of its config did not finish (None when the report does not record its config and stages)."""

    name: str
    dataset: str
    models: list[dict]
    reference: dict | None
    train_records: pathlib.Path | None  # data/records/train.jsonl when the run directory has it
    path: pathlib.Path | None = None  # the astar.json read
    partial: str | None = None
    missing: list[str] | None = None

    @property
    def complete(self) -> bool:
        return self.partial is None


def _unit(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0.0 <= value <= 1.0


def _interval_problems(value, name: str) -> list[str]:
    """What is wrong with one interval entry ({"estimate", "low", "high", ...}), [] when nothing."""
    if not isinstance(value, dict):
        return [f"'{name}' is not an interval object"]
    absent = [k for k in ("estimate", "low", "high") if value.get(k) is None]
    if absent:
        return [f"'{name}' has no {', '.join(repr(k) for k in absent)}"]
    bad = [k for k in ("estimate", "low", "high") if not _unit(value[k])]
    if bad:
        return [f"'{name}' has {', '.join(f'{k}={value[k]!r}' for k in bad)} (expected finite numbers in [0, 1])"]
    if value["low"] > value["high"]:
        return [f"'{name}' has low {value['low']} > high {value['high']}"]
    return []


def model_problems(m) -> list[str]:
    """What a model entry of astar.json lacks or holds wrongly, against what `reasoner.evaluation` writes; []
    when it is whole."""
    if not isinstance(m, dict):
        return ["not an object"]
    out = []
    if not isinstance(m.get("label"), str):
        out.append("no 'label' string")
    examples = m.get("examples")
    if not isinstance(examples, int) or isinstance(examples, bool) or examples < 1:
        out.append("no 'examples' count" if examples is None else f"'examples' is {examples!r} (expected an int >= 1)")
    if "accuracy" not in m:
        out.append("no 'accuracy'")
    else:
        out += _interval_problems(m["accuracy"], "accuracy")
    for key in EFFICIENCY_KEYS:
        name = f"efficiency_{key}"
        if name not in m:
            out.append(f"no '{name}'")
        elif m[name] is None:  # no correct proof: only when the accuracy is 0
            acc = m.get("accuracy")
            if isinstance(acc, dict) and _unit(acc.get("estimate")) and acc["estimate"] > 0:
                out.append(f"'{name}' is null (no correct proof) but the accuracy is {acc['estimate']}")
        else:
            out += _interval_problems(m[name], name)
    return out


def _missing_evaluations(doc: dict) -> list[str] | None:
    """The evaluation stages the run's config asked for that its report does not list as finished (`timings_s`
    holds each finished stage); None when the report records no config or stages."""
    config, timings = doc.get("config"), doc.get("timings_s")
    if not isinstance(config, dict) or not isinstance(timings, dict):
        return None
    section = lambda name: config.get(name) if isinstance(config.get(name), dict) else {}  # noqa: E731
    expected = ["eval_base"]
    if section("eval").get("few_shot"):
        expected.append("eval_base_few_shot")
    if section("sft").get("enabled"):
        expected.append("eval_sft")
    if section("grpo").get("enabled"):
        expected.append("eval_grpo")
    return [stage for stage in expected if stage not in timings]


def load_run(path) -> RunReport:
    """A run directory (its `report/astar.json`) or an `astar.json` file; a ValueError that names the file and
    what was expected when it is missing or malformed, or when a model entry lacks what the pipeline writes
    (`model_problems`). A report that does not say `"complete": true` loads as a partial run (module docstring)."""
    path = pathlib.Path(path)
    js = path / "report" / "astar.json" if path.is_dir() else path
    if not js.is_file():
        raise ValueError(f"{path}: no report/astar.json; expected an A* run directory (reasoner demo / reasoner "
                         "train with an astar config) or its astar.json")
    try:
        doc = json.loads(js.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{js}: not valid JSON ({err})") from None
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, list) or not models:
        raise ValueError(f"{js}: expected an object with a non-empty 'models' list (the A* pipeline's report)")
    for i, m in enumerate(models):
        if not isinstance(m, dict) or not isinstance(m.get("label"), str) or not isinstance(m.get("accuracy"), dict):
            raise ValueError(f"{js}: models[{i}] has no 'label' string and 'accuracy' object")
    problems = [f"models[{i}] ({m['label']!r}): {'; '.join(found)}"
                for i, m in enumerate(models) if (found := model_problems(m))]
    if problems:
        raise ValueError(f"{js}: incomplete model entries (expected what reasoner.evaluation writes for each model: "
                         "examples, accuracy and efficiency_pushes / efficiency_pops with estimate, low and high):\n  "
                         + "\n  ".join(problems))
    dataset = str(((doc.get("config") or {}).get("data") or {}).get("dataset") or "unknown")
    run_dir = js.parent.parent if js.parent.name == "report" else None  # <run>/report/astar.json: named by <run>
    records = run_dir / "data" / "records" / "train.jsonl" if run_dir is not None else None
    missing = _missing_evaluations(doc)
    partial = None
    if doc.get("complete") is not True:
        partial = ("its report says complete: false (the pipeline stopped before its last evaluation: preempted or "
                   "failed)" if doc.get("complete") is False else
                   "its report has no 'complete': true (not the report of a finished A* pipeline)")
        partial += (f"; missing evaluations: {', '.join(missing)}" if missing else
                    "; which evaluations are missing is not recorded" if missing is None else "")
    return RunReport(run_dir.name if run_dir is not None else js.stem, dataset, models, doc.get("reference_efficiency"),
                     records if records is not None and records.is_file() else None, js, partial,
                     missing if partial is not None else [])


def distinct_names(runs: Sequence[RunReport]) -> list[RunReport]:
    """The runs with distinct names: runs named alike (`a/sft` and `b/sft`, or astar.json files outside a run
    directory) take as many parent directories of their run as tell them apart (`a/sft`, `b/sft`). The same file
    given twice is a ValueError."""
    seen: dict[pathlib.Path, int] = {}
    for i, run in enumerate(runs):
        if run.path is not None:
            key = run.path.resolve()
            if key in seen:
                raise ValueError(f"{run.path}: given twice (runs {seen[key] + 1} and {i + 1})")
            seen[key] = i

    def parts(run: RunReport) -> tuple[str, ...]:
        if run.path is None:
            return (run.name,)
        js = run.path.resolve()
        base = js.parent.parent if js.parent.name == "report" else js.with_suffix("")
        return tuple(base.parts[1:]) or (run.name,)

    out = list(runs)
    for name in {r.name for r in runs}:
        same = [i for i, r in enumerate(runs) if r.name == name]
        if len(same) < 2:
            continue
        paths = [parts(runs[i]) for i in same]
        depth = 1
        while depth < max(map(len, paths)) and len({p[-depth:] for p in paths}) < len(paths):
            depth += 1
        for i, p in zip(same, paths):
            out[i] = dataclasses.replace(runs[i], name="/".join(p[-depth:]))
    return out


def model_point(report: dict, label: str, *, partial: bool = False) -> ModelPoint:
    """The plotted point of one model report (`summarise_model`'s JSON, checked by `model_problems`): undefined
    efficiency (no correct proof) sits at 0 without an interval."""
    acc = report["accuracy"]
    eff, eff_iv = {}, {}
    for key in EFFICIENCY_KEYS:
        e = report[f"efficiency_{key}"]
        eff[key] = float(e["estimate"]) if e else 0.0
        if e:
            eff_iv[key] = (float(e["low"]), float(e["high"]))
    return ModelPoint(label, float(acc["estimate"]), eff, (float(acc["low"]), float(acc["high"])), eff_iv,
                      partial=partial)


def run_label(run: RunReport) -> str:
    """How a run's models are labelled: `<run>` or `<run> (partial run)`."""
    return run.name if run.complete else f"{run.name} (partial run)"


def by_dataset(runs: Sequence[RunReport]) -> dict[str, tuple[list[tuple[str, dict]], dict | None]]:
    """{dataset: ([(label, model report)], reference lines)}: every model of every run, a shared base once; each
    row's report gains `run` and `run_complete`."""
    out: dict[str, tuple[list, dict | None]] = {}
    for run in runs:
        rows, reference = out.setdefault(run.dataset, ([], run.reference))
        for m in run.models:
            if m["label"] == "base" and any(r["label"] == "base" and r["accuracy"] == m["accuracy"]
                                            and r.get("examples") == m.get("examples") for _, r in rows):
                continue
            rows.append((f"{run_label(run)}: {m['label']}", dict(m, run=run.name, run_complete=run.complete)))
    return out


def proof_step_counts(records_path: pathlib.Path, dataset: str, *, seen: set | None = None) -> dict[str, list[int]]:
    """{search order: [proof steps of each provable training problem]} under each of the three heuristics. `seen`:
    the records (canonical JSON) already counted, skipped here and added to, so that runs sharing their training
    problems count each problem once."""
    from reasoner.data.jsonl import read_jsonl
    from reasoner.tasks.astar import problem_from_record
    from search.astar import solve

    counts: dict[str, list[int]] = {name: [] for name in SEARCH_ORDERS.values()}
    for record in read_jsonl(records_path, what="one A* problem record per line"):
        if seen is not None:
            key = json.dumps(record, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
        problem = problem_from_record(record, dataset=dataset)
        for heuristic, name in SEARCH_ORDERS.items():
            result = solve(problem.program, problem.goal, heuristic=heuristic)
            if result.proved:
                counts[name].append(len(result.trace))
    return counts


def write_combined(runs: Sequence[RunReport], out_dir) -> dict[str, str]:
    """Writes the four files of the module docstring; returns their paths."""
    from reasoner.metrics.pareto import plot_accuracy_efficiency_grid
    from reasoner.pipelines.astar import format_table

    if not runs:
        raise ValueError("no run to report on")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = distinct_names(runs)
    datasets = by_dataset(runs)
    rows = {d: ([model_point(m, label, partial=not m["run_complete"]) for label, m in models], reference)
            for d, (models, reference) in datasets.items()}
    partial_runs = [r for r in runs if not r.complete]
    fronts = plot_accuracy_efficiency_grid(
        rows, path=out / "astar_combined.png",
        title="open markers: models of partial runs (not every evaluation finished)" if partial_runs else None)
    steps = {}
    seen_records: dict[str, set] = {}
    for run in runs:  # runs of one dataset usually share their training split: each problem counts once
        if run.train_records is not None:
            counts = proof_step_counts(run.train_records, run.dataset, seen=seen_records.setdefault(run.dataset, set()))
            for name, values in counts.items():
                steps.setdefault(run.dataset, {}).setdefault(name, []).extend(values)
    if steps:
        plot_proof_steps(steps, out / "astar_proof_steps.png")
    tables = [f"## {d}\n\n" + format_table([dict(m, label=label) for label, m in models])
              + _table_notes(d, models, [r for r in runs if r.dataset == d])
              for d, (models, _) in datasets.items()]
    (out / "astar_combined.md").write_text("\n\n".join(tables) + "\n", encoding="utf-8")
    doc = {"runs": [{"name": r.name, "dataset": r.dataset, "path": str(r.path) if r.path else None,
                     "complete": r.complete, "partial": r.partial, "missing_evaluations": r.missing} for r in runs],
           "models": {d: [dict(m, label=label) for label, m in models] for d, (models, _) in datasets.items()},
           "pareto_front": fronts, "proof_steps": steps}
    (out / "astar_combined.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    paths = {"png": str(out / "astar_combined.png"), "table": str(out / "astar_combined.md"),
             "json": str(out / "astar_combined.json")}
    if steps:
        paths["proof_steps"] = str(out / "astar_proof_steps.png")
    return paths


def _table_notes(dataset: str, models: list[tuple[str, dict]], runs: list[RunReport]) -> str:
    """Lines under a dataset's table: its partial runs, the interval methods when they differ between rows (e.g. a
    report written before efficiency intervals resampled problems), and reference lines that differ between runs."""
    notes = [f"- partial run {r.name}: {r.partial}" for r in runs if not r.complete]
    for key in ("accuracy", *(f"efficiency_{k}" for k in EFFICIENCY_KEYS)):
        methods: dict[str, list[str]] = {}
        for label, m in models:
            if m.get(key):
                methods.setdefault(str(m[key].get("method", "unrecorded")), []).append(label)
        if len(methods) > 1:
            notes.append(f"- {key} intervals differ in method: "
                         + "; ".join(f"{method} ({', '.join(labels)})" for method, labels in methods.items()))
    references = {json.dumps(r.reference, sort_keys=True) for r in runs}
    if len(references) > 1:
        notes.append(f"- the runs' search-algorithm efficiencies differ (different test sets?): the figure's dashed "
                     f"lines are {runs[0].name}'s")
    return "\n\n" + "\n".join(notes) if notes else ""


def plot_proof_steps(steps: dict[str, dict[str, list[int]]], path) -> None:
    """Figs. 5/6: one panel per dataset, one histogram of proof steps per search order (integer bins)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(steps), figsize=(5.5 * len(steps), 3.8), squeeze=False)
    for ax, (dataset, orders) in zip(axes[0], steps.items()):
        top = max((max(v) for v in orders.values() if v), default=1)
        bins = np.arange(0.5, top + 1.5, 1.0)
        for j, (name, values) in enumerate(orders.items()):  # outlines, so coinciding orders stay visible
            ax.hist(values, bins=bins, histtype="step", linewidth=2.5 - 0.6 * j, linestyle=("-", "--", ":")[j % 3],
                    label=f"{name} (mean {np.mean(values):.1f})" if values else name)
        n = max(len(v) for v in orders.values())
        ax.set_title(f"{dataset}: proof steps over {n} training problems")
        ax.set_xlabel("proof steps (pushes of the trace)")
        ax.set_ylabel("problems")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
