"""Config sections every training config shares: run header, model, LoRA, optimizer, train loop, metric writers.

    c = common.run_config("sft", seed=0)              # trainer, seed, mesh, model, lora (rank 0), export_dir, log
    c.optim = common.optim(name="adam", lr=2e-5, schedule="cosine", warmup_ratio=0.03)
    c.train = common.train(batch_size=4, num_epochs=3, checkpoint_every=200)

Each function returns a fresh ConfigDict holding every field its consumer reads, with the given values replacing
the defaults; an unknown field is an error (a misspelt setting is never silently ignored).
"""

import ml_collections

RANDOM_MODEL = dict(family="llama", vocab_size=49152, hidden_size=64, intermediate_size=128, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=16, tie_embeddings=True, rms_norm_eps=1e-5)


def _section(defaults: dict, changes: dict, name: str, optional: tuple[str, ...] = ()) -> ml_collections.ConfigDict:
    known = set(defaults) | set(optional)
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ValueError(f"configs.common.{name}: unknown fields {unknown}; expected some of {sorted(known)}")
    return ml_collections.ConfigDict({**defaults, **changes})


def model(**changes) -> ml_collections.ConfigDict:
    """`config.model`: a preset / GGUF / HF directory `name` ("" = random init from `random`), compute dtype, remat."""
    out = _section(dict(name="smollm2-135m-instruct",  # preset, .gguf file or HF directory; "" = random init
                        tokenizer="",  # "" = the model's own
                        dtype="float32",  # compute dtype; master weights and optimizer state stay float32
                        remat=False, seed=0), changes, "model")
    out.random = ml_collections.ConfigDict(dict(RANDOM_MODEL))  # the random-init dims (`trainers.run.build_model`)
    return out


def lora(**changes) -> ml_collections.ConfigDict:
    """`config.lora`: rank 0 = full fine-tuning; rank > 0 trains only adapters on the projections matching
    `pattern`, initialised from `seed` (`trainers.run.add_lora`; dropout must be 0). quantize_base "nf4" | "int8"
    (QLoRA, needs rank > 0) stores the frozen base's projection kernels quantized (`reasoner.models.quant`)."""
    return _section(dict(rank=0, alpha=16.0, pattern=r"(attn|mlp)\.\w+_proj", dropout=0.0, seed=0,
                         quantize_base="none"), changes, "lora")


def optim(**changes) -> ml_collections.ConfigDict:
    """`config.optim` (`trainers.optim`): warm-up over `warmup_steps` optimizer steps when > 0, else over
    ceil(warmup_ratio x total steps)."""
    return _section(dict(name="adam", lr=1e-5, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0, max_grad_norm=1.0,
                         schedule="cosine", warmup_ratio=0.0, warmup_steps=0, min_lr_ratio=0.0), changes, "optim")


def grpo(**changes) -> ml_collections.ConfigDict:
    """`config.grpo` (`trainers.grpo`; TRL 1.16 GRPOConfig defaults where TRL has the setting). tool "scratchpad"
    (with max_turns > 1): multi-turn SMT scratchpad rollouts (`reasoner.agents.scratchpad.ScratchpadTool`); tool
    "python": the functions `tools` names, as tools (`reasoner.agents.environment.python_tools`)."""
    return _section(dict(num_generations=8, prompts_per_step=1, max_new_tokens=2048, max_completion_tokens=0,
                         temperature=1.0, top_p=1.0, top_k=0, stop=(), loss_type="dapo", beta=0.0, epsilon_low=0.2,
                         epsilon_high=0.2, delta=0.0, use_bias_correction_kl=True, scale_rewards="group",
                         num_iterations=1, mask_truncated=False, grad_accum=1, max_turns=1, tool="",
                         tool_reserve=256,
                         # tool "python": grpo.tools ["package.module:function", ...] served as tools
                         # (reasoner.agents.tools): run in the verifier pool ("pool") or trusted threads ("inprocess"),
                         # each call within tool_timeout_s; tool_finish names the tool that ends an episode
                         tools=(), tool_mode="pool", tool_timeout_s=10.0, tool_finish="", tool_workers=2,
                         # variants (trainers.grpo_loss): GSPO ratio, RLOO / REINFORCE++ advantages, DAPO options
                         importance_sampling_level="token", advantage_estimator="grpo", normalize_advantages=False,
                         dynamic_sampling=False, overlong_max_len=0, overlong_cache=0,
                         # prompt length (trainers.grpo_eval): 0 = no limit; "truncate_left" (TRL) | "drop"
                         max_prompt_tokens=0, prompt_overflow="truncate_left",
                         # rollouts (trainers.grpo.sampler_for): "auto" = the paged rollout engine on one device
                         # (single- and multi-turn), the static sampler on several; "paged" | "static" force one;
                         # engine_slots 0 = every row of the step at once
                         rollout_engine="auto", engine_slots=0), changes, "grpo")


def train(**changes) -> ml_collections.ConfigDict:
    """`config.train` (`trainers.loop.run_loop`; batch_size / grad_accum / num_epochs for SFT and DPO, num_steps /
    eval_every and the validation settings eval_temperature, eval_top_p, eval_batch_prompts, eval_rewards,
    best_metric, export_best for GRPO: `trainers.grpo_eval`)."""
    return _section(dict(checkpoint_every=200, keep_checkpoints=3, async_checkpoint=True, max_nonfinite_steps=5),
                    changes, "train", optional=("batch_size", "grad_accum", "num_epochs", "num_steps", "eval_every",
                                                "eval_temperature", "eval_top_p", "eval_batch_prompts",
                                                "eval_rewards", "best_metric", "export_best"))


# GRPO's validation settings (`trainers.grpo_eval`): off by default, greedy, every reward function, no best/.
GRPO_EVAL = dict(eval_every=0, eval_temperature=0.0, eval_top_p=1.0, eval_batch_prompts=8, eval_rewards=(),
                 best_metric="", export_best=False)


def grpo_train(**changes) -> ml_collections.ConfigDict:
    """`config.train` of a GRPO config: `train` with every validation setting present (so each one can be set
    from the command line), defaults GRPO_EVAL."""
    return train(**{**GRPO_EVAL, **changes})


def log(**changes) -> ml_collections.ConfigDict:
    """`config.log` (`reasoner.metrics.writers.open_writers`): where metrics go besides `workdir/metrics.jsonl`
    (always written). writers: a comma list of jsonl, tensorboard (`workdir/tensorboard`), wandb (`workdir/wandb`;
    wandb_mode "" = $WANDB_MODE, else offline), trackio (trackio's local store, $TRACKIO_DIR; project
    `trackio_project`, else `wandb_project`; the run is named after the workdir). completions_every: GRPO logs a
    table of its first `completions_rows` samples (prompt head, completion, rewards) every that many steps (0 =
    never)."""
    return _section(dict(writers="jsonl", completions_every=0, completions_rows=4, wandb_project="reasoner",
                         wandb_name="", wandb_mode="", trackio_project=""), changes, "log")


def run_config(trainer: str, *, seed: int = 0) -> ml_collections.ConfigDict:
    """The header of a trainer's config: `trainer`, seed, mesh, model, LoRA (rank 0, seeded like the run), export."""
    c = ml_collections.ConfigDict()
    c.trainer = trainer  # what `reasoner train` starts with this config
    c.seed = seed
    c.mesh = "fsdp=-1"  # "[name=size,...]" over data, fsdp, tensor; -1 takes the remaining devices
    c.model = model()
    c.lora = lora(seed=seed)
    c.export_dir = ""  # "" = no export; else a Hugging Face checkpoint of the trained model
    c.log = log()
    return c


def update(c: ml_collections.ConfigDict, changes: dict) -> ml_collections.ConfigDict:
    """`c` with `changes` ({"section.field": value}) applied in place; an unknown key is an error naming it."""
    for dotted, value in changes.items():
        *path, field = dotted.split(".")
        node = c
        for key in path:
            node = node[key]
        if field not in node:
            raise KeyError(f"configs.common.update: {dotted!r} is not a config field")
        node[field] = value
    return c


def tiny(c: ml_collections.ConfigDict, changes: dict | None = None) -> ml_collections.ConfigDict:
    """The `tiny` variant: the random-init 2-layer model with SmolLM2's tokenizer (tests, smoke runs), plus
    `changes` ({"section.field": value})."""
    return update(c, {"model.name": "", "model.tokenizer": "smollm2-135m-instruct", **(changes or {})})


def large_model(c: ml_collections.ConfigDict, changes: dict | None = None) -> ml_collections.ConfigDict:
    """Paper-scale compute: bfloat16 activations over float32 master weights, rematerialised layers; + `changes`."""
    return update(c, {"model.dtype": "bfloat16", "model.remat": True, **(changes or {})})
