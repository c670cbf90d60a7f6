"""`reasoner eval --config FILE[:VARIANT] (--checkpoint DIR | --endpoint URL --endpoint-model NAME) [--split test]
[--few-shot K [K ...]] [--max-tokens N] [--config.a.b=v ...]`.

Jitted batched evaluation of a model on the A* task (`reasoner.evaluation`): greedy by default (the paper's
setting), or `--num-samples K --temperature T` for avg@N, pass@k, pass^k and stability. The problems are the
config's test split (`data` section of configs/astar_demo.py: generated DeepRD, `data.records` or `data.tfds_name`)
or `--records FILE.jsonl` (A* dataset records, e.g. `<demo workdir>/data/records/test.jsonl`).

The model: --checkpoint is a model directory (HF safetensors, such as the SFT export `<workdir>/sft/export`), a
.gguf file or a preset name; or --endpoint URL --endpoint-model NAME, an OpenAI-compatible server (a large API model,
`reasoner serve`, vLLM; key from $OPENAI_API_KEY or --api-key-env), `reasoner.evaluation_endpoint`: a request that
still fails after its retries scores as wrong and is counted in the report, never ending the run. --max-tokens is
the generation budget (default: the config's eval.endpoint_max_tokens for an endpoint, eval.max_new_tokens for a
checkpoint).

Few-shot (the paper's in-context baselines): --few-shot K puts K solved training problems before each problem, drawn
per problem with the config's eval.seed from the config's train split (or --shots-records FILE), answered by host-A*
traces under data.heuristic (or --few-shot-heuristic) and data.cost; several K (`--few-shot 0 5`) evaluate the model
once per K into one report, side by side. Default: the config's eval.few_shot (0 in the demo; 10 / 5 in the paper's
SFT variants). A local model's prompt drops shots from its end until it fits the model's context with the token
budget (`reasoner.evaluation.build_prompts`; the report's generation.few_shot counts them).

Writes OUT/eval.json, OUT/eval.png (accuracy vs efficiency with the Pareto front) and OUT/eval_completions.jsonl;
prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="evaluate a model on A* proof problems (accuracy, efficiency)",
                                   description="Batched A* evaluation; --config.KEY=VALUE overrides any entry.")
    parser.add_argument("--config", default=None, metavar="FILE[:VARIANT]",
                        help="default: configs/astar_demo.py:cpu (its data and eval sections are used)")
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--checkpoint", default=None, help="model directory, .gguf file or preset name")
    model.add_argument("--endpoint", default=None, metavar="URL",
                       help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (with --endpoint-model)")
    parser.add_argument("--endpoint-model", default=None, metavar="NAME", help="the endpoint's model name")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="variable holding the endpoint's API key")
    parser.add_argument("--concurrency", type=int, default=8, help="endpoint requests in flight (default 8)")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per endpoint request (default 300)")
    parser.add_argument("--retries", type=int, default=2, help="retries of a failed endpoint request (default 2)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="generation budget (default: eval.endpoint_max_tokens / eval.max_new_tokens)")
    parser.add_argument("--few-shot", type=int, nargs="+", default=None, metavar="K",
                        help="solved training problems per prompt; several K -> one row each (default: eval.few_shot)")
    parser.add_argument("--few-shot-heuristic", default=None, choices=("zero", "dependency", "true"),
                        help="search order of the shots' traces (default: data.heuristic)")
    parser.add_argument("--shots-records", default=None, help="JSONL of A* records to draw shots from "
                                                              "(default: the config's train split)")
    parser.add_argument("--split", default="test", choices=("train", "validation", "test"))
    parser.add_argument("--records", default=None, help="JSONL of A* records instead of the config's split")
    parser.add_argument("--num-samples", type=int, default=None, help="K samples per problem (default: config)")
    parser.add_argument("--temperature", type=float, default=None, help="default: config (0 = greedy)")
    parser.add_argument("--label", default=None,
                        help="model name in the report (default: the checkpoint or endpoint model; ' (K-shot)' added)")
    parser.add_argument("--output", default=None, help="report directory (default: ./eval_<label>)")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(func=run)
    from reasoner.cli.overrides import accept_config_overrides

    accept_config_overrides(parser)


def _read_records(path: str, flag: str) -> list[dict]:
    from reasoner.data.jsonl import read_jsonl

    file = pathlib.Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{flag} {file}: no such file (expected JSONL of A* records)")
    rows = read_jsonl(file, what="one A* record per line")
    if not rows:
        raise ValueError(f"{flag} {file}: no records")
    return rows


def _records(args, config) -> list[dict]:
    if args.records:
        return _read_records(args.records, "--records")
    from reasoner.pipelines.astar import _split_records

    return _split_records(config.data, args.split)


def _shots(args, config) -> list[int]:
    shots = args.few_shot if args.few_shot is not None else [int(config.eval.get("few_shot", 0))]
    bad = [k for k in shots if k < 0]
    if bad or len(set(shots)) != len(shots):
        raise ValueError(f"--few-shot {' '.join(map(str, shots))}: expected distinct ints >= 0")
    return shots


def _model(args, config):
    """(model, max_new_tokens, label): a loaded checkpoint or an `EndpointModel`, its token budget and name."""
    if args.endpoint:
        from reasoner.evaluation_endpoint import EndpointModel

        if not args.endpoint_model:
            raise ValueError("--endpoint needs --endpoint-model NAME (the served model's name)")
        model = EndpointModel(args.endpoint, args.endpoint_model, api_key=os.environ.get(args.api_key_env),
                              timeout_s=args.timeout_s, retries=args.retries, max_concurrency=args.concurrency)
        budget = args.max_tokens or int(config.eval.get("endpoint_max_tokens", config.eval.max_new_tokens))
        return model, budget, args.label or args.endpoint_model
    if args.endpoint_model:
        raise ValueError("--endpoint-model names an endpoint's model: expected --endpoint URL with it")
    from reasoner.models import load_model
    from reasoner.models.presets import resolve

    model = load_model(str(resolve(args.checkpoint)))
    return model, args.max_tokens or int(config.eval.max_new_tokens), args.label or pathlib.Path(args.checkpoint).name


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from reasoner.cli.demo import load, use_single_device
    from reasoner.config import ConfigKeyError

    try:
        config = load(args.config, getattr(args, "config_overrides", []))
        if args.num_samples is not None:
            config.eval.num_samples = args.num_samples
            config.eval.ks = tuple(k for k in (1, 2, 4, 8, 16) if k <= args.num_samples)
        if args.temperature is not None:
            config.eval.temperature = args.temperature
        if args.few_shot_heuristic:
            config.data.heuristic = args.few_shot_heuristic
        if args.max_tokens is not None and args.max_tokens < 1:
            raise ValueError(f"--max-tokens {args.max_tokens}: expected an int >= 1")
        shots = _shots(args, config)
        records = _records(args, config)
        train_records = (_read_records(args.shots_records, "--shots-records") if args.shots_records else None)
    except (ConfigKeyError, FileNotFoundError, ValueError) as err:
        print(f"reasoner eval: {err}", file=sys.stderr)
        return 2
    use_single_device(config)
    from trainers.run import use_config_rules  # starts JAX: after the device choice above

    use_config_rules(config)  # the config's sharding table, before any model is laid out
    from reasoner.evaluation import evaluate, reference_efficiency, write_report
    from reasoner.pipelines.astar import _eval_settings, _split_records, format_table
    from reasoner.tasks.astar import problem_from_record

    try:
        settings = _eval_settings(config)
        problems = [problem_from_record(r, dataset=config.data.dataset) for r in records]
        examples = None
        if any(shots):
            rows = train_records if train_records is not None else _split_records(config.data, "train")
            examples = [problem_from_record(r, dataset=config.data.dataset) for r in rows]
        model, budget, label = _model(args, config)
    except (FileNotFoundError, ValueError) as err:
        print(f"reasoner eval: {err}", file=sys.stderr)
        return 2
    tokenizer = None
    if not args.endpoint:  # the config's model (or tokenizer) names the tokenizer: exports carry weights only
        from trainers.run import load_tokenizer_for

        tokenizer = load_tokenizer_for(config.model)
    results = []
    out = pathlib.Path(args.output or "eval_" + re.sub(r"[^\w.-]+", "_", label))
    reference = reference_efficiency(problems)
    for k in shots:
        run_settings = dataclasses.replace(settings, few_shot=k, max_new_tokens=budget)
        name = f"{label} ({k}-shot)" if k else label
        try:
            results.append(evaluate(model, tokenizer, problems, run_settings, label=name,
                                    progress=not args.no_progress, examples=examples))
        except ValueError as err:  # a prompt that cannot fit the model's context, shots too few for k
            print(f"reasoner eval: {err}", file=sys.stderr)
            return 2
        # rewritten after every K, so a run stopped at a later K keeps the rows it finished
        paths = write_report(results, out, name="eval", reference=reference)
    print(format_table([r.report for r in results]))
    for r in results:
        generation = r.report["generation"]
        print(json.dumps({"model": r.label, **r.report["reliability"], "few_shot": generation["few_shot"],
                          **({"endpoint": generation["endpoint"]} if "endpoint" in generation else {})}))
    print(f"report: {paths['json']}\nplot:   {paths['png']}")
    return 0
