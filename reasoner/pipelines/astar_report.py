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

Choices where the paper is silent: a model is labelled `<run>: <label>` (the run's directory name); the base model of
runs of one dataset is drawn once when their reports agree (same accuracy over the same examples), since each run
evaluates the same base; the reference lines of a dataset come from its first run.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Sequence

from reasoner.metrics.pareto import ModelPoint

SEARCH_ORDERS = {"zero": "Dijkstra", "dependency": "A* dependency", "true": "A* true cost-to-go"}


@dataclasses.dataclass(frozen=True)
class RunReport:
    """One run's report: its name, dataset, model reports (as `astar.json` holds them) and reference lines."""

    name: str
    dataset: str
    models: list[dict]
    reference: dict | None
    train_records: pathlib.Path | None  # data/records/train.jsonl when the run directory has it


def load_run(path) -> RunReport:
    """A run directory (its `report/astar.json`) or an `astar.json` file; a ValueError that names the file and
    what was expected when it is missing or malformed."""
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
    dataset = str(((doc.get("config") or {}).get("data") or {}).get("dataset") or "unknown")
    run_dir = js.parent.parent if js.parent.name == "report" else None  # <run>/report/astar.json: named by <run>
    records = run_dir / "data" / "records" / "train.jsonl" if run_dir is not None else None
    return RunReport(run_dir.name if run_dir is not None else js.stem, dataset, models, doc.get("reference_efficiency"),
                     records if records is not None and records.is_file() else None)


def model_point(report: dict, label: str) -> ModelPoint:
    """The plotted point of one model report (`summarise_model`'s JSON): undefined efficiency sits at 0."""
    acc = report["accuracy"]
    eff, eff_iv = {}, {}
    for key in ("pushes", "pops"):
        e = report.get(f"efficiency_{key}")
        eff[key] = float(e["estimate"]) if e else 0.0
        if e and e.get("low") is not None:
            eff_iv[key] = (float(e["low"]), float(e["high"]))
    interval = (float(acc["low"]), float(acc["high"])) if acc.get("low") is not None else None
    return ModelPoint(label, float(acc["estimate"]), eff, interval, eff_iv)


def by_dataset(runs: Sequence[RunReport]) -> dict[str, tuple[list[tuple[str, dict]], dict | None]]:
    """{dataset: ([(label, model report)], reference lines)}: every model of every run, a shared base once."""
    out: dict[str, tuple[list, dict | None]] = {}
    for run in runs:
        rows, reference = out.setdefault(run.dataset, ([], run.reference))
        for m in run.models:
            if m["label"] == "base" and any(r["label"] == "base" and r["accuracy"] == m["accuracy"]
                                            and r.get("examples") == m.get("examples") for _, r in rows):
                continue
            rows.append((f"{run.name}: {m['label']}", m))
    return out


def proof_step_counts(records_path: pathlib.Path, dataset: str) -> dict[str, list[int]]:
    """{search order: [proof steps of each provable training problem]} under each of the three heuristics."""
    from reasoner.data.jsonl import read_jsonl
    from reasoner.tasks.astar import problem_from_record
    from search.astar import solve

    counts: dict[str, list[int]] = {name: [] for name in SEARCH_ORDERS.values()}
    for record in read_jsonl(records_path, what="one A* problem record per line"):
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
    datasets = by_dataset(runs)
    rows = {d: ([model_point(m, label) for label, m in models], reference)
            for d, (models, reference) in datasets.items()}
    fronts = plot_accuracy_efficiency_grid(rows, path=out / "astar_combined.png")
    steps = {}
    for run in runs:
        if run.train_records is not None:
            for name, values in proof_step_counts(run.train_records, run.dataset).items():
                steps.setdefault(run.dataset, {}).setdefault(name, []).extend(values)
    if steps:
        plot_proof_steps(steps, out / "astar_proof_steps.png")
    tables = [f"## {d}\n\n" + format_table([dict(m, label=label) for label, m in models])
              for d, (models, _) in datasets.items()]
    (out / "astar_combined.md").write_text("\n\n".join(tables) + "\n", encoding="utf-8")
    doc = {"runs": [{"name": r.name, "dataset": r.dataset} for r in runs],
           "models": {d: [dict(m, label=label) for label, m in models] for d, (models, _) in datasets.items()},
           "pareto_front": fronts, "proof_steps": steps}
    (out / "astar_combined.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    paths = {"png": str(out / "astar_combined.png"), "table": str(out / "astar_combined.md"),
             "json": str(out / "astar_combined.json")}
    if steps:
        paths["proof_steps"] = str(out / "astar_proof_steps.png")
    return paths


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
