"""GRPO's validation pass and best checkpoint, its prompt-length limit, and the failure counts it logs.

Validation (`config.train`, every `eval_every` generation steps and at the end, on the run's held-out prompts):
its keys are documented on `EvalSettings`' fields. The pass reports `eval/reward`, `eval/count` and `eval/<name>` (the
mean over held-out completions; a failed completion scores 0, as in training).

Prompt length (`config.grpo`): `max_prompt_tokens` (0 = no limit) and `prompt_overflow`:
  "truncate_left"  keep the LAST max_prompt_tokens tokens of the chat-templated prompt (what TRL's GRPOTrainer
                   did with `max_prompt_length` up to its removal before 1.x: `prompt_ids[:, -max_prompt_length:]`,
                   the setting the CEDAR authors ran through Unsloth); the generation prompt at the end survives,
                   the head of the system/user text does not. Each step logs `prompts/truncated`.
  "drop"           leave such examples out at load, with a logged count (the training rows keep their prompt
                   whole; an empty result is an error).
At load both modes log how many prompts exceed the limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

OVERFLOW = ("truncate_left", "drop")


# ============================================================================================== settings
@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """The validation settings of `config.train`, each field's key named first; `from_config` checks them."""

    every: int = 0
    """`eval_every`: validate every this many generation steps and at the end; 0 = no validation."""
    temperature: float = 0.0
    """`eval_temperature`: 0 = greedy; > 0 samples one completion per prompt (CEDAR App. C: T 0.7, top-p 0.95)."""
    top_p: float = 1.0
    """`eval_top_p`: nucleus mass of the sampled pass (1 = off)."""
    batch_prompts: int = 8
    """`eval_batch_prompts`: prompts per sampler call (the training sampler, current weights)."""
    rewards: tuple[str, ...] = ()
    """`eval_rewards`: names of `config.rewards` (their `as`) scored in validation, () = all; ("correctness",)
    leaves the judged terms out of checkpoint selection, as the paper selects by correctness only."""
    best_metric: str = ""
    """`best_metric`: "" = none, else "eval/reward" (the weighted total of the scored functions) or "eval/<name>":
    `workdir/best/` keeps the checkpoint with the HIGHEST value (mode "max": a reward)."""
    export_best: bool = False
    """`export_best`: with `export_dir`, export the best checkpoint instead of the final state (the final state when
    no evaluation has run); needs `best_metric`."""

    @classmethod
    def from_config(cls, config) -> EvalSettings:
        t = config.train
        s = cls(every=int(t.get("eval_every", 0) or 0), temperature=float(t.get("eval_temperature", 0.0)),
                top_p=float(t.get("eval_top_p", 1.0)), batch_prompts=int(t.get("eval_batch_prompts", 8)),
                rewards=tuple(t.get("eval_rewards", ()) or ()), best_metric=str(t.get("best_metric", "") or ""),
                export_best=bool(t.get("export_best", False)))
        if s.every < 0 or s.batch_prompts < 1:
            raise ValueError(f"train.eval_every={s.every}, train.eval_batch_prompts={s.batch_prompts}: expected "
                             ">= 0 and >= 1")
        if not s.temperature >= 0:
            raise ValueError(f"train.eval_temperature={s.temperature}: expected >= 0 (0 = greedy)")
        if not 0 < s.top_p <= 1:
            raise ValueError(f"train.eval_top_p={s.top_p}: expected a nucleus mass in (0, 1] (1 = off)")
        if s.export_best and not s.best_metric:
            raise ValueError("train.export_best=True needs train.best_metric (e.g. 'eval/correctness')")
        return s

    def metric_names(self, reward_names: Sequence[str]) -> tuple[str, ...]:
        """The metrics the pass reports for `reward_names` (the composite's), checking `rewards` and
        `best_metric` against them (ValueError naming the setting)."""
        unknown = [n for n in self.rewards if n not in reward_names]
        if unknown:
            raise ValueError(f"train.eval_rewards={list(self.rewards)}: {unknown} are not reward names; expected "
                             f"some of {list(reward_names)}")
        scored = self.rewards or tuple(reward_names)
        names = ("eval/reward", *(f"eval/{n}" for n in scored))
        if self.best_metric and self.best_metric not in names:
            raise ValueError(f"train.best_metric={self.best_metric!r}: expected '' or one of {list(names)}")
        return names


def eval_reward(reward, settings: EvalSettings):
    """The composite scored in validation: `reward` itself, or a new one over the named functions (same function
    objects and weights, its own counters and thread pool: close it)."""
    from reasoner.rewards import CompositeReward

    if not settings.rewards:
        return reward
    return CompositeReward([r for r in reward.rewards if r.name in settings.rewards])


# ============================================================================================== prompt length
def check_prompt_limit(config) -> tuple[int, str]:
    """(max_prompt_tokens, prompt_overflow) of `config.grpo` (0 = no limit); ValueError naming a bad setting."""
    g = config.grpo
    limit, overflow = g.get("max_prompt_tokens", 0), str(g.get("prompt_overflow", "truncate_left"))
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"grpo.max_prompt_tokens={limit!r}: expected an int >= 0 (0 = no limit)")
    if overflow not in OVERFLOW:
        raise ValueError(f"grpo.prompt_overflow={overflow!r}: expected one of {OVERFLOW}")
    return limit, overflow


def encode_prompts(examples: Sequence[Mapping], *, tokenizer, tool=None, max_tokens: int = 0
                   ) -> tuple[list[list[int]], int]:
    """(prompt token ids per example, how many were cut): the chat-templated prompt (the tool's own rendering
    for multi-turn rollouts), its last `max_tokens` tokens when longer (0 = whole)."""
    from trainers.data import prompt_token_ids

    ids = [list(tool.prompt_ids(e["prompt"])) if tool is not None else prompt_token_ids(tokenizer, e["prompt"])
           for e in examples]
    if not max_tokens:
        return ids, 0
    cut = sum(len(x) > max_tokens for x in ids)
    return [x[-max_tokens:] for x in ids], cut


def fit_prompts(examples: Sequence[Mapping], *, config, tokenizer, tool=None, what: str = "train",
                log: Callable[[str], None] = print) -> list[Mapping]:
    """`examples` under `config.grpo`'s prompt limit: all of them (truncated at each step) or those that fit
    (`drop`), with a logged count of the prompts over the limit. ValueError when `drop` leaves none."""
    limit, overflow = check_prompt_limit(config)
    if not limit or not examples:
        return list(examples)
    lengths = np.array([len(x) for x in encode_prompts(examples, tokenizer=tokenizer, tool=tool)[0]])
    over = lengths > limit
    if not over.any():
        return list(examples)
    action = "dropped" if overflow == "drop" else "truncated from the left at each step"
    log(f"[grpo] {what}: {int(over.sum())} of {len(examples)} prompts exceed grpo.max_prompt_tokens={limit} "
        f"(longest {int(lengths.max())} tokens): {action}")
    if overflow != "drop":
        return list(examples)
    kept = [e for e, o in zip(examples, over) if not o]
    if not kept and what == "train":
        raise ValueError(f"grpo.max_prompt_tokens={limit} with prompt_overflow='drop' leaves no {what} prompt "
                         f"(shortest {int(lengths.min())} tokens)")
    return kept


# ============================================================================================== the pass
def evaluate(run, sampler, state, *, examples: Sequence[Mapping], reward, settings: EvalSettings, tool=None,
             seed: int = 0) -> dict[str, float]:
    """One completion per held-out example (greedy, or sampled at `settings.temperature` / top_p from `seed`),
    scored by `reward`: {"eval/reward": mean weighted total (0 where no function applied), "eval/count": rows,
    "eval/<name>": each function's mean over the rows it applies to (NaN if none: not offered to best/)}. Failed
    completions (errors, timeouts, failed judge calls) score 0, the training rule."""
    from reasoner.agents.multiturn import rollout
    from reasoner.sampling import SamplingParams
    from trainers.grpo import completion_budget, sync_sampler

    g = run.config.grpo
    limit, _ = check_prompt_limit(run.config)
    sync_sampler(sampler, run, state.params)
    sampling = SamplingParams(max_new_tokens=int(g.max_new_tokens), temperature=settings.temperature,
                              top_p=settings.top_p if settings.temperature > 0 else 1.0, n=1,
                              seed=int(seed) % 2**32, stop=tuple(g.stop),
                              eos_ids=() if g.get("ignore_eos") else None)
    totals, per_fn = [], []
    for start in range(0, len(examples), settings.batch_prompts):
        chunk = list(examples[start:start + settings.batch_prompts])
        ids, _ = encode_prompts(chunk, tokenizer=run.tokenizer, tool=tool, max_tokens=limit)
        r = rollout(sampler, prompt_ids=ids, examples=chunk, sampling=sampling, budget=completion_budget(run.config),
                    tool=tool, max_turns=int(g.max_turns), tool_reserve=int(g.tool_reserve))
        rb = reward(r.completions, examples=r.examples)
        totals.append(np.nan_to_num(rb.total_B, nan=0.0))
        per_fn.append(rb.per_function_BxF)
    total, table = np.concatenate(totals), np.concatenate(per_fn)
    out = {"eval/reward": float(total.mean()), "eval/count": float(len(total))}
    for i, name in enumerate(reward.names):  # NaN = not applicable to that row (TRL's rewards/<name>/mean)
        col = table[:, i]
        out[f"eval/{name}"] = float(np.nanmean(col)) if np.any(~np.isnan(col)) else float("nan")
    return out


# ============================================================================================== export, counts
def export_params(run, result, *, workdir, settings: EvalSettings, meta: dict, log: Callable[[str], None] = print):
    """The params to export: the best checkpoint's when `settings.export_best` and one exists, else the final."""
    from trainers.run import best_params

    if not settings.export_best:
        return result.state.params
    params, step = best_params(result, workdir=workdir, best_metric=settings.best_metric, best_mode="max", meta=meta)
    if step is None:
        log(f"[grpo] export: no evaluation reached best/ ({settings.best_metric}); exporting the final state")
    else:
        log(f"[grpo] export: the best checkpoint, step {step} by {settings.best_metric}")
    return params


def failure_metrics(reward) -> dict[str, float]:
    """Counts since the run started: `reward_failures/<name>` (errors + timeouts + non-finite values the registry
    scored 0) and, for judged rewards, `judge/requests|valid|invalid|failed|cache_hits|cache_misses|cancelled` summed
    over distinct judges (rewards sharing a judge share its counters; a failed call — timeout, HTTP error — or an
    invalid reply scored 0; a `CachedJudge` counts its hits and misses into the counters it is asked with; cancelled:
    prompts a reward call past its deadline did not send)."""
    out = {}
    for name, counts in reward.counter_dict().items():
        out[f"reward_failures/{name}"] = float(counts["errors"] + counts["timeouts"] + counts["non_finite"])
    judges = {id(c): c for c in (getattr(r.fn, "counters", None) for r in reward.rewards)
              if all(hasattr(c, k) for k in ("requests", "valid", "invalid", "failed"))}
    for key in ("requests", "valid", "invalid", "failed", "cache_hits", "cache_misses", "cancelled") if judges else ():
        if not all(hasattr(c, key) for c in judges.values()):
            continue
        out[f"judge/{key}"] = float(sum(getattr(c, key) for c in judges.values()))
    return out


def tool_metrics(tool) -> dict[str, float]:
    """`tool/<key>` for each count a multi-turn tool keeps since the run started (`ScratchpadTool.counts`: Z3 pool
    starts that failed and the calls answered by an error observation for it); {} for single-turn rollouts."""
    return {f"tool/{k}": float(v) for k, v in sorted(getattr(tool, "counts", {}).items())}


def seed_for(config_seed: int, step: int, *, salt: int = 0) -> int:
    """A sampling seed in [0, 2**32) per (run seed, step): training uses salt 0, validation another."""
    return (int(config_seed) * 1_000_003 + int(step) + int(salt) * 7_919) % 2**32

