"""Metric writers behind one protocol: JSONL always, TensorBoard and Weights & Biases on request (`log.writers`).

    writer = open_writers(workdir, log=config.log, enabled=is_primary())   # `Writers`
    writer.hparams(flatten_config(config))                                 # once, at the start
    writer.write(step, "train", loss=0.3, lr=1e-5)                         # every step (and "eval" records)
    writer.table(step, "completions", [{"prompt": ..., "completion": ..., "reward": 1.0}])
    writer.close()

Where the files go (all under `workdir`):
  * "jsonl" (always on, whatever the list says): `metrics.jsonl`, `hparams.json`, `metrics.<table>.jsonl`
    (`reasoner.metrics.curves.MetricsWriter`; resume truncates them to the restored step).
  * "tensorboard": event files in `tensorboard/` (tensorboardX). Scalars are tagged `kind/name` (`train/loss`,
    `eval/reward`; a name that already starts with `kind/` is not prefixed twice), hyperparameters go to the HParams
    plugin, tables are markdown text. On resume the restored step is a purge step, so TensorBoard drops the
    recomputed steps of the killed run instead of drawing them twice.
  * "wandb": a W&B run in `wandb/` with the same `kind/name` keys, the config, tables as `wandb.Table`. Mode:
    `log.wandb_mode` if set, else `WANDB_MODE`, else "offline" (`wandb sync workdir/wandb/offline-run-*` uploads
    later; nothing here needs the network). Online runs keep their id in `wandb/run_id` and resume it.
  * "trackio": a trackio run in trackio's own local store (`$TRACKIO_DIR`, default `~/.cache/huggingface/trackio`,
    where `trackio show` finds every project: runs of several workdirs side by side, as TRL users have them), project
    `log.trackio_project` (else `log.wandb_project`), named after the workdir, the same `kind/name` keys, the config,
    tables as `trackio.Table`; a resumed run continues the same trackio run (`resume="allow"`). trackio's own
    CPU/GPU sampling threads are off: the trainer logs what it measures.

Failures: an unknown writer name is a ValueError listing the known ones. An optional writer whose package is
missing, or that raises in any call (disk full, a network error, a bad value), warns once naming the writer and
the error and is switched off; training goes on. JSONL errors propagate as before (the run's own record).
Only process 0 writes (`enabled=False` elsewhere: every call is a no-op).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from reasoner.metrics.curves import MetricsWriter, _clean

TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
# One name per optional writer: the package it needs (how to install it) and what it builds.
OPTIONAL = {"tensorboard": "tensorboardX", "wandb": "wandb", "trackio": "trackio"}
KNOWN = ("jsonl", *OPTIONAL)


class MetricWriter(Protocol):
    """What every writer does; `step` is the optimizer step (DQN: the batch of episodes)."""

    def write(self, step: int, kind: str, **scalars: Any) -> None: ...

    def hparams(self, params: Mapping[str, Any]) -> None: ...

    def table(self, step: int, name: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def close(self) -> None: ...


def writer_names(spec) -> tuple[str, ...]:
    """`log.writers` as names: a comma list ("jsonl,tensorboard") or a sequence; unknown names are a ValueError."""
    if isinstance(spec, str):
        names = [s.strip() for s in spec.split(",")]
    elif isinstance(spec, Sequence):
        names = [str(s).strip() for s in spec]
    else:
        raise ValueError(f"log.writers={spec!r}: expected a comma list or a list of names from {list(KNOWN)}")
    names = [n.lower() for n in names if n]
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise ValueError(f"log.writers={spec!r}: unknown writer(s) {unknown}; known writers: {', '.join(KNOWN)}")
    return tuple(dict.fromkeys(names))


def tag(kind: str, name: str) -> str:
    """`kind/name`, unless `name` already carries the prefix (GRPO's eval metrics are named `eval/...`)."""
    return name if name.startswith(f"{kind}/") else f"{kind}/{name}"


def numeric(scalars: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries as floats (bools as 0/1); strings and None are left to the JSONL record."""
    out = {}
    for key, value in scalars.items():
        value = value.item() if hasattr(value, "item") else value
        if isinstance(value, (bool, int, float)):
            out[key] = float(value)
    return out


def flatten_config(config, prefix: str = "") -> dict[str, Any]:
    """A nested config (ConfigDict / dict, lists of dicts such as `rewards`) as `{"a.b.c": scalar}`: what the
    HParams plugin and W&B's config table take. A list of scalars becomes its JSON text (`'["a", "b"]'`), any other
    object its `str` (a path), so the record is always valid JSON."""
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    out: dict[str, Any] = {}
    items = config.items() if isinstance(config, Mapping) else enumerate(config)
    for key, value in items:
        dotted = f"{prefix}{key}"
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        if isinstance(value, Mapping) or (isinstance(value, (list, tuple))
                                          and any(isinstance(v, Mapping) or hasattr(v, "to_dict") for v in value)):
            out.update(flatten_config(value, dotted + "."))
        elif isinstance(value, (list, tuple)):
            out[dotted] = json.dumps([_clean(v) for v in value], default=str)
        else:
            value = _clean(value)
            out[dotted] = value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
    return out


def table_columns(rows: Sequence[Mapping[str, Any]]) -> dict:
    """Rows (same keys, at least one) as {"columns", "data"}: what W&B's and trackio's `Table` take."""
    columns = list(rows[0])
    return {"columns": columns, "data": [[_clean(r.get(c)) for c in columns] for r in rows]}


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows (same keys) as a markdown table; cell text has `|` escaped and newlines as spaces."""
    if not rows:
        return ""
    columns = list(rows[0])

    def cell(v):
        text = f"{v:.4g}" if isinstance(v, float) and math.isfinite(v) else str(v)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def prompt_head(prompt, *, chars: int = 200) -> str:
    """The start of a prompt for a table cell: a string, or the last user message of a chat message list."""
    if not isinstance(prompt, str):
        messages = [m for m in prompt if isinstance(m, Mapping)] if isinstance(prompt, Sequence) else []
        users = [m for m in messages if m.get("role") == "user"] or messages
        prompt = str(users[-1].get("content") or "") if users else str(prompt)
    return prompt[:chars] + ("..." if len(prompt) > chars else "")


def completion_rows(*, prompts: Sequence, completions: Sequence[str], total_B, per_function_BxF,
                    names: Sequence[str], max_rows: int = 4) -> list[dict[str, Any]]:
    """The first `max_rows` samples of a generation step as table rows: prompt head (row b's prompt), completion
    text, total (weighted) reward and each reward function's value (NaN: the function did not apply)."""
    rows = []
    for b in range(min(int(max_rows), len(completions))):
        row = {"prompt": prompt_head(prompts[b]), "completion": str(completions[b]),
               "reward": float(total_B[b])}
        row.update({f"reward/{n}": float(per_function_BxF[b][i]) for i, n in enumerate(names)})
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------- tensorboard
class TensorBoardWriter:
    """tensorboardX event files in `logdir`. The SummaryWriter opens at the first call, and again after
    `truncate_after(step)` with purge_step = step + 1 (TensorBoard then discards the older events from there)."""

    def __init__(self, logdir, *, flush_secs: int = 30):
        import tensorboardX  # noqa: F401 - a missing package is reported when the writer is opened

        self.logdir = pathlib.Path(logdir)
        self.flush_secs = flush_secs
        self._purge_step: int | None = None
        self._sw = None

    def _writer(self):
        if self._sw is None:
            from tensorboardX import SummaryWriter

            # A new file per opening, named to sort after the last (TensorBoard reads a run's files in name order;
            # tensorboardX's own name has one-second resolution, so a resume within that second would reuse it).
            self._sw = SummaryWriter(logdir=str(self.logdir), purge_step=self._purge_step, flush_secs=self.flush_secs,
                                     filename_suffix=f".{time.time_ns()}")
        return self._sw

    def truncate_after(self, step: int) -> None:
        self.close()
        self._purge_step = int(step) + 1

    def write(self, step: int, kind: str, **scalars: Any) -> None:
        sw = self._writer()
        for name, value in numeric(scalars).items():
            sw.add_scalar(tag(kind, name), value, global_step=int(step))

    def hparams(self, params: Mapping[str, Any]) -> None:
        from tensorboardX.summary import hparams

        values = {k: v for k, v in params.items() if isinstance(v, (bool, int, float, str))}
        file_writer = self._writer()._get_file_writer()
        for summary in hparams(values, {}):  # experiment, session start, session end: what add_hparams writes
            file_writer.add_summary(summary)
        self._sw.add_text("config", markdown_table([{"key": k, "value": v} for k, v in params.items()]), 0)

    def table(self, step: int, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self._writer().add_text(name, markdown_table(rows), global_step=int(step))

    def close(self) -> None:
        if self._sw is not None:
            self._sw.close()
            self._sw = None


# ---------------------------------------------------------------------------------------------- wandb, trackio
class _HostedRun:
    """What the W&B and trackio writers share (trackio copies wandb's logging API): a run opened by `_run()` at the
    first call, scalars logged as `kind/name` keys at `step`, tables as the package's `Table`."""

    def _run(self):
        raise NotImplementedError

    def _table(self, **columns_and_data):
        raise NotImplementedError

    def write(self, step: int, kind: str, **scalars: Any) -> None:
        self._run().log({tag(kind, k): v for k, v in numeric(scalars).items()}, step=int(step))

    def table(self, step: int, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._run().log({name: self._table(**table_columns(rows))}, step=int(step))

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


class WandbWriter(_HostedRun):
    """One W&B run (opened at the first call) logging `kind/name` keys at `step`; see the module docstring."""

    def __init__(self, workdir, *, project: str = "reasoner", name: str = "", mode: str = ""):
        import wandb  # noqa: F401 - a missing package is reported when the writer is opened

        self.workdir = pathlib.Path(workdir)  # wandb.init(dir=workdir) writes workdir/wandb/
        self.project = project or "reasoner"
        self.name = name or self.workdir.resolve().name
        self.mode = mode or os.environ.get("WANDB_MODE") or "offline"
        self.run = None

    def _run(self):
        if self.run is None:
            import wandb

            (self.workdir / WANDB_DIR).mkdir(parents=True, exist_ok=True)
            resume = {}
            if self.mode == "online":  # offline runs are uploaded by `wandb sync`, one directory each
                id_file = self.workdir / WANDB_DIR / "run_id"
                if not id_file.exists():
                    id_file.write_text(wandb.util.generate_id(), encoding="utf-8")
                resume = dict(id=id_file.read_text(encoding="utf-8").strip(), resume="allow")
            self.run = wandb.init(project=self.project, name=self.name, dir=str(self.workdir), mode=self.mode,
                                  reinit="create_new", **resume)
        return self.run

    def _table(self, **columns_and_data):
        import wandb

        return wandb.Table(**columns_and_data)

    def hparams(self, params: Mapping[str, Any]) -> None:
        self._run().config.update(dict(params), allow_val_change=True)


class TrackioWriter(_HostedRun):
    """One trackio run (opened at the first call, with the config when `hparams` comes first, as the loops call it)
    logging `kind/name` keys at `step`; see the module docstring."""

    def __init__(self, workdir, *, project: str = "reasoner", name: str = ""):
        import trackio  # noqa: F401 - a missing package is reported when the writer is opened

        self.project = project or "reasoner"
        self.name = name or pathlib.Path(workdir).resolve().name
        self.run = None

    def _run(self, config: Mapping[str, Any] | None = None):
        if self.run is None:
            import trackio

            self.run = trackio.init(project=self.project, name=self.name, config=dict(config or {}), resume="allow",
                                    auto_log_cpu=False, auto_log_gpu=False)
        return self.run

    def _table(self, **columns_and_data):
        import trackio

        return trackio.Table(**columns_and_data)

    def hparams(self, params: Mapping[str, Any]) -> None:
        if self.run is None:
            self._run(params)
        else:
            self.run.config.update(dict(params))


# ---------------------------------------------------------------------------------------------- fan-out
class Writers:
    """JSONL plus the optional writers; `path`, `enabled` and `truncate_after` are the JSONL log's (the loops
    read them), every other call goes to all writers. An optional writer that raises is warned about once and
    dropped (`disabled` keeps `name -> error`)."""

    def __init__(self, jsonl: MetricsWriter, optional: Mapping[str, MetricWriter] | None = None):
        self.jsonl = jsonl
        self.optional = dict(optional or {})
        self.disabled: dict[str, str] = {}

    path = property(lambda self: self.jsonl.path)
    enabled = property(lambda self: self.jsonl.enabled)

    @property
    def names(self) -> tuple[str, ...]:
        return ("jsonl", *self.optional)

    def disable(self, name: str, err: BaseException, *, when: str) -> None:
        message = f"{type(err).__name__}: {err}"
        self.disabled[name] = message
        writer = self.optional.pop(name, None)
        warnings.warn(f"metrics writer {name!r} failed ({when}: {message}); it is switched off and training goes on "
                      f"(metrics.jsonl keeps every record)", RuntimeWarning, stacklevel=3)
        if writer is not None:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - already reported; closing a broken writer may fail again
                pass

    def _each(self, method: str, *args, **kwargs) -> None:
        for name, writer in list(self.optional.items()):
            try:
                getattr(writer, method)(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - any failure of an optional writer must not stop training
                self.disable(name, err, when=method)

    def write(self, step: int, kind: str = "train", **scalars: Any) -> None:
        self.jsonl.write(step, kind, **scalars)
        self._each("write", step, kind, **scalars)

    def hparams(self, params: Mapping[str, Any]) -> None:
        self.jsonl.hparams(params)
        self._each("hparams", params)

    def table(self, step: int, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.jsonl.table(step, name, rows)
        self._each("table", step, name, rows)

    def truncate_after(self, step: int) -> None:
        self.jsonl.truncate_after(step)
        for name, writer in list(self.optional.items()):
            if hasattr(writer, "truncate_after"):
                try:
                    writer.truncate_after(step)
                except Exception as err:  # noqa: BLE001
                    self.disable(name, err, when="truncate_after")

    def close(self) -> None:
        self.jsonl.close()
        self._each("close")


def _log_setting(log, key: str, default):
    if log is None:
        return default
    value = log.get(key, default) if hasattr(log, "get") else getattr(log, key, default)
    return default if value is None else value


def open_writers(workdir, *, log=None, enabled: bool = True) -> Writers:
    """The writers `log` (a config's `log` section; None = JSONL only) asks for, under `workdir`. Names are
    checked on every process; only an `enabled` one (process 0) opens files."""
    workdir = pathlib.Path(workdir)
    names = writer_names(_log_setting(log, "writers", "jsonl"))
    out = Writers(MetricsWriter(workdir / "metrics.jsonl", enabled=enabled))
    if not enabled:
        return out
    for name in names:
        if name == "jsonl":
            continue
        try:
            if name == "tensorboard":
                out.optional[name] = TensorBoardWriter(workdir / TENSORBOARD_DIR)
            elif name == "wandb":
                out.optional[name] = WandbWriter(workdir, project=_log_setting(log, "wandb_project", ""),
                                                 name=_log_setting(log, "wandb_name", ""),
                                                 mode=_log_setting(log, "wandb_mode", ""))
            elif name == "trackio":
                out.optional[name] = TrackioWriter(
                    workdir, project=_log_setting(log, "trackio_project", "") or _log_setting(log, "wandb_project", ""))
        except ImportError as err:
            out.disable(name, ImportError(f"{err}; pip install {OPTIONAL[name]}"), when="open")
    return out
