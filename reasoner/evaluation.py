"""Batched evaluation of a model on A* proof problems (A* post-training §4.1, Figs. 2-4).

Generation goes through the jitted KV-cache sampler (`reasoner.sampling.Sampler`): greedy by default (the paper's
setting), or K samples per prompt sharing one prefill. Prompts are evaluated in fixed-size batches, each padded to
the sampler's prompt bucket, so a run compiles a handful of shapes. Scoring (`scoring=`): "device" (default) parses
on the host and scores every completion of the split in one jitted A* kernel call
(`reasoner.rewards.astar_device.score_on_device`, the path GRPO's A* rewards take); "host" scores each completion
with `reasoner.tasks.astar.score_completion` (parse -> verify -> efficiency). Both give identical correctness,
pushes, pops and efficiencies; rewards agree within 1e-6 (float32 on device).

Metrics (JSON report, one dict per model):
  accuracy           share of correct attempts over all P*K attempts (with K = 1 the paper's accuracy over problems)
                     with a 95% Wilson interval; with K > 1 the Wilson interval uses the design-effect adjusted number
                     of trials (the K attempts of a problem are correlated; `intervals.clustered_wilson_interval`);
  efficiency_pushes  mean over correct attempts of steps(shortest proof) / steps(attempt), with a 95% percentile
                     bootstrap interval that resamples problems, not attempts (`pareto.summarise_model`);
  efficiency_pops    same with |V_pops| (Eq. 6);
  reliability        avg@N, pass@k (unbiased), pass^k and stability pass^k / pass@k for each k <= K;
  finish_reasons, mean completion tokens, seconds.
`write_report` stores the reports as JSON and draws accuracy against efficiency with the Pareto front.

Prompts (`build_prompts`): zero-shot (`settings.few_shot = 0`) or k-shot, the paper's in-context baselines (§4): k
solved training examples chosen per problem by `reasoner.tasks.astar.few_shot_choice` (seeded by `settings.seed` and
the problem id), answered by their host-A* traces under `settings.few_shot_heuristic` and `settings.cost`. Every model
is scored the same way whatever its prompt; the report's `generation.few_shot` says how many shots the prompts held.
Models: a local decoder (jitted sampler) or an OpenAI-compatible endpoint (`reasoner.evaluation_endpoint.
EndpointModel`, `settings.max_new_tokens` its token budget; a request that fails scores as wrong and is counted).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from reasoner.tasks.astar import (COSTS, HEURISTICS, AStarProblem, TaskScore, few_shot_choice, messages_with_shots,
                                   score_completion, sft_completion)

SCORING = ("device", "host")

__all__ = ["SCORING", "EvalSettings", "EvalResult", "Prompts", "build_prompts", "generate_completions",
           "score_problems", "evaluate_completions", "evaluate", "write_report", "reference_efficiency"]


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """num_samples 1 + temperature 0 = greedy. batch_size counts prompts per sampler call (each has K rows).
    few_shot: solved training examples before each problem (0 = zero-shot); their traces use few_shot_heuristic
    and cost (the A* cost of the traces: "max" or "sum"). max_new_tokens is the generation budget of whichever
    model is evaluated (an endpoint's `max_tokens`)."""

    num_samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    batch_size: int = 16
    seed: int = 0
    ks: tuple[int, ...] = (1,)
    scoring: str = "device"
    few_shot: int = 0
    few_shot_heuristic: str = "dependency"
    cost: str = "max"

    def __post_init__(self):
        if self.scoring not in SCORING:
            raise ValueError(f"eval scoring={self.scoring!r}: expected one of {SCORING}")
        if not isinstance(self.few_shot, int) or self.few_shot < 0:
            raise ValueError(f"eval few_shot={self.few_shot!r}: expected an int >= 0")
        if self.few_shot_heuristic not in HEURISTICS:
            raise ValueError(f"eval few_shot_heuristic={self.few_shot_heuristic!r}: expected one of {HEURISTICS}")
        if self.cost not in COSTS:
            raise ValueError(f"eval cost={self.cost!r}: expected one of {COSTS}")
        for name in ("num_samples", "max_new_tokens", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"eval {name}={value!r}: expected an int >= 1")
        if self.num_samples > 1 and self.temperature == 0:
            raise ValueError(f"eval num_samples={self.num_samples} with temperature 0: greedy samples are identical; "
                             "expected temperature > 0")
        bad = [k for k in self.ks if not isinstance(k, int) or not 1 <= k <= self.num_samples]
        if bad:
            raise ValueError(f"eval ks={self.ks}: expected ints in [1, num_samples={self.num_samples}]")


@dataclasses.dataclass
class EvalResult:
    label: str
    report: dict
    point: object  # reasoner.metrics.pareto.ModelPoint
    completions: list[list[str]]
    scores: list[list[TaskScore]]


@dataclasses.dataclass(frozen=True)
class Prompts:
    """messages[i]: problem i's chat prompt; shots[i]: the solved examples it holds; ids[i]: its token ids (local
    models only, else None); stats: the report's `generation.few_shot` entry."""

    messages: list[list[dict[str, str]]]
    shots: list[int]
    ids: list[list[int]] | None
    stats: dict


def build_prompts(problems: Sequence[AStarProblem], settings: EvalSettings, *,
                  examples: Sequence[AStarProblem] | None = None, tokenizer=None,
                  context: int | None = None) -> Prompts:
    """Chat prompts of `problems`: zero-shot, or k = settings.few_shot shots drawn from `examples` (the training
    split) per problem by `few_shot_choice` (seed settings.seed), each answered by its host-A* trace under
    settings.few_shot_heuristic and settings.cost (one search per distinct example).

    Context check (local models: `tokenizer` and `context` = the model's max_position_embeddings): a prompt whose
    tokens plus settings.max_new_tokens exceed `context` drops shots from the END of its drawn list (the rest stay
    as drawn, so a shorter prompt is a prefix of the k-shot one) until it fits; `shots` says how many each kept and
    stats counts the prompts left short of k. A prompt that does not fit even with no shot is a ValueError naming the
    problem (the budget or the model is wrong, not the shots). Without a tokenizer (an OpenAI-compatible endpoint,
    whose context is the server's) nothing is dropped; a prompt the server refuses is a failed request, scored wrong.
    """
    from reasoner.tokenization import chat_ids

    k = settings.few_shot
    if k and examples is None:
        raise ValueError(f"few_shot={k}: expected training examples to draw the shots from (examples=...)")
    if (tokenizer is None) != (context is None):
        raise ValueError("build_prompts: give tokenizer and context together (both or neither)")
    traces: dict[str, str] = {}

    def trace(ex: AStarProblem) -> str:
        if ex.id not in traces:
            traces[ex.id] = sft_completion(ex, heuristic=settings.few_shot_heuristic, cost=settings.cost)
        return traces[ex.id]

    messages, shots, ids = [], [], []
    for p in problems:
        drawn = [(ex, trace(ex)) for ex in few_shot_choice(p, examples, k, seed=settings.seed)] if k else []
        n = len(drawn)
        while True:
            m = messages_with_shots(p, drawn[:n])
            if tokenizer is None:
                break
            x = chat_ids(tokenizer, m)
            if len(x) + settings.max_new_tokens <= context:
                ids.append(x)
                break
            if n == 0:
                raise ValueError(f"problem {p.id}: its prompt ({len(x)} tokens) plus max_new_tokens="
                                 f"{settings.max_new_tokens} exceeds the model's context of {context} tokens; expected "
                                 "a smaller max_new_tokens or a longer-context model")
            n -= 1
        messages.append(m)
        shots.append(n)
    stats = {"k": k, "heuristic": settings.few_shot_heuristic if k else None, "cost": settings.cost if k else None,
             "mean_shots": float(np.mean(shots)), "min_shots": int(min(shots)) if shots else 0,
             "prompts_short_of_k": sum(n < k for n in shots),
             "max_prompt_tokens": max(map(len, ids)) if tokenizer is not None and ids else None}
    return Prompts(messages=messages, shots=shots, ids=ids if tokenizer is not None else None, stats=stats)


def generate_completions(model, tokenizer, problems: Sequence[AStarProblem], settings: EvalSettings, *,
                         examples: Sequence[AStarProblem] | None = None, progress: bool = True,
                         desc: str = "eval") -> tuple[list[list[str]], dict]:
    """K completion texts per problem (problem order) and generation stats (finish reasons, tokens, seconds, the
    few-shot entry of `build_prompts`). `model`: a local decoder (the jitted sampler, fixed-size batches) or an
    `EndpointModel` (concurrent requests; `tokenizer` unused)."""
    from reasoner.evaluation_endpoint import EndpointModel

    if not problems:
        raise ValueError("problems is empty: expected at least one A* problem to evaluate")
    if isinstance(model, EndpointModel):
        prompts = build_prompts(problems, settings, examples=examples)
        texts, stats = model.generate(prompts.messages, settings, progress=progress, desc=desc)
        return texts, {**stats, "few_shot": prompts.stats}
    context = getattr(getattr(model, "cfg", None), "max_position_embeddings", None)
    prompts = build_prompts(problems, settings, examples=examples, tokenizer=tokenizer, context=context)
    texts, stats = _sample(model, tokenizer, prompts.ids, settings, progress=progress, desc=desc)
    return texts, {**stats, "few_shot": prompts.stats}


def _sample(model, tokenizer, prompts: list[list[int]], settings: EvalSettings, *, progress: bool,
            desc: str) -> tuple[list[list[str]], dict]:
    """Greedy or K-sample generation of token-id prompts, `settings.batch_size` prompts at a time.

    On one device the prompts go through the paged `RolloutEngine` with `batch_size` x K decode slots: a row that
    ends (EOS) hands its slot to the next prompt at once, where a static batch would wait for its longest row. Prompt
    i draws with the keys a static batch would give it (`prompt_index = i % batch_size`), so greedy rows equal the
    static sampler's and sampled rows are reproducible for a given batch size, on either path. A model sharded over
    several devices keeps the static sampler (the engine's block pool is not sharded), in batches topped up with
    copies (one compile for every batch). The batch size is the largest, halving down to one prompt, whose cache
    the memory check admits (`sampling.memory.check_fits`: MemoryError on the host before anything runs; k-shot
    prompts are several times longer); the size used is reported (`generation.batch_size`)."""
    from tqdm import tqdm

    from reasoner.sampling import Sampler, SamplingParams
    from reasoner.sampling.buckets import bucket_length
    from reasoner.sampling.memory import check_fits
    from reasoner.sampling.rollout_engine import RolloutEngine, on_one_device

    params = SamplingParams(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                            top_p=settings.top_p, n=settings.num_samples, seed=settings.seed)
    # One cache length for every batch: the longest prompt's bucket + new tokens, so all batches share one compile.
    max_len = bucket_length(max(len(p) for p in prompts) + settings.max_new_tokens)
    prompt_bucket = bucket_length(max(len(p) for p in prompts), cap=max_len)
    batch = settings.batch_size
    while True:
        try:
            check_fits(model.cfg, batch=batch * settings.num_samples, prompts=batch, prompt_bucket=prompt_bucket,
                       alloc_len=max_len, max_new=settings.max_new_tokens)
            break
        except MemoryError:
            if batch == 1:
                raise
            batch = max(1, batch // 2)
    texts: list[list[str]] = [[] for _ in prompts]
    reasons: Counter = Counter()
    tokens = 0
    start = time.perf_counter()
    bar = tqdm(total=len(prompts), desc=desc, unit="problem", disable=not progress, dynamic_ncols=True)

    def record(i: int, group) -> None:
        nonlocal tokens
        texts[i] = [c.text for c in group]
        reasons.update(c.finish_reason for c in group)
        tokens += sum(c.num_tokens for c in group)
        bar.update(1)

    try:
        if on_one_device(model):
            engine = RolloutEngine(model, tokenizer, slots=batch * settings.num_samples, max_len=max_len)
            ids = {engine.submit(p, params, prompt_index=i % batch): i for i, p in enumerate(prompts)}
            while ids:
                for rid, group in engine.step().items():
                    record(ids.pop(rid), group)
        else:
            sampler = Sampler(model, tokenizer)
            for lo in range(0, len(prompts), batch):
                chunk = prompts[lo:lo + batch]
                out = sampler.generate(chunk + [chunk[-1]] * (batch - len(chunk)), params, max_len=max_len)
                for i in range(len(chunk)):
                    record(lo + i, out[i * settings.num_samples:(i + 1) * settings.num_samples])
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    n_rows = len(prompts) * settings.num_samples
    return texts, {"finish_reasons": dict(reasons), "mean_completion_tokens": tokens / n_rows,
                   "generation_seconds": seconds, "tokens_per_second": tokens / max(seconds, 1e-9),
                   "batch_size": batch}


def score_problems(problems: Sequence[AStarProblem], completions: Sequence[Sequence[str]], *,
                   scoring: str = "device") -> list[list[TaskScore]]:
    """TaskScore of every completion (K per problem), on device (one jitted kernel call) or on the host."""
    if scoring == "host":
        return [[score_completion(p, text) for text in texts] for p, texts in zip(problems, completions)]
    if scoring != "device":
        raise ValueError(f"scoring={scoring!r}: expected one of {SCORING}")
    from reasoner.rewards.astar_device import compile_for_kernel, score_on_device

    compiled = [compile_for_kernel(p.program, p.goal, p.verbalizer, name=p.id) for p in problems]
    flat = score_on_device([(c, text) for c, texts in zip(compiled, completions) for text in texts])
    out, i = [], 0
    for texts in completions:
        out.append([TaskScore(correct=s.correct, steps_parsed=s.steps_parsed, pushes=s.pushes, v_pops=s.v_pops,
                              efficiency_pushes=s.efficiency_pushes, efficiency_pops=s.efficiency_pops,
                              rewards=s.rewards) for s in flat[i:i + len(texts)]])
        i += len(texts)
    return out


def evaluate_completions(problems: Sequence[AStarProblem], completions: Sequence[Sequence[str]], *, label: str,
                         ks: Sequence[int] = (1,), group: str = "", n_resamples: int = 10_000, seed: int = 0,
                         scoring: str = "device") -> EvalResult:
    """Scores K completions per problem and builds the report (see module docstring) and the plot point."""
    from reasoner.metrics.pareto import summarise_model
    from reasoner.metrics.reliability import reliability_report

    if len(completions) != len(problems):
        raise ValueError(f"{len(completions)} completion lists for {len(problems)} problems: expected one per problem")
    widths = {len(c) for c in completions}
    if len(widths) != 1 or 0 in widths:
        raise ValueError(f"completions per problem {sorted(widths)}: expected the same K >= 1 for every problem")
    scores = score_problems(problems, completions, scoring=scoring)
    flat = [s for row in scores for s in row]
    point, report = summarise_model(
        label, correct=[s.correct for s in flat],
        efficiency={"pushes": [s.efficiency_pushes for s in flat], "pops": [s.efficiency_pops for s in flat]},
        problem=[i for i, row in enumerate(scores) for _ in row], group=group, n_resamples=n_resamples, seed=seed)
    correct_PxK = np.array([[s.correct for s in row] for row in scores], bool)
    report["problems"] = len(problems)
    report["samples_per_problem"] = int(correct_PxK.shape[1])
    report["reliability"] = reliability_report(correct_PxK, ks=tuple(ks))
    report["mean_rewards"] = {k: float(np.mean([s.rewards[k] for s in flat])) for k in flat[0].rewards}
    report["mean_parsed_steps"] = float(np.mean([s.steps_parsed for s in flat]))
    return EvalResult(label=label, report=report, point=point, completions=[list(c) for c in completions],
                      scores=scores)


def evaluate(model, tokenizer, problems: Sequence[AStarProblem], settings: EvalSettings = EvalSettings(), *,
             label: str, group: str = "", progress: bool = True,
             examples: Sequence[AStarProblem] | None = None) -> EvalResult:
    """Generate (jitted sampler, batched; or an endpoint) then score; the report also carries generation stats and
    settings. `examples`: the training problems few-shot prompts draw from (needed when settings.few_shot > 0)."""
    texts, stats = generate_completions(model, tokenizer, problems, settings, examples=examples, progress=progress,
                                        desc=f"eval {label}")
    result = evaluate_completions(problems, texts, label=label, ks=settings.ks, group=group, seed=settings.seed,
                                  scoring=settings.scoring)
    result.report["generation"] = stats
    result.report["settings"] = dataclasses.asdict(settings)
    return result


def reference_efficiency(problems: Sequence[AStarProblem], heuristics: Sequence[str] = ("zero", "dependency", "true")
                         ) -> dict[str, dict[str, float]]:
    """Efficiency of the search algorithms themselves on these problems (the paper's dashed lines in Fig. 2)."""
    names = {"zero": "Dijkstra", "dependency": "A* dependency", "true": "A* true cost-to-go"}
    out: dict[str, dict[str, float]] = {"pushes": {}, "pops": {}}
    for h in heuristics:
        scored = [score_completion(p, sft_completion(p, heuristic=h)) for p in problems]
        out["pushes"][names[h]] = float(np.mean([s.efficiency_pushes for s in scored]))
        out["pops"][names[h]] = float(np.mean([s.efficiency_pops for s in scored]))
    return out


def write_report(results: Sequence[EvalResult], out_dir, *, name: str = "eval", title: str | None = None,
                 reference: dict | None = None, extra: dict | None = None) -> dict[str, str]:
    """Writes `<name>.json` (reports, Pareto fronts, extra), `<name>.png` (accuracy vs efficiency) and
    `<name>_completions.jsonl` (every completion with its scores; a lone surrogate in a text is written as U+FFFD);
    returns the paths. In a job of several processes only process 0 writes (the others return the same paths)."""
    from reasoner.data.jsonl import write_jsonl
    from reasoner.distributed import is_primary
    from reasoner.metrics.pareto import plot_accuracy_efficiency

    if not results:
        raise ValueError("results is empty: nothing to report")
    out = pathlib.Path(out_dir)
    png, js, comp = out / f"{name}.png", out / f"{name}.json", out / f"{name}_completions.jsonl"
    paths = {"json": str(js), "png": str(png), "completions": str(comp)}
    if not is_primary():
        return paths
    out.mkdir(parents=True, exist_ok=True)
    fronts = plot_accuracy_efficiency([r.point for r in results], path=png, reference_efficiency=reference,
                                      title=title)
    doc = {"models": [r.report for r in results], "pareto_front": fronts, "reference_efficiency": reference,
           **(extra or {})}
    js.write_text(json.dumps(doc, indent=2, default=_jsonable))
    write_jsonl(comp, ({"model": r.label, "problem": i, "text": _utf8(text), **s.as_dict()}
                       for r in results for i, (texts, scores) in enumerate(zip(r.completions, r.scores))
                       for text, s in zip(texts, scores)), default=_jsonable)
    return paths


def _utf8(text: str) -> str:
    """`text` writable as UTF-8: a lone surrogate (an endpoint's JSON may hold "\\ud83d" alone, cut mid-emoji)
    becomes U+FFFD, a pair joins into its character; it made the completions file raise after the whole run."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _jsonable(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return str(value)
