"""`reasoner parity --model smollm2-135m-instruct [--mesh fsdp=4,tensor=2] --json`.

Compares our f32 logits with transformers' (same checkpoint, f32) over 10 chat prompts (> 512
tokens) and prints {"max_abs_logit_diff", "top1_agreement", "tokens", "reference", ...}. Exits 1
when the diff exceeds --tolerance (default 2e-3) or top-1 agreement is below 1.0.
"""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser("parity", help="check our logits against transformers on chat prompts")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="preset name, .gguf file or HF directory")
    parser.add_argument("--mesh", default=None, help="e.g. fsdp=4,tensor=2 (default: one device)")
    parser.add_argument("--tolerance", type=float, default=2e-3, help="largest allowed |logit difference|")
    parser.add_argument("--json", action="store_true", help="print one JSON object (default: readable lines)")
    parser.set_defaults(func=_run)


def _run(args) -> int:
    from reasoner.models.parity import run_parity

    result = run_parity(args.model, mesh_spec=args.mesh)
    ok = result["max_abs_logit_diff"] <= args.tolerance and result["top1_agreement"] == 1.0
    result["pass"] = ok
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if ok else 1
