"""`reasoner bench load --json`: load SmolLM2 from its GGUF, ours vs transformers, same process.

Ours: `load_model(path)` until every parameter is on the device (dequantized, float32). Baseline:
`AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32)`. Runs are interleaved
(ours, baseline, ours, ...) after one warm-up of each so page cache and imports favour neither;
figures are medians of `--repeats`. Prints {"ours_s", "baseline_s", "ratio", ...}.
"""

from __future__ import annotations

import json

from reasoner.cli.arg_types import positive_number


def register(subparsers) -> None:
    p = subparsers.add_parser("load", help="checkpoint load time: ours vs transformers (GGUF)")
    p.add_argument("--model", default="smollm2-135m-instruct", help="preset, .gguf file or HF directory")
    p.add_argument("--repeats", type=positive_number(int), default=3)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.set_defaults(func=run)


def run(args) -> int:
    import gc
    import os
    import statistics
    import time

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import jax
    from flax import nnx

    from reasoner.models.loading import load_model
    from reasoner.models.presets import resolve
    from reasoner.models.reference import load_transformers_model, transformers_version

    path = resolve(args.model)

    def ours():
        start = time.perf_counter()
        model = load_model(path)
        jax.block_until_ready(jax.tree.leaves(nnx.state(model)))
        return time.perf_counter() - start

    def baseline():
        start = time.perf_counter()
        load_transformers_model(path)
        return time.perf_counter() - start

    ours(), baseline()  # warm-up: imports, page cache, tokenizer-free code paths
    ours_s, base_s = [], []
    for _ in range(args.repeats):
        gc.collect()
        ours_s.append(ours())
        gc.collect()
        base_s.append(baseline())
    row = {
        "ours_s": round(statistics.median(ours_s), 3),
        "baseline_s": round(statistics.median(base_s), 3),
        "ratio": round(statistics.median(base_s) / statistics.median(ours_s), 2),
        "ours_runs": [round(x, 3) for x in ours_s],
        "baseline_runs": [round(x, 3) for x in base_s],
        "model": args.model,
        "baseline": transformers_version(),
    }
    if not args.json:
        print(f"load {args.model}: ours {row['ours_s']} s, transformers {row['baseline_s']} s, ratio {row['ratio']}")
    print(json.dumps(row), flush=True)
    return 0
