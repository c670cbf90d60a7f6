"""`reasoner generate --model M --input prompts.jsonl --output out.jsonl [-n 4 --temperature 0.7 ...]`.

Input lines: {"prompt": "user text"} (rendered with the chat template), {"messages": [...]}, {"text": "raw
text"} (no chat template: tokenized as vLLM's /v1/completions and transformers' `tokenizer(text)` do, with the
tokenizer's BOS where it adds one, `reasoner.tokenization.encode_prompt`), or {"ids": [token ids]} (used as is).
Output: one line per sample, in input order, with the input's line number, the sample index, text, tokens, finish
reason and both log-prob lists.

Rows run in static batches of `--batch-size` prompts; `--engine` runs them on the rollout engine instead
(continuous batching: `--batch-size` x n decode slots; a finished row's slot takes the next prompt; not with
`--mesh`, the engine's cache is not sharded yet). The engine wins where rows finish at different lengths
(`reasoner bench rollout`: 2.3x on a long-tailed GRPO-shaped workload); a file of prompts generated to one
`max_tokens` gains only its live-length attention, and the static path shards over a mesh, so it stays the
default here. `--speculate k` adds prompt-lookup speculative decoding on the engine
(`reasoner.sampling.speculative`: the same tokens; 2.9x transformers at batch 1 on `reasoner bench generate`'s
prompts, whose outputs repeat them). Either way
prompt i draws with the keys the static batches would give it (seed + its batch's first line, its index in that
batch), so outputs do not depend on the path.
"""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="batched sampling over a JSONL file of prompts")
    p.add_argument("--model", default="smollm2-135m-instruct", help="preset name, .gguf file or HF directory")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("-n", type=int, default=1, help="samples per prompt (one shared prefill)")
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-len", type=int, default=None, help="cache slots per row (default: bucketed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--batch-size", type=int, default=16, help="prompts per device batch")
    p.add_argument("--mesh", default=None, help="e.g. fsdp=4,tensor=2 (shards params and cache; static sampler)")
    p.add_argument("--engine", action="store_true", help="the continuous-batching rollout engine instead of static "
                                                         "batches")
    p.add_argument("--speculate", type=int, default=0,
                   help="draft tokens a decode step verifies per row by prompt lookup (engine only, implies --engine; "
                        "the same tokens in fewer steps where outputs repeat their prompt; 0 = off)")
    p.set_defaults(func=run)


def _read_prompts(path: str, tokenizer) -> list[list[int]]:
    from reasoner.data.jsonl import iter_jsonl
    from reasoner.tokenization import chat_ids, encode_prompt

    prompts = []
    for number, item in iter_jsonl(path, what="an object with 'prompt', 'messages', 'text' or 'ids'"):
        if "ids" in item:
            prompts.append([int(t) for t in item["ids"]])
        elif "messages" in item:
            prompts.append(chat_ids(tokenizer, item["messages"]))
        elif "prompt" in item:
            prompts.append(chat_ids(tokenizer, [{"role": "user", "content": str(item["prompt"])}]))
        elif "text" in item:
            if not isinstance(item["text"], str) or not item["text"]:
                raise ValueError(f"{path}:{number}: 'text' must be a non-empty string, got {item['text']!r:.80}")
            prompts.append(encode_prompt(tokenizer, item["text"]))
        else:
            raise ValueError(f"{path}:{number}: expected a key 'prompt', 'messages', 'text' or 'ids'")
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts


def run(args) -> int:
    import json
    import sys

    from tqdm import tqdm

    from reasoner.models import load_model
    from reasoner.models.presets import resolve
    from reasoner.sampling import Sampler, SamplingParams
    from reasoner.tokenization import load_tokenizer

    path = resolve(args.model)
    tokenizer = load_tokenizer(path)
    try:
        params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                                top_p=args.top_p, n=args.n, seed=args.seed, stop=tuple(args.stop))
        prompts = _read_prompts(args.input, tokenizer)
        if args.batch_size < 1:
            raise ValueError(f"--batch-size={args.batch_size}: expected >= 1")
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    mesh = None
    if args.mesh:
        from reasoner.sharding import make_mesh

        mesh = make_mesh(args.mesh)
    total = len(prompts) * params.n * params.max_new_tokens
    if args.speculate < 0:
        print(f"reasoner generate: --speculate={args.speculate}: expected an integer >= 0", file=sys.stderr)
        return 2
    args.engine = args.engine or args.speculate > 0
    if args.engine and mesh is not None:
        print("reasoner generate: --engine does not take --mesh yet (its KV cache is not sharded)", file=sys.stderr)
        return 2
    if args.engine:
        return _run_engine(args, load_model(path), tokenizer, prompts, params, total=total)
    sampler = Sampler(load_model(path, mesh=mesh), tokenizer, mesh=mesh)
    with open(args.output, "w") as out, tqdm(total=total, unit="tok", desc="generate", file=sys.stderr) as bar:
        for start in range(0, len(prompts), args.batch_size):
            batch = prompts[start:start + args.batch_size]
            session = sampler.start(batch, params.replace(seed=params.seed + start), max_len=args.max_len)
            completions = session.run(on_chunk=bar.update, chunk_steps=32)
            bar.update(len(batch) * params.n * params.max_new_tokens - sum(c.num_tokens for c in completions))
            for c in completions:
                record = c.to_json()
                record["line"] = start + c.prompt_index
                out.write(json.dumps(record) + "\n")
    return 0


def _run_engine(args, model, tokenizer, prompts, params, *, total: int) -> int:
    """All prompts through one `RolloutEngine`; lines are written in input order as soon as they are complete."""
    import json
    import sys

    from tqdm import tqdm

    from reasoner.sampling.rollout_engine import RolloutEngine

    engine = RolloutEngine(model, tokenizer, slots=args.batch_size * params.n, chunk_steps=32, speculate=args.speculate,
                           max_len=max(args.max_len or 0, max(len(p) for p in prompts) + params.max_new_tokens + 1))
    line_of = {}
    for i, p in enumerate(prompts):
        start = i - i % args.batch_size
        rid = engine.submit(p, params.replace(seed=params.seed + start), prompt_index=i - start, max_len=args.max_len)
        line_of[rid] = i
    done: dict[int, list] = {}
    written = 0
    with open(args.output, "w") as out, tqdm(total=total, unit="tok", desc="generate", file=sys.stderr) as bar:
        while written < len(prompts):
            for rid, completions in engine.step().items():
                done[line_of[rid]] = completions
                bar.update(params.n * params.max_new_tokens)
            while written in done:
                for c in done.pop(written):
                    record = c.to_json()
                    record["line"] = written
                    out.write(json.dumps(record) + "\n")
                written += 1
    return 0
