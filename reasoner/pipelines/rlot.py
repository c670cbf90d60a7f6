"""The RL-of-Thoughts pipeline (`reasoner demo rlot`): failed problems -> navigator training -> evaluation.

    from reasoner.pipelines.rlot import run
    summary = run(load_config("configs/rlot.py:cpu"), workdir="runs/rlot")

Stages (each timed):
  1. data      `demo.task` problems from the staged data (`reasoner.tasks.reasoning`): a training pool and a
               held-out test split (GSM8K: its train / test files; one-file tasks: test first, pool after).
  2. direct    a direct-answer pass over the pool; the problems the model gets wrong are the training problems
               (all of the pool if it gets none wrong), sampled with repetition by the environment.
  3. train     `trainers.dqn.train_dqn` on `ThoughtEnv` over those problems (checkpoints in `<workdir>/navigator`).
  4. eval      on the test split, every method through the same batched `SamplerLM`: the greedy navigator,
               direct, zero-shot CoT, CoT-SC (k samples, majority vote), and navigator-SC when `demo.navigator_sc`.
Outputs: `<workdir>/report/report.json` (accuracy with Wilson 95% intervals, LLM calls and tokens per problem,
the most frequent 2- and 3-block sequences of the navigator's test episodes, timings, unparsed-state counts) and
`<workdir>/report/rlot_training.png` (per batch of episodes: the mean reward per step, the authors' training curve,
the mean return, TD loss and epsilon; `plot_training`).

Transfer (`demo.navigator=DIR`, the paper's navigators moved across LLMs): stages 2 and 3 are skipped; the navigator
trained in the DQN run at DIR (a demo's workdir or its `navigator/`, or a `reasoner train configs/rlot.py` workdir;
`reasoner.agents.rlot.transfer`) is evaluated with `demo.model` in stage 4, beside that model's own baselines. The
report names the run it came from (`navigator_from`) and the episodes it was trained for; it has no training curve.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time

import numpy as np

from reasoner.agents.rlot import inference
from reasoner.agents.rlot.env import ThoughtEnv
from reasoner.agents.rlot.llm import SamplerLM
from reasoner.agents.rlot.setup import batch_line, env_args, load_model_and_tokenizer, split_problems
from reasoner.distributed import is_primary

__all__ = ["run", "format_table"]


def _log(msg: str) -> None:
    print(f"[rlot] {msg}", flush=True)


def _method_summary(result: inference.MethodResult) -> dict:
    from reasoner.metrics.intervals import wilson_interval

    n = len(result.correct)
    interval = wilson_interval(int(sum(result.correct)), n)
    return {"method": result.name, "n": n, "accuracy": result.accuracy, "ci95": [interval.low, interval.high],
            "llm_calls_per_problem": float(np.mean(result.calls)), "tokens_per_problem": float(np.mean(result.tokens))}


def format_table(methods: list[dict]) -> str:
    lines = ["| method | accuracy | 95% CI | LLM calls / problem | tokens / problem |", "|---|---|---|---|---|"]
    for m in methods:
        lines.append(f"| {m['method']} | {m['accuracy']:.3f} | [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}] | "
                     f"{m['llm_calls_per_problem']:.1f} | {m['tokens_per_problem']:.0f} |")
    return "\n".join(lines)


CURVES = (("mean_step_reward", "mean reward per step"), ("mean_return", "mean return (sum of rewards)"),
          ("loss", "TD loss"), ("epsilon", "epsilon"))


def plot_training(history: list[dict], path: pathlib.Path) -> None:
    """One panel per `CURVES` key of the `trainers.dqn` metrics rows. The first is the authors' training curve:
    their loop logs and plots each episode's mean reward per step (train_Dueling_DDQN_MATH.py l. 238 `episode_reward
    = np.mean(episode_rewards)`, plotted by `save()`, l. 167 and 175), not the sum that `mean_return` is (an earlier
    version plotted only that, titled "mean return", beside the paper's curves of the other quantity). A row
    without a key (a run logged before the key existed) plots as a gap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    episodes = [h["episodes"] for h in history]
    fig, axes = plt.subplots(1, len(CURVES), figsize=(16, 3.2))
    for ax, (key, title) in zip(axes, CURVES):
        ax.plot(episodes, [h.get(key, np.nan) for h in history], marker="o")
        ax.set_xlabel("episodes")
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _train(config, lm, pool, args, *, workdir, progress: bool, times: dict):
    """Stages 2-3: the direct pass over the pool, then the navigator trained on the failed problems."""
    from trainers.dqn import train_dqn

    tick = time.perf_counter()
    screen = inference.direct(lm, pool, max_new_tokens=int(config.demo.direct_max_new_tokens))
    failed = [p for p, ok in zip(pool, screen.correct) if not ok] or list(pool)
    times["direct_pass"] = time.perf_counter() - tick
    _log(f"direct pass: {len(pool) - sum(screen.correct)} of {len(pool)} failed -> training problems")

    tick = time.perf_counter()
    train_env = ThoughtEnv(lm, failed, **args)

    on_batch = (lambda b, stats, record: _log(f"train {batch_line(b, record)}")) if progress else None
    navigator = train_dqn(train_env, config, workdir=workdir / "navigator", on_batch=on_batch)
    times["train"] = time.perf_counter() - tick
    if navigator.history and is_primary():
        plot_training(navigator.history, workdir / "report" / "rlot_training.png")
    trained = {"training_problems": len(failed), "episodes_trained": int(navigator.state.episodes),
               "training_history": navigator.history,
               "training_unparsed_states": {"unparsed": train_env.unparsed_states,
                                            "evaluated": train_env.evaluated_states}}
    return navigator, failed, trained


def run(config, *, workdir, progress: bool = True) -> dict:
    """Runs every stage (module docstring); returns the report dict (also written to report/report.json)."""
    from reasoner.agents.rlot.transfer import load_navigator

    workdir = pathlib.Path(workdir)
    report_dir = workdir / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    d, e = config.demo, config.env
    times: dict[str, float] = {}
    tick = time.perf_counter()
    source = str(d.get("navigator", "") or "")
    loaded = load_navigator(source) if source else None  # before the model: a wrong path fails in seconds
    if loaded is None:
        from configs.rlot import check

        check(config)  # likewise a config the training cannot run (not after the direct pass)
    model, tokenizer = load_model_and_tokenizer(d.model)
    pool, test = split_problems(config)
    lm = SamplerLM(model, tokenizer, max_new_tokens=int(e.max_new_tokens), max_len=int(d.max_len), seed=int(d.seed))
    times["data"] = time.perf_counter() - tick
    _log(f"{d.task}: pool {len(pool)}, test {len(test)}; model {d.model}")

    args = env_args(config, model=model, tokenizer=tokenizer, problems=list(test) + ([] if loaded else list(pool)))
    try:
        if loaded is None:
            navigator, _, trained = _train(config, lm, pool, args, workdir=workdir, progress=progress,
                                                times=times)
            if navigator.preempted:  # checkpointed: the same command resumes; no evaluation of a half-trained one
                _log(f"preempted after {trained['episodes_trained']} episodes: the navigator is checkpointed; "
                     f"start the same command again to resume")
                return {"preempted": "train", "episodes_trained": trained["episodes_trained"]}
        else:
            _log(f"transfer: navigator of {loaded.source} ({loaded.episodes} episodes) with {d.model}")
            navigator = loaded
            trained = {"training_problems": 0, "episodes_trained": loaded.episodes, "training_history": [],
                       "training_unparsed_states": None}
        results, nav_unparsed = _evaluate(config, lm, args, navigator.act, test, model=model, tokenizer=tokenizer,
                                          times=times)
    finally:
        close = getattr(args["prm"], "close", None)  # the Z3 PRM's verifier pool
        if close is not None:
            close()

    methods = [_method_summary(r) for r in results]
    episodes = results[0].episodes
    report = {
        "task": d.task, "model": d.model, "navigator_from": loaded.source if loaded else None,
        "train_pool": 0 if loaded else len(pool), "test": len(test), "navigator_params": navigator.num_params,
        **{k: trained[k] for k in ("training_problems", "episodes_trained")},
        "methods": methods,
        "patterns": {n: inference.block_patterns(episodes, length=int(n)) for n in ("2", "3")},
        "navigator_unparsed_states": {"unparsed": nav_unparsed[0], "evaluated": nav_unparsed[1]},
        "training_unparsed_states": trained["training_unparsed_states"],
        "training_history": trained["training_history"], "seconds": times,
        "config": {"dqn": config.dqn.to_dict(), "env": config.env.to_dict(), "demo": config.demo.to_dict()},
        "navigator_episodes": [
            {"id": ep.problem.id, "blocks": ep.blocks, "answer": ep.answer, "gold": ep.problem.gold,
             "correct": ep.correct, "rewards": ep.rewards} for ep in episodes],
    }
    if is_primary():
        (report_dir / "report.json").write_text(json.dumps(report, indent=1, default=_jsonable))
    table = format_table(methods)
    print(table, flush=True)
    for n in ("2", "3"):
        _log(f"most frequent {n}-block sequences: " + "; ".join(f"{s} ({c})" for s, c in report["patterns"][n]))
    curve = "" if loaded else f"; training curve: {report_dir / 'rlot_training.png'}"
    _log(f"report: {report_dir / 'report.json'}{curve}; seconds: "
         + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))
    return report


def _evaluate(config, lm, args, act, test, *, model, tokenizer, times: dict):
    """Stage 4: the greedy navigator `act`, direct, CoT, CoT-SC (and navigator-SC) on the test problems."""
    d, e = config.demo, config.env
    tick = time.perf_counter()
    eval_env = ThoughtEnv(lm, **args)
    results = [inference.navigate(eval_env, act, test)]
    nav_unparsed = (eval_env.unparsed_states, eval_env.evaluated_states)
    results.append(inference.direct(lm, test, max_new_tokens=int(d.direct_max_new_tokens)))
    results.append(inference.chain_of_thought(lm, test, max_new_tokens=int(d.cot_max_new_tokens)))
    results.append(inference.cot_self_consistency(lm, test, k=int(d.sc_samples), temperature=float(d.sc_temperature),
                                                  max_new_tokens=int(d.cot_max_new_tokens)))
    if int(d.navigator_sc) > 1:
        sampling_lm = SamplerLM(model, tokenizer, max_new_tokens=int(e.max_new_tokens), max_len=int(d.max_len),
                                temperature=float(d.sc_temperature), seed=int(d.seed) + 1)
        results.append(inference.navigate_self_consistency(ThoughtEnv(sampling_lm, **args), act, test,
                                                           k=int(d.navigator_sc)))
    times["eval"] = time.perf_counter() - tick
    return results, nav_unparsed


def _jsonable(x):
    if dataclasses.is_dataclass(x):
        return dataclasses.asdict(x)
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
