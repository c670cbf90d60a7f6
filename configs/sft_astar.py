"""SFT on verbalized A* search traces (A* post-training, App. B.3).

Paper settings: Adam (b1 0.9, b2 0.999), lr 2e-5, cosine schedule with warmup ratio 0.03, 3 epochs,
batch 4 (1B) / 2 (3B), keep the epoch checkpoint with the lowest validation loss; max 1024 generated
tokens on ProofWriter, 2048 on DeepRD.

Traces: `data.path` holds chat SFT examples whose completions are verbalized A* traces. Their search order and A*
cost ("max" | "sum") are fixed when they are written: the A* pipeline writes them under its `data.heuristic` and
`data.cost` (configs/astar_demo.py, configs/astar_paper.py; `reasoner.data.astar_traces.write_splits`), the same
cost its GRPO rewards read. This config trains on the file as given, so it holds no cost of its own.

Variants: None / "smollm2" (the embedded SmolLM2-135M-Instruct, CPU-sized), "llama1b", "llama3b"
(paper scale; set model.name to a Llama-3.2 HF directory), "deeprd" (2048-token traces), "tiny"
(random 2-layer model with SmolLM2's tokenizer, for tests and smoke runs).
"""

import ml_collections

from configs import common


def base_config() -> ml_collections.ConfigDict:
    c = common.run_config("sft", seed=0)
    c.data = ml_collections.ConfigDict(dict(
        source="jsonl", path="data/astar_traces", name="", tfds_dir="", hf_path="", hf_split="train",
        seq_len=1024, overflow="truncate", packing=True))
    c.optim = common.optim(name="adam", lr=2e-5, schedule="cosine", warmup_ratio=0.03)
    c.train = common.train(batch_size=4, grad_accum=1, num_epochs=3, checkpoint_every=200)
    return c


def get_config(variant=None) -> ml_collections.ConfigDict:
    c = base_config()
    if variant in (None, "smollm2"):
        return c
    if variant in ("llama1b", "llama3b"):
        return common.large_model(c, {"model.name": f"checkpoints/Llama-3.2-{variant[-2:].upper()}-Instruct",
                                      "train.batch_size": 4 if variant == "llama1b" else 2, "mesh": "fsdp=-1"})
    if variant == "deeprd":
        c.data.seq_len = 2048
        return c
    if variant == "tiny":
        return common.tiny(c, {"data.seq_len": 256, "optim.lr": 3e-3, "optim.warmup_ratio": 0.1,
                               "train.batch_size": 8, "train.num_epochs": 2, "train.checkpoint_every": 2})
    raise ValueError(f"unknown variant {variant!r}; expected one of None, smollm2, llama1b, llama3b, deeprd, tiny")
