"""`reasoner bench sft --json`: our SFT step vs TRL's SFTTrainer on SmolLM2-135M-Instruct (CPU or GPU).

Same model weights, float32, AdamW, batch, sequence length, completion-only loss and remat setting;
prints {"ours_tok_s", "baseline_tok_s", "ratio", ...} measured in one run: ours in this process, TRL in fresh
child processes under glibc's default malloc settings and under ours (`ratio_same_env`; see `baseline_child`).
"""

from __future__ import annotations

import json

from reasoner.benchmarks.train_common import add_baseline_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("sft", help="SFT step throughput: ours vs TRL SFTTrainer")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5, help="measured steps per side (after one warm-up)")
    parser.add_argument("--remat", action="store_true", help="gradient checkpointing on both sides")
    add_baseline_args(parser)
    parser.set_defaults(func=run)


def _batch(*, rows: int, seq_len: int, vocab: int):
    """A fixed random batch: 32 prompt tokens then completion tokens, every row full length."""
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, vocab, size=(1, rows, seq_len)).astype(np.int32)
    loss_mask = np.ones_like(tokens)
    loss_mask[..., :32] = 0
    positions = np.broadcast_to(np.arange(seq_len, dtype=np.int32), tokens.shape).copy()
    return {"tokens": tokens, "positions": positions, "segment_ids": np.ones_like(tokens), "loss_mask": loss_mask}


def run(args) -> int:
    import tempfile

    from reasoner.benchmarks import train_common as tc
    from trainers.sft import sft_denominator, sft_loss_fn

    model, mesh = tc.load_ours(remat=args.remat)
    batch = _batch(rows=args.batch, seq_len=args.seq_len, vocab=model.cfg.vocab_size)
    with tempfile.TemporaryDirectory() as tmp:
        request = {"benchmark": "sft", "model_dir": tc.export_weights(model, f"{tmp}/model"), "batch": args.batch,
                   "seq_len": args.seq_len, "steps": args.steps, "remat": args.remat}
        baselines = tc.measure_baselines(args, request, arrays={k: batch[k][0] for k in ("tokens", "loss_mask")})
    step, state, frozen = tc.build_our_step(
        model, mesh, loss_fn_factory=lambda graphdef, **_: {"loss_fn": sft_loss_fn(graphdef)},
        denominator=sft_denominator, example_batch=batch, total_steps=args.steps + 1)
    ours_times, ours_loss = tc.time_ours(step, state, frozen, batch, steps=args.steps, mesh=mesh)
    result = tc.summary(ours_times=ours_times, baselines=baselines, units_per_step=args.batch * args.seq_len,
                        unit="tok", extra={"benchmark": "sft", "model": "smollm2-135m-instruct", "dtype": "float32",
                                           "batch": args.batch, "seq_len": args.seq_len, "remat": args.remat,
                                           "ours_first_loss": round(ours_loss, 5)})
    result = tc.add_roofline(result, model.cfg, ours_times=ours_times, rows=args.batch, seq_len=args.seq_len)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


def baseline(request: dict) -> dict:
    """TRL SFTTrainer on the same tokens (pre-tokenized input_ids + completion_mask); runs in `baseline_child`."""
    import tempfile

    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from reasoner.benchmarks import baseline_child
    from reasoner.benchmarks import train_common as tc

    arrays = baseline_child.load_arrays(request)
    rows, masks = arrays["tokens"].tolist(), arrays["loss_mask"].tolist()
    steps = request["steps"]
    data = Dataset.from_dict({"input_ids": rows * (steps + 1), "completion_mask": masks * (steps + 1)})
    with tempfile.TemporaryDirectory() as tmp:
        config = SFTConfig(**tc.trl_common_args(f"{tmp}/out", batch=request["batch"], steps=steps,
                                                remat=request["remat"]),
                           max_length=request["seq_len"], packing=False, completion_only_loss=True,
                           dataset_num_proc=None, shuffle_dataset=False)
        return tc.train_trl(SFTTrainer, config, data, model_dir=request["model_dir"])
