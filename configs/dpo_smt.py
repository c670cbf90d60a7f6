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


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.trainer = "dpo"  # what `reasoner train` starts with this config
    c.seed = 0
    c.mesh = "fsdp=-1"
    c.model = ml_collections.ConfigDict(dict(
        name="smollm2-135m-instruct", tokenizer="", dtype="float32", remat=False, seed=0,
        random=ml_collections.ConfigDict(dict(
            family="llama", vocab_size=49152, hidden_size=64, intermediate_size=128, num_layers=2,
            num_heads=4, num_kv_heads=2, head_dim=16, tie_embeddings=True, rms_norm_eps=1e-5)),
    ))
    c.lora = ml_collections.ConfigDict(dict(rank=0, alpha=16.0, pattern=r"(attn|mlp)\.\w+_proj", dropout=0.0,
                                            seed=0))
    c.data = ml_collections.ConfigDict(dict(
        source="jsonl", path="data/smt_pairs", name="", tfds_dir="", seq_len=1024, overflow="drop"))
    c.dpo = ml_collections.ConfigDict(dict(
        beta=0.1, loss_type="sigmoid", label_smoothing=0.0,
        precompute_ref=True,  # one reference pass before training, cached in workdir/ref_logps.npz
        ref_model=""))  # "" = the starting policy weights
    c.optim = ml_collections.ConfigDict(dict(
        name="adamw", lr=5e-7, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0, max_grad_norm=1.0,
        schedule="cosine", warmup_ratio=0.1, min_lr_ratio=0.0))
    c.train = ml_collections.ConfigDict(dict(
        batch_size=4, grad_accum=8, num_epochs=2, checkpoint_every=10, keep_checkpoints=3,
        async_checkpoint=True, max_nonfinite_steps=5))
    c.export_dir = ""
    if variant in (None, "smollm2"):
        return c
    if variant == "paper":
        c.data.seq_len = 8192
        c.train.batch_size = 8
        c.train.grad_accum = 4
        c.model.dtype = "bfloat16"
        c.model.remat = True
        return c
    if variant == "tiny":
        c.model.name = ""
        c.model.tokenizer = "smollm2-135m-instruct"
        c.data.seq_len = 256
        c.optim.lr = 3e-3
        c.train.batch_size = 8
        c.train.grad_accum = 1
        c.train.checkpoint_every = 2
        return c
    raise ValueError(f"unknown variant {variant!r}; expected one of None, smollm2, paper, tiny")
