"""`reasoner eval --config FILE[:VARIANT] --checkpoint DIR [--split test] [--config.a.b=v ...]`.

Jitted batched evaluation of a model on the A* task (`reasoner.evaluation`): greedy by default (the paper's
setting), or `--num-samples K --temperature T` for avg@N, pass@k, pass^k and stability. The problems are the
config's DeepRD split (`data` section of configs/astar_demo.py) or `--records FILE.jsonl` (A* dataset records, e.g.
`<demo workdir>/data/records/test.jsonl`). --checkpoint is a model directory (HF safetensors, such as the SFT
export `<workdir>/sft/export`), a .gguf file or a preset name. Writes OUT/eval.json, OUT/eval.png (accuracy vs
efficiency with the Pareto front) and OUT/eval_completions.jsonl; prints the table.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="evaluate a model on A* proof problems (accuracy, efficiency)",
                                   description="Batched A* evaluation; --config.KEY=VALUE overrides any entry.")
    parser.add_argument("--config", default=None, metavar="FILE[:VARIANT]",
                        help="default: configs/astar_demo.py:cpu (its data and eval sections are used)")
    parser.add_argument("--checkpoint", required=True, help="model directory, .gguf file or preset name")
    parser.add_argument("--split", default="test", choices=("train", "validation", "test"))
    parser.add_argument("--records", default=None, help="JSONL of A* records instead of the config's split")
    parser.add_argument("--num-samples", type=int, default=None, help="K samples per problem (default: config)")
    parser.add_argument("--temperature", type=float, default=None, help="default: config (0 = greedy)")
    parser.add_argument("--label", default=None, help="model name in the report (default: the checkpoint)")
    parser.add_argument("--output", default=None, help="report directory (default: ./eval_<checkpoint name>)")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(func=run)
    from reasoner.cli.overrides import accept_config_overrides

    accept_config_overrides(parser)


def _records(args, config) -> list[dict]:
    if args.records:
        from reasoner.data.jsonl import read_jsonl

        path = pathlib.Path(args.records)
        if not path.is_file():
            raise FileNotFoundError(f"--records {path}: no such file (expected JSONL of A* records)")
        rows = read_jsonl(path, what="one A* record per line")
        if not rows:
            raise ValueError(f"--records {path}: no records")
        return rows
    from reasoner.data.astar_traces import deeprd_records
    from reasoner.data.deeprd import DeepRDSpec

    d = config.data
    spec = DeepRDSpec(min_lookahead=d.min_lookahead, max_lookahead=d.max_lookahead, min_branches=d.min_branches,
                      max_branches=d.max_branches, extra_ratio=d.extra_ratio, max_degree=d.max_degree)
    return deeprd_records(seed=int(d.seed), split=args.split, size=int(d[args.split]), spec=spec)


def run(args: argparse.Namespace) -> int:
    from reasoner.cli.demo import load, use_single_device
    from reasoner.config import ConfigKeyError

    try:
        config = load(args.config, getattr(args, "config_overrides", []))
        if args.num_samples is not None:
            config.eval.num_samples = args.num_samples
            config.eval.ks = tuple(k for k in (1, 2, 4, 8, 16) if k <= args.num_samples)
        if args.temperature is not None:
            config.eval.temperature = args.temperature
        records = _records(args, config)
    except (ConfigKeyError, FileNotFoundError, ValueError) as err:
        print(f"reasoner eval: {err}", file=sys.stderr)
        return 2
    use_single_device(config)
    from reasoner.evaluation import evaluate, reference_efficiency, write_report
    from reasoner.models import load_model
    from reasoner.models.presets import resolve
    from reasoner.pipelines.astar import _eval_settings, format_table
    from reasoner.tasks.astar import problem_from_record

    try:
        settings = _eval_settings(config)
        problems = [problem_from_record(r, dataset=config.data.dataset) for r in records]
        source = resolve(args.checkpoint)
        model = load_model(str(source))
    except (FileNotFoundError, ValueError) as err:
        print(f"reasoner eval: {err}", file=sys.stderr)
        return 2
    # The config's model (or tokenizer) names the tokenizer: exported checkpoints carry weights, not vocabularies.
    from trainers.run import load_tokenizer_for

    tokenizer = load_tokenizer_for(config.model)
    label = args.label or pathlib.Path(args.checkpoint).name
    result = evaluate(model, tokenizer, problems, settings, label=label, progress=not args.no_progress)
    out = pathlib.Path(args.output or f"eval_{label}")
    paths = write_report([result], out, name="eval", reference=reference_efficiency(problems))
    print(format_table([result.report]))
    rel = result.report["reliability"]
    print(json.dumps({k: v for k, v in rel.items()}))
    print(f"report: {paths['json']}\nplot:   {paths['png']}")
    return 0
