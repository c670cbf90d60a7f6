"""`reasoner serve --model M [--host 127.0.0.1] [--port 8000] [--max-batch 16] [--batch-wait-ms 20] [--max-len N]`.

An OpenAI-compatible server (`/v1/models`, `/v1/chat/completions`) over the continuous-batching rollout engine
(`--engine paged`, the default) or the static sampler (`--engine static`); see `reasoner.serve`. Logs to stderr: the
URL once listening, one line per finished request (`request of R rows: T tokens in S s`; static: one per decoded
batch, `batch of K requests, R rows: ...`), and `shut down` after SIGTERM/SIGINT, which stop accepting, finish the
queued requests and exit 0.

Why paged by default: requests of a server end at different lengths and arrive at any time; the engine admits each
between two decode chunks and compiles a bounded set of shapes (batch and length buckets), where the static sampler
compiles one program per batch size and token budget it meets (`reasoner bench rollout`'s serve workload, 16 clients
with long-tailed budgets, exhausted its memory compiling).
"""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="OpenAI-compatible HTTP server over the jitted sampler")
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="preset, .gguf file, HF directory (an export, LoRA merged) or a directory with export/")
    p.add_argument("--tokenizer", default=None, help="default: the checkpoint's own, else the embedded SmolLM2's")
    p.add_argument("--served-name", default=None, help="model id in /v1/models (default: the --model name)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 = any free port (the log names it)")
    p.add_argument("--max-batch", type=int, default=16, help="rows (samples, counting n) decoded together")
    p.add_argument("--batch-wait-ms", type=float, default=20.0, help="how long a batch collects arriving requests")
    p.add_argument("--max-len", type=int, default=None,
                   help="cache slots per row, prompt + completion (default: min(2048, the model's positions))")
    p.add_argument("--default-max-tokens", type=int, default=512, help="max_tokens of a request that names none")
    p.add_argument("--max-body-bytes", type=int, default=4 << 20)
    p.add_argument("--engine", default="paged", choices=("static", "paged"),
                   help="static: the jitted sampler, requests arriving within --batch-wait-ms share a batch that "
                        "decodes to its longest row; paged: the continuous-batching engine (a request joins the "
                        "running rows within one decode chunk; per-request budgets, stops and seeds)")
    p.add_argument("--speculate", type=int, default=0,
                   help="paged engine: draft tokens a decode step verifies per row by prompt lookup (the same tokens "
                        "in fewer steps where answers repeat the prompt; pays most with few concurrent requests; "
                        "0 = off)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="weights and activations")
    p.add_argument("--verbose", action="store_true", help="also log every HTTP request")
    p.set_defaults(func=run)


def _check(args) -> None:
    for flag, value, low in (("--max-batch", args.max_batch, 1), ("--default-max-tokens", args.default_max_tokens, 1),
                             ("--max-body-bytes", args.max_body_bytes, 1), ("--port", args.port, 0)):
        if value < low:
            raise ValueError(f"{flag}={value}: expected an integer >= {low}")
    if args.port > 65535:
        raise ValueError(f"--port={args.port}: expected at most 65535")
    if args.batch_wait_ms < 0:
        raise ValueError(f"--batch-wait-ms={args.batch_wait_ms}: expected a number >= 0")
    if args.speculate < 0:
        raise ValueError(f"--speculate={args.speculate}: expected an integer >= 0")
    if args.speculate and args.engine != "paged":
        raise ValueError(f"--speculate={args.speculate}: speculative decoding runs on the paged engine, not "
                         f"--engine {args.engine}")
    if args.max_len is not None and args.max_len < 2:
        raise ValueError(f"--max-len={args.max_len}: expected an integer >= 2")


def run(args) -> int:
    import logging
    import signal
    import sys
    import threading

    _check(args)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    log = logging.getLogger("reasoner.serve")
    from reasoner.models import load_model
    from reasoner.serve import build_server
    from reasoner.serve.model_source import check_vocabulary, resolve_model
    from reasoner.tokenization import load_tokenizer

    source = resolve_model(args.model, tokenizer=args.tokenizer, name=args.served_name)
    tokenizer = load_tokenizer(source.tokenizer)
    model = load_model(source.checkpoint, param_dtype=args.dtype, dtype=args.dtype)
    check_vocabulary(tokenizer, model.cfg.vocab_size, source=source)
    max_len = args.max_len or min(2048, int(model.cfg.max_position_embeddings))
    server = build_server(model, tokenizer, model_name=source.name, host=args.host, port=args.port,
                          max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms, max_len=max_len,
                          default_max_tokens=args.default_max_tokens, max_body_bytes=args.max_body_bytes,
                          engine=args.engine, speculate=args.speculate)
    closing = threading.Event()

    def stop(signum, _frame):
        if not closing.is_set():
            closing.set()
            log.info("%s: finishing queued requests, then shutting down", signal.Signals(signum).name)
            threading.Thread(target=server.close_gracefully, name="reasoner-serve-shutdown").start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("serving %s (%s) at %s: %s engine, max batch %d rows, batch wait %g ms, max len %d", source.name,
             source.checkpoint, server.url, args.engine, args.max_batch, args.batch_wait_ms, max_len)
    server.serve_forever()
    if closing.is_set():
        server.service.batcher.close()
        server.tracker.wait_idle(600.0)
    log.info("shut down")
    return 0
