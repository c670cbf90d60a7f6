"""The A* post-training pipeline (the paper's §4 on one machine): data -> base eval -> SFT -> eval -> GRPO -> eval.

    from reasoner.pipelines.astar import run
    summary = run(load_config("configs/astar_demo.py:cpu"), workdir="runs/demo")

Stages (each timed; progress bars throughout):
  1. data   DeepRD train/validation/test problems (`reasoner.data.deeprd`, each checked by host A*), written as
            records (`<workdir>/data/records/<split>.jsonl`, what GRPO reads) and as chat SFT examples whose
            completion is the verbalized A* trace under `data.heuristic` and `data.cost` (`<workdir>/data/sft/
            <split>.jsonl`). `data.cost` ("max" | "sum") is the pipeline's one cost key: its traces, its few-shot
            traces and every A* reward of the GRPO stage (`grpo_config` writes it into their `options.cost`).
  2. base   greedy evaluation of the starting model on the test problems (`reasoner.evaluation`); with
            `eval.few_shot` = k > 0 also the paper's in-context baseline: the same model with k solved training
            problems in its prompt (label "base (k-shot)"). Trained models are evaluated zero-shot, as trained.
  3. sft    `trainers.sft.train` on the traces (best validation-loss checkpoint, exported to HF safetensors).
  4. eval of the SFT model.
  5. grpo   `trainers.grpo.train` from the SFT model with the A*-informed reward of `grpo.rewards`, then eval.
            Its prompts: the first `grpo.data.limit` training records (0 = all), a fixed pool cycled each step so
            per-step rewards are comparable; the report keeps the reward per step and its slope per step with a
            95% t interval (`trainers.grpo.reward_slope`).
Outputs under the workdir: `report/astar.json` (every model's report, timings, data figures, before/after table),
`report/astar.png` (accuracy vs efficiency with the Pareto front and the search algorithms' own efficiency),
`report/grpo_reward.png` (the GRPO stage's reward per step),
`report/astar_completions.jsonl`, and the trainers' own directories (`sft/`, `grpo/`).
"""

from __future__ import annotations

import pathlib
import time

from reasoner.data.astar_traces import deeprd_records, sft_examples, write_jsonl
from reasoner.metrics.intervals import format_interval
from reasoner.pipelines.stages import StageTimer, pipeline_devices
from reasoner.tasks.astar import problem_from_record

__all__ = ["run", "build_data", "format_table", "sft_config", "grpo_config"]

SPLITS = ("train", "validation", "test")


def _log(msg: str) -> None:
    print(f"[astar] {msg}", flush=True)


def _split_records(d, split: str) -> list[dict]:
    """One split's records: from `data.records` (JSONL: `<dir>/<split>.jsonl` or `<prefix>.<split>.jsonl`, e.g. from
    `reasoner data build deeprd --jsonl PREFIX`), from the TFDS builder `data.tfds_name` in `data.tfds_dir` (e.g.
    proofwriter_astar), or generated DeepRD; `data.<split>` > 0 keeps the first that many."""
    limit = int(d[split])
    if d.get("records"):
        base = pathlib.Path(d.records)
        path = base / f"{split}.jsonl" if base.is_dir() else pathlib.Path(f"{d.records}.{split}.jsonl")
        if not path.is_file():
            raise FileNotFoundError(f"data.records={d.records!r}: {path} does not exist; expected JSONL A* records")
        from reasoner.data.jsonl import read_jsonl

        rows = read_jsonl(path, what="one A* record per line")
    elif d.get("tfds_name"):
        import tensorflow_datasets as tfds

        from reasoner.data.records import decode_record

        builder = tfds.builder(d.tfds_name, data_dir=d.get("tfds_dir") or None, file_format="array_record")
        source = builder.as_data_source(split=split)
        rows = [decode_record(source[i]) for i in range(min(len(source), limit) if limit > 0 else len(source))]
    else:
        from reasoner.data.deeprd import DeepRDSpec

        if d.dataset != "deeprd":
            raise ValueError(f"data.dataset={d.dataset!r} without data.records or data.tfds_name: only DeepRD is "
                             "generated here; expected 'deeprd' or a records source")
        spec = DeepRDSpec(lookahead=(int(d.min_lookahead), int(d.max_lookahead)),
                          branches=(int(d.min_branches), int(d.max_branches)), extra_ratio=d.extra_ratio,
                          max_degree=d.max_degree)
        return deeprd_records(seed=int(d.seed), split=split, size=limit, spec=spec)
    return rows[:limit] if limit > 0 else rows


def build_data(config, *, out_dir) -> dict:
    """Records and SFT examples of every split (written as JSONL) -> {split: {"records", "problems", "sft"}}.

    Every process builds the same splits in memory (the generator is seeded); under a multi-process launch only
    process 0 writes the files, and the others wait at a barrier until they are whole, since the stages after
    this one read them from the shared workdir."""
    from reasoner.distributed import barrier, is_primary

    d = config.data
    out = pathlib.Path(out_dir)
    splits = {}
    for split in SPLITS:
        records = _split_records(d, split)
        problems = [problem_from_record(r, dataset=d.dataset) for r in records]
        examples = sft_examples(problems, heuristic=d.heuristic, cost=d.get("cost", "max"))
        if is_primary():
            write_jsonl(out / "records" / f"{split}.jsonl", records)
            write_jsonl(out / "sft" / f"{split}.jsonl", examples)
        splits[split] = {"records": records, "problems": problems, "sft": examples}
    barrier(f"astar:data:{out}")
    return splits


def sft_config(config, *, export_dir):
    """The `trainers.sft` config of this pipeline: configs/sft_astar.py with the pipeline's model and `sft` section."""
    from configs import sft_astar

    c = sft_astar.base_config()
    c.seed = config.seed
    c.mesh = config.mesh
    c.model = config.model
    for key in ("data", "optim", "train", "lora"):
        c[key].update(config.sft[key].to_dict())
    c.export_dir = str(export_dir)
    if "log" in config:  # the demo's metric writers reach every trainer it runs
        c.log.update(config.log.to_dict())
    return c


def _plot_grpo_rewards(metrics_path: pathlib.Path, png_path: pathlib.Path, *, names: list[str]) -> None:
    """`report/grpo_reward.png`: the GRPO stage's mean reward per step (with each reward function's, the group
    best, the reward spread and the KL), from its metrics file; process 0 only."""
    from reasoner.metrics.curves import plot_curves
    from trainers.loop import is_primary

    if is_primary() and metrics_path.exists():
        png_path.parent.mkdir(parents=True, exist_ok=True)
        plot_curves(metrics_path, png_path, keys=["reward", *[f"rewards/{n}" for n in names], "group_best",
                                                  "reward_std", "frac_reward_zero_std", "kl"])


def _reward_slope(per_step: list) -> dict | None:
    """The GRPO stage's mean reward per step as a least-squares slope per step with its 95% t interval
    (`reasoner.metrics.intervals.slope_interval`): with a fixed prompt pool (`grpo.data.limit`) every step scores
    the same prompts, so an interval above 0 says the training reward rose beyond its step-to-step noise.
    None with fewer than 3 finite steps."""
    from reasoner.metrics.intervals import slope_interval

    ys = [float(y) for y in per_step if y is not None and y == y]
    if len(ys) < 3:
        return None
    s = slope_interval(ys).as_dict()
    _log(f"grpo: reward per step {', '.join(f'{y:.3f}' for y in ys)}; slope {format_interval(s)} per step")
    return s


def grpo_config(config):
    """The `trainers.grpo` config: configs/grpo_astar.py with the pipeline's model and `grpo` section."""
    from configs import grpo_astar

    c = grpo_astar.base_config()
    c.seed = config.seed
    c.mesh = config.mesh
    c.model = config.model
    for key in ("data", "grpo", "optim", "train", "lora"):
        c[key].update(config.grpo[key].to_dict())
    c.rewards = [dict(r) for r in config.grpo.rewards]
    for r in c.rewards:  # data.cost is the one cost key: the traces' and every A* reward's
        if r["name"] == "astar":
            r["options"] = {**r.get("options", {}), "cost": config.data.get("cost", "max")}
    c.data.dataset = config.data.dataset
    c.data.task = "astar"
    if "log" in config:  # the demo's metric writers reach every trainer it runs
        c.log.update(config.log.to_dict())
    return c


def _eval_settings(config, *, few_shot: int = 0):
    """EvalSettings of the config's `eval` section; few_shot shots (traces under data.heuristic and data.cost)."""
    from reasoner.evaluation import EvalSettings

    e = config.eval
    return EvalSettings(num_samples=int(e.num_samples), temperature=float(e.temperature), top_p=float(e.top_p),
                        max_new_tokens=int(e.max_new_tokens), batch_size=int(e.batch_size), seed=int(e.seed),
                        ks=tuple(int(k) for k in e.ks), few_shot=int(few_shot),
                        few_shot_heuristic=config.data.get("heuristic", "dependency"),
                        cost=config.data.get("cost", "max"))


def _metric(report: dict, key: str) -> str:
    return format_interval(report.get(key), missing="n/a (no correct proof)")


def format_table(reports: list[dict]) -> str:
    """The before/after table: accuracy (Wilson 95%), efficiency pushes / pops (bootstrap 95%) per model."""
    head = ("model", "accuracy", "efficiency (pushes)", "efficiency (pops)")
    rows = [(r["label"], _metric(r, "accuracy"), _metric(r, "efficiency_pushes"), _metric(r, "efficiency_pops"))
            for r in reports]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def _announce(result, results, *, workdir, reference, extra) -> None:
    """Prints one model's numbers as soon as it is evaluated and rewrites the report with every model so far,
    so a run stopped in a later stage still leaves its finished evaluations on disk."""
    from reasoner.evaluation import write_report

    r = result.report
    _log(f"{result.label}: accuracy {_metric(r, 'accuracy')}, efficiency pushes {_metric(r, 'efficiency_pushes')}, "
         f"pops {_metric(r, 'efficiency_pops')}; finish reasons {r['generation']['finish_reasons']}")
    write_report(results, workdir / "report", name="astar", reference=reference,
                 extra={**extra, "table": format_table([x.report for x in results]), "complete": False})


def _preempted(stage: str) -> dict:
    _log(f"preempted in stage {stage}: its checkpoint is written; the same command resumes the pipeline there")
    return {"preempted": stage}


def check_stages(config) -> None:
    """Raises ValueError naming the setting when a later stage's config cannot work, before the first stage runs
    (a bad GRPO loss type surfaced after data, evaluation and SFT: minutes here, hours at paper scale)."""
    from trainers import grpo as grpo_trainer
    from trainers.optim import make_optimizer

    if config.sft.enabled:
        make_optimizer(sft_config(config, export_dir="unused").optim, total_steps=1)
    if config.grpo.enabled:
        grpo = grpo_config(config)
        grpo_trainer.check_config(grpo)
        make_optimizer(grpo.optim, total_steps=1)


def run(config, *, workdir, progress: bool = True) -> dict:
    """Runs every enabled stage in `workdir`; returns the summary written to `report/astar.json`."""
    import jax

    from reasoner.evaluation import evaluate, reference_efficiency, write_report
    from reasoner.models import load_model
    from reasoner.sharding import make_mesh
    from trainers.run import build_model, load_tokenizer_for

    check_stages(config)
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    timer = StageTimer(_log)
    total_start = time.perf_counter()
    settings = _eval_settings(config)
    # every stage on these devices: one under single_device, also where JAX started with several (a Python caller)
    devices = pipeline_devices(config)
    mesh = make_mesh(config.mesh, devices=devices)
    _log(f"devices: {mesh.devices.size} x {jax.devices()[0].platform}; workdir {workdir}")

    splits = timer.stage("data", lambda: build_data(config, out_dir=workdir / "data"))
    test = splits["test"]["problems"]
    tokenizer = load_tokenizer_for(config.model)
    lengths = [len(tokenizer(ex["completion"], add_special_tokens=False)["input_ids"])
               for ex in splits["test"]["sft"]]
    fits = sum(n < settings.max_new_tokens for n in lengths)
    _log(f"data: " + ", ".join(f"{s} {len(splits[s]['records'])}" for s in SPLITS)
         + f"; test A* traces fitting in {settings.max_new_tokens} new tokens: {fits}/{len(lengths)}")

    shots = int(config.eval.get("few_shot", 0))
    if shots > len(splits["train"]["problems"]):  # before the model loads, not after the base evaluation
        raise ValueError(f"eval.few_shot={shots}: the in-context baseline draws its shots from the training split, "
                         f"which holds {len(splits['train']['problems'])} problems (data.train="
                         f"{config.data.get('train')}); expected eval.few_shot <= the training problems")
    reference = reference_efficiency(test)
    partial = {"timings_s": timer.seconds, "config": config.to_dict()}
    base_model = build_model(config.model, mesh=mesh)
    results = [timer.stage("eval_base", lambda: evaluate(base_model, tokenizer, test, settings, label="base",
                                                         progress=progress))]
    _announce(results[-1], results, workdir=workdir, reference=reference, extra=partial)
    if shots:  # the paper's in-context baseline: the base model with k solved training problems in its prompt
        results.append(timer.stage("eval_base_few_shot", lambda: evaluate(
            base_model, tokenizer, test, _eval_settings(config, few_shot=shots), label=f"base ({shots}-shot)",
            progress=progress, examples=splits["train"]["problems"])))
        _announce(results[-1], results, workdir=workdir, reference=reference, extra=partial)
    del base_model
    summary_models = {}
    model, model_dir = None, None  # the model GRPO starts from, and the directory it was loaded from
    if config.sft.enabled:
        from trainers import sft

        export_dir = workdir / "sft" / "export"
        cfg = sft_config(config, export_dir=export_dir)
        data = {s: splits[s]["sft"] for s in ("train", "validation")}
        res = timer.stage("sft", lambda: sft.train(cfg, workdir=workdir / "sft", progress=progress,
                                                   tokenizer=tokenizer, splits=data, devices=devices))
        if res.preempted:
            return _preempted("sft")
        summary_models["sft"] = {"last_metrics": res.last_metrics, "eval_history": res.eval_history}
        model, model_dir = load_model(str(export_dir)), str(export_dir)  # on the first device (as under single_device)
        results.append(timer.stage("eval_sft", lambda: evaluate(model, tokenizer, test, settings,
                                                                label=f"SFT ({config.data.heuristic})",
                                                                progress=progress)))
        _announce(results[-1], results, workdir=workdir, reference=reference, extra=partial)
    if config.grpo.enabled:
        from trainers import grpo

        cfg = grpo_config(config)
        reward_name = ", ".join(r.get("as", r["name"]) for r in cfg.rewards)
        pool = splits["train"]["records"][: int(cfg.data.get("limit", 0)) or None]  # grpo.data.limit: first N
        res = timer.stage("grpo", lambda: grpo.train(
            cfg, workdir=workdir / "grpo", model=model, tokenizer=tokenizer, examples=pool, mesh=mesh,
            base_model=model_dir, progress=progress))
        if res.preempted:
            return _preempted("grpo")
        per_step = [h.get("reward") for h in res.history]
        summary_models["grpo"] = {"last_metrics": res.last_metrics, "history": res.history,
                                  "reward_per_step": per_step, "reward_slope": _reward_slope(per_step)}
        _plot_grpo_rewards(workdir / "grpo" / "metrics.jsonl", workdir / "report" / "grpo_reward.png",
                           names=[r.get("as", r["name"]) for r in cfg.rewards])
        model = res.model()
        results.append(timer.stage("eval_grpo", lambda: evaluate(model, tokenizer, test, settings,
                                                                 label=f"SFT+GRPO ({reward_name})",
                                                                 progress=progress)))
        _announce(results[-1], results, workdir=workdir, reference=reference, extra=partial)

    table = format_table([r.report for r in results])
    seconds = round(time.perf_counter() - total_start, 1)
    base_acc = results[0].report["accuracy"]["estimate"]
    final_acc = results[-1].report["accuracy"]["estimate"]
    extra = {"table": table, "timings_s": {**timer.seconds, "total": seconds},
             "accuracy_gain": final_acc - base_acc, "trainers": summary_models,
             "data": {s: len(splits[s]["records"]) for s in SPLITS}, "test_traces_fitting": [fits, len(lengths)],
             "config": config.to_dict(), "complete": True}
    paths = write_report(results, workdir / "report", name="astar", reference=reference, extra=extra,
                         title="A* post-training on DeepRD (SmolLM2-135M-Instruct)" if config.model.name else None)
    print("\n" + table, flush=True)
    print(f"\naccuracy: {base_acc:.3f} -> {final_acc:.3f} (gain {final_acc - base_acc:+.3f}); "
          f"total {seconds:.0f} s (" + ", ".join(f"{k} {v:.0f} s" for k, v in timer.seconds.items()) + ")",
          flush=True)
    print(f"report: {paths['json']}\nplot:   {paths['png']}", flush=True)
    return {"table": table, "paths": paths, "timings_s": extra["timings_s"], "accuracy_gain": extra["accuracy_gain"],
            "reports": [r.report for r in results]}
