"""`reasoner cedar {check,data,eval}`: CEDAR-GRPO's verifiers, training mixture and evaluation.

  check --source NAME --input FILE --completions FILE --json
        Table 8 correctness of completions against records in the source's published format, one
        `{"id", "reward"}` JSON line per completion.
  data  --data-dir DIR --out DIR [--user-data-dir DIR] [--scale S] [--validation-scale S] [--seed N]
        [--generated-crypto N] [--generated-list-functions N]
        The App. A.1 mixture (`reasoner.data.cedar_mixture`): OUT/train.jsonl, OUT/validation.jsonl, OUT/mixture.json;
        the --generated-* flags add our own seeded tasks (`reasoner.data.cedar_generators`) to the training split.
  eval  --model CKPT|embedded [--input FILE | --data-dir DIR ...] [--heldout NAME[,NAME] [--heldout-limit N]]
        [--judge-endpoint URL] --json
        Correctness per source (Wilson 95%), judged coverage and directionality (bootstrap 95%) and the App. E
        text proxies (`reasoner.pipelines.cedar_eval`) of greedy completions of a mixture file (--input, e.g.
        OUT/validation.jsonl) or of the validation split built from --data-dir; --heldout adds held-out sets
        (`reasoner.data.cedar_heldout`: e-CARE, defeasible NLI, MuSR) read from --data-dir, reported with their
        task-native accuracy (Wilson 95%); --validation-scale 0 evaluates only those. --judged-process adds App. E's
        five counting process metrics as the judge extracts them (`reasoner.judges.process`). CKPT: a preset name, an HF
        directory (e.g. a run's export_dir) or a GGUF file; `embedded` = SmolLM2-135M-Instruct. The judge is a copy
        of the same model in-process unless --judge-endpoint names an OpenAI-compatible server; --no-judge skips it.
"""

from __future__ import annotations

import sys

EMBEDDED = "smollm2-135m-instruct"


def register(subparsers) -> None:
    from reasoner.tasks.cedar_verify import SOURCES

    p = subparsers.add_parser("cedar", help="CEDAR-GRPO tools (correctness check, training mixture, evaluation)")
    sub = p.add_subparsers(dest="cedar_command", required=True)
    check = sub.add_parser("check", help="score completions against a source's records")
    check.add_argument("--source", required=True, choices=SOURCES)
    check.add_argument("--input", required=True, help="the source's records, in its published format")
    check.add_argument("--completions", required=True,
                       help='JSON lines {"id", "completion"}; id = the record id (UniADILR: 0-based line number)')
    check.add_argument("--json", action="store_true", help="print one JSON line per completion (the only output)")
    check.set_defaults(func=run_check)

    def mixture_args(parser, *, scale: float, validation_scale: float | None) -> None:
        parser.add_argument("--data-dir", default=None, help="the staged sources (default ../shared/data)")
        parser.add_argument("--user-data-dir", default=None,
                            help="Balanced COPA / CLIMATE-FEVER / CauseLogics as downloaded (see cedar_mixture)")
        parser.add_argument("--scale", type=float, default=scale, help="x the paper's training counts")
        parser.add_argument("--validation-scale", type=float, default=validation_scale,
                            help="x the paper's validation counts (default: --scale)")
        parser.add_argument("--seed", type=int, default=42)
        parser.add_argument("--sources", default=",".join(SOURCES), help="comma-separated source names")
        parser.add_argument("--max-prompt-chars", type=int, default=0, help="keep only prompts this short (0: all)")
        parser.add_argument("--generated-crypto", type=int, default=0, metavar="N",
                            help="add N of our own Caesar/Atbash tasks to the training split (cedar_generators)")
        parser.add_argument("--generated-list-functions", type=int, default=0, metavar="N",
                            help="add N of our own list-function tasks to the training split")

    data = sub.add_parser("data", help="build the App. A.1 training mixture as JSONL")
    mixture_args(data, scale=1.0, validation_scale=None)
    data.add_argument("--out", required=True, help="output directory (train.jsonl, validation.jsonl, mixture.json)")
    data.add_argument("--json", action="store_true", help="print the counts and notes as one JSON object")
    data.set_defaults(func=run_data)

    ev = sub.add_parser("eval", help="correctness / coverage / directionality per source of a model")
    ev.add_argument("--model", required=True, help="preset name, HF directory, GGUF file, or 'embedded'")
    ev.add_argument("--input", default=None, help="mixture rows (e.g. OUT/validation.jsonl of `cedar data`)")
    mixture_args(ev, scale=0.0, validation_scale=1.0)
    ev.add_argument("--heldout", default="", metavar="NAME[,NAME]",
                    help="also evaluate held-out sets from --data-dir with their task-native accuracy: ecare, "
                         "defeasible_nli, musr_murder, musr_object, musr_team (musr = the three)")
    ev.add_argument("--heldout-limit", type=int, default=0, metavar="N",
                    help="the first N examples of each held-out set (0: all)")
    ev.add_argument("--judge-endpoint", default=None, metavar="URL", help="OpenAI-compatible judge server")
    ev.add_argument("--judge-model", default="judge", help="the endpoint's model name")
    ev.add_argument("--no-judge", action="store_true", help="correctness only")
    ev.add_argument("--judged-process", action="store_true",
                    help="also ask the judge for App. E's five counting process metrics of every trace (5 more "
                         "judge calls per trace); without it only the text-only proxies are reported")
    ev.add_argument("--max-new-tokens", type=int, default=256)
    ev.add_argument("--judge-max-new-tokens", type=int, default=512)
    ev.add_argument("--batch-size", type=int, default=8)
    ev.add_argument("--completions-out", default=None, help="write every completion with its scores (JSONL)")
    ev.add_argument("--json", action="store_true", help="print the report as one JSON object (else the table)")
    ev.set_defaults(func=run_eval)


def _spec(args):
    from reasoner.data.cedar_mixture import MixtureSpec

    return MixtureSpec(scale=args.scale, validation_scale=args.validation_scale, seed=args.seed,
                       sources=tuple(s.strip() for s in args.sources.split(",") if s.strip()),
                       max_prompt_chars=args.max_prompt_chars, generated_crypto=args.generated_crypto,
                       generated_list_functions=args.generated_list_functions)


def _data_dir(args):
    from reasoner.pipelines.cedar import default_data_dir

    return args.data_dir or default_data_dir()


def run_data(args) -> int:
    import json

    from reasoner.data.cedar_mixture import build_mixture, write_mixture

    try:
        spec = _spec(args)
        mixture = build_mixture(spec, data_dir=_data_dir(args), user_dir=args.user_data_dir)
    except (ValueError, FileNotFoundError) as err:
        print(f"reasoner cedar data: {err}", file=sys.stderr)
        return 2
    paths = write_mixture(mixture, out_dir=args.out, spec=spec)
    if args.json:
        print(json.dumps({"counts": mixture.counts, "notes": mixture.notes, "paths": paths}))
    else:
        for note in mixture.notes:
            print(f"note: {note}")
        for source, c in mixture.counts.items():
            ours = f" ({c['generated']} generated)" if c.get("generated") else ""
            print(f"{source}: train {c['train']}{ours}, validation {c['validation']}")
        print(f"wrote {paths['train']}, {paths['validation']}, {paths['summary']}")
    return 0


def _held_out(args) -> list[dict]:
    """The rows to evaluate: mixture rows (--input, else the validation split), then the --heldout sets' rows."""
    from reasoner.data.cedar_heldout import heldout_names, load_heldout
    from reasoner.data.cedar_mixture import build_mixture
    from reasoner.data.jsonl import read_jsonl

    if args.heldout_limit < 0:
        raise ValueError(f"--heldout-limit={args.heldout_limit}: expected >= 0 (0: all)")
    names = heldout_names(args.heldout)  # a bad name is an error before anything is read
    if args.input:
        rows = read_jsonl(args.input, what="one CEDAR mixture row (source, prompt, answer | tests) per line")
    else:
        mixture = build_mixture(_spec(args), data_dir=_data_dir(args), user_dir=args.user_data_dir)
        for note in mixture.notes:
            print(f"note: {note}", file=sys.stderr)
        rows = mixture.validation
    for name in names:
        examples = load_heldout(name, data_dir=_data_dir(args))
        rows += [ex.row() for ex in examples[:args.heldout_limit or None]]
    return rows


def run_eval(args) -> int:
    import json

    from reasoner.data.jsonl import write_jsonl
    from reasoner.judges import EndpointJudge, SamplerJudge
    from reasoner.models import load_model
    from reasoner.models.presets import resolve
    from reasoner.pipelines.cedar_eval import CedarEvalSettings, evaluate_cedar, format_table
    from reasoner.tokenization import load_tokenizer

    try:
        settings = CedarEvalSettings(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
        if args.judged_process and args.no_judge:
            raise ValueError("--judged-process needs a judge: drop --no-judge (or give --judge-endpoint URL)")
        if args.judge_max_new_tokens < 1:
            raise ValueError(f"--judge-max-new-tokens={args.judge_max_new_tokens}: expected >= 1")
        rows = _held_out(args)
        if not rows:
            raise ValueError("no rows to evaluate: give --input, a --validation-scale that selects some or --heldout")
        name = EMBEDDED if args.model == "embedded" else args.model
        path = resolve(name)
        model, tokenizer = load_model(path), load_tokenizer(path)
    except (ValueError, FileNotFoundError, OSError) as err:
        print(f"reasoner cedar eval: {err}", file=sys.stderr)
        return 2
    judge = None
    if args.judge_endpoint:
        judge = EndpointJudge(args.judge_endpoint, args.judge_model, max_tokens=args.judge_max_new_tokens)
    elif not args.no_judge:
        judge = SamplerJudge(load_model(path), tokenizer, judge_id=str(path),
                             max_new_tokens=args.judge_max_new_tokens, batch_size=args.batch_size)
    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    try:
        result = evaluate_cedar(model, tokenizer, rows, judge=judge, settings=settings, label=args.model, log=log,
                                judged_process=args.judged_process)
    except ValueError as err:
        print(f"reasoner cedar eval: {err}", file=sys.stderr)
        return 2
    if args.completions_out:
        write_jsonl(args.completions_out, result.rows)
    print(json.dumps(result.report) if args.json else format_table([result]), flush=True)
    return 0


def run_check(args) -> int:
    import json
    import pathlib

    from reasoner.data.jsonl import iter_jsonl
    from reasoner.tasks.cedar_verify import load_records, score

    try:
        records = {}
        for r in load_records(args.source, args.input):
            if str(r.id) in records:  # a completion's id must name one record, not the last of several
                raise ValueError(f"{args.input}: id {r.id!r} names more than one record; expected unique ids")
            records[str(r.id)] = r
        path = pathlib.Path(args.completions)
        rows = []
        for n, row in iter_jsonl(path, what='{"id": ..., "completion": "..."}'):
            if "id" not in row or not isinstance(row.get("completion"), str):
                raise ValueError(f'{path}:{n}: expected {{"id": ..., "completion": "..."}}')
            if str(row["id"]) not in records:
                raise ValueError(f"{path}:{n}: id {row['id']!r} is not a record of {args.input}")
            rows.append(row)
    except (ValueError, OSError) as err:
        print(f"reasoner cedar check: {err}", file=sys.stderr)
        return 2
    for row in rows:
        reward = score(records[str(row["id"])], row["completion"])
        print(json.dumps({"id": row["id"], "reward": reward}) if args.json else f"{row['id']}\t{reward}", flush=True)
    return 0
