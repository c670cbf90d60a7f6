"""`reasoner bench generate --json`: our jitted sampler vs transformers `generate`, same process.

Both load SmolLM2 (f32) from the same GGUF; each setting generates exactly `new_tokens` greedy
tokens (EOS disabled on both sides) after prompts of exactly `prompt_len` tokens cut from real
text. Timings are interleaved (ours, baseline, ours, ...) so machine load hits both alike; each
figure is a median of `--repeats` runs after one warm-up. `compile_s` is our first call's time
minus our median (compilation and first-touch costs). One JSON object per setting:
{"batch", "prompt_len", "new_tokens", "ours_tok_s", "baseline_tok_s", "ratio", "compile_s",
 "ours_decode_step_ms", "projection_floor_ms", "baseline_projection_floor_ms", "packed_projection_floor_ms",
 "engine_tok_s", "engine_ratio",
 "engine_decode_step_ms"}.
`*_decode_step_ms` is one decode step of the whole batch: the time of the decode phase alone (after the
prefill has finished) over its steps (`baseline_decode_step_ms`: transformers' `generate` of N tokens less its
`generate` of one token, over N - 1); with batches 1 and 16 the two rows show how far the batched step is
from the single-row one. `projection_floor_ms` is the step's matmuls alone at that batch (projections and the
vocabulary head over weights of the model's shapes, no attention or sampling: `train_common.decode_matmul_chain`),
the floor no decode step goes under with XLA's matmuls on this machine: the batch-16 floor over the batch-1 step
bounds how close the two steps can come, and the baseline's time per token over our floor bounds the ratio.
`baseline_projection_floor_ms` is the same chain on the same weights through PyTorch (`F.linear`, the baseline's
GEMM library), timed interleaved with ours: where the two floors are equal, a ratio above baseline step / floor
cannot come from faster matmuls. `packed_projection_floor_ms` is the chain through the engine's packed small-row
matmul (`train_common.packed_matmul_chain`, `reasoner.sampling.packed_weights`; absent where the native kernels
do not build), the floor under `engine_decode_step_ms`. `engine_*` is the rollout engine (`RolloutEngine`, paged cache, `batch` slots).
`engine_spec_*` is the engine with prompt-lookup speculative decoding (`--speculate k`, see
`reasoner.sampling.speculative`): `engine_spec_tokens_per_pass` is a row's decode tokens over the decode forward
passes the batch ran (N - 1 over passes: the slowest row's pace at batch > 1; 1.0 without speculation), `engine_spec_same_tokens` whether every row's tokens equal the static sampler's and
`baseline_same_tokens` whether they equal transformers'. At batch 1 transformers runs its own prompt lookup too
(`generate(prompt_lookup_num_tokens=k)`, batch 1 only): `baseline_lookup_tok_s` and `engine_spec_ratio_vs_lookup`,
the like-for-like comparison.
With two or more batches, a last object compares the engine's decode step at the largest batch with the smallest,
the two timed in alternation: {"engine_step_ratio_batches", "engine_step_ms_interleaved", "engine_step_ratio",
"rounds"} (the rows' own `engine_decode_step_ms` are minutes apart).
"""

from __future__ import annotations

import json
import time

from reasoner.cli.arg_types import positive_number


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="jitted KV-cache sampler vs transformers generate (tokens/s)")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--batches", default="1,16", help="comma-separated batch sizes")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=positive_number(int), default=3)
    p.add_argument("--no-engine", action="store_true", help="skip the rollout engine's figures")
    p.add_argument("--speculate", type=int, default=8,
                   help="draft tokens per step of the engine's prompt-lookup speculation (0: skip those figures)")
    p.add_argument("--json", action="store_true", help="print only the JSON lines")
    p.set_defaults(func=run)


def _prompts(tokenizer, *, batch: int, length: int) -> list[list[int]]:
    """`batch` different prompts of exactly `length` tokens from a fixed English text."""
    from reasoner.tokenization import chat_ids

    base = (
        "Anne is red. If someone is red then they are kind. Bob is big. If someone is big and kind then "
        "they are round. Charlie is not young. All kind people are smart. Dave is green and cold. "
    )
    out = []
    for i in range(batch):
        ids = chat_ids(tokenizer, [{"role": "user", "content": f"Problem {i}: " + base * 20}])
        out.append(ids[:length])
    return out


def run(args) -> int:
    import os
    import statistics

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from reasoner.models.loading import load_model
    from reasoner.models.presets import resolve
    from reasoner.sampling import Sampler, SamplingParams
    from reasoner.tokenization import load_tokenizer
    from transformers import AutoModelForCausalLM

    from reasoner.sampling.rollout_engine import RolloutEngine

    path = resolve(args.model)
    tokenizer = load_tokenizer(path)
    ours_model = load_model(path)
    ours = Sampler(ours_model, tokenizer)
    torch.set_grad_enabled(False)
    theirs = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                  dtype=torch.float32).eval()
    theirs.generation_config.eos_token_id = None  # exactly new_tokens tokens, like ours with eos_ids=()
    N = args.new_tokens
    params = SamplingParams(max_new_tokens=N, temperature=0.0, eos_ids=())

    engines = {}  # batch -> (engine, prompts), for the interleaved step ratio after the loop
    for batch in (int(b) for b in args.batches.split(",")):
        prompts = _prompts(tokenizer, batch=batch, length=args.prompt_len)
        ids = torch.tensor(prompts, dtype=torch.long)
        mask = torch.ones_like(ids)

        outputs = {}

        def run_ours():
            outputs["ours"] = out = ours.generate(prompts, params)
            assert all(c.num_tokens == N for c in out)

        def run_theirs(**lookup):
            out = theirs.generate(input_ids=ids, attention_mask=mask, max_new_tokens=N, do_sample=False, pad_token_id=0,
                                  **lookup)
            assert out.shape[1] == args.prompt_len + N
            outputs["theirs"] = out[:, args.prompt_len:].numpy()

        t = time.perf_counter()
        run_ours()
        first = time.perf_counter() - t
        run_theirs()  # warm-up
        times_ours, times_theirs = [], []
        for _ in range(args.repeats):
            for fn, times in ((run_ours, times_ours), (run_theirs, times_theirs)):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
        ours_s, theirs_s = statistics.median(times_ours), statistics.median(times_theirs)
        theirs_first_s = statistics.median(_timed(lambda: theirs.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=1, do_sample=False, pad_token_id=0), args.repeats))
        row = {
            "batch": batch, "prompt_len": args.prompt_len, "new_tokens": N,
            "ours_tok_s": round(batch * N / ours_s, 2), "baseline_tok_s": round(batch * N / theirs_s, 2),
            "ratio": round(theirs_s / ours_s, 3), "compile_s": round(max(first - ours_s, 0.0), 2),
            "ours_decode_step_ms": round(1e3 * _decode_step_s(
                lambda: ours.start(prompts, params), lambda s: s.run(), steps=N - 1, repeats=args.repeats), 2),
            "baseline_decode_step_ms": round(1e3 * max(theirs_s - theirs_first_s, 0.0) / (N - 1), 2),
        }
        floors = _projection_floors_s(ours_model.cfg, batch, repeats=args.repeats)
        row.update(projection_floor_ms=round(1e3 * floors[0], 2),
                   baseline_projection_floor_ms=round(1e3 * floors[1], 2))
        if floors[2] is not None:
            row["packed_projection_floor_ms"] = round(1e3 * floors[2], 2)
        if not args.no_engine:
            engine = RolloutEngine(ours_model, tokenizer, slots=batch, chunk_steps=N)
            engine.generate(prompts, params)  # compile
            times_engine = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                out = engine.generate(prompts, params)
                times_engine.append(time.perf_counter() - t)
                assert all(c.num_tokens == N for c in out)
            engine_s = statistics.median(times_engine)
            row.update(engine_tok_s=round(batch * N / engine_s, 2), engine_ratio=round(theirs_s / engine_s, 3),
                       engine_decode_step_ms=round(1e3 * _engine_step_s(engine, prompts, params, steps=N - 1,
                                                                        repeats=args.repeats), 2))
            engines[batch] = (engine, prompts)
        if not args.no_engine and args.speculate:
            row.update(_speculative_row(ours_model, tokenizer, prompts, params, args, outputs, run_theirs, theirs_s))
        if not args.json:
            row["ours_s"] = [round(x, 3) for x in times_ours]
            row["baseline_s"] = [round(x, 3) for x in times_theirs]
        print(json.dumps(row), flush=True)
    if len(engines) >= 2:
        print(json.dumps(_step_ratio_row(engines, params, rounds=max(args.repeats, 5))), flush=True)
    return 0


def _step_ratio_row(engines: dict, params, *, rounds: int) -> dict:
    """The engine's decode step at the largest batch over the step at the smallest, the two measured in alternation
    (`rounds` rounds, one timed decode of every batch each; medians), so that a drift of the machine between the
    settings' rows, minutes apart, does not enter the ratio."""
    import statistics

    small, large = min(engines), max(engines)
    times = {b: [] for b in (small, large)}
    for _ in range(rounds):
        for b in (small, large):
            engine, prompts = engines[b]
            times[b].append(_engine_step_s(engine, prompts, params, steps=params.max_new_tokens - 1, repeats=1))
    step = {b: statistics.median(t) for b, t in times.items()}
    return {"engine_step_ratio_batches": [small, large], "engine_step_ms_interleaved": {
        str(b): round(1e3 * s, 2) for b, s in step.items()}, "engine_step_ratio": round(step[large] / step[small], 3),
        "rounds": rounds}


def _speculative_row(model, tokenizer, prompts, params, args, outputs, run_theirs, theirs_s) -> dict:
    """The engine with prompt-lookup speculation against the same baseline (and, at batch 1, against transformers'
    own prompt lookup, timed interleaved with ours)."""
    import statistics

    import numpy as np

    from reasoner.sampling.rollout_engine import RolloutEngine

    batch, N = len(prompts), params.max_new_tokens
    # the engine's default chunks (not one chunk of N steps): a row that finishes early leaves the batch, and the
    # rows left may draft more tokens a pass (`draft_budget`)
    engine = RolloutEngine(model, tokenizer, slots=batch, speculate=args.speculate)
    first = engine.generate(prompts, params)  # compile
    row = {"engine_spec_k": args.speculate,
           "engine_spec_same_tokens": all(np.array_equal(a.tokens, b.tokens) for a, b in zip(first, outputs["ours"])),
           "baseline_same_tokens": all(np.array_equal(c.tokens, t) for c, t in zip(first, outputs["theirs"]))}
    lookup = batch == 1
    if lookup:
        run_theirs(prompt_lookup_num_tokens=args.speculate)  # warm-up
    times, times_lookup, passes = [], [], 0
    for _ in range(args.repeats):
        before = int(engine.state.passes)
        t = time.perf_counter()
        engine.generate(prompts, params)
        times.append(time.perf_counter() - t)
        passes = int(engine.state.passes) - before
        if lookup:
            t = time.perf_counter()
            run_theirs(prompt_lookup_num_tokens=args.speculate)
            times_lookup.append(time.perf_counter() - t)
    spec_s = statistics.median(times)
    row.update(engine_spec_tok_s=round(batch * N / spec_s, 2), engine_spec_ratio=round(theirs_s / spec_s, 3),
               engine_spec_tokens_per_pass=round((N - 1) / passes, 2))
    if lookup:
        lookup_s = statistics.median(times_lookup)
        row.update(baseline_lookup_tok_s=round(batch * N / lookup_s, 2),
                   engine_spec_ratio_vs_lookup=round(lookup_s / spec_s, 3))
    return row


def _timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def _projection_floors_s(cfg, batch: int, *, repeats: int) -> tuple[float, float, float | None]:
    """Median seconds of the decode step's matmuls alone at this batch, through XLA
    (`train_common.decode_matmul_chain`: the floor under the static sampler's `ours_decode_step_ms`, whatever
    attention and sampling cost), through PyTorch on the same weights (`torch_matmul_chain`: the baseline's own
    floor) and through the engine's packed matmul (`packed_matmul_chain`; None where it does not build),
    interleaved."""
    import statistics

    import jax
    import numpy as np
    import torch

    from reasoner.benchmarks.train_common import decode_matmul_chain, packed_matmul_chain, torch_matmul_chain

    fn, weights = decode_matmul_chain(cfg, rows=batch)
    torch_fn = torch_matmul_chain(weights)
    packed = packed_matmul_chain(weights)
    x = np.random.default_rng(1).standard_normal((batch, cfg.hidden_size), np.float32)
    x_jax, x_torch = jax.numpy.asarray(x), torch.from_numpy(x)
    chains = [lambda: fn(x_jax, weights).block_until_ready(), lambda: torch_fn(x_torch)]
    if packed is not None:
        chains.append(lambda: packed[0](x_jax, packed[1]).block_until_ready())
    times: tuple[list[float], ...] = tuple([] for _ in chains)
    for call in range(max(repeats, 5) + 1):  # each chain's first call compiles / warms up and is not timed
        for chain, timed in zip(chains, times):
            t = time.perf_counter()
            chain()
            if call:
                timed.append(time.perf_counter() - t)
    medians = [statistics.median(t) for t in times]
    return medians[0], medians[1], medians[2] if packed is not None else None


def _decode_step_s(start, decode, *, steps: int, repeats: int) -> float:
    """Median seconds per decode step: `start()` prefills (timed apart, waited for), `decode(session)` runs."""
    import statistics

    import jax

    times = []
    for _ in range(repeats):
        session = start()
        jax.block_until_ready(session.state.count_B)
        t = time.perf_counter()
        decode(session)
        times.append((time.perf_counter() - t) / steps)
    return statistics.median(times)


def _engine_step_s(engine, prompts, params, *, steps: int, repeats: int) -> float:
    """The same for the rollout engine: admission and prefill first, then the decode chunks alone."""
    import statistics

    import jax

    times = []
    for _ in range(repeats):
        ids = [engine.submit(p, params, prompt_index=i) for i, p in enumerate(prompts)]
        engine._admit()
        jax.block_until_ready(engine.state.count_S)
        t = time.perf_counter()
        done = engine.collect()
        times.append((time.perf_counter() - t) / steps)
        assert sorted(done) == sorted(ids)
    return statistics.median(times)
