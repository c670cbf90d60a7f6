"""GRPO with A*-informed process rewards (A* post-training, §3.2 Eq. 7, App. B.3).

Paper settings: one epoch, 16 completions per group, KL coefficient beta 0.04, Adam (b1 0.9, b2 0.999) with lr 1e-6,
greedy decoding at evaluation; max 1024 new tokens on ProofWriter, 2048 on DeepRD. The policy starts from the SFT
checkpoint (`model.name` = its exported directory). The paper does not name TRL's loss type or clipping: TRL 1.16
defaults (dapo, epsilon 0.2, scale_rewards "group") are kept. `rewards` lists registry specs
(`reasoner.rewards.CompositeReward.from_config`); the four rewards are correctness, step_count, astar_dependency,
astar_true (`reasoner.tasks.astar.reward_specs`). They are scored ON DEVICE by default (option `device: True` of the
"astar" reward: completions parsed on the host, the whole batch scored by the jitted A* kernel in one call,
`reasoner.rewards.astar_device`); set a spec's `options.device` to False for the host `ProblemScorer` path.

Variants: None / "smollm2" (the embedded SmolLM2-135M-Instruct on DeepRD, CPU-sized), "llama1b" / "llama3b"
(paper scale, bf16 + remat, set model.name), "proofwriter" (1024 new tokens, ProofWriter verbalizer), one variant
per reward: "correctness", "step_count", "astar_dependency", "astar_true"; "tiny" (random 2-layer model, tests and
smoke runs).
"""

import ml_collections

from configs import common

REWARDS = ("correctness", "step_count", "astar_dependency", "astar_true")


def astar_reward(name: str, dataset: str, *, device: bool = True, cost: str = "max") -> list[dict]:
    """Registry spec of one A* reward; device=True scores the batch with the jitted kernel (one call per step);
    cost: "max" (proof depth, Eq. 2) or "sum" (number of vertices, App. A.2) for the reward's A* weights."""
    return [{"name": "astar", "as": name, "weight": 1.0, "timeout_s": 60.0,
             "options": {"reward": name, "dataset": dataset, "device": device, "cost": cost}}]


def base_config() -> ml_collections.ConfigDict:
    c = common.run_config("grpo", seed=0)
    c.data = ml_collections.ConfigDict(dict(
        source="jsonl", path="data/deeprd_records", name="", tfds_dir="", task="astar", dataset="deeprd",
        eval_split="validation", limit=0, hf_path="", hf_split="train"))
    c.grpo = common.grpo(num_generations=16, beta=0.04)
    c.rewards = astar_reward("astar_dependency", "deeprd")
    c.optim = common.optim(name="adam", lr=1e-6, schedule="constant")
    c.train = common.train(num_steps=200, checkpoint_every=20, eval_every=50)
    return c


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = base_config()
    if variant in (None, "smollm2"):
        return common.update(c, {"grpo.num_generations": 4, "grpo.prompts_per_step": 2, "grpo.max_new_tokens": 256,
                                 "train.num_steps": 20, "train.eval_every": 10})
    if variant in ("llama1b", "llama3b"):
        return common.large_model(c, {"model.name": f"checkpoints/Llama-3.2-{variant[-2:].upper()}-Instruct-sft"})
    if variant == "proofwriter":
        c.data.dataset = "proofwriter"
        c.data.path = "data/proofwriter_records"
        c.grpo.max_new_tokens = 1024
        c.rewards = astar_reward("astar_true", "proofwriter")
        return c
    if variant in REWARDS:
        c.rewards = astar_reward(variant, "deeprd")
        return c
    if variant == "cost_sum":  # the A* rewards under the sum cost (App. A.2)
        c.rewards = astar_reward("astar_dependency", "deeprd", cost="sum")
        return c
    if variant == "tiny":
        return common.tiny(c, {"grpo.num_generations": 4, "grpo.prompts_per_step": 2, "grpo.max_new_tokens": 16,
                               "optim.lr": 1e-3, "train.num_steps": 2, "train.checkpoint_every": 1,
                               "train.eval_every": 0})
    raise ValueError(f"unknown variant {variant!r}; expected one of None, smollm2, llama1b, llama3b, proofwriter, "
                     f"{', '.join(REWARDS)}, cost_sum, tiny")
