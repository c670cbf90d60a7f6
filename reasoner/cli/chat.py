"""`reasoner chat --model M --prompt "..."`: one chat turn, streamed to the terminal as it is generated."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("chat", help="answer a chat prompt with the jitted sampler, streaming the text")
    p.add_argument("--model", default="smollm2-135m-instruct", help="preset name, .gguf file or HF directory")
    p.add_argument("--prompt", required=True, help="the user message")
    p.add_argument("--system", default=None, help="optional system message")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--chunk-steps", type=int, default=8, help="decode steps between text updates")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from reasoner.models import load_model
    from reasoner.models.presets import resolve
    from reasoner.sampling import Sampler, SamplingParams
    from reasoner.tokenization import chat_ids, load_tokenizer

    path = resolve(args.model)
    tokenizer = load_tokenizer(path)
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
        {"role": "user", "content": args.prompt}]
    try:
        params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                                top_p=args.top_p, seed=args.seed, stop=tuple(args.stop))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sampler = Sampler(load_model(path), tokenizer)
    session = sampler.start([chat_ids(tokenizer, messages)], params)

    def show(_row: int, delta: str) -> None:
        sys.stdout.write(delta)
        sys.stdout.flush()

    (completion,) = session.run(on_text=show, chunk_steps=args.chunk_steps)
    sys.stdout.write("\n")
    print(f"[{completion.num_tokens} tokens, finish: {completion.finish_reason}]", file=sys.stderr)
    return 0
