"""KTO on unpaired preference data (Ethayarajh et al. 2024, "KTO: Model Alignment as Prospect Theoretic
Optimization"; `trainers.kto`).

Data: `data.path` a directory of train.jsonl (and validation.jsonl) rows {prompt, completion, label} (label true =
desirable) or paired {prompt, chosen, rejected} rows, or `data.hf_path` a Hugging Face `datasets` file or directory
in TRL's unpaired or paired preference format.

Default (None / "smollm2"): TRL 1.16's KTOConfig defaults on the embedded SmolLM2-135M-Instruct: beta 0.1, both
weights 1, AdamW lr 1e-6 with transformers' linear decay and no warm-up, weight decay 0, gradient clipping at 1.0,
8 examples per batch, 3 epochs, sequences cut at 1024 tokens (TRL's max_length, keeping the start). "large": the same
with bfloat16 activations and rematerialised layers (set model.name to the checkpoint). "tiny": a random 2-layer
model for tests and smoke runs.

kto.desirable_weight / kto.undesirable_weight weigh the two kinds of examples (TRL's names); when the data are
unbalanced the trainer prints the paper's recommended range (Eq. 8). kto.ref_model names a reference model other
than the starting policy ("" = the starting weights; under LoRA the adapter-free base).
"""

import ml_collections

from configs import common


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = common.run_config("kto", seed=0)
    c.data = ml_collections.ConfigDict(dict(
        source="jsonl", path="data/kto", name="", tfds_dir="", hf_path="", hf_split="train", seq_len=1024,
        overflow="truncate"))
    c.kto = ml_collections.ConfigDict(dict(beta=0.1, desirable_weight=1.0, undesirable_weight=1.0, ref_model=""))
    c.optim = common.optim(name="adamw", lr=1e-6, schedule="linear", warmup_ratio=0.0, weight_decay=0.0,
                           max_grad_norm=1.0)
    c.train = common.train(batch_size=8, grad_accum=1, num_epochs=3, checkpoint_every=200)
    if variant in (None, "smollm2"):
        return c
    if variant == "large":
        return common.large_model(c)
    if variant == "tiny":
        return common.tiny(c, {"data.seq_len": 256, "optim.lr": 3e-3, "optim.schedule": "cosine",
                               "optim.warmup_ratio": 0.1, "train.batch_size": 8, "train.checkpoint_every": 2})
    raise ValueError(f"unknown variant {variant!r}; expected one of None, smollm2, large, tiny")
