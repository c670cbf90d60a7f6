"""`reasoner bench grpo --json`: one GRPO iteration, ours vs TRL's GRPOTrainer, on SmolLM2-135M-Instruct.

One iteration = 4 prompts x G 4 completions of exactly 128 new tokens (EOS suppressed on both sides, so both
generate the same amount), reward, advantages, one optimizer update. Both sides: the same weights (ours dequantized
from the GGUF, TRL from our safetensors export of exactly those weights), float32, temperature 1, Adam(W) lr 1e-6
with clipping at 1.0, TRL's default loss (dapo, beta 0: no reference model), the same Python reward function.
Ours is `trainers.grpo.generation_step` (rollouts on the paged `RolloutEngine`, host reward thread, jitted
step); theirs is `GRPOTrainer.train` with transformers generation. Reported: completions per second over the
median of the measured iterations (after one warm-up iteration each: compilation on our side), and the ratio.
TRL runs in child processes, under glibc's default malloc settings and under ours (`ratio_same_env`; see
`baseline_child`). `rollout_static_s` is our rollout phase before the engine (the same iterations on the static
sampler, `grpo.rollout_engine=static`), `ours_phase_s.rollout_s` after it; with every row generating exactly
`--new-tokens` tokens, the engine's gain here is its live-length attention only (no row finishes early).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time

from reasoner.benchmarks.train_common import add_baseline_args

PROMPTS = [
    "Prove that the sum of two even numbers is even.",
    "Facts: Anne is red. If someone is red then they are big. Prove: Anne is big.",
    "Explain in three steps why the sky looks blue.",
    "List the prime numbers below thirty and say how you found them.",
]


def register(subparsers) -> None:
    parser = subparsers.add_parser("grpo", help="one GRPO iteration: ours vs TRL GRPOTrainer")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="measured iterations per side (after one warm-up)")
    add_baseline_args(parser)
    parser.set_defaults(func=run)


def distinct_word_share(texts) -> list[float]:
    """The benchmark's reward: distinct words / words of each completion (cheap, deterministic, host side)."""
    out = []
    for t in texts:
        words = t.split()
        out.append(len(set(words)) / len(words) if words else 0.0)
    return out


def our_config(*, prompts: int, generations: int, new_tokens: int, steps: int, rollout_engine: str = "auto"):
    from reasoner.config import load_config

    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "configs" / "grpo_astar.py"
    c = load_config(f"{path}:smollm2", [
        f"--config.grpo.num_generations={generations}", f"--config.grpo.prompts_per_step={prompts}",
        f"--config.grpo.max_new_tokens={new_tokens}", "--config.grpo.beta=0.0", "--config.grpo.temperature=1.0",
        f"--config.train.num_steps={steps + 1}", "--config.optim.lr=1e-6", "--config.mesh=fsdp=-1",
        f"--config.grpo.rollout_engine={rollout_engine}"])
    c.grpo.ignore_eos = True
    return c


def time_ours(model, tokenizer, *, prompts: int, generations: int, new_tokens: int, steps: int,
              rollout_engine: str = "auto"):
    """(seconds per measured iteration, per-iteration phase seconds: rollout, reward wait, update)."""
    from reasoner.rewards import CompositeReward, WeightedReward, completion_text
    from trainers import grpo

    cfg = our_config(prompts=prompts, generations=generations, new_tokens=new_tokens, steps=steps,
                     rollout_engine=rollout_engine)
    reward = CompositeReward([WeightedReward(
        "distinct", lambda cs, *, examples: distinct_word_share([completion_text(c) for c in cs]))])
    built = grpo.build_grpo(cfg, model=model, tokenizer=tokenizer)
    sampler = grpo.sampler_for(built.run)
    examples = [{"prompt": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]} for i in range(prompts)]
    state = built.run.state
    times, phases = [], []
    for i in range(steps + 1):
        t = time.perf_counter()
        state, m = grpo.generation_step(built, sampler, state, examples=examples, reward=reward, tool=None, seed=i)
        times.append(time.perf_counter() - t)
        phases.append({k: m[k] for k in ("rollout_s", "reward_wait_s", "update_s")})
        if m["completions/mean_length"] != new_tokens:
            raise RuntimeError(f"ours generated {m['completions/mean_length']} tokens on average, not {new_tokens}")
    reward.close()
    return times[1:], phases[1:]


def baseline(request: dict) -> dict:
    """TRL GRPOTrainer with transformers generation on the same prompts and reward; runs in `baseline_child`."""
    import tempfile

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from reasoner.benchmarks import baseline_child
    from reasoner.benchmarks.train_common import step_timer_callback, trl_common_args
    from trainers.run import load_tokenizer_for

    import ml_collections

    tokenizer = load_tokenizer_for(ml_collections.ConfigDict(dict(name="smollm2-135m-instruct", tokenizer="")))
    prompts, generations, steps = request["prompts"], request["generations"], request["steps"]
    rows = [{"prompt": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]} for i in range(prompts)]
    dataset = Dataset.from_list(rows * (steps + 1))

    def reward(completions, **kwargs):
        from reasoner.rewards import completion_text

        return distinct_word_share([completion_text(c) for c in completions])

    with tempfile.TemporaryDirectory() as tmp:
        args = trl_common_args(f"{tmp}/trl", batch=prompts * generations, steps=steps, remat=False)
        args.update(num_generations=generations, max_completion_length=request["new_tokens"], temperature=1.0,
                    beta=0.0, generation_kwargs={"min_new_tokens": request["new_tokens"]}, shuffle_dataset=False)
        timer = step_timer_callback()
        trainer = GRPOTrainer(model=baseline_child.load_model(request["model_dir"]), reward_funcs=reward,
                              args=GRPOConfig(**args), train_dataset=dataset, processing_class=tokenizer,
                              callbacks=[timer])
        trainer.train()
    return {"step_s": timer.times[1:]}


def run(args) -> int:
    import jax

    from reasoner.benchmarks import train_common as tc
    from trainers.run import load_tokenizer_for

    import ml_collections

    model, _ = tc.load_ours(remat=False)
    tokenizer = load_tokenizer_for(ml_collections.ConfigDict(dict(name="smollm2-135m-instruct", tokenizer="")))
    kw = dict(prompts=args.prompts, generations=args.generations, new_tokens=args.new_tokens, steps=args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        # Export before our trainer donates the parameter buffers.
        request = {"benchmark": "grpo", "model_dir": tc.export_weights(model, f"{tmp}/hf"), **kw}
        baselines = tc.measure_baselines(args, request)
    # The rollout phase before the engine: the same iterations with the static sampler (weights copied first: our
    # trainer donates the parameter buffers).
    import jax.numpy as jnp
    from flax import nnx

    graphdef, weights = nnx.split(model)
    _, static_phases = time_ours(nnx.merge(graphdef, jax.tree.map(jnp.copy, weights)), tokenizer,
                                 rollout_engine="static", **kw)
    ours_times, phases = time_ours(model, tokenizer, **kw)
    out = tc.summary(ours_times=ours_times, baselines=baselines, units_per_step=args.prompts * args.generations,
                     unit="samples", extra={
                         "ours_phase_s": {k: round(statistics.median(p[k] for p in phases), 2) for k in phases[0]},
                         "rollout_static_s": round(statistics.median(p["rollout_s"] for p in static_phases), 2),
                         "rollout_ratio_static_over_engine": round(
                             statistics.median(p["rollout_s"] for p in static_phases)
                             / statistics.median(p["rollout_s"] for p in phases), 3),
                         "samples_per_step": args.prompts * args.generations, "new_tokens": args.new_tokens,
                         "device": jax.devices()[0].device_kind})
    out = tc.add_roofline(out, model.cfg, ours_times=ours_times, **rollout_work(
        model.cfg, tokenizer, prompts=args.prompts, generations=args.generations, new_tokens=args.new_tokens))
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


def rollout_work(cfg, tokenizer, *, prompts: int, generations: int, new_tokens: int) -> dict:
    """The iteration's model FLOPs for `train_common.add_roofline`: the update trains prompts x G rows of
    prompt + new tokens; the rollout prefills each prompt once and decodes `new_tokens` steps of prompts x G
    rows (decode GEMMs have m = rows, so their shapes enter the measured GEMM rate as they are)."""
    from reasoner.benchmarks.train_common import step_gemms
    from reasoner.tokenization import chat_ids

    lengths = [len(chat_ids(tokenizer, [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]))
               for i in range(prompts)]
    prompt_len = round(sum(lengths) / len(lengths))
    rows = prompts * generations
    decode = [(rows, k, n, c * new_tokens) for _, k, n, c in step_gemms(cfg, tokens=rows, backward=False)]
    prefill = step_gemms(cfg, tokens=sum(lengths), backward=False)
    # decode attention: each new token reads on average prompt + new/2 cached positions
    decode_attn = 2 * 2 * rows * cfg.num_heads * cfg.head_dim * (prompt_len + new_tokens / 2) * cfg.num_layers
    return dict(rows=rows, seq_len=prompt_len + new_tokens, extra_gemms=decode + prefill,
                extra_flops=decode_attn * new_tokens)
