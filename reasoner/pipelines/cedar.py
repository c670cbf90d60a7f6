"""The CEDAR-GRPO pipeline (`reasoner demo cedar`): mixture -> base eval -> GRPO (composite reward) -> eval.

    from reasoner.pipelines.cedar import run
    report = run(load_config("configs/cedar_demo.py:cpu"), workdir="runs/cedar")

Stages (each timed):
  1. data       the App. A.1 mixture (`reasoner.data.cedar_mixture`) scaled by `data.scale` / `validation_scale`
                from `data.data_dir` (default ../shared/data beside the checkout) and `data.user_data_dir`, written
                to `<workdir>/data/{train,validation}.jsonl`; the validation split is the held-out set.
  2. eval_base  the base model on the held-out set (`reasoner.pipelines.cedar_eval`): correctness per source
                (Wilson 95%), judged coverage and directionality (bootstrap 95%), App. E text proxies.
  3. grpo       `trainers.grpo.train` on the training split with R = l_cor r_cor + l_cov r_cov + l_dir r_dir
                (`config.weights`; a zero weight leaves its term and its judge calls out), every component logged
                per step in `<workdir>/grpo/metrics.jsonl` as rewards/<name>.
  4. eval_grpo  the trained policy on the same held-out set.
The judge is a frozen copy of the base model in this process (greedy, `judge.max_new_tokens`), or the
OpenAI-compatible `judge.endpoint` (temperature 0); its replies are cached in `<workdir>/judge_cache.jsonl` (process
k > 0 of a multi-process job appends to `judge_cache.p<k>.jsonl`; every file is read back on the next run), the
cache's hits and misses counted per judged metric and in total (report `judge_cache`).
Outputs: `<workdir>/report/report.json` (both evaluations, table, per-stage seconds, mixture counts and notes,
judge counters, GRPO history, load average), `report/cedar_table.md`, `report/cedar_rewards.png` (the reward
components per GRPO step) and `report/cedar_completions.jsonl`.
"""

from __future__ import annotations

import json
import os
import pathlib
import time

from reasoner.data.cedar_mixture import MixtureSpec, build_mixture, write_mixture
from reasoner.distributed import is_primary
from reasoner.pipelines.cedar_eval import CedarEvalSettings, evaluate_cedar, format_table
from reasoner.pipelines.stages import StageTimer, pipeline_devices

__all__ = ["run", "grpo_config", "make_judge", "composite_reward", "plot_rewards", "default_data_dir"]

COMPONENTS = ("correctness", "coverage", "directionality")


def _log(msg: str) -> None:
    print(f"[cedar] {msg}", flush=True)


def default_data_dir() -> pathlib.Path:
    """../shared/data beside the checkout."""
    return pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data"


def mixture_spec(config) -> MixtureSpec:
    d = config.data
    return MixtureSpec(scale=float(d.scale), validation_scale=float(d.validation_scale), seed=int(d.seed),
                       sources=tuple(d.sources), max_prompt_chars=int(d.max_prompt_chars))


def make_judge(config, *, model_factory, tokenizer, cache_path=None):
    """The judge of `config.judge`: `EndpointJudge` when `endpoint` is set, else a `SamplerJudge` over
    `model_factory()` (a fresh copy of the base model: it stays fixed while the policy trains); cached on disk
    at `cache_path` when given and `judge.cache`, with its own `JudgeCounters` (`.counters`: hits and misses over
    the whole run; each judged metric's counters count its own too)."""
    from reasoner.judges import CachedJudge, EndpointJudge, JudgeCounters, SamplerJudge

    j = config.judge
    if j.endpoint:
        judge = EndpointJudge(j.endpoint, j.model, max_tokens=int(j.max_new_tokens), timeout_s=float(j.timeout_s))
    else:
        name = config.model.name or f"random-seed{config.model.seed}"
        judge = SamplerJudge(model_factory(), tokenizer, judge_id=name, max_new_tokens=int(j.max_new_tokens),
                             batch_size=int(j.batch_size))
    return CachedJudge(judge, cache_path, JudgeCounters()) if cache_path is not None and j.cache else judge


def judge_cache_report(judge) -> dict:
    """{hits, misses, files, skipped_lines, write_errors} of a `CachedJudge` made by `make_judge` over the run so far
    (skipped_lines: unreadable rows of the files at start; write_errors: replies that could not be appended); {} for
    an uncached judge."""
    counters = getattr(judge, "counters", None)
    if counters is None:
        return {}
    from reasoner.judges.cache import cache_files

    return {"hits": counters.cache_hits, "misses": counters.cache_misses,
            "files": [str(f) for f in cache_files(judge.path)], "skipped_lines": judge.skipped_lines,
            "write_errors": judge.write_errors}


def composite_reward(config, judge):
    """CompositeReward of the weighted CEDAR terms (zero weights left out), logged as rewards/<component>."""
    from reasoner.rewards import CompositeReward, WeightedReward
    from reasoner.rewards.judged import cedar_correctness, judged_coverage, judged_directionality

    builders = {"correctness": (cedar_correctness, 300.0), "coverage": (judged_coverage, 3600.0),
                "directionality": (judged_directionality, 3600.0)}
    terms = []
    for name in COMPONENTS:
        weight = float(config.weights[name])
        if weight:
            build, timeout = builders[name]
            terms.append(WeightedReward(name, build() if name == "correctness" else build(judge=judge), weight,
                                        timeout))
    if not terms:
        raise ValueError(f"weights {config.weights.to_dict()}: expected at least one non-zero weight")
    return CompositeReward(terms)


def grpo_config(config):
    """The `trainers.grpo` config: configs/grpo_cedar.py with the pipeline's model, `grpo` sections and weights."""
    from configs import grpo_cedar

    c = grpo_cedar.get_config("smollm2")
    c.seed = config.seed
    c.mesh = config.mesh
    c.model = config.model
    for key in ("grpo", "optim", "train", "lora"):
        c[key].update(config.grpo[key].to_dict())
    c.rewards = grpo_cedar.cedar_rewards(*(float(config.weights[k]) for k in COMPONENTS),
                                         judge={"endpoint": config.judge.endpoint, "model": config.judge.model}
                                         if config.judge.endpoint else None)
    c.data.task = "chat"
    if "log" in config:  # the demo's metric writers reach every trainer it runs
        c.log.update(config.log.to_dict())
    return c


def plot_rewards(metrics_path, png_path) -> pathlib.Path:
    """One panel: the total reward and each component's batch mean (rewards/<name>) against the GRPO step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from reasoner.metrics.curves import read_metrics, save_figure

    records = read_metrics(metrics_path, kind="train")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in [("reward", "total R")] + [(f"rewards/{c}", c) for c in COMPONENTS]:
        points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if points:
            ax.plot(*zip(*points), marker="o", label=label)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean over the step's completions")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)
    ax.set_title("CEDAR-GRPO reward components")
    return save_figure(fig, png_path, dpi=90)


def run(config, *, workdir, progress: bool = True) -> dict:
    """Runs every stage (module docstring); returns the report (also written to report/report.json)."""
    from reasoner.data.jsonl import write_jsonl
    from reasoner.sharding import make_mesh
    from trainers import grpo
    from trainers.run import build_model, load_tokenizer_for

    workdir = pathlib.Path(workdir)
    report_dir = workdir / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    timer = StageTimer(_log)
    stage, seconds = timer.stage, timer.seconds
    load = {"start": os.getloadavg()}
    t_all = time.perf_counter()

    spec = mixture_spec(config)
    data_dir = pathlib.Path(config.data.data_dir) if config.data.data_dir else default_data_dir()

    def data():  # every process builds the same mixture (seeded); process 0 writes it (the stages take it in memory)
        mixture = build_mixture(spec, data_dir=data_dir, user_dir=config.data.user_data_dir or None)
        if is_primary():
            write_mixture(mixture, out_dir=workdir / "data", spec=spec)
        return mixture

    mixture = stage("data", data)
    for note in mixture.notes:
        _log(f"note: {note}")
    _log("mixture: " + ", ".join(f"{s} {c['train']}/{c['validation']}" for s, c in mixture.counts.items())
         + " (train/validation)")
    if not mixture.train or not mixture.validation:
        raise ValueError(f"the mixture has {len(mixture.train)} training and {len(mixture.validation)} validation "
                         "rows: raise data.scale / data.validation_scale or data.max_prompt_chars")

    mesh = make_mesh(config.mesh, devices=pipeline_devices(config))  # one device under single_device, as A* and SMT
    tokenizer = load_tokenizer_for(config.model)
    model = stage("load", lambda: build_model(config.model, mesh=mesh))
    judge = make_judge(config, model_factory=lambda: build_model(config.model, mesh=mesh), tokenizer=tokenizer,
                       cache_path=workdir / "judge_cache.jsonl")
    settings = CedarEvalSettings(max_new_tokens=int(config.eval.max_new_tokens), batch_size=int(config.eval.batch_size))
    held_out = mixture.validation
    base = stage("eval_base", lambda: evaluate_cedar(model, tokenizer, held_out, judge=judge, settings=settings,
                                                     label="base", log=_log))
    _log("base:\n" + format_table([base]))

    cfg = grpo_config(config)
    reward = composite_reward(config, judge)
    try:
        res = stage("grpo", lambda: grpo.train(cfg, workdir=workdir / "grpo", model=model, tokenizer=tokenizer,
                                               examples=mixture.train, reward=reward, mesh=mesh, progress=progress))
    finally:
        reward.close()
    if res.preempted:
        _log("preempted during GRPO: its checkpoint is written; the same command resumes it")
        return {"preempted": "grpo"}
    label = "CEDAR-GRPO" if all(float(config.weights[k]) for k in COMPONENTS) else "GRPO (" + "+".join(
        k for k in COMPONENTS if float(config.weights[k])) + ")"
    trained = stage("eval_grpo", lambda: evaluate_cedar(res.model(), tokenizer, held_out, judge=judge,
                                                        settings=settings, label=label, log=_log))
    results = [base, trained]
    table = format_table(results)
    seconds["total"] = round(time.perf_counter() - t_all, 1)
    load["end"] = os.getloadavg()
    metrics_path = workdir / "grpo" / "metrics.jsonl"
    report = {
        "models": [r.report for r in results], "table": table, "seconds": seconds, "load_average": load,
        "mixture": {"counts": mixture.counts, "notes": mixture.notes, "data_dir": str(data_dir)},
        "grpo_history": res.history, "config": config.to_dict(), "judge_cache": judge_cache_report(judge),
    }
    if is_primary():
        (report_dir / "report.json").write_text(json.dumps(report, indent=1, default=str))
        (report_dir / "cedar_table.md").write_text(table + "\n")
        write_jsonl(report_dir / "cedar_completions.jsonl",
                    ({"model": r.label, **row} for r in results for row in r.rows))
        if metrics_path.is_file():
            plot_rewards(metrics_path, report_dir / "cedar_rewards.png")
    if report["judge_cache"]:
        _log("judge cache: {hits} hits, {misses} misses".format(**report["judge_cache"]))
    print("\n" + table, flush=True)
    _log(f"report: {report_dir / 'report.json'}; rewards plot: {report_dir / 'cedar_rewards.png'}; seconds: "
         + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))
    return report
