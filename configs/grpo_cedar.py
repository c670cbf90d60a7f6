"""CEDAR-GRPO (Table 7): GRPO with LoRA and a verifier correctness reward on `<think>/<answer>` completions.

Paper settings: group size G 4, per-device batch 4 prompts, KL beta 0.01, clip epsilon 0.2, AdamW (b1 0.9, b2 0.99,
weight decay 0.1) lr 1e-5 with a cosine schedule and 2 warm-up steps, max grad norm 0.1, rollout temperature 0.7,
LoRA rank 64 alpha 64 on q/k/v/o/gate/up/down projections, max completion length 2048, 5 epochs, evaluation and
save every 128 steps. The paper's reward is (r_cor + r_cov + r_dir) / 3 with LLM judges for coverage and
directionality (gpt-oss-120b, unreachable here): the default `rewards` is its correctness term alone (Cor-GRPO),
with CEDAR Table 8's verifiers in the registry (exact_match / integer_match / set_match / code execution); the
ablation variants below add the judged terms (`judged_coverage`, `judged_directionality`) and route correctness by
source (`cedar_correctness`). The paper's 4-bit NF4 quantisation is not done.

Data: `data.path` (data/cedar) holds the App. A.1 mixture as `reasoner cedar data --data-dir ../shared/data --out
data/cedar` writes it (train.jsonl / validation.jsonl, one row per example with its source, App. B prompt and gold
fields; `--scale` multiplies the paper's per-source counts); use an ablation variant (cedar_correctness routes by
source) rather than the default exact-match reward on it. `reasoner demo cedar` runs the whole recipe on CPU.

Variants: None / "smollm2" (embedded SmolLM2-135M-Instruct, CPU-sized), "paper" (paper lengths, bf16 + remat; set
model.name), "tiny" (random 2-layer model, tests and smoke runs); the reward ablations of Sec. 5.3 on the smollm2
sizes: "cor" (Cor-GRPO), "cor_cov", "cor_dir", "cor_cov_dir" (CEDAR-GRPO, R = (r_cor + r_cov + r_dir) / 3), with
the judged terms from `reasoner.rewards.judged`.
"""

import ml_collections

from configs import common


# (lambda_cor, lambda_cov, lambda_dir) of the paper's reward ablations (Sec. 5.3): the included terms share the
# weight equally, an omitted term has weight 0 (and is left out, so no judge is called for it).
ABLATIONS = {"cor": (1.0, 0.0, 0.0), "cor_cov": (0.5, 0.5, 0.0), "cor_dir": (0.5, 0.0, 0.5),
             "cor_cov_dir": (1 / 3, 1 / 3, 1 / 3)}
# The judge of the ablation variants: the embedded SmolLM2 in-process, greedy (the paper's gpt-oss-120b is out of
# reach here); point `options.judge` at {"endpoint": URL, "model": NAME} for a served judge. One cache for both.
JUDGE = {"sampler": "smollm2-135m-instruct", "max_new_tokens": 512, "batch_size": 8}
JUDGE_CACHE = "data/cedar/judge_cache.jsonl"


def cedar_rewards(l_cor: float, l_cov: float, l_dir: float, *, judge=None, cache: str = JUDGE_CACHE) -> list:
    """`config.rewards` for R = l_cor r_cor + l_cov r_cov + l_dir r_dir (terms with weight 0 left out); each
    term is logged under its own name (correctness, coverage, directionality)."""
    judge = dict(JUDGE if judge is None else judge)
    # Correctness routed by each example's source (Table 8 verifier + gold preprocessing; code in the sandbox).
    specs = [{"name": "cedar_correctness", "as": "correctness", "weight": l_cor, "timeout_s": 120.0, "options": {}}]
    for name, alias, weight in (("judged_coverage", "coverage", l_cov), ("judged_directionality", "directionality",
                                                                        l_dir)):
        if weight:
            specs.append({"name": name, "as": alias, "weight": weight, "timeout_s": 600.0,
                          "options": {"judge": judge, "cache": cache}})
    return specs


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = common.run_config("grpo", seed=42)
    c.lora.update(rank=64, alpha=64.0)
    c.data = ml_collections.ConfigDict(dict(
        source="jsonl", path="data/cedar", name="", tfds_dir="", task="chat", dataset="", eval_split="validation",
        limit=0, hf_path="", hf_split="train"))
    c.grpo = common.grpo(num_generations=4, prompts_per_step=4, temperature=0.7, beta=0.01)
    c.rewards = [{"name": "exact_match", "as": "correctness", "weight": 1.0, "timeout_s": 30.0,
                  "options": {"answer_key": "answer", "normalize": "lower_ws"}}]
    c.optim = common.optim(name="adamw", lr=1e-5, b2=0.99, weight_decay=0.1, max_grad_norm=0.1, schedule="cosine")
    c.train = common.train(num_steps=2400, checkpoint_every=128, eval_every=128)
    if variant in ABLATIONS:
        c.rewards = cedar_rewards(*ABLATIONS[variant])
        variant = None
    if variant in (None, "smollm2"):
        return common.update(c, {"lora.rank": 16, "lora.alpha": 16.0, "grpo.max_new_tokens": 256,
                                 "train.num_steps": 20, "train.eval_every": 10, "train.checkpoint_every": 10})
    if variant == "paper":
        return common.large_model(c)
    if variant == "tiny":
        return common.tiny(c, {"lora.rank": 4, "lora.alpha": 4.0, "grpo.prompts_per_step": 2,
                               "grpo.max_new_tokens": 16, "optim.lr": 1e-3, "optim.max_grad_norm": 1.0,
                               "train.num_steps": 2, "train.checkpoint_every": 1, "train.eval_every": 0})
    raise ValueError(f"unknown variant {variant!r}; expected one of None, smollm2, paper, tiny, {', '.join(ABLATIONS)}")
