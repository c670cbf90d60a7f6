"""DPO on chosen/rejected SMT trajectories (Sequent-Prover, "Training details").

Paper settings: sigmoid loss, beta 0.1, lr 5e-7, cosine decay, warmup ratio 0.1, weight decay 0,
gradient clipping at 1.0, 2 epochs, effective batch 32 (per-device 1 x accumulation 4 x 8 GPUs),
cutoff 8192 tokens with over-long pairs discarded (no truncation inside tool-call spans), no packing,
bf16 with gradient checkpointing.

Variants: None / "smollm2" (the embedded SmolLM2-135M-Instruct, CPU-sized), "paper" (the paper's
batch and cutoff, bf16 + remat; set model.name to the SFT checkpoint), "tiny" (random 2-layer model,
for tests and smoke runs).
"""

import ml_collections

from configs import common


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = common.run_config("dpo", seed=0)
    c.data = ml_collections.ConfigDict(dict(
        source="jsonl", path="data/smt_pairs", name="", tfds_dir="", hf_path="", hf_split="train", seq_len=1024,
        overflow="drop"))
    c.dpo = ml_collections.ConfigDict(dict(
        beta=0.1, loss_type="sigmoid", label_smoothing=0.0,  # loss_type: sigmoid robust ipo hinge | orpo simpo
        simpo_gamma=0.5,  # SimPO's target margin (TRL CPOConfig default); beta is ORPO's lambda / SimPO's beta
        precompute_ref=True,  # one reference pass before training, cached in workdir/ref_logps.npz
        ref_model=""))  # "" = the starting policy weights
    c.optim = common.optim(name="adamw", lr=5e-7, schedule="cosine", warmup_ratio=0.1)
    c.train = common.train(batch_size=4, grad_accum=8, num_epochs=2, checkpoint_every=10)
    if variant in (None, "smollm2"):
        return c
    if variant == "paper":
        return common.large_model(c, {"data.seq_len": 8192, "train.batch_size": 8, "train.grad_accum": 4})
    if variant == "tiny":
        return common.tiny(c, {"data.seq_len": 256, "optim.lr": 3e-3, "train.batch_size": 8, "train.grad_accum": 1,
                               "train.checkpoint_every": 2})
    raise ValueError(f"unknown variant {variant!r}; expected one of None, smollm2, paper, tiny")
