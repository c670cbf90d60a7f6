"""`reasoner bench astar`: host A* (search.astar, Python) against the jitted batched kernel (search.kernel).

Default: 1,024 DeepRD problems at the paper's ranges (L 5..10, B 4..8); for each heuristic, the median of
`--repeats` timed runs of the host reference over all problems and of the kernel over the whole batch, run in
interleaved pairs so both see the same machine load (compile excluded and reported as compile_s), and agreement =
fraction of problems whose w*_G, push trace, pop sequence, pop count and |V_pops| are identical. The top-level
figures are for `--heuristic` (default zero = Dijkstra, the most pops); `per_heuristic` holds all three, each with
the agenda that ran it (`kernel_queue`: "auto" takes the frontier queue for the zero heuristic and a one-pop queue
otherwise) and its mean/max pops. `pack_s` is the host compile of the problems to padded tensors (done once per
batch, shared by the three heuristics, not in the kernel's problems/s; the host reference is likewise given
precompiled hypergraphs; it computes its heuristic inside each call, the kernel on device, except the dependency
heuristic's relaxed-graph grounding, which the kernel receives from pack).

`--scaling`: layered programs of 64 .. 4,096 atoms (`kernel_corpus.scaling_program`), a batch of
`--scaling-batch` per size, the agenda implementations (dense and blocked one-pop queues, and the frontier queue):
problems/s of host and kernel.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from reasoner.cli.arg_types import positive_number

HEURISTICS = ("zero", "dependency", "true")


def register(subparsers) -> None:
    p = subparsers.add_parser("astar", help="host A* vs the jitted batched A* kernel (problems/s, agreement)")
    p.add_argument("--json", action="store_true", help="print JSON (one object; with --scaling one per line)")
    p.add_argument("--problems", type=int, default=1024, help="DeepRD problems (default 1024)")
    p.add_argument("--heuristic", choices=HEURISTICS, default="zero", help="heuristic of the top-level figures")
    p.add_argument("--queue", choices=("auto", "frontier", "dense", "blocked", "packed"), default="auto")
    p.add_argument("--sub-batches", type=int, default=1,
                   help="group problems by predicted pops into this many loops per device (1: one loop)")
    p.add_argument("--repeats", type=positive_number(int), default=3,
                   help="timed runs per measurement (median reported)")
    p.add_argument("--shards", type=int, default=0,
                   help="split the batch over this many devices (0: all local devices; on CPU one per core)")
    p.add_argument("--scaling", action="store_true", help="throughput by problem size for both queues")
    p.add_argument("--sizes", default="64,256,1024,4096", help="atom counts for --scaling")
    p.add_argument("--scaling-batch", type=int, default=32, help="problems per size for --scaling")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_run)


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _agreement(res, host) -> float:
    import numpy as np

    r = {k: np.asarray(v) for k, v in vars(res).items()}
    same = 0
    for i, ref in enumerate(host):
        same += (float(r["weight_B"][i]) == float(ref.weight)
                 and r["trace_BxM"][i, : r["pushes_B"][i]].tolist() == list(ref.edge_trace)
                 and r["popped_BxN"][i, : r["pops_B"][i]].tolist() == list(ref.popped)
                 and int(r["v_pops_B"][i]) == ref.v_pops)
    return same / max(1, len(host))


def _setup(shards: int):
    """Mesh over `shards` local devices (None for one). On CPU, expose one XLA device per core if not yet set."""
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={os.cpu_count() or 1}")
    import jax
    import numpy as np

    n = shards or jax.local_device_count()
    if n <= 1:
        return None, 1
    return jax.sharding.Mesh(np.array(jax.devices()[:n]), ("data",)), n


def _measure(problems, *, heuristics, queue: str, repeats: int, mesh, shards: int, sub_batches: int = 1) -> dict:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from search.astar import solve
    from search.kernel import astar_batch, from_hypergraph
    from search.kernel_tensors import pack_batch, to_device

    t0 = time.perf_counter()
    batch = pack_batch([from_hypergraph(hg, hg.goal_id(g), name=name) for name, hg, g in problems],
                       pad_batch_to=shards)
    batch = to_device(batch, NamedSharding(mesh, PartitionSpec("data")) if mesh is not None else None)
    jax.block_until_ready(batch)
    pack_s = time.perf_counter() - t0
    out = {"pack_s": round(pack_s, 4), "padded_sizes": dict(zip(("atoms", "hyperedges", "premises", "out_degree"),
                                                                   batch.sizes))}
    per = {}
    for h in heuristics:
        def kernel():
            jax.block_until_ready(astar_batch(batch, heuristic=h, queue=queue, mesh=mesh, sub_batches=sub_batches))

        t0 = time.perf_counter()
        kernel()
        first = time.perf_counter() - t0
        host = []

        def run_host():
            host[:] = [solve(hg, g, heuristic=h) for _, hg, g in problems]

        # interleaved (kernel, host) pairs: on a shared machine the load drifts, and both sides should see the same
        kernel_t, host_t = [], []
        for _ in range(max(1, repeats)):
            kernel_t.append(_median_time(kernel, 1))
            host_t.append(_median_time(run_host, 1))
        kernel_s, host_s = statistics.median(kernel_t), statistics.median(host_t)
        res = astar_batch(batch, heuristic=h, queue=queue, mesh=mesh, sub_batches=sub_batches)
        n = len(problems)
        per[h] = {"host_problems_per_s": round(n / host_s, 1), "kernel_problems_per_s": round(n / kernel_s, 1),
                  "speedup": round(host_s / kernel_s, 2), "agreement": _agreement(res, host),
                  "compile_s": round(max(0.0, first - kernel_s), 3),
                  "kernel_queue": "frontier" if queue == "auto" and h == "zero" else queue,
                  "mean_pops": round(statistics.fmean(r.pops for r in host), 1), "max_pops": max(r.pops for r in host)}
    out["per_heuristic"] = per
    return out


def _run(args) -> int:
    mesh, shards = _setup(args.shards)
    import jax

    from reasoner.benchmarks.kernel_corpus import deeprd_problems, scaling_program

    device = f"{jax.devices()[0].platform} x{shards}"
    if args.scaling:
        from search.hypergraph import compile_program

        rows = []
        for size in [int(s) for s in args.sizes.split(",") if s]:
            problems = []
            for k in range(args.scaling_batch):
                program, goal = scaling_program(size, seed=args.seed + k)
                problems.append((f"scaling-{size}-{k}", compile_program(program), goal))
            for queue in ("dense", "blocked", "frontier"):
                m = _measure(problems, heuristics=(args.heuristic,), queue=queue, repeats=args.repeats, mesh=mesh,
                             shards=shards)
                row = {"benchmark": "astar_scaling", "atoms": size, "queue": queue, "problems": len(problems),
                       "heuristic": args.heuristic, "device": device, **m["per_heuristic"][args.heuristic],
                       "padded_sizes": m["padded_sizes"]}
                rows.append(row)
                if args.json:
                    print(json.dumps(row), flush=True)
        if not args.json:
            print(f"{'atoms':>6} {'queue':>8} {'host/s':>10} {'kernel/s':>10} {'speedup':>8} {'agree':>6} "
                  f"{'compile_s':>9} {'pops':>7}")
            for r in rows:
                print(f"{r['atoms']:>6} {r['queue']:>8} {r['host_problems_per_s']:>10} "
                      f"{r['kernel_problems_per_s']:>10} {r['speedup']:>8} {r['agreement']:>6} "
                      f"{r['compile_s']:>9} {r['mean_pops']:>7}")
        return 0 if all(r["agreement"] == 1.0 for r in rows) else 1

    problems = deeprd_problems(args.problems, seed=args.seed, split="test")
    m = _measure(problems, heuristics=HEURISTICS, queue=args.queue, repeats=args.repeats, mesh=mesh, shards=shards,
                 sub_batches=args.sub_batches)
    top = m["per_heuristic"][args.heuristic]
    result = {"benchmark": "astar", "dataset": "deeprd (L 5..10, B 4..8)", "problems": len(problems),
              "heuristic": args.heuristic, "host_problems_per_s": top["host_problems_per_s"],
              "kernel_problems_per_s": top["kernel_problems_per_s"], "speedup": top["speedup"],
              "agreement": top["agreement"], "compile_s": top["compile_s"], "queue": args.queue, "device": device,
              "repeats": args.repeats, **m}
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0 if all(v["agreement"] == 1.0 for v in m["per_heuristic"].values()) else 1
