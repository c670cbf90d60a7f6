"""The Sequent-Prover pipeline on one machine (`reasoner demo smt`): teacher -> curation -> SFT -> student ->
curation -> DPO -> K-sample evaluation of base, SFT and SFT+DPO.

    from reasoner.pipelines.smt import run
    summary = run(load_config("configs/smt_demo.py:cpu"), workdir="runs/smt")

Stages (each timed; progress bars throughout):
  1. data      Logic-LLM problems of `data.datasets` from `data.data_root`: per dataset the first `data.test` are
               held out, the next `data.train` are the training split.
  2. teacher   scratchpad trajectories on the training split (`teacher_policy`): `teacher.endpoint` (any
               OpenAI-compatible server, `reasoner serve` included; retried, infrastructure failures excluded),
               else `teacher.model`: 'embedded' (the demo's own `model`, in this process) or a preset / checkpoint
               path, sampled by the local jitted sampler (`SamplerPolicy`, as the evaluations are), else (the
               default 'teacher', or 'symbolic') the symbolic teacher (`reasoner.agents.symbolic_teacher`, real
               Z3 observations); curated Gold / Silver / Rejected with reasons; Gold -> multi-turn SFT records.
  3. eval_base K samples per held-out problem with the local sampler (`reasoner.agents.student_eval`).
  4. sft       `trainers.sft` on the Gold records (assistant turns trained, tool turns masked), exported.
  5. eval_sft
  6. student   the SFT model's own rollouts on the training split (its first `student.problems`; 0: all), curated;
               DPO pairs per problem: a Gold trace (teacher's or student's) against the student's Silver (hard
               negatives first) or Rejected traces.
  7. dpo       `trainers.dpo` on those pairs (over-long pairs dropped and counted), exported.
  8. eval_dpo
Outputs: `report/smt.json` (curation counts, every model's App. B summary, timings, the table), `report/smt.png`
(pass@K, pass^K, avg@K, vcr and soundness per model with 95% intervals), per-model sample files
`report/samples_<model>.jsonl`, the curated trajectories under `data/`, and the trainers' directories.
"""

from __future__ import annotations

import json
import pathlib
import time

from reasoner.data import jsonl
from reasoner.distributed import is_primary
from reasoner.pipelines.stages import StageTimer, pipeline_devices
from reasoner.tasks.logic_llm import FILES

TABLE_KEYS = ("pass@{k}", "pass^{k}", "avg@{k}", "vcr", "soundness")


def _log(msg: str) -> None:
    print(f"[smt] {msg}", flush=True)


def missing_data_message(root: pathlib.Path, datasets) -> str | None:
    """None when every dataset file is under `root`; else what to download and where to put it."""
    missing = [FILES[d] for d in datasets if not (root / FILES[d]).is_file()]
    if not missing:
        return None
    return (f"the Sequent-Prover demo reads Logic-LLM files from {root} (--data-dir), and these are missing: "
            f"{', '.join(missing)}. Download them from the teacherpeterpan/Logic-LLM repository (data/ProntoQA/"
            "dev.json -> prontoqa/logic_llm_dev.json, data/ProofWriter/dev.json -> proofwriter/logic_llm_owa_d5_dev"
            ".json, data/FOLIO/dev.json -> folio/logic_llm_dev.json) into that folder")


def load_splits(config) -> tuple[list, list]:
    """(train, held-out) problems; the held-out ones come first in each file, so a larger train never leaks.
    `data.max_context_chars` (0: no limit) first keeps only problems whose theory is at most that many characters:
    a theory's SMT-LIB encoding grows with it (ProofWriter OWA d5: 289 characters -> 475 SmolLM2 tokens, 531 -> 676,
    correlation 0.98), and a CPU run's token budget must hold the whole script."""
    from reasoner.tasks.logic_llm import load_problems

    d = config.data
    root = pathlib.Path(d.data_root)
    message = missing_data_message(root, d.datasets)
    if message:
        raise FileNotFoundError(message)
    train, test = [], []
    limit = int(d.max_context_chars)
    for name in d.datasets:
        problems = [p for p in load_problems(root, name) if not limit or len(p.context) <= limit]
        test += problems[:d.test]
        train += problems[d.test:d.test + d.train] if d.train else problems[d.test:]
    return train, test


SYMBOLIC_NAMES = ("", "teacher", "symbolic")  # teacher.model values that mean the symbolic teacher (no endpoint)


def teacher_kind(teacher) -> str:
    """'endpoint', 'local' or 'symbolic' for a `config.teacher` section (stage 2 of the module docstring)."""
    if teacher.endpoint:
        return "endpoint"
    return "symbolic" if teacher.model in SYMBOLIC_NAMES else "local"


def teacher_policy(config, problems, *, local_policy=None):
    """(policy, the problems it can answer) for the configured teacher (`teacher_kind`).

    local_policy: model spec -> policy, how the pipeline builds a `SamplerPolicy` for a local teacher (the
    pipeline passes one that samples at `teacher.temperature` with the rollout's token budgets).
    """
    t = config.teacher
    kind = teacher_kind(t)
    if kind == "endpoint":
        from reasoner.agents.policies import OpenAIChatPolicy

        return OpenAIChatPolicy(t.endpoint, t.model, temperature=t.temperature, retries=t.retries), problems
    if kind == "local":
        from reasoner.models.presets import PRESETS

        if t.model != "embedded" and t.model not in PRESETS and not pathlib.Path(t.model).exists():
            raise FileNotFoundError(f"teacher.model={t.model!r}: expected 'embedded' (the demo's model), a preset "
                                    f"({', '.join(sorted(PRESETS))}), an existing checkpoint, 'symbolic', or "
                                    "teacher.endpoint for a served model")
        if local_policy is None:
            raise ValueError(f"teacher.model={t.model!r} is a local model, but no local_policy was given")
        return local_policy(t.model), problems
    from reasoner.agents.symbolic_teacher import SymbolicTeacher, encode_logic_llm

    encoded, failures = encode_logic_llm(problems)
    for pid, reason in failures:
        _log(f"symbolic teacher skips {pid}: {reason}")
    return SymbolicTeacher(encoded), [p for p, _ in encoded]


def curation_counts(rollout) -> dict:
    """Gold / Silver / Rejected counts and how often each reason was given."""
    reasons: dict[str, int] = {}
    for row in rollout.rows:
        for reason in row["reasons"]:
            reasons[reason] = reasons.get(reason, 0) + 1
    return {**rollout.metrics["labels"], "reasons": reasons,
            "infrastructure_failures": rollout.metrics.get("infrastructure_failures", 0)}


def _trainer_config(config, section: str, *, export_dir):
    import ml_collections

    from configs import dpo_smt, sft_smt

    c = (sft_smt if section == "sft" else dpo_smt).get_config(None)
    c.seed, c.mesh, c.model = config.seed, config.mesh, ml_collections.ConfigDict(config.model.to_dict())
    if "model" in config[section]:  # per-trainer model settings (e.g. remat for DPO's four long sequences a step)
        c.model.update(config[section].model.to_dict())
    for key in ("data", "optim", "train", "lora") + (("dpo",) if section == "dpo" else ()):
        c[key].update(config[section][key].to_dict())
    c.export_dir = str(export_dir)
    if "log" in config:  # the demo's metric writers reach every trainer it runs
        c.log.update(config.log.to_dict())
    return c


def format_table(reports: list[dict], k: int) -> str:
    """Model rows, metric columns: estimate [95% low, high] (bootstrap over problems)."""
    keys = [key.format(k=k) for key in TABLE_KEYS]
    head = ("model", *keys)

    def cell(report, key):
        i = report["summary"]["intervals"].get(key)
        value = report["summary"].get(key)
        return "n/a" if value is None else (f"{value:.3f} [{i['low']:.3f}, {i['high']:.3f}]" if i else f"{value:.3f}")

    rows = [(r["label"], *(cell(r, key) for key in keys)) for r in reports]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def _write_jsonl(path: pathlib.Path, rows) -> None:
    """`reasoner.data.jsonl.write_jsonl` on process 0 only: the run's samples and curated data are records of the
    run (the stages after take them in memory), one copy per job."""
    if is_primary():
        jsonl.write_jsonl(path, rows)


def _write_summary(workdir: pathlib.Path, summary: dict) -> None:
    """report/smt.json, rewritten after each stage so a stopped run keeps what it finished (process 0 only)."""
    if is_primary():
        (workdir / "report" / "smt.json").write_text(json.dumps(summary, indent=1, default=str))


def plot(reports: list[dict], k: int, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from reasoner.metrics.curves import save_figure

    keys = [key.format(k=k) for key in TABLE_KEYS]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(reports))
    for j, report in enumerate(reports):
        s = report["summary"]
        values = [s.get(key) or 0.0 for key in keys]
        errors = [[v - (s["intervals"].get(key) or {"low": v})["low"] for key, v in zip(keys, values)],
                  [(s["intervals"].get(key) or {"high": v})["high"] - v for key, v in zip(keys, values)]]
        ax.bar(np.arange(len(keys)) + j * width, values, width, yerr=errors, capsize=3, label=report["label"])
    ax.set_xticks(np.arange(len(keys)) + width * (len(reports) - 1) / 2, keys)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("rate (95% bootstrap interval)")
    ax.set_title(f"Sequent-Prover on {reports[0]['problems']} held-out problems, K = {k}")
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120)


def check_stages(config) -> None:
    """Raises ValueError naming the setting when the SFT or DPO stage's config cannot work, before the teacher's
    rollouts (a bad dpo.loss_type surfaced after the teacher, SFT and the student rollouts)."""
    from trainers.dpo import reference_free
    from trainers.optim import make_optimizer

    for section in ("sft", "dpo"):
        if config[section].enabled:
            c = _trainer_config(config, section, export_dir="unused")
            make_optimizer(c.optim, total_steps=1)
            if section == "dpo":
                reference_free(c.dpo)


def run(config, *, workdir, progress: bool = True) -> dict:
    """Runs every enabled stage in `workdir`; returns the summary written to `report/smt.json`."""
    from reasoner.agents.rollouts import rollout_logic
    from reasoner.agents.sampler_policy import SamplerPolicy
    from reasoner.agents.student_eval import evaluate_policy
    from reasoner.models import load_model
    from reasoner.models.presets import resolve
    from reasoner.tokenization import load_tokenizer
    from reasoner.sharding import make_mesh
    from reasoner.verifiers.curation import curate, dpo_pairs, problem_entities
    from reasoner.verifiers.z3_runner import Z3Runner
    from trainers.run import build_model, load_tokenizer_for

    check_stages(config)
    workdir = pathlib.Path(workdir)
    (workdir / "report").mkdir(parents=True, exist_ok=True)
    timer = StageTimer(_log)
    stage, seconds = timer.stage, timer.seconds
    start_all = time.perf_counter()
    r, k = config.rollout, int(config.eval.k)
    # every stage on these devices: one under single_device, also where JAX started with several (a Python caller)
    devices = pipeline_devices(config)
    mesh = make_mesh(config.mesh, devices=devices)
    _log(f"devices: {mesh.devices.size}; workdir {workdir}")

    train, test = stage("data", lambda: load_splits(config))
    _log(f"data: {len(train)} train / {len(test)} held-out problems from {', '.join(config.data.datasets)}")
    tokenizer = load_tokenizer_for(config.model)
    summary: dict = {"config": config.to_dict(), "timings_s": seconds, "reports": []}

    def policy_for(model, temperature, seed):
        return SamplerPolicy(model, tokenizer, temperature=temperature, top_p=float(config.eval.top_p),
                             max_new_tokens=int(r.max_new_tokens), max_len=int(r.max_len), seed=seed)

    with Z3Runner(timeout_s=float(r.z3_timeout_s), workers=int(r.z3_workers)) as runner:
        def rollouts(policy, problems, samples):
            return rollout_logic(policy, problems, runner=runner, samples=samples, t_max=int(r.t_max),
                                 timeout_cap_s=float(r.z3_timeout_s), problems_per_batch=int(r.problems_per_batch))

        def evaluate(model, label):
            result = evaluate_policy(policy_for(model, float(config.eval.temperature), config.seed), test,
                                     runner=runner, k=k, t_max=int(r.t_max), timeout_cap_s=float(r.z3_timeout_s),
                                     problems_per_batch=int(r.problems_per_batch), seed=config.seed)
            _write_jsonl(workdir / "report" / f"samples_{label.split()[0].lower().replace('+', '_')}.jsonl",
                          result.rows)
            report = {"label": label, "problems": len(test), "summary": result.summary}
            summary["reports"].append(report)
            s = result.summary
            _log(f"{label}: " + ", ".join(f"{key}={s[key]:.3f}" for key in (f"pass@{k}", f"pass^{k}", f"avg@{k}",
                                                                             "vcr") if s[key] is not None))
            _write_summary(workdir, summary)
            return report

        base = build_model(config.model, mesh=mesh)

        def local_teacher(spec):  # 'embedded': the demo's own model; else a preset or checkpoint with its tokenizer
            temperature, seed = float(config.teacher.temperature), config.seed + 2
            if spec == "embedded":
                return policy_for(base, temperature, seed)
            path = resolve(spec)
            return SamplerPolicy(load_model(path), load_tokenizer(path), temperature=temperature,
                                 top_p=float(config.eval.top_p), max_new_tokens=int(r.max_new_tokens),
                                 max_len=int(r.max_len), seed=seed)

        policy, taught = teacher_policy(config, train, local_policy=local_teacher)
        teacher = stage("teacher", lambda: rollouts(policy, taught, int(config.teacher.samples)))
        del policy  # a local teacher's sampler and caches are not needed after its stage
        summary["curation_teacher"] = curation_counts(teacher)
        _log(f"teacher curation: {summary['curation_teacher']}")
        _write_jsonl(workdir / "data" / "teacher.jsonl", teacher.rows)
        _write_jsonl(workdir / "data" / "sft" / "train.jsonl", teacher.sft)

        stage("eval_base", lambda: evaluate(base, "base"))
        model = base
        if config.sft.enabled:
            from trainers import sft

            if not teacher.sft:
                raise RuntimeError(f"no Gold trajectory to train on (teacher curation {summary['curation_teacher']})")
            cfg = _trainer_config(config, "sft", export_dir=workdir / "sft" / "export")
            res = stage("sft", lambda: sft.train(cfg, workdir=workdir / "sft", progress=progress, tokenizer=tokenizer,
                                                 splits={"train": teacher.sft}, devices=devices))
            if res.preempted:
                return {"preempted": "sft", **summary}
            del base
            model = load_model(str(workdir / "sft" / "export"))
            stage("eval_sft", lambda: evaluate(model, "SFT"))
        if config.dpo.enabled:
            from trainers import dpo

            students = taught[:int(config.student.problems)] if int(config.student.problems) else taught
            student = stage("student", lambda: rollouts(policy_for(model, float(config.student.temperature),
                                                                   config.seed + 1), students,
                                                        int(config.student.samples)))
            summary["curation_student"] = curation_counts(student)
            _log(f"student curation: {summary['curation_student']}")
            trajectories = teacher.trajectories + student.trajectories
            entities = {p.id: problem_entities(p.context, p.question) for p in taught}  # students are a prefix
            curated = [curate(t, entities[t.problem_id]) for t in trajectories]
            pairs = dpo_pairs(trajectories, curated,
                              max_pairs_per_problem=int(config.student.max_pairs_per_problem))
            from reasoner.agents.policies import TOOLS

            pairs = [p | {"tools": TOOLS} for p in pairs]
            summary["dpo_pairs"] = {"pairs": len(pairs), "hard_negatives": sum(p["hard_negative"] for p in pairs)}
            _write_jsonl(workdir / "data" / "dpo" / "train.jsonl", pairs)
            if pairs:
                cfg = _trainer_config(config, "dpo", export_dir=workdir / "dpo" / "export")
                if config.sft.enabled:  # the policy starts from, and its reference is, the SFT model
                    cfg.model.name = str(workdir / "sft" / "export")
                res = stage("dpo", lambda: dpo.train(cfg, workdir=workdir / "dpo", progress=progress,
                                                     tokenizer=tokenizer, splits={"train": pairs}, devices=devices))
                if res.preempted:
                    return {"preempted": "dpo", **summary}
                model = load_model(str(workdir / "dpo" / "export"))
                stage("eval_dpo", lambda: evaluate(model, "SFT+DPO"))
            else:
                _log("no DPO pair (no problem has both a Gold and a contrastive trace): DPO skipped")

    seconds["total"] = round(time.perf_counter() - start_all, 1)
    summary["table"] = format_table(summary["reports"], k)
    _write_summary(workdir, summary)
    if is_primary():
        plot(summary["reports"], k, workdir / "report" / "smt.png")
    print("\n" + summary["table"], flush=True)
    print(f"\ncuration (teacher): {summary['curation_teacher']}", flush=True)
    if "curation_student" in summary:
        print(f"curation (student): {summary['curation_student']}; DPO pairs: {summary['dpo_pairs']}", flush=True)
    print("total {:.0f} s (".format(seconds["total"]) + ", ".join(f"{a} {b:.0f} s" for a, b in seconds.items()
                                                                 if a != "total") + ")", flush=True)
    print(f"report: {workdir / 'report' / 'smt.json'}\nplot:   {workdir / 'report' / 'smt.png'}", flush=True)
    return summary
