"""SFT on Gold SMT-scratchpad trajectories (Sequent-Prover, App. C "Training details").

Paper settings: full fine-tuning, AdamW lr 3e-6, cosine decay, warmup ratio 0.03, weight decay 0, gradient clipping
at 1.0, 2 epochs, effective batch 64 (per-device 1 x accumulation 8 x 8 GPUs), 16,384-token sequences with
packing, bf16 with gradient checkpointing, a checkpoint every 10 optimizer steps keeping the three most recent.
The data are multi-turn trajectories (`reasoner.data.chat_jsonl`: prompt messages, then assistant / tool turns),
rendered through the chat template with the scratchpad's tool schema; the loss covers the assistant turns only.

Variants: None / "smollm2" (the embedded SmolLM2-135M-Instruct, CPU-sized: lr 2e-5 and batch 8, since a 135M model
on a few hundred Gold traces needs a larger step than the paper's 4B-27B models on 14k), "paper" (the paper's
recipe, bf16 + remat; set model.name to the base checkpoint), "tiny" (random 2-layer model, tests and smoke runs).
"""

import ml_collections

from configs import common


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = common.run_config("sft", seed=0)
    c.data = ml_collections.ConfigDict(dict(
        source="jsonl", path="data/smt_gold", name="", tfds_dir="", hf_path="", hf_split="train", seq_len=2048,
        overflow="drop", packing=True))
    c.optim = common.optim(name="adamw", lr=2e-5, schedule="cosine", warmup_ratio=0.03, weight_decay=0.0,
                           max_grad_norm=1.0)
    c.train = common.train(batch_size=4, grad_accum=2, num_epochs=2, checkpoint_every=10, keep_checkpoints=3)
    if variant in (None, "smollm2"):
        return c
    if variant == "paper":
        return common.large_model(c, {"data.seq_len": 16384, "optim.lr": 3e-6, "train.batch_size": 8,
                                      "train.grad_accum": 8})
    if variant == "tiny":
        return common.tiny(c, {"data.seq_len": 512, "optim.lr": 3e-3, "train.batch_size": 8, "train.grad_accum": 1,
                               "train.num_epochs": 1, "train.checkpoint_every": 2})
    raise ValueError(f"unknown variant {variant!r}; expected one of None, smollm2, paper, tiny")
