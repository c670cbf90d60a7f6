"""`reasoner parity --model smollm2-135m-instruct [--mesh fsdp=4,tensor=2] --json`.

Compares our f32 logits with transformers' (same checkpoint, f32) over 10 chat prompts (> 512
tokens) and prints {"max_abs_logit_diff", "top1_agreement", "tokens", "reference", ...}. Exits 1
when the diff exceeds --tolerance or top-1 agreement is below 1.0. The default tolerance is the float32 bound of
the model at hand (`reasoner.models.parity.logit_bound`: the decoder's reduction depth and its largest logit), not a
constant: a fixed 2e-3 (the old default) lies below the float32 error of a large model's logits and far above a
tiny model's.
"""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser("parity", help="check our logits against transformers on chat prompts")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="preset name, .gguf file or HF directory")
    parser.add_argument("--mesh", default=None, help="e.g. fsdp=4,tensor=2 (default: one device)")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="largest allowed |logit difference| (default: the model's float32 bound, "
                             "printed as float32_bound)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (default: readable lines)")
    parser.set_defaults(func=_run)


def _run(args) -> int:
    from reasoner.models.parity import run_parity

    result = run_parity(args.model, mesh_spec=args.mesh)
    tolerance = result["float32_bound"] if args.tolerance is None else args.tolerance
    ok = result["max_abs_logit_diff"] <= tolerance and result["top1_agreement"] == 1.0
    result["tolerance"], result["pass"] = tolerance, ok
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if ok else 1
