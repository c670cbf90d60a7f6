"""Paper-scale A* post-training (A* post-training §4, App. B.3) through the same pipeline as the demo.

Variant names: `<model>_<dataset>_sft_<heuristic>` or `<model>_<dataset>_grpo_<reward>`, with
  model     llama1b | llama3b          (Llama-3.2-1B/3B-Instruct; USER-PROVIDED HF directories, see MODEL_PATHS)
  dataset   proofwriter | deeprd       (ProofWriter: the TFDS builder proofwriter_astar/owa_depth5 built by
                                        `reasoner data build proofwriter --manual-dir ...`; DeepRD generated at the
                                        paper's sizes 2000/200/500, L 5..10, B 4..8)
  heuristic zero | dependency | true   (the SFT search order: Dijkstra, A* dependency, A* true cost-to-go)
  reward    correctness | step_count | astar_dependency | astar_true   (GRPO from an SFT checkpoint)
SFT: Adam (0.9, 0.999), lr 2e-5, cosine with warmup 0.03, 3 epochs, batch 4 (1B) / 2 (3B), best validation loss.
GRPO: one epoch, 16 completions per group, beta 0.04, lr 1e-6; starts from the SFT export named in SFT_EXPORTS
(the paper: true cost-to-go SFT on ProofWriter, dependency SFT on DeepRD): the SFT variant's run with
`--workdir checkpoints/<sft variant>` writes it there. The GRPO reward is scored
ON DEVICE (`options.device=True` of the "astar" reward: host parsing, then one jitted A* kernel call per batch), and
evaluation scores the split on device too (`reasoner.evaluation.EvalSettings.scoring`, default "device").
Generation budget: 1024 new tokens on ProofWriter, 2048 on DeepRD; greedy evaluation on the full test split.
In-context baselines (§4): SFT variants also evaluate their base model with eval.few_shot solved training problems in
the prompt (10 on ProofWriter, 5 on DeepRD; traces under the variant's heuristic); an API model is evaluated with
`reasoner eval --endpoint URL --endpoint-model NAME`, budget eval.endpoint_max_tokens (the paper's DeepSeek-V3.2: 2048
on ProofWriter, 5000 on DeepRD). data.cost ("max"; "sum" for App. A.2) reaches the traces and the GRPO rewards.
bf16 compute with f32 master weights, remat, FSDP over all devices (TPU pods / GPU nodes).
"""

import ml_collections

from configs import astar_demo, grpo_astar
from reasoner.tasks.astar import FEW_SHOT_K

MODELS = ("llama1b", "llama3b")
DATASETS = ("proofwriter", "deeprd")
HEURISTICS = ("zero", "dependency", "true")
REWARDS = ("correctness", "step_count", "astar_dependency", "astar_true")
MODEL_PATHS = {"llama1b": "checkpoints/Llama-3.2-1B-Instruct", "llama3b": "checkpoints/Llama-3.2-3B-Instruct"}
# where an SFT variant run with `--workdir checkpoints/<variant>` leaves its export (the pipeline writes
# `<workdir>/sft/export`)
SFT_EXPORTS = {("llama1b", "proofwriter"): "checkpoints/llama1b_proofwriter_sft_true/sft/export",
               ("llama3b", "proofwriter"): "checkpoints/llama3b_proofwriter_sft_true/sft/export",
               ("llama1b", "deeprd"): "checkpoints/llama1b_deeprd_sft_dependency/sft/export",
               ("llama3b", "deeprd"): "checkpoints/llama3b_deeprd_sft_dependency/sft/export"}
NEW_TOKENS = {"proofwriter": 1024, "deeprd": 2048}
API_NEW_TOKENS = {"proofwriter": 2048, "deeprd": 5000}  # DeepSeek-V3.2's budgets (App. B.3)


def variants() -> list[str]:
    out = [f"{m}_{d}_sft_{h}" for m in MODELS for d in DATASETS for h in HEURISTICS]
    return out + [f"{m}_{d}_grpo_{r}" for m in MODELS for d in DATASETS for r in REWARDS]


def get_config(variant=None) -> ml_collections.ConfigDict:
    if variant is None:
        variant = "llama1b_deeprd_sft_dependency"
    parts = variant.split("_", 3)
    if len(parts) != 4 or parts[0] not in MODELS or parts[1] not in DATASETS or parts[2] not in ("sft", "grpo") \
            or parts[3] not in (HEURISTICS if parts[2] == "sft" else REWARDS):
        raise ValueError(f"unknown variant {variant!r}; expected <model>_<dataset>_sft_<heuristic> or "
                         f"<model>_<dataset>_grpo_<reward> with model in {MODELS}, dataset in {DATASETS}, "
                         f"heuristic in {HEURISTICS}, reward in {REWARDS}")
    model, dataset, stage, which = parts
    c = astar_demo.base_config()
    c.single_device = False
    c.mesh = "fsdp=-1"
    c.model.name = MODEL_PATHS[model] if stage == "sft" else SFT_EXPORTS[(model, dataset)]
    c.model.dtype = "bfloat16"
    c.model.remat = True
    c.data.dataset = dataset
    if dataset == "deeprd":
        c.data.update(dict(min_lookahead=5, max_lookahead=10, min_branches=4, max_branches=8, extra_ratio=1.0,
                           max_degree=4, train=2000, validation=200, test=500))
    else:
        c.data.update(dict(tfds_name="proofwriter_astar/owa_depth5", train=0, validation=0, test=0))
    c.data.heuristic = which if stage == "sft" else "dependency"
    new_tokens = NEW_TOKENS[dataset]
    c.sft.enabled = stage == "sft"
    c.sft.data.seq_len = 2 * new_tokens
    c.sft.optim.update(dict(lr=2e-5, warmup_ratio=0.03, schedule="cosine"))
    c.sft.train.update(dict(batch_size=4 if model == "llama1b" else 2, num_epochs=3, checkpoint_every=500))
    c.grpo.enabled = stage == "grpo"
    c.grpo.grpo.update(dict(num_generations=16, prompts_per_step=1, max_new_tokens=new_tokens, temperature=1.0))
    c.grpo.optim.lr = 1e-6
    c.grpo.train.update(dict(num_steps={"deeprd": 2000, "proofwriter": 9207}[dataset], checkpoint_every=100))
    reward = which if stage == "grpo" else "astar_dependency"
    c.grpo.rewards = grpo_astar.astar_reward(reward, dataset, device=True, cost=c.data.cost)
    c.eval.update(dict(num_samples=1, temperature=0.0, max_new_tokens=new_tokens, batch_size=64,
                       few_shot=FEW_SHOT_K[dataset] if stage == "sft" else 0,
                       endpoint_max_tokens=API_NEW_TOKENS[dataset]))
    return c
