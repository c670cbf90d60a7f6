"""`reasoner bench sft --json`: our SFT step vs TRL's SFTTrainer on SmolLM2-135M-Instruct (CPU or GPU).

Same model weights, float32, AdamW, batch, sequence length, completion-only loss and remat setting;
prints {"ours_tok_s", "baseline_tok_s", "ratio", ...} measured in this one process run.
"""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser("sft", help="SFT step throughput: ours vs TRL SFTTrainer")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5, help="measured steps per side (after one warm-up)")
    parser.add_argument("--remat", action="store_true", help="gradient checkpointing on both sides")
    parser.add_argument("--skip-baseline", action="store_true")
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
    from reasoner.benchmarks import train_common as tc
    from trainers.sft import sft_denominator, sft_loss_fn

    model, mesh = tc.load_ours(remat=args.remat)
    batch = _batch(rows=args.batch, seq_len=args.seq_len, vocab=model.cfg.vocab_size)
    # The baseline runs first, on a process that has not run XLA yet (see train_common: order).
    base_times, base_loss = [float("nan")], float("nan")
    if not args.skip_baseline:
        base_times, base_loss = _baseline(model, batch, args)
    step, state, frozen = tc.build_our_step(
        model, mesh, loss_fn_factory=lambda graphdef, **_: {"loss_fn": sft_loss_fn(graphdef)},
        denominator=sft_denominator, example_batch=batch, total_steps=args.steps + 1)
    ours_times, ours_loss = tc.time_ours(step, state, frozen, batch, steps=args.steps, mesh=mesh)
    result = tc.summary(ours_times=ours_times, base_times=base_times, tokens_per_step=args.batch * args.seq_len,
                        extra={"benchmark": "sft", "model": "smollm2-135m-instruct", "dtype": "float32",
                               "batch": args.batch, "seq_len": args.seq_len, "remat": args.remat,
                               "ours_first_loss": round(ours_loss, 5), "baseline_first_loss": round(base_loss, 5)})
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


def _baseline(model, batch, args):
    """TRL SFTTrainer on the same tokens (pre-tokenized input_ids + completion_mask)."""
    import tempfile

    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from reasoner.benchmarks import train_common as tc
    from reasoner.models.presets import resolve
    from reasoner.tokenization import load_tokenizer

    tokenizer = load_tokenizer(resolve("smollm2-135m-instruct"))
    rows = batch["tokens"][0].tolist()
    masks = batch["loss_mask"][0].tolist()
    data = Dataset.from_dict({"input_ids": rows * (args.steps + 1), "completion_mask": masks * (args.steps + 1)})
    with tempfile.TemporaryDirectory() as tmp:
        torch_model = tc.export_baseline_model(model, f"{tmp}/model")
        config = SFTConfig(**tc.trl_common_args(f"{tmp}/out", batch=args.batch, steps=args.steps, remat=args.remat),
                           max_length=args.seq_len, packing=False, completion_only_loss=True,
                           dataset_num_proc=None, shuffle_dataset=False)
        timer = tc.step_timer_callback()
        trainer = SFTTrainer(model=torch_model, args=config, train_dataset=data, processing_class=tokenizer,
                             callbacks=[timer])
        out = trainer.train()
        del out
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return timer.times[1:], (losses[0] if losses else float("nan"))
