"""Group Relative Policy Optimization (DeepSeekMath; TRL 1.16's GRPOTrainer semantics) on the jitted sampler.

One generation step: P prompts -> G completions each from `reasoner.sampling.Sampler` (one shared prefill per
prompt; optionally several turns with a tool whose response tokens are masked out of the loss) -> rewards from the
weighted registry `reasoner.rewards.CompositeReward` in a host thread, overlapped with the device computing the
reference log-probs -> group advantages -> `num_iterations` optimizer steps on that batch. The math (advantages,
per-token loss for grpo / bnpo / dr_grpo / dapo, clipping, k3 KL) is `trainers.grpo_loss`; this file wires it.

    from trainers import grpo
    result = grpo.train(config, workdir="runs/grpo", examples=train_rows, eval_examples=val_rows)
    result.state, result.history[-1]["reward"], result.eval_history, result.model()

`train(config, *, workdir, model=None, tokenizer=None, examples=None, eval_examples=None, reward=None, tool=None)`:
  config: `configs/grpo_*.py` (sections mesh, model, lora, data, grpo, rewards, optim, train).
  model: a Decoder to start from (e.g. the SFT result); default `config.model`. LoRA adapters are added when
    `config.lora.rank > 0`; then only they train and the reference is the adapter-free base (`trainers.run`).
  examples / eval_examples: dataset rows (`trainers.data.as_example`); default from `config.data`.
  reward: a CompositeReward (default: `CompositeReward.from_config(config.rewards)`).
  tool: a multi-turn tool, e.g. `reasoner.agents.scratchpad.ScratchpadTool` (the SMT scratchpad: Hermes tool calls
    z3_solve / finish, observations as tool messages) or Python functions as tools
    (`reasoner.agents.environment.python_tools`); default from `config.grpo.tool` ("" = single turn).
  Runs on `trainers.loop.run_loop` (resume, checkpoints, metrics, preemption). Returns `GRPOResult`.
  Validation every `train.eval_every` steps on `eval_examples` (greedy or sampled, some or all reward functions),
  the best checkpoint by `train.best_metric` in `workdir/best` (highest wins), export of it on request, and
  `grpo.max_prompt_tokens` (TRL's left truncation, or drop at load): `trainers.grpo_eval`.

Choices where TRL leaves room: a completion is truncated iff the sampler stopped it on length (TRL: the last token is
not EOS), and `mask_truncated` zeroes those rows in the loss. Old log-probs for num_iterations > 1 are the sampler's
(temperature-scaled, hence top-k/top-p must be off). Rewards are scored on the host for the batch just generated
(on-policy); the next rollout needs the updated weights, so the overlap is with the reference forward instead.

Sections: config, loss, steps, one iteration, train (the batch layout: `trainers.grpo_batch`; validation, prompt
length and failure counts: `trainers.grpo_eval`).
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from reasoner.agents.multiturn import Rollout, rollout
from reasoner.models.scoring import completion_logps
from trainers import grpo_eval
from trainers import grpo_loss as gl
from trainers.grpo_batch import GRPOBatch, batch_shardings, pack, prompt_bucket
from trainers.data import PromptStream, as_example, load_examples
from trainers.loop import LoopResult, run_loop
from trainers.run import Frozen, Run, setup, with_reference
from trainers.state import TrainState
from trainers.step import jit_train_step, make_train_step


# ============================================================================================== config
def loss_config(config) -> gl.GRPOLossConfig:
    """The static loss settings of `config.grpo` (delta 0 = off)."""
    g = config.grpo
    return gl.GRPOLossConfig(loss_type=g.loss_type, beta=float(g.beta), epsilon_low=float(g.epsilon_low),
                             epsilon_high=float(g.epsilon_high), delta=float(g.delta) if g.delta else None,
                             use_bias_correction_kl=bool(g.use_bias_correction_kl),
                             max_completion_length=completion_budget(config),
                             importance_sampling_level=str(g.get("importance_sampling_level", "token")))


def advantage_config(config) -> gl.AdvantageConfig:
    """The host-side advantage settings of `config.grpo` (estimator, DAPO dynamic sampling and overlong shaping)."""
    g = config.grpo
    return gl.AdvantageConfig(estimator=str(g.get("advantage_estimator", "grpo")), scale_rewards=g.scale_rewards,
                              normalize_advantages=bool(g.get("normalize_advantages", False)),
                              dynamic_sampling=bool(g.get("dynamic_sampling", False)),
                              overlong_max_len=int(g.get("overlong_max_len", 0)),
                              overlong_cache=int(g.get("overlong_cache", 0)))


def completion_budget(config) -> int:
    """Completion tokens per row in the train batch (all turns and tool responses of a multi-turn rollout)."""
    g = config.grpo
    return int(g.max_completion_tokens or g.max_new_tokens)


def check_config(config) -> None:
    """Raises ValueError naming the setting when the GRPO section cannot work."""
    g = config.grpo
    rows = g.prompts_per_step * g.num_generations
    if g.num_generations < 2:
        raise ValueError(f"grpo.num_generations={g.num_generations}: expected >= 2 (advantages compare a group)")
    if g.prompts_per_step < 1 or g.num_iterations < 1 or g.grad_accum < 1:
        raise ValueError(f"grpo.prompts_per_step={g.prompts_per_step}, num_iterations={g.num_iterations}, "
                         f"grad_accum={g.grad_accum}: expected positive ints")
    if rows % g.grad_accum:
        raise ValueError(f"grpo.grad_accum={g.grad_accum}: expected a divisor of prompts x generations = {rows}")
    if g.temperature <= 0:
        raise ValueError(f"grpo.temperature={g.temperature}: training samples need a temperature > 0")
    if g.num_iterations > 1 and (g.top_k or g.top_p < 1):
        raise ValueError("grpo.num_iterations > 1 takes old log-probs from the sampler, which are those of the "
                         f"truncated distribution when top_k={g.top_k} / top_p={g.top_p}; set top_k=0, top_p=1.0")
    if completion_budget(config) < g.max_new_tokens:
        raise ValueError(f"grpo.max_completion_tokens={g.max_completion_tokens}: expected >= max_new_tokens")
    loss_config(config)
    advantage_config(config)
    grpo_eval.check_prompt_limit(config)
    grpo_eval.EvalSettings.from_config(config)


def tool_from_config(config, tokenizer):
    """The multi-turn tool `config.grpo.tool` names ("scratchpad", or "python" with `grpo.tools`), or None for
    single-turn rollouts (`reasoner.agents.environment.tool_from_settings`)."""
    from reasoner.agents.environment import tool_from_settings

    return tool_from_settings(config.grpo, tokenizer)


# ============================================================================================== loss
def advantages(total_B: np.ndarray, *, num_generations: int, scale_rewards: str, adv_cfg=None, lengths_B=None,
               mask_BxT=None) -> tuple[np.ndarray, dict]:
    """(advantages_B, stats) from the registry's weighted totals, TRL's group statistics (`adv_cfg`: the options of
    `gl.AdvantageConfig`; default plain GRPO with `scale_rewards`)."""
    h = gl.host_advantages(total_B, num_generations=num_generations, lengths_B=lengths_B, mask_BxT=mask_BxT,
                           config=adv_cfg or gl.AdvantageConfig(scale_rewards=scale_rewards))
    return h.advantages_B, gl.reward_stats(h, num_generations=num_generations,
                                        dynamic_sampling=adv_cfg is not None and adv_cfg.dynamic_sampling)


def grpo_loss_fn(graphdef, loss_cfg: gl.GRPOLossConfig, *, prompt_len: int, temperature: float, grad_accum: int,
                 num_iterations: int):
    """loss_fn(params, frozen: Frozen, mb: GRPOBatch, denom) for `trainers.step.make_train_step`.

    TRL's normalisation over A micro-batches of one generation batch: gradient_accumulation_steps =
    steps_per_generation = A, and dapo's num_items_in_batch = `denom` (loss tokens of the whole batch).
    Metrics are divided by A so the step's sums are means over micro-batches.
    """

    def loss_fn(params, frozen: Frozen, mb: GRPOBatch, denom: jax.Array):
        model = nnx.merge(graphdef, params, frozen.base)
        logps, entropy = completion_logps(model, mb.tokens, positions_BxT=mb.positions, segment_ids_BxT=mb.segment_ids,
                                          completion_ids_BxN=mb.completion_ids, prompt_len=prompt_len,
                                          temperature=temperature)
        old = jax.lax.stop_gradient(logps) if num_iterations == 1 else mb.old_logps
        loss, metrics = gl.grpo_loss(logps, old_logps_BxT=old, ref_logps_BxT=mb.ref_logps,
                                     advantages_B=mb.advantages, mask_BxT=mb.loss_mask, config=loss_cfg,
                                     num_items_in_batch=denom, gradient_accumulation_steps=grad_accum,
                                     steps_per_generation=grad_accum, entropies_BxT=entropy)
        return loss, {k: v / grad_accum for k, v in metrics.items()}

    return loss_fn


def loss_token_count(batch: GRPOBatch) -> jax.Array:
    """Loss tokens of the whole [A, B, N] generation batch (dapo's num_items_in_batch)."""
    return jnp.sum(batch.loss_mask)


# ============================================================================================== steps
@dataclasses.dataclass(frozen=True)
class GRPOSteps:
    """The jitted update and reference functions of a run, compiled once per prompt-length bucket."""

    run: Run
    loss_cfg: gl.GRPOLossConfig
    updates: dict = dataclasses.field(default_factory=dict)
    references: dict = dataclasses.field(default_factory=dict)

    def update(self, prompt_len: int):
        """`step(state, frozen, batch) -> (state, metrics)` for this prompt length."""
        if prompt_len not in self.updates:
            g, run = self.run.config.grpo, self.run
            loss_fn = grpo_loss_fn(run.graphdef, self.loss_cfg, prompt_len=prompt_len,
                                   temperature=float(g.temperature), grad_accum=int(g.grad_accum),
                                   num_iterations=int(g.num_iterations))
            step = make_train_step(loss_fn=loss_fn, optimizer=run.optimizer, schedule=run.schedule,
                                   denominator=loss_token_count)
            self.updates[prompt_len] = jit_train_step(
                step, state_sharding=run.shardings.state, frozen_sharding=run.shardings.frozen,
                batch_sharding=batch_shardings(run.mesh, with_ref=self.loss_cfg.beta != 0),
                metrics_sharding=run.shardings.replicated)
        return self.updates[prompt_len]

    def reference(self, prompt_len: int):
        """Jitted (frozen, batch) -> ref log-probs [A, B, N] of `frozen.reference`."""
        if prompt_len not in self.references:
            run = self.run
            self.references[prompt_len] = make_reference_fn(
                run.graphdef, prompt_len=prompt_len, temperature=float(run.config.grpo.temperature),
                frozen_sharding=run.shardings.frozen, batch_sharding=batch_shardings(run.mesh, with_ref=False))
        return self.references[prompt_len]


def make_reference_fn(graphdef, *, prompt_len: int, temperature: float, frozen_sharding: Frozen,
                      batch_sharding: GRPOBatch):
    """Jitted (frozen, batch) -> ref log-probs [A, B, N] of `frozen.reference`, one micro-batch a time."""

    def ref_logps(frozen, batch):
        model = nnx.merge(graphdef, frozen.reference, frozen.base)

        def one(_, mb):
            return None, completion_logps(model, mb.tokens, positions_BxT=mb.positions, segment_ids_BxT=mb.segment_ids,
                                          completion_ids_BxN=mb.completion_ids, prompt_len=prompt_len,
                                          temperature=temperature)[0]

        return jax.lax.scan(one, None, batch)[1]

    return jax.jit(ref_logps, in_shardings=(frozen_sharding, batch_sharding), out_shardings=batch_sharding.old_logps)


def sampler_for(run: Run):
    """The rollout generator of a run: the paged `RolloutEngine` (continuous batching, per-row budgets, live-length
    attention, shared prompt blocks, KV continuation of tool turns through `RolloutEngine.start`) or the static
    `Sampler`, by `grpo.rollout_engine`. "auto" takes the engine on a one-device mesh, single- and multi-turn alike,
    and the static Sampler on a mesh of several devices (the engine's block pool is not sharded). Both draw the same
    tokens from the same keys, turn after turn (tested), so the choice is speed only."""
    from reasoner.sampling import Sampler
    from reasoner.sampling.rollout_engine import RolloutEngine

    g = run.config.grpo
    choice = str(g.get("rollout_engine", "auto"))
    if choice not in ("auto", "paged", "static"):
        raise ValueError(f"grpo.rollout_engine={choice!r}: expected 'auto', 'paged' or 'static'")
    devices = 1 if run.mesh is None else run.mesh.devices.size
    if choice == "paged" and devices != 1:
        raise ValueError(f"grpo.rollout_engine='paged' needs a one-device mesh (the engine's block pool is not "
                         f"sharded); this run has {devices} devices (use 'auto' or 'static')")
    if choice == "static" or devices != 1:
        return Sampler(run.model(), run.tokenizer, mesh=run.mesh)
    # every row of a step at once; a multi-turn session needs a slot per row and grows the engine's slots to them
    slots = int(g.get("engine_slots", 0)) or int(g.num_generations) * int(g.prompts_per_step)
    return RolloutEngine(run.model(), run.tokenizer, slots=slots)


def sync_sampler(sampler, run: Run, params) -> None:
    """Points the sampler at the current weights (no copy: the merged state shares the arrays)."""
    sampler.params = nnx.state(run.model(params))


# ============================================================================================== one iteration
def generation_step(steps: GRPOSteps, sampler, state: TrainState, *, examples: Sequence[Mapping], reward, tool,
                    seed: int, table_rows: int = 0) -> tuple[TrainState, dict[str, float]]:
    """Rollout -> rewards (host thread) || reference log-probs (device) -> advantages -> num_iterations updates.
    table_rows > 0: the metrics also carry `tables["completions"]`, that many samples with their rewards (the loop
    hands it to the metric writers)."""
    from reasoner.sampling import SamplingParams

    run = steps.run
    c, g, tok = run.config, run.config.grpo, run.tokenizer
    budget = completion_budget(c)
    t0 = time.perf_counter()
    prompt_ids, cut = grpo_eval.encode_prompts(examples, tokenizer=tok, tool=tool,
                                               max_tokens=grpo_eval.check_prompt_limit(c)[0])
    sampling = SamplingParams(max_new_tokens=int(g.max_new_tokens), temperature=float(g.temperature),
                              top_p=float(g.top_p), top_k=int(g.top_k), n=int(g.num_generations), seed=seed,
                              stop=tuple(g.stop), eos_ids=() if g.get("ignore_eos") else None)
    sync_sampler(sampler, run, state.params)
    r = rollout(sampler, prompt_ids=prompt_ids, examples=examples, sampling=sampling, budget=budget,
                tool=tool, max_turns=int(g.max_turns), tool_reserve=int(g.tool_reserve))
    t1 = time.perf_counter()
    future = reward.submit(r.completions, examples=r.examples)  # RewardBatch; total_B NaN = unscorable
    P = prompt_bucket(max(len(p) for p in prompt_ids))
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    # Advantages are not known yet: pack with zeros, fill them in once the rewards arrive.
    host = pack(r, np.zeros(len(r.completion_ids), np.float32), prompt_len=P, budget=budget,
                grad_accum=int(g.grad_accum), pad_id=pad_id, mask_truncated=bool(g.mask_truncated))
    ref_logps = None
    if run.frozen.reference is not None:
        ref_logps = steps.reference(P)(run.frozen, host.on_mesh(run.mesh))
    rewards = future.result()
    t2 = time.perf_counter()
    lengths = np.array([len(x) for x in r.completion_ids])
    adv_cfg = advantage_config(c)
    h = gl.host_advantages(rewards.total_B, num_generations=int(g.num_generations), config=adv_cfg,
                           lengths_B=lengths, mask_BxT=host.loss_mask.reshape(len(lengths), -1))
    stats = gl.reward_stats(h, num_generations=int(g.num_generations), dynamic_sampling=adv_cfg.dynamic_sampling)
    keep = h.keep_B.reshape(host.advantages.shape)[..., None]  # dropped groups leave the loss (all: loss 0)
    host = host.replace(advantages=h.advantages_B.reshape(host.advantages.shape), loss_mask=host.loss_mask * keep)
    batch = host.on_mesh(run.mesh).replace(ref_logps=ref_logps)
    update = steps.update(P)
    metrics = []
    for _ in range(int(g.num_iterations)):
        state, m = update(state, run.frozen, batch)
        metrics.append(m)
    host_metrics = {k: float(np.mean([float(x[k]) for x in metrics])) for k in metrics[-1]}
    t3 = time.perf_counter()
    out = {**host_metrics, **stats, **{f"rewards/{k}": v for k, v in rewards.means().items()},
           "completions/mean_length": float(lengths.mean()), "completions/clipped_ratio": float(r.truncated.mean()),
           "prompts/truncated": float(cut), "rollout_s": t1 - t0, "reward_wait_s": t2 - t1, "update_s": t3 - t2,
           "samples_s": len(lengths) / (t3 - t0), **grpo_eval.failure_metrics(reward), **grpo_eval.tool_metrics(tool)}
    if table_rows > 0:
        from reasoner.metrics.writers import completion_rows

        out["tables"] = {"completions": completion_rows(
            prompts=[e.get("prompt", "") for e in r.examples], completions=r.texts, total_B=rewards.total_B,
            per_function_BxF=rewards.per_function_BxF, names=rewards.names, max_rows=table_rows)}
    return state, out


# ============================================================================================== train
@dataclasses.dataclass(frozen=True)
class GRPOResult:
    """The loop's result and the run it trained (`model()`: the trained policy, adapters included under LoRA)."""

    loop: LoopResult
    run: Run

    state = property(lambda self: self.loop.state)
    history = property(lambda self: self.loop.history)
    eval_history = property(lambda self: self.loop.eval_history)
    resumed_from = property(lambda self: self.loop.resumed_from)
    last_metrics = property(lambda self: self.loop.last_metrics)
    preempted = property(lambda self: self.loop.preempted)

    def model(self):
        return self.run.model(self.state.params)


def build_grpo(config, *, model=None, tokenizer=None, mesh=None) -> GRPOSteps:
    """The run (policy, reference when `grpo.beta` > 0, optimizer, state) and its jitted steps."""
    check_config(config)
    run = setup(config, total_steps=int(config.train.num_steps) * int(config.grpo.num_iterations), model=model,
                mesh=mesh, tokenizer=tokenizer)
    loss_cfg = loss_config(config)
    return GRPOSteps(run=with_reference(run) if loss_cfg.beta else run, loss_cfg=loss_cfg)


def train(config, *, workdir, model=None, tokenizer=None, examples=None, eval_examples=None, reward=None,
          tool=None, mesh=None, base_model: str | None = None, progress: bool = True) -> GRPOResult:
    """Runs (or resumes) GRPO for `config.train.num_steps` generation steps; see the module docstring.

    base_model: the name or directory `model` was loaded from (e.g. the SFT export), recorded as a LoRA export's
    `base_model_name_or_path`; without `model`, `config.model.name` is recorded instead."""
    from reasoner.checkpoint import fingerprint
    from reasoner.rewards import CompositeReward

    d = config.data
    if examples is None:  # from config.data, and the evaluation split with it
        examples = load_examples(d, split="train")
        if eval_examples is None and d.get("eval_split"):
            eval_examples = load_examples(d, split=d.eval_split)
    examples = [as_example(e, task=d.task, dataset=d.dataset) for e in examples]
    eval_examples = [as_example(e, task=d.task, dataset=d.dataset) for e in eval_examples or []]
    steps = build_grpo(config, model=model, tokenizer=tokenizer, mesh=mesh)
    run = steps.run
    sampler = sampler_for(run)
    own_reward, own_tool = reward is None, tool is None
    reward = reward or CompositeReward.from_config([dict(s) for s in config.rewards])
    tool = tool if tool is not None else tool_from_config(config, run.tokenizer)
    settings = grpo_eval.EvalSettings.from_config(config)
    examples = grpo_eval.fit_prompts(examples, config=config, tokenizer=run.tokenizer, tool=tool)
    validating = bool(eval_examples) and settings.every > 0
    if validating:  # its reward names and best metric are checked only when the pass runs
        settings.metric_names(reward.names)
        eval_examples = grpo_eval.fit_prompts(eval_examples, config=config, tokenizer=run.tokenizer, tool=tool,
                                              what="validation")
        validating = bool(eval_examples)
    scorer = grpo_eval.eval_reward(reward, settings) if validating else None
    stream = PromptStream(len(examples), int(config.grpo.prompts_per_step), int(config.seed),
                          total_steps=int(config.train.num_steps))

    def update(state, indices):
        every = int(config.log.completions_every) if "log" in config else 0
        return generation_step(steps, sampler, state, examples=[examples[i] for i in indices], reward=reward,
                               tool=tool, seed=grpo_eval.seed_for(config.seed, stream.step),
                               table_rows=int(config.log.completions_rows)
                               if every > 0 and stream.step % every == 0 else 0)

    def eval_fn(state):
        return grpo_eval.evaluate(run, sampler, state, examples=eval_examples, reward=scorer, settings=settings,
                                  tool=tool, seed=grpo_eval.seed_for(config.seed, stream.step, salt=1))

    def close():
        if scorer is not None and scorer is not reward:
            scorer.close()
        if own_reward:
            reward.close()
        if own_tool and tool is not None:
            tool.close()

    meta = {"trainer": "grpo", "fingerprint": fingerprint(run.state)}
    loop = run_loop(run, source=stream, update=update, workdir=pathlib.Path(workdir), trainer="grpo", meta=meta,
                    eval_fn=eval_fn if validating else None, eval_every=settings.every,
                    best_metric=(settings.best_metric or None) if validating else None, best_mode="max",
                    progress=progress, on_close=close)
    result = GRPOResult(loop=loop, run=run)
    if config.get("export_dir") and not loop.preempted:
        from trainers.run import export_run

        params = grpo_eval.export_params(run, result, workdir=workdir, settings=settings, meta=meta)
        # a model passed in is not what config.model.name holds: its base is the caller's `base_model` or none
        export_run(run, params, config.export_dir, base_model=(base_model or "") if model is not None else None)
    return result
