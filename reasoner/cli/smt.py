"""`reasoner smt check|rollout`: SMT-LIB scripts through the verifier pool, and scratchpad rollouts.

`smt check FILE... [--json]` prints one line per file: {"file", "sat_result", "error", "elapsed_s"}.
With `--expected TSV` (columns `file`, `expected`, as in z3test_sample/expected.tsv) it also prints a
summary line {"agree", "total", "disagreements": [...]} to stderr.

`smt rollout --dataset folio --endpoint URL --model NAME --out rows.jsonl` samples scratchpad
episodes from an OpenAI-compatible server (teacher rollouts), scores and curates them, writes one
JSON row per trajectory (and DPO triples with `--dpo-out`) and prints the SMT metrics as JSON.
The teacher is chosen by `--model` and `--endpoint`:
  --model symbolic              the symbolic teacher (ProofWriter, ProntoQA, FOLIO; real Z3 observations);
  --endpoint URL --model NAME   the model NAME served at URL (OpenAI-compatible, `reasoner serve` included);
  --model embedded|CKPT         without --endpoint: the local model in this process through the jitted sampler
                                (`SamplerPolicy`, the policy `smt eval` uses; 'embedded' is SmolLM2-135M-Instruct,
                                CKPT a preset, GGUF file, HF directory or export), `--samples` copies of a prompt
                                sharing one prefill, `--problems-per-batch` problems at a time. Each batch's rows
                                are appended as soon as it is curated, so a stopped run resumes after the last
                                finished batch; the printed metrics cover every trajectory of this run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys

from reasoner.cli.arg_types import positive_number


def register(subparsers) -> None:
    parser = subparsers.add_parser("smt", help="SMT-LIB tools (Z3 through the verifier pool)")
    inner = parser.add_subparsers(dest="smt_command", metavar="SUBCOMMAND")
    inner.required = True
    check = inner.add_parser("check", help="run SMT-LIB 2 scripts and print their verdicts")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--json", action="store_true", help="one JSON object per line")
    check.add_argument("--timeout", type=positive_number(float), default=30.0, help="seconds per script (default 30)")
    check.add_argument("--memory-mb", type=positive_number(int), default=256,
                       help="memory cap per script (default 256)")
    check.add_argument("--workers", type=positive_number(int), default=2)
    check.add_argument("--expected", metavar="TSV", help="compare against a file<TAB>expected table")
    check.set_defaults(func=run_check)

    rollout = inner.add_parser("rollout", help="scratchpad rollouts from an OpenAI-compatible endpoint, a local "
                                               "model or the symbolic teacher; resumes an existing --out file")
    rollout.add_argument("--dataset", required=True, choices=("proofwriter", "folio", "prontoqa", "arlsat",
                                                              "logicaldeduction"))
    rollout.add_argument("--data-root", default=None,
                         help="the staged Logic-LLM data (default ../shared/data beside the checkout, wherever the "
                              "command runs; a given relative path is taken from the current directory)")
    rollout.add_argument("--limit", type=positive_number(int), default=10, help="number of problems")
    rollout.add_argument("--samples", type=positive_number(int), default=1, help="episodes per problem")
    rollout.add_argument("--endpoint", help="base URL, e.g. http://127.0.0.1:8000/v1 (omit for a local model or "
                                            "--model symbolic)")
    rollout.add_argument("--model", required=True, help="with --endpoint: the served model's name; without: "
                                                        "'embedded', a preset or checkpoint run in-process; "
                                                        "'symbolic' for the symbolic teacher (ProofWriter, "
                                                        "ProntoQA, FOLIO)")
    rollout.add_argument("--retries", type=int, default=4, help="retries of a failed request (backoff 1, 2, 4 s...)")
    rollout.add_argument("--api-key-env", default="OPENAI_API_KEY", help="variable holding the API key")
    rollout.add_argument("--temperature", type=float, default=0.9)
    rollout.add_argument("--top-p", type=float, default=1.0, help="local model: nucleus mass")
    rollout.add_argument("--max-new-tokens", type=positive_number(int), default=512,
                         help="local model: tokens per assistant turn")
    rollout.add_argument("--max-len", type=positive_number(int), default=4096,
                         help="local model: cache slots per conversation")
    rollout.add_argument("--problems-per-batch", type=positive_number(int), default=8,
                         help="local model: problems decoded together (each with its --samples copies)")
    rollout.add_argument("--seed", type=int, default=0, help="local model: sampling seed")
    rollout.add_argument("--t-max", type=int, default=10)
    rollout.add_argument("--timeout", type=positive_number(float), default=30.0,
                         help="cap of one z3_solve call, seconds")
    rollout.add_argument("--workers", type=positive_number(int), default=2)
    rollout.add_argument("--out", required=True, help="JSONL file for the trajectories")
    rollout.add_argument("--dpo-out", help="JSONL file for the DPO triples (multi-turn chosen / rejected)")
    rollout.add_argument("--sft-out", help="JSONL file for the Gold trajectories as multi-turn SFT records")
    rollout.set_defaults(func=run_rollout)

    from reasoner.cli import smt_eval

    smt_eval.add_parser(inner)  # `reasoner smt eval`: K-sample evaluation of a local model


def default_data_root() -> str:
    """`../shared/data` beside the checkout, where `reasoner demo`, `reasoner cedar` and the configs look: a default
    relative to the current directory found nothing when the command ran from anywhere but the checkout."""
    return str(pathlib.Path(__file__).resolve().parents[3] / "shared" / "data")


def data_root(args) -> str:
    """The --data-root to read (the default beside the checkout when none is given); FileNotFoundError naming it and
    what was expected when it is not a directory."""
    root = args.data_root or default_data_root()
    if not os.path.isdir(root):
        raise FileNotFoundError(f"--data-root {root}: no such directory; expected the staged Logic-LLM data (the "
                                "workspace's shared/data, see its README for each file's public source)")
    return root


def read_script(path: str) -> str:
    """The script's text; bytes that are not UTF-8 are read as Latin-1 (Z3's tests contain some)."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def run_check(args) -> int:
    missing = [f for f in args.files if not os.path.isfile(f)]
    if missing:
        print(f"reasoner smt check: no such file: {', '.join(missing)} (expected SMT-LIB 2 script paths)",
              file=sys.stderr)
        return 2
    from reasoner.verifiers.z3_runner import Z3Runner

    rows = []
    with Z3Runner(timeout_s=args.timeout, memory_mb=args.memory_mb, workers=args.workers) as runner:
        futures = [runner.submit(read_script(path)) for path in args.files]
        for path, future in zip(args.files, futures):
            result = future.result()
            row = {"file": path, "sat_result": result.sat_result, "error": result.error,
                   "elapsed_s": round(result.elapsed_s, 4)}
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"{result.sat_result or '-':8s} {row['elapsed_s']:8.3f}s  {path}"
                      + (f"  error: {result.error}" if result.error else ""), flush=True)
    if args.expected:
        print(json.dumps(compare_expected(rows, args.expected)), file=sys.stderr)
    return 0


def compare_expected(rows: list[dict], tsv_path: str) -> dict:
    """Agreement of `rows` with a `file<TAB>expected` table (matched by base name)."""
    import csv

    with open(tsv_path, newline="") as f:
        expected = {r["file"]: r["expected"] for r in csv.DictReader(f, delimiter="\t")}
    disagreements = []
    for row in rows:
        want = expected.get(os.path.basename(row["file"]))
        if want is not None and want != row["sat_result"]:
            disagreements.append({"file": os.path.basename(row["file"]), "expected": want,
                                  "got": row["sat_result"], "error": row["error"]})
    total = sum(os.path.basename(r["file"]) in expected for r in rows)
    return {"agree": total - len(disagreements), "total": total, "disagreements": disagreements}


@dataclasses.dataclass(frozen=True)
class RolloutFile:
    """What an existing rollout file holds, read without changing it (`read_rollout_file`).

    counts: rows per problem id. intact_bytes: where the complete rows end; a last line past it is not a complete
    row (a kill mid-append) and `torn_line` is its 1-based number. newline_missing: the last complete row lacks its
    newline (a kill between a row and its newline), so a row appended now would join its line."""

    counts: dict[str, int]
    intact_bytes: int = 0
    torn_line: int | None = None
    newline_missing: bool = False

    def finished_ids(self, samples: int) -> set[str]:
        """Problem ids that already have `samples` rows (resume skips them)."""
        return {pid for pid, n in self.counts.items() if n >= samples}


def read_rollout_file(path: str) -> RolloutFile:
    """The rows of an existing rollout file (an empty `RolloutFile` when there is none). A last line that is not a
    complete row is noted, not counted (`mend_rollout_file` cuts it); a bad line before the last is an error naming
    it, since dropping it would lose a finished row silently."""
    if not os.path.isfile(path):
        return RolloutFile(counts={})
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    counts: dict[str, int] = {}
    offset = intact = 0
    for number, raw in enumerate(lines, 1):
        last = number == len(lines) or (number == len(lines) - 1 and not lines[-1])
        offset += len(raw) + (number < len(lines))  # the line's bytes and its newline, when it has one
        if not raw.strip():
            continue
        try:
            pid = json.loads(raw)["problem_id"]
            counts[pid] = counts.get(pid, 0) + 1
            intact = offset
        except (ValueError, KeyError, TypeError):
            if not last:
                raise ValueError(f"{path}:{number}: not a rollout row (expected JSON with problem_id); move the "
                                 "file away to start afresh") from None
            return RolloutFile(counts=counts, intact_bytes=intact, torn_line=number)
    return RolloutFile(counts=counts, intact_bytes=intact, newline_missing=number == len(lines) and bool(raw.strip()))


def mend_rollout_file(path: str, found: RolloutFile) -> None:
    """Makes the next appended row start on a line of its own: cuts a torn last row (its problem runs again, as
    `found` did not count it) or ends a last complete row that lacks its newline. Writes, so only the primary
    process calls it."""
    if found.torn_line is not None:
        print(f"reasoner smt rollout: {path}:{found.torn_line}: an incomplete last row (an interrupted write) is "
              "dropped; its problem runs again", file=sys.stderr)
        with open(path, "r+b") as f:
            f.truncate(found.intact_bytes)
    elif found.newline_missing:
        with open(path, "ab") as f:
            f.write(b"\n")


ROLLOUT_SETTINGS = ("dataset", "model", "endpoint", "samples", "t_max", "temperature", "top_p", "seed")


def _check_resume_settings(args) -> None:
    """`<out>.settings.json` records the settings that shape the rows; resuming an `--out` written with others
    would mix two runs in one file (another --samples appended extra rows per problem), so it is refused."""
    settings = {key: getattr(args, key, None) for key in ROLLOUT_SETTINGS}
    path = args.out + ".settings.json"
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            before = json.load(f)
        changed = {k: (before.get(k), v) for k, v in settings.items() if before.get(k) != v}
        if changed:
            raise ValueError(f"{args.out} was written with other settings (" + ", ".join(
                f"{k}: {a!r} then, {b!r} now" for k, (a, b) in changed.items()) + "); use another --out or the same "
                "settings")
    elif os.path.isfile(args.out) and os.path.getsize(args.out):
        return  # written before settings were recorded: resumed as it is
    from reasoner.distributed import is_primary

    if is_primary():
        with open(path, "w", encoding="utf-8") as f:
            json.dump(settings, f, indent=1)


def teacher(args, problems):
    """(policy, the problems it will answer, problems per batch or None for one batch) for the rollout's
    --model / --endpoint (module docstring)."""
    if args.model == "symbolic":
        from reasoner.cli.smt_eval import symbolic_policy

        policy, problems = symbolic_policy(problems, args)
        return policy, problems, None
    if args.endpoint:
        from reasoner.agents.policies import OpenAIChatPolicy

        return OpenAIChatPolicy(args.endpoint, args.model, api_key=os.environ.get(args.api_key_env),
                                temperature=args.temperature, retries=args.retries), problems, None
    from reasoner.cli.smt_eval import sampler_policy

    if args.temperature < 0 or not 0 < args.top_p <= 1:
        raise ValueError(f"--temperature={args.temperature} / --top-p={args.top_p}: expected >= 0 and in (0, 1]")
    try:
        policy = sampler_policy(args.model, temperature=args.temperature, top_p=args.top_p,
                                max_new_tokens=args.max_new_tokens, max_len=args.max_len, seed=args.seed)
    except ValueError as err:
        if "expected 'embedded'" not in str(err):
            raise
        raise ValueError(f"{err}, or --endpoint URL for a served model of that name") from None
    return policy, problems, args.problems_per_batch


def run_rollout(args) -> int:
    from reasoner.agents.rollouts import rollout_logic
    from reasoner.distributed import is_primary
    from reasoner.tasks.logic_llm import load_problems
    from reasoner.verifiers.z3_runner import Z3Runner

    try:
        if args.samples < 1 or args.limit < 1 or args.retries < 0:
            raise ValueError(f"--samples={args.samples}, --limit={args.limit}, --retries={args.retries}: expected "
                             "samples and limit >= 1, retries >= 0")
        args.data_root = data_root(args)  # the symbolic teacher reads FOLIO's annotations under it too
        problems = load_problems(args.data_root, args.dataset, limit=args.limit)
        _check_resume_settings(args)
        found = read_rollout_file(args.out)
        if is_primary():  # under a multi-process launch one process mends the file, as one appends to it
            mend_rollout_file(args.out, found)
        done = found.finished_ids(args.samples)
        policy, todo, per_batch = teacher(args, [p for p in problems if p.id not in done])
    except (ValueError, OSError) as err:
        print(f"reasoner smt rollout: {err}", file=sys.stderr)
        return 2
    per_batch = per_batch or max(1, len(todo))
    results = []
    with Z3Runner(timeout_s=args.timeout, workers=args.workers) as runner:
        for start in range(0, len(todo), per_batch):
            result = rollout_logic(policy, todo[start:start + per_batch], runner=runner, samples=args.samples,
                                   t_max=args.t_max, timeout_cap_s=args.timeout)
            if is_primary():  # under a multi-process launch every process rolls out; one writes
                _write_jsonl(args.out, result.rows, append=True)
                if args.dpo_out:
                    _write_jsonl(args.dpo_out, result.pairs, append=True)
                if args.sft_out:
                    _write_jsonl(args.sft_out, result.sft, append=True)
            for failure in result.failures:
                print(json.dumps({"infrastructure_failure": failure}), file=sys.stderr)
            results.append(result)
    print(json.dumps({"dataset": args.dataset, "problems": len(problems), "resumed_skipped": len(done),
                      "run": len(todo), **merged_metrics(results, todo)}))
    return 0


def merged_metrics(results, problems) -> dict:
    """The metrics `rollout_logic` reports, over the trajectories of every batch together."""
    from reasoner.metrics.smt import smt_metrics
    from reasoner.verifiers.curation import problem_entities

    if len(results) == 1:
        return results[0].metrics
    trajectories = [t for r in results for t in r.trajectories]
    metrics = smt_metrics(trajectories, {p.id: problem_entities(p.context, p.question) for p in problems})
    metrics["labels"] = {label: sum(r.metrics["labels"][label] for r in results)
                         for label in ("gold", "silver", "rejected")}
    metrics["infrastructure_failures"] = sum(r.metrics["infrastructure_failures"] for r in results)
    return metrics


def _write_jsonl(path: str, rows: list[dict], *, append: bool = False) -> None:
    with open(path, "a" if append else "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
