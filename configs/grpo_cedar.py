"""CEDAR-GRPO: GRPO with LoRA on `<think>/<answer>` completions, R = l_cor r_cor + l_cov r_cov + l_dir r_dir.

Paper settings (Table 7, shared by the four backbones; `paper` below is exactly this table): AdamW (b1 0.9, b2
0.99, weight decay 0.1), lr 1e-5, cosine schedule, 2 warm-up steps, max grad norm 0.1; NF4 base + LoRA rank 64,
alpha 64 on q/k/v/o/gate/up/down; group size G 4, per-device batch 4, gradient accumulation 1, rollout temperature
0.7, KL beta 0.01, clip epsilon 0.2; max prompt 2048, max completion 2048 (max sequence 4096 = their sum); 5
epochs; evaluation / save every 128 steps. Checkpoint selection (App. C, Table 12 and the authors' code): one
sampled completion per validation example (T 0.7, top-p 0.95), the checkpoint with the highest mean validation
correctness is kept (`best/`) and exported.

Our reading of "per-device batch 4" with G 4: 4 prompts x 4 completions per step, so 5 epochs of the 1,920
training prompts are 5 x 1920 / 4 = 2,400 steps. TRL counts that batch in completions (1 prompt per step, 9,600
steps), but the paper's own Fig. 2 trace places step 534 in epoch 2 and step 1,018 in epoch 3, i.e. 480 steps
per epoch, and its SFT ablation (Table 12, same split and batch) states 2,400 steps for 5 epochs.

Rewards: correctness is `cedar_correctness` (Table 8's verifier routed by each example's source, with its gold
preprocessing; code answers in the sandbox; the FIRST `<answer>` span, `reasoner.tasks.cedar_verify`). The judged
terms (`judged_coverage`, `judged_directionality`, `reasoner.rewards.judged`) need a judge: the paper's is
gpt-oss-120b at temperature 0 behind an endpoint (`PAPER_JUDGE`; point it at your server, e.g. vLLM); the CPU
variants use the embedded SmolLM2 in-process (`JUDGE`). A failed judge call scores 0 and is counted
(`judge/failed`).

Data: `data.path` (data/cedar) holds the App. A.1 mixture as `reasoner cedar data --data-dir ../shared/data --out
data/cedar` writes it (train.jsonl / validation.jsonl, one row per example with its source, App. B prompt and gold
fields; `--scale` multiplies the paper's per-source counts). `reasoner demo cedar` runs the whole recipe on CPU.

Variants:
  None / "smollm2"  Cor-GRPO (correctness only) on the embedded SmolLM2-135M-Instruct, CPU-sized (no warm-up:
                    its 20 steps are a smoke run)
  "cor", "cor_cov", "cor_dir", "cor_cov_dir"  the reward ablations of Sec. 5.3 at the smollm2 sizes
                    (cor_cov_dir = CEDAR-GRPO, R = (r_cor + r_cov + r_dir) / 3; two terms: 0.5 each)
  "paper"           Table 7 with CEDAR-GRPO's reward and the paper's judge endpoint (set model.name to one of the
                    paper's backbones as an HF directory; default checkpoints/Qwen3-4B)
  "paper_cor", "paper_cor_cov", "paper_cor_dir", "paper_cor_cov_dir"  Table 7 with an ablation's reward
  "tiny"            a random 2-layer model (tests and smoke runs)
"""

import ml_collections

from configs import common

# (lambda_cor, lambda_cov, lambda_dir) of the paper's reward ablations (Sec. 5.3): the included terms share the
# weight equally, an omitted term has weight 0 (and is left out, so no judge is called for it).
ABLATIONS = {"cor": (1.0, 0.0, 0.0), "cor_cov": (0.5, 0.5, 0.0), "cor_dir": (0.5, 0.0, 0.5),
             "cor_cov_dir": (1 / 3, 1 / 3, 1 / 3)}
# The judge of the CPU variants: the embedded SmolLM2 in-process, greedy; {"endpoint": URL, "model": NAME} for a
# served judge. One cache for both judged terms.
JUDGE = {"sampler": "smollm2-135m-instruct", "max_new_tokens": 512, "batch_size": 8}
# The paper's judge (Sec. 4, App. D: gpt-oss-120b, temperature 0; the authors' code: 60 s timeout, 2 retries,
# up to 8,192 completion tokens) behind an OpenAI-compatible server.
PAPER_JUDGE = {"endpoint": "http://127.0.0.1:8000/v1", "model": "openai/gpt-oss-120b", "timeout_s": 60.0,
               "retries": 2, "max_tokens": 8192}
JUDGE_CACHE = "data/cedar/judge_cache.jsonl"
# Table 7 ("Training Epochs 5") over the App. A.1 mixture's 1,920 training prompts, 4 prompts per step.
PAPER_TRAIN_PROMPTS, PAPER_EPOCHS, PAPER_PROMPTS_PER_STEP = 1920, 5, 4


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


def paper(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Table 7 on `c` (every value of the table; `tests/test_cedar_paper_config.py` pins them)."""
    c.lora.update(rank=64, alpha=64.0, quantize_base="nf4", pattern=r"(attn|mlp)\.(q|k|v|o|gate|up|down)_proj")
    c.grpo.update(num_generations=4, prompts_per_step=PAPER_PROMPTS_PER_STEP, grad_accum=1, temperature=0.7,
                  beta=0.01, epsilon_low=0.2, epsilon_high=0.2, max_prompt_tokens=2048, max_new_tokens=2048,
                  max_completion_tokens=0, prompt_overflow="truncate_left")
    c.optim.update(name="adamw", lr=1e-5, b1=0.9, b2=0.99, weight_decay=0.1, max_grad_norm=0.1, schedule="cosine",
                   warmup_steps=2, warmup_ratio=0.0, min_lr_ratio=0.0)
    c.train.update(num_steps=PAPER_EPOCHS * PAPER_TRAIN_PROMPTS // PAPER_PROMPTS_PER_STEP, eval_every=128,
                   checkpoint_every=128, eval_temperature=0.7, eval_top_p=0.95, eval_rewards=("correctness",),
                   best_metric="eval/correctness", export_best=True)
    c.model.name = "checkpoints/Qwen3-4B"
    return common.large_model(c)


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = common.run_config("grpo", seed=42)
    c.lora.update(rank=64, alpha=64.0)
    c.data = ml_collections.ConfigDict(dict(
        source="jsonl", path="data/cedar", name="", tfds_dir="", task="chat", dataset="", eval_split="validation",
        limit=0, hf_path="", hf_split="train"))
    c.grpo = common.grpo(num_generations=4, prompts_per_step=4, temperature=0.7, beta=0.01, max_prompt_tokens=2048)
    c.rewards = cedar_rewards(*ABLATIONS["cor"])
    c.optim = common.optim(name="adamw", lr=1e-5, b2=0.99, weight_decay=0.1, max_grad_norm=0.1, schedule="cosine")
    # validation as the paper selects checkpoints: one sampled completion per example, scored by correctness
    c.train = common.grpo_train(num_steps=2400, checkpoint_every=128, eval_every=128, eval_temperature=0.7,
                                eval_top_p=0.95, eval_rewards=("correctness",), best_metric="eval/correctness",
                                export_best=True)
    if variant == "paper" or (variant or "").startswith("paper_") and variant[6:] in ABLATIONS:
        c.rewards = cedar_rewards(*ABLATIONS[variant[6:] if variant != "paper" else "cor_cov_dir"],
                                  judge=PAPER_JUDGE)
        return paper(c)
    if variant in ABLATIONS:
        c.rewards = cedar_rewards(*ABLATIONS[variant])
        variant = None
    if variant in (None, "smollm2"):
        return common.update(c, {"lora.rank": 16, "lora.alpha": 16.0, "grpo.max_new_tokens": 256,
                                 "train.num_steps": 20, "train.eval_every": 10, "train.checkpoint_every": 10})
    if variant == "tiny":
        return common.tiny(c, {"lora.rank": 4, "lora.alpha": 4.0, "grpo.prompts_per_step": 2,
                               "grpo.max_new_tokens": 16, "optim.lr": 1e-3, "optim.max_grad_norm": 1.0,
                               "train.num_steps": 2, "train.checkpoint_every": 1, "train.eval_every": 0})
    raise ValueError(f"unknown variant {variant!r}; expected one of None, smollm2, paper, tiny, "
                     f"{', '.join(ABLATIONS)}, {', '.join('paper_' + a for a in ABLATIONS)}")
