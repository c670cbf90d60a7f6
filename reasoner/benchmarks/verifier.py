"""`reasoner bench verifier --json`: throughput and per-call overhead of Z3 through the verifier pool.

A fixed mix of generated scripts (pigeonhole refutations, ProntoQA-style entailment chains, linear
integer puzzles; all sat/unsat known) is run
  * serially and in-process with `run_script` (the bare baseline: no pool, no IPC), and
  * through a `Z3Runner` with `--workers` processes (default 2, the cores of the target host).
Reported, medians over `--repeats` runs: scripts per second both ways and their ratio (`speedup`),
and the p95 (and p50) over the 8 distinct scripts of (pool latency at concurrency 1 - bare in-process
time; median of 3 interleaved samples), in ms: what the pool costs one call (pipes, pickling, thread
hand-offs, process wake-ups). Timings are wall clock, so a host
shared with other jobs lowers `speedup` (the second worker has no free core) without any change here.
"""

from __future__ import annotations

import json
import os
import statistics
import time


def register(subparsers) -> None:
    parser = subparsers.add_parser("verifier", help="Z3 through the verifier pool vs in-process")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=4, help="copies of the base mix of 8 scripts")
    parser.set_defaults(func=run)


def pigeonhole(holes: int) -> str:
    """holes+1 pigeons into `holes` holes: unsat, and exponentially hard for resolution."""
    pigeons = holes + 1
    lines = [f"(declare-const p{i}_{j} Bool)" for i in range(pigeons) for j in range(holes)]
    lines += [f"(assert (or {' '.join(f'p{i}_{j}' for j in range(holes))}))" for i in range(pigeons)]
    lines += [f"(assert (not (and p{i}_{j} p{k}_{j})))"
              for j in range(holes) for i in range(pigeons) for k in range(i + 1, pigeons)]
    return "\n".join(lines + ["(check-sat)"])


def entailment_chain(length: int, *, negate_goal: bool) -> str:
    """ProntoQA-shaped: every A_i is an A_{i+1}; x is an A_0; query A_length(x) by refutation."""
    lines = ["(declare-sort Thing 0)", "(declare-const max Thing)"]
    lines += [f"(declare-fun a{i} (Thing) Bool)" for i in range(length + 1)]
    lines += [f"(assert (forall ((x Thing)) (=> (a{i} x) (a{i + 1} x))))" for i in range(length)]
    goal = f"(a{length} max)"
    lines += ["(assert (a0 max))", f"(assert (not {goal}))" if negate_goal else f"(assert {goal})"]
    return "\n".join(lines + ["(check-sat)"])


def integer_puzzle(n: int) -> str:
    """n distinct integers in [1, n] with a sum constraint: sat with a model."""
    lines = [f"(declare-const v{i} Int)" for i in range(n)]
    lines += [f"(assert (and (>= v{i} 1) (<= v{i} {n})))" for i in range(n)]
    lines += [f"(assert (distinct {' '.join(f'v{i}' for i in range(n))}))",
              f"(assert (> (+ v0 v1) {n}))", "(check-sat)", "(get-model)"]
    return "\n".join(lines)


def script_mix(copies: int) -> list[str]:
    base = [pigeonhole(6), pigeonhole(7), entailment_chain(15, negate_goal=True),
            entailment_chain(30, negate_goal=True), integer_puzzle(12), integer_puzzle(20),
            pigeonhole(5), entailment_chain(10, negate_goal=True)]
    return base * copies


def _overhead_ms(runner, run_script, script: str, samples: int = 3) -> float:
    """Median over interleaved samples of (pool call at concurrency 1 - bare call), in ms."""
    deltas = []
    for _ in range(samples):
        t0 = time.perf_counter()
        run_script(script)
        t1 = time.perf_counter()
        runner.solve(script)
        t2 = time.perf_counter()
        deltas.append(((t2 - t1) - (t1 - t0)) * 1e3)
    return statistics.median(deltas)


def run(args) -> int:
    from reasoner.verifiers.z3_runner import Z3Runner, run_script

    scripts = script_mix(args.copies)
    serial_rates, pool_rates, overheads_ms, medians_ms = [], [], [], []
    with Z3Runner(workers=args.workers) as runner:
        runner.solve_batch(scripts[:args.workers * 2])  # warm the workers' z3 import
        for _ in range(args.repeats):
            start = time.perf_counter()
            bare = [run_script(s) for s in scripts]
            serial_rates.append(len(scripts) / (time.perf_counter() - start))

            start = time.perf_counter()
            pooled = runner.solve_batch(scripts)
            pool_rates.append(len(scripts) / (time.perf_counter() - start))
            assert [r.sat_result for r in pooled] == [r.sat_result for r in bare], "pool and bare disagree"

            deltas = sorted(_overhead_ms(runner, run_script, s) for s in scripts[:len(scripts) // args.copies])
            overheads_ms.append(deltas[min(len(deltas) - 1, int(0.95 * len(deltas)))])
            medians_ms.append(statistics.median(deltas))
        stats = runner.pool.stats()
    serial, pooled_rate = statistics.median(serial_rates), statistics.median(pool_rates)
    report = {"scripts": len(scripts), "workers": args.workers, "cpus": os.cpu_count(),
              "serial_per_s": round(serial, 3), "pool_per_s": round(pooled_rate, 3),
              "speedup": round(pooled_rate / serial, 3),
              "p95_overhead_ms": round(statistics.median(overheads_ms), 3),
              "p50_overhead_ms": round(statistics.median(medians_ms), 3),
              "repeats": args.repeats, "load_avg_1m": round(os.getloadavg()[0], 2),
              "pool_stats": stats}
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0
