"""`reasoner smt eval --model CKPT --k K (--dataset NAME | --input FILE) [--limit N] --samples-out FILE --json`.

K samples per problem through the SMT scratchpad with the local jitted sampler (`SamplerPolicy`; the K copies of
a prompt share one prefill, problems are batched), real Z3 in the verifier pool, and the App. B summary
(`reasoner.metrics.smt_eval`): reliability keys named with the K used (`pass@4`, `pass^4`, `avg@4` for K = 4),
agent-reliability and SMT-quality metrics, the efficiency profile and bootstrap intervals.
`--model embedded` is the embedded SmolLM2-135M-Instruct (the preset `smollm2-135m-instruct`); any other value is a
preset, GGUF file, HF directory or export (`sampler_policy`, which `reasoner smt rollout` uses too).
`--model symbolic` evaluates the symbolic teacher (`reasoner.agents.symbolic_teacher`) instead of a model: the
reference trajectories a CPU run learns from, and a check of the harness without a model.
`--samples-out` gets one JSON line per (problem, sample): id, sample, correct, verified, answer, gold, turns,
z3_calls, termination, verdicts.
"""

from __future__ import annotations

import json
import os
import sys



def add_parser(inner) -> None:
    from reasoner.cli.smt import default_data_root
    from reasoner.tasks.logic_llm import FILES

    p = inner.add_parser("eval", help="K-sample scratchpad evaluation of a local model (App. B metrics)")
    p.add_argument("--model", required=True, help="'embedded', a preset, GGUF file, HF directory or export; "
                                                  "'symbolic' for the symbolic teacher")
    p.add_argument("--k", type=int, default=4, help="samples per problem (default 4)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", choices=sorted(FILES), help="a staged Logic-LLM dataset under --data-root")
    source.add_argument("--input", help="any file in the Logic-LLM format (JSON list or JSON lines)")
    p.add_argument("--data-root", default=default_data_root(),
                   help="where the staged data lives (default: ../shared/data beside the checkout)")
    p.add_argument("--limit", type=int, default=None, help="first N problems")
    p.add_argument("--samples-out", default=None, help="JSON lines, one per (problem, sample)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=512, help="tokens per assistant turn")
    p.add_argument("--max-len", type=int, default=4096, help="cache slots per conversation")
    p.add_argument("--t-max", type=int, default=10, help="assistant turns per episode (paper: 10)")
    p.add_argument("--problems-per-batch", type=int, default=8)
    p.add_argument("--timeout", type=float, default=30.0, help="Z3 seconds per call")
    p.add_argument("--workers", type=int, default=2, help="Z3 worker processes")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def _check(args) -> None:
    for name in ("k", "max_new_tokens", "max_len", "t_max", "problems_per_batch", "workers"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)}: expected >= 1")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit={args.limit}: expected >= 1")
    if not args.timeout > 0:
        raise ValueError(f"--timeout={args.timeout}: expected > 0 seconds")
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        raise ValueError(f"--temperature={args.temperature} / --top-p={args.top_p}: expected >= 0 and in (0, 1]")


def _problems(args):
    from reasoner.tasks.logic_llm import load_file, load_problems

    if args.input:
        return load_file(args.input, limit=args.limit)
    if not os.path.isdir(args.data_root):
        raise FileNotFoundError(f"--data-root {args.data_root}: no such directory; the staged data is the "
                                "workspace's shared/data (see its README for each file's public source)")
    return load_problems(args.data_root, args.dataset, limit=args.limit)


def symbolic_policy(problems, args):
    """The symbolic teacher over what it can encode of `problems`; what it cannot is named on stderr."""
    from reasoner.agents.symbolic_teacher import teacher_for

    teacher, encoded, failures = teacher_for(problems, args.data_root, timeout_s=int(args.timeout))
    for pid, reason in failures:
        print(f"symbolic teacher: skipping {pid}: {reason}", file=sys.stderr)
    return teacher, encoded


EMBEDDED = "smollm2-135m-instruct"


def sampler_policy(spec: str, *, temperature: float, top_p: float, max_new_tokens: int, max_len: int, seed: int):
    """`SamplerPolicy` over a local model: `spec` is 'embedded' (the embedded SmolLM2-135M-Instruct), a preset
    name, or a checkpoint path (GGUF file, HF directory, our export). A spec that is none of these is a
    ValueError naming it, raised before anything is loaded."""
    from reasoner.agents.sampler_policy import SamplerPolicy
    from reasoner.models import load_model
    from reasoner.models.presets import PRESETS, resolve
    from reasoner.tokenization import load_tokenizer

    name = EMBEDDED if spec == "embedded" else spec
    if name not in PRESETS and not os.path.exists(name):
        raise ValueError(f"--model {spec}: expected 'embedded', a preset ({', '.join(sorted(PRESETS))}) or an "
                         "existing checkpoint file or directory")
    path = resolve(name)
    return SamplerPolicy(load_model(path), load_tokenizer(path), temperature=temperature, top_p=top_p,
                         max_new_tokens=max_new_tokens, max_len=max_len, seed=seed)


def run(args) -> int:
    from tqdm import tqdm

    from reasoner.agents.student_eval import evaluate_policy
    from reasoner.verifiers.z3_runner import Z3Runner

    try:
        _check(args)
        problems = _problems(args)
        if args.model == "symbolic":
            policy, problems = symbolic_policy(problems, args)
        else:
            policy = sampler_policy(args.model, temperature=args.temperature, top_p=args.top_p,
                                    max_new_tokens=args.max_new_tokens, max_len=args.max_len, seed=args.seed)
    except (ValueError, OSError) as err:
        print(f"reasoner smt eval: {err}", file=sys.stderr)
        return 2
    with Z3Runner(timeout_s=args.timeout, workers=args.workers) as runner, \
            tqdm(total=len(problems), unit="problem", desc=f"smt eval (K={args.k})", file=sys.stderr) as bar:
        result = evaluate_policy(policy, problems, runner=runner, k=args.k, t_max=args.t_max,
                                 timeout_cap_s=args.timeout, problems_per_batch=args.problems_per_batch,
                                 on_batch=bar.update, seed=args.seed)
    if args.samples_out:
        from reasoner.data.jsonl import write_jsonl

        write_jsonl(args.samples_out, result.rows)
    summary = {"model": args.model, "source": args.input or args.dataset, **result.summary}
    if args.json:
        print(json.dumps(summary))
    else:
        k = args.k
        print(" ".join(f"{key}={summary[key]:.3f}" for key in (f"avg@{k}", f"pass@{k}", f"pass^{k}", f"maj@{k}",
                                                                "vcr", "vcr_unsat") if summary[key] is not None))
    return 0
