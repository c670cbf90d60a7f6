"""`reasoner train --config configs/<file>.py[:variant] [--config.a.b=v ...] --workdir DIR`: starts ANY config.

What runs is named by the config itself, never by its file name: `config.trainer` ("sft", "dpo", "kto", "grpo", "dqn")
runs that trainer's `train(config, workdir=...)`; `config.pipeline` ("astar") runs that end-to-end pipeline (e.g.
every variant of configs/astar_paper.py). If DIR already holds checkpoints the run resumes from the newest one
(exactly: same batches, same losses). SIGTERM (preemption) or Ctrl-C lets the current step finish, writes a
checkpoint and exits 0; the same command resumes. Shows a progress bar; writes DIR/metrics.jsonl and DIR/curves.png.
"""

from __future__ import annotations

import argparse
import importlib
import sys

TRAINERS = {"sft": "trainers.sft", "dpo": "trainers.dpo", "kto": "trainers.kto", "grpo": "trainers.grpo",
            "dqn": "trainers.dqn"}
PIPELINES = {"astar": "reasoner.pipelines.astar", "smt": "reasoner.pipelines.smt",
             "cedar": "reasoner.pipelines.cedar"}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train", help="run or resume the trainer or pipeline a config file names",
        description="Train with a Python config file (its `trainer` or `pipeline` entry says what runs); "
                    "--config.KEY=VALUE overrides any config entry.")
    parser.add_argument("--config", required=True, metavar="FILE[:VARIANT]",
                        help="config file and optional variant, e.g. configs/sft_astar.py:tiny")
    from reasoner.cli.arg_types import local_workdir

    parser.add_argument("--workdir", required=True, type=local_workdir,
                        help="run directory (checkpoints, metrics); resumed if present")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)
    from reasoner.cli.overrides import accept_config_overrides

    accept_config_overrides(parser)


def target_of(config, spec: str) -> tuple[str, str]:
    """("trainer" | "pipeline", name) of `config`; a clear error when it names neither or an unknown one."""
    trainer, pipeline = config.get("trainer"), config.get("pipeline")
    if bool(trainer) == bool(pipeline):
        raise ValueError(f"config {spec!r}: expected exactly one of `trainer` ({', '.join(TRAINERS)}) or "
                         f"`pipeline` ({', '.join(PIPELINES)}); got trainer={trainer!r}, pipeline={pipeline!r}")
    kind, name, known = ("trainer", trainer, TRAINERS) if trainer else ("pipeline", pipeline, PIPELINES)
    if name not in known:
        raise ValueError(f"config {spec!r}: {kind}={name!r}; expected one of {sorted(known)}")
    return kind, name


def run(args: argparse.Namespace) -> int:
    from reasoner.config import ConfigKeyError, load_config

    overrides = list(getattr(args, "config_overrides", []) or [])
    try:
        config = load_config(args.config, overrides)
        kind, name = target_of(config, args.config)
        from trainers.run import use_config_rules

        use_config_rules(config)  # the config's sharding table, before any model is laid out
    except (ConfigKeyError, FileNotFoundError, ValueError) as err:
        print(f"reasoner train: {err}", file=sys.stderr)
        return 2
    if kind == "pipeline":
        importlib.import_module(PIPELINES[name]).run(config, workdir=args.workdir, progress=not args.no_progress)
        return 0
    result = importlib.import_module(TRAINERS[name]).train(config, workdir=args.workdir,
                                                           progress=not args.no_progress)
    last = result.last_metrics
    status = "preempted" if getattr(result, "preempted", False) else "done"
    summary = f"[{name}] {status}: step {int(result.state.step)}"
    if last:
        summary += f", loss {last['loss']:.4f}"
    if result.eval_history:
        summary += ", eval " + ", ".join(f"{k}={v:.4f}" for k, v in result.eval_history[-1].items()
                                         if k not in ("step", "epoch") and isinstance(v, float))
    if result.resumed_from is not None:
        summary += f" (resumed from step {result.resumed_from})"
    print(summary, flush=True)
    return 0
