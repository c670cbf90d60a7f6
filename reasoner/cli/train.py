"""`reasoner train --config configs/<file>.py[:variant] [--config.a.b=v ...] --workdir DIR`.

Picks the trainer from the config file name (`sft_*` -> SFT, `dpo_*` -> DPO, `grpo_*` -> GRPO) or `--trainer`. If DIR
already holds checkpoints the run resumes from the newest one (exactly: same batches, same losses).
Shows a progress bar with loss and tokens/s; writes DIR/metrics.jsonl and DIR/curves.png.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

TRAINERS = ("sft", "dpo", "grpo")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train", help="run or resume SFT / DPO / GRPO from a config file",
        description="Train with a Python config file; --config.KEY=VALUE overrides any config entry.")
    parser.add_argument("--config", required=True, metavar="FILE[:VARIANT]",
                        help="config file and optional variant, e.g. configs/sft_astar.py:tiny")
    parser.add_argument("--workdir", required=True, help="run directory (checkpoints, metrics); resumed if present")
    parser.add_argument("--trainer", choices=TRAINERS, default=None, help="default: from the config file name")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)
    from reasoner.cli.overrides import accept_config_overrides

    accept_config_overrides(parser)


def trainer_for(spec: str, explicit: str | None) -> str:
    if explicit:
        return explicit
    stem = pathlib.Path(spec.partition(":")[0]).stem
    for name in TRAINERS:
        if stem.startswith(name):
            return name
    raise SystemExit(f"cannot tell the trainer from config {spec!r}; name it sft_*.py / dpo_*.py or pass --trainer")


def run(args: argparse.Namespace) -> int:
    from reasoner.config import ConfigKeyError, load_config

    overrides = list(getattr(args, "config_overrides", []) or [])
    try:
        config = load_config(args.config, overrides)
    except (ConfigKeyError, FileNotFoundError, ValueError) as err:
        print(f"reasoner train: {err}", file=sys.stderr)
        return 2
    name = trainer_for(args.config, args.trainer)
    if name == "sft":
        from trainers import sft as trainer
    elif name == "grpo":
        from trainers import grpo as trainer
    else:
        from trainers import dpo as trainer
    result = trainer.train(config, workdir=args.workdir, progress=not args.no_progress)
    last = result.last_metrics
    summary = f"[{name}] done: step {int(result.state.step)}"
    if last:
        summary += f", loss {last['loss']:.4f}"
    if result.eval_history:
        summary += ", eval " + ", ".join(f"{k}={v:.4f}" for k, v in result.eval_history[-1].items()
                                         if k not in ("step", "epoch"))
    if result.resumed_from is not None:
        summary += f" (resumed from step {result.resumed_from})"
    print(summary, flush=True)
    return 0
