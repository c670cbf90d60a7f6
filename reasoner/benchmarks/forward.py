"""`reasoner bench forward --json`: teacher-forced log-prob scoring, ours (jitted) vs transformers.

Batch `--batch` x `--length` tokens (default 8 x 512) of real chat text, float32, SmolLM2 from the
same GGUF. Ours: one jitted `token_logps` (compile time excluded, reported as `compile_s`).
Baseline: `model(input_ids).logits` -> log_softmax -> gather under `torch.no_grad()`. Interleaved
runs, medians of `--repeats`. Also reports the largest |log-prob| difference between the two.
Prints {"ours_tok_s", "baseline_tok_s", "ratio", "compile_s", "max_abs_logprob_diff", ...}.
"""

from __future__ import annotations

import json

from reasoner.cli.arg_types import positive_number


def register(subparsers) -> None:
    p = subparsers.add_parser("forward", help="log-prob scoring throughput: ours vs transformers")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--repeats", type=positive_number(int), default=3)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.set_defaults(func=run)


def _batch_tokens(tokenizer, *, batch: int, length: int):
    import numpy as np

    from reasoner.models.parity import PARITY_CHATS
    from reasoner.tokenization import chat_ids

    stream = []
    while len(stream) < batch * length:
        for chat in PARITY_CHATS:
            stream.extend(chat_ids(tokenizer, chat, add_generation_prompt=False))
    return np.asarray(stream[:batch * length], np.int32).reshape(batch, length)


def run(args) -> int:
    import os
    import statistics
    import time

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import jax
    import numpy as np
    import torch
    from flax import nnx

    from reasoner.models.loading import load_model
    from reasoner.models.presets import resolve
    from reasoner.models.reference import load_transformers_model, transformers_version
    from reasoner.models.scoring import token_logps
    from reasoner.tokenization import load_tokenizer

    path = resolve(args.model)
    tokens = _batch_tokens(load_tokenizer(path), batch=args.batch, length=args.length)
    graphdef, state = nnx.split(load_model(path))
    score = jax.jit(lambda state, tokens: token_logps(nnx.merge(graphdef, state), tokens))
    reference = load_transformers_model(path)
    torch_tokens = torch.tensor(tokens, dtype=torch.long)

    def ours():
        start = time.perf_counter()
        out = jax.block_until_ready(score(state, tokens))
        return time.perf_counter() - start, out

    def baseline():
        start = time.perf_counter()
        with torch.no_grad():
            logits = reference(torch_tokens).logits[:, :-1].float()
            logp = torch.log_softmax(logits, dim=-1).gather(-1, torch_tokens[:, 1:, None])[..., 0]
        return time.perf_counter() - start, logp.numpy()

    first, ours_logp = ours()
    _, base_logp = baseline()
    diff = float(np.abs(np.asarray(ours_logp)[:, :-1] - base_logp).max())
    ours_s, base_s = [], []
    for _ in range(args.repeats):
        ours_s.append(ours()[0])
        base_s.append(baseline()[0])
    n = tokens.size
    ours_tok_s, base_tok_s = n / statistics.median(ours_s), n / statistics.median(base_s)
    row = {
        "ours_tok_s": round(ours_tok_s, 1),
        "baseline_tok_s": round(base_tok_s, 1),
        "ratio": round(ours_tok_s / base_tok_s, 2),
        "compile_s": round(first - statistics.median(ours_s), 3),
        "max_abs_logprob_diff": diff,
        "batch": args.batch,
        "length": args.length,
        "ours_runs_s": [round(x, 3) for x in ours_s],
        "baseline_runs_s": [round(x, 3) for x in base_s],
        "torch_threads": torch.get_num_threads(),
        "model": args.model,
        "baseline": transformers_version(),
    }
    if not args.json:
        print(f"forward {args.batch}x{args.length}: ours {row['ours_tok_s']} tok/s, "
              f"transformers {row['baseline_tok_s']} tok/s, ratio {row['ratio']}")
    print(json.dumps(row), flush=True)
    return 0
