"""Training curves: one JSON object per line (`metrics.jsonl`) and a PNG of every numeric series.

`MetricsWriter(path)` appends records `{"step": n, "kind": "train"|"eval", ...}` and flushes each
line, so a killed run keeps everything it logged. On resume, `truncate_after(step)` drops records
of steps the restored checkpoint had not reached (they are recomputed), so the file reads as
one uninterrupted run. `plot_curves(jsonl, png)` draws one panel per metric against step. The writer also keeps
the run's flattened config (`hparams.json`) and tables (`metrics.<name>.jsonl`, one row a line with its step), so it
stands in for the TensorBoard / W&B writers of `reasoner.metrics.writers`.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Any


def _clean(value: Any) -> Any:
    """JSON-safe scalar: numpy/jax scalars -> float/int; NaN/inf -> string so the line stays valid JSON."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricsWriter:
    """Append-only JSON-lines log of metrics records."""

    def __init__(self, path, *, enabled: bool = True):
        self.path = pathlib.Path(path)
        self.enabled = enabled
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, step: int, kind: str = "train", **metrics: Any) -> None:
        if not self.enabled:
            return
        record = {"step": int(step), "kind": kind, **{k: _clean(v) for k, v in metrics.items()}}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def hparams(self, params: dict[str, Any]) -> None:
        """`hparams.json` beside the log: the run's flattened config, rewritten at each start."""
        if not self.enabled:
            return
        tmp = self.path.with_name("hparams.json.tmp")
        tmp.write_text(json.dumps({k: _clean(v) for k, v in params.items()}, indent=1) + "\n", encoding="utf-8")
        tmp.replace(self.path.with_name("hparams.json"))

    def table_path(self, name: str) -> pathlib.Path:
        """Where table `name` goes: `metrics.<name>.jsonl` beside the log."""
        if not name or any(c in name for c in "/\\") or name.startswith("."):
            raise ValueError(f"table name {name!r}: expected a plain file-name part such as 'completions'")
        return self.path.with_name(f"{self.path.stem}.{name}.jsonl")

    def table(self, step: int, name: str, rows) -> None:
        """Appends each row as `{"step": step, **row}` to `table_path(name)`."""
        path = self.table_path(name)
        if not self.enabled:
            return
        with open(path, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps({"step": int(step), **{k: _clean(v) for k, v in row.items()}}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        """Nothing is held open (each record is appended and synced)."""

    def truncate_after(self, step: int) -> None:
        """Removes records with step > `step` (and a torn last line from a killed process), in the log and in
        its tables."""
        if not self.enabled:
            return
        for path in [self.path, *sorted(self.path.parent.glob(f"{self.path.stem}.*.jsonl"))]:
            if path.exists():
                _truncate_jsonl(path, step)


def _truncate_jsonl(path: pathlib.Path, step: int) -> None:
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if int(record.get("step", 0)) <= step:
            kept.append(line)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    tmp.replace(path)


def read_metrics(path, *, kind: str | None = None) -> list[dict[str, Any]]:
    """All records of `path` (optionally only one kind), in file order; a bad line is a ValueError naming the file
    and line (`reasoner.data.jsonl`)."""
    from reasoner.data.jsonl import iter_jsonl

    records = iter_jsonl(path, what="one metrics record (step, kind, values) per line")
    return [record for _, record in records if kind is None or record.get("kind") == kind]


def metric_series(records, *, keys: list[str] | None = None) -> tuple[dict, dict]:
    """`(series, constant)`: `series[name][kind] = (steps, values)` for each numeric metric that changed, and
    `constant[name] = value` for each that kept one value over more than one record (no panel needed)."""
    series: dict[str, dict[str, tuple[list, list]]] = {}
    for r in records:
        for key, value in r.items():
            if key in ("step", "kind") or isinstance(value, (str, bool)) or value is None:
                continue
            if keys is not None and key not in keys:
                continue
            xs, ys = series.setdefault(key, {}).setdefault(r.get("kind", "train"), ([], []))
            xs.append(r["step"])
            ys.append(value)
    constant = {}
    for name, kinds in list(series.items()):
        values = [y for _, ys in kinds.values() for y in ys]
        if len(values) > 1 and len(set(values)) == 1:
            constant[name] = values[0]
            del series[name]
    return series, constant


def plot_curves(jsonl_path, png_path, *, keys: list[str] | None = None) -> pathlib.Path:
    """One panel per numeric metric that changed during the run (train and eval records share a panel when names
    match); metrics that kept one value are listed in the title instead of drawn as flat lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series, constant = metric_series(read_metrics(jsonl_path), keys=keys)
    names = sorted(series)
    cols = 3
    rows = max(1, math.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3 * rows), squeeze=False)
    if constant:
        fig.suptitle("constant: " + ", ".join(f"{k}={v:g}" for k, v in sorted(constant.items())), fontsize=8)
    for ax, name in zip(axes.flat, names):
        for kind, (xs, ys) in series[name].items():
            ax.plot(xs, ys, marker="o" if kind != "train" else None, markersize=3, label=kind)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    return save_figure(fig, png_path, dpi=80)


def save_figure(fig, path, *, dpi: int) -> pathlib.Path:
    """Lays `fig` out, writes it to `path` (PNG at `dpi`) and closes it (pyplot keeps every open figure alive:
    a long run that plots each evaluation would otherwise hold them all); returns the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = pathlib.Path(path)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
