"""`reasoner bench dpo --json`: our DPO step vs TRL's DPOTrainer on SmolLM2-135M-Instruct.

Same weights, float32, AdamW, sigmoid loss (beta 0.1), reference computed on the fly on both sides
(TRL's default), the same pairs (prompt + chosen / rejected of equal token length), remat setting.
Throughput counts the tokens of both sequences of every pair. TRL runs in child processes, under glibc's default
malloc settings and under ours (`ratio_same_env`; see `baseline_child`).
"""

from __future__ import annotations

import json

from reasoner.benchmarks.train_common import add_baseline_args

PROMPT_TOKENS = 32


def register(subparsers) -> None:
    parser = subparsers.add_parser("dpo", help="DPO step throughput: ours vs TRL DPOTrainer")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--batch", type=int, default=2, help="pairs per step")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--remat", action="store_true")
    add_baseline_args(parser)
    parser.set_defaults(func=run)


def _texts(seq_len: int):
    """Prompt and completions whose SmolLM2 tokenizations are one token per word (+ EOS), seq_len in total."""
    n = seq_len - PROMPT_TOKENS - 1
    return "the" + " the" * (PROMPT_TOKENS - 1), " a" * n, " an" * n


def _pairs(tokenizer, *, rows: int, seq_len: int):
    import numpy as np

    prompt, chosen, rejected = _texts(seq_len)
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    out = {}
    for side, text in (("chosen", chosen), ("rejected", rejected)):
        c = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = (p + c)[:seq_len]
        if len(ids) != seq_len:
            raise RuntimeError(f"benchmark texts tokenize to {len(ids)} tokens, expected {seq_len}")
        mask = [0] * len(p) + [1] * len(c)
        out[f"{side}_tokens"] = np.tile(np.asarray(ids, np.int32), (1, rows, 1))
        out[f"{side}_positions"] = np.tile(np.arange(seq_len, dtype=np.int32), (1, rows, 1))
        out[f"{side}_segment_ids"] = np.ones((1, rows, seq_len), np.int32)
        out[f"{side}_loss_mask"] = np.tile(np.asarray(mask[:seq_len], np.int32), (1, rows, 1))
    return out


def run(args) -> int:
    import tempfile

    import jax
    import jax.numpy as jnp
    import ml_collections

    from reasoner.benchmarks import train_common as tc
    from reasoner.models.presets import resolve
    from reasoner.tokenization import load_tokenizer
    from trainers.dpo import dpo_loss_fn, pair_denominator
    from trainers.run import Frozen

    tokenizer = load_tokenizer(resolve("smollm2-135m-instruct"))
    model, mesh = tc.load_ours(remat=args.remat)
    batch = _pairs(tokenizer, rows=args.batch, seq_len=args.seq_len)
    dpo_cfg = ml_collections.ConfigDict(dict(beta=0.1, loss_type="sigmoid", label_smoothing=0.0))

    def factory(*, graphdef, params, frozen, params_sharding, frozen_sharding):
        return {"loss_fn": dpo_loss_fn(graphdef, dpo_cfg, precomputed=False),
                "frozen": Frozen(base=frozen, reference=jax.tree.map(jnp.copy, params)),
                "frozen_sharding": Frozen(base=frozen_sharding, reference=params_sharding)}

    with tempfile.TemporaryDirectory() as tmp:
        request = {"benchmark": "dpo", "model_dir": tc.export_weights(model, f"{tmp}/model"), "batch": args.batch,
                   "seq_len": args.seq_len, "steps": args.steps, "remat": args.remat}
        baselines = tc.measure_baselines(args, request)
    step, state, frozen = tc.build_our_step(model, mesh, loss_fn_factory=factory, denominator=pair_denominator,
                                            example_batch=batch, total_steps=args.steps + 1)
    ours_times, ours_loss = tc.time_ours(step, state, frozen, batch, steps=args.steps, mesh=mesh)
    result = tc.summary(ours_times=ours_times, baselines=baselines, units_per_step=2 * args.batch * args.seq_len,
                        unit="tok", extra={"benchmark": "dpo", "model": "smollm2-135m-instruct", "dtype": "float32",
                                           "pairs": args.batch, "seq_len": args.seq_len, "remat": args.remat,
                                           "ours_first_loss": round(ours_loss, 5)})
    # chosen and rejected rows train; the reference model runs forward on both
    result = tc.add_roofline(result, model.cfg, ours_times=ours_times, rows=2 * args.batch, seq_len=args.seq_len,
                             forward_only_rows=2 * args.batch)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


def baseline(request: dict) -> dict:
    """TRL DPOTrainer on the same texts, reference on the fly; runs in `baseline_child`."""
    import tempfile

    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from reasoner.benchmarks import train_common as tc

    prompt, chosen, rejected = _texts(request["seq_len"])
    n = request["batch"] * (request["steps"] + 1)
    data = Dataset.from_dict({"prompt": [prompt] * n, "chosen": [chosen] * n, "rejected": [rejected] * n})
    with tempfile.TemporaryDirectory() as tmp:
        config = DPOConfig(**tc.trl_common_args(f"{tmp}/out", batch=request["batch"], steps=request["steps"],
                                                remat=request["remat"]),
                           beta=0.1, loss_type=["sigmoid"], max_length=request["seq_len"],
                           precompute_ref_log_probs=False, dataset_num_proc=None)
        return tc.train_trl(DPOTrainer, config, data, model_dir=request["model_dir"])
