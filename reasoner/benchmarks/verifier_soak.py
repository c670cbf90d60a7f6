"""`reasoner bench verifier --soak N --json`: N mixed calls through the verifier pools, hostile ones included.

The mix (fractions of N, fixed order from a seeded shuffle): valid SMT with a known verdict
(pigeonhole refutations, entailment chains, integer puzzles), hostile SMT (file-touching options and
`include`, refused; a memory-out followed by `(get-model)`; malformed text), hanging SMT (Fermat cubes:
Z3's timeout), and code-sandbox payloads (a correct transform, an infinite loop, a memory bomb,
`_posixsubprocess.fork_exec`, a socket, a write outside). Z3 runs in a jailed `Z3Runner`, the code
in a second pool of `--workers` unjailed workers (the sandbox builds its own jail per test). At most
`2 * workers` calls are in flight per pool; a warm-up call per worker comes first (not counted).

Reported: throughput, end-to-end latency p50/p95/p99 (submit to result), per-kind counts and
`wrong_outcomes` (calls whose outcome was not the one their kind must give), the pools' restarts and
recycles, `leaked_processes` (descendants of this process after both pools closed, plus new processes
of uid nobody re-parented to PID 1: must be 0), and resident memory of this process and of
the workers at the first and last decile of the run (`*_growth_mb`: must stay flat).
"""

from __future__ import annotations

import collections
import json
import os
import random
import statistics
import threading
import time

FERMAT = ("(declare-const x Int)(declare-const y Int)(declare-const z Int)(assert (> x 2))(assert (> y 2))"
          "(assert (> z 2))(assert (= (+ (* x x x) (* y y y)) (* z z z)))(check-sat)")
MEMOUT = ("(declare-const x (_ BitVec 4096))(declare-const y (_ BitVec 4096))"
          "(assert (= (bvmul x y) (bvnot (_ bv0 4096))))(assert (bvugt x (_ bv1 4096)))"
          "(assert (bvugt y (_ bv1 4096)))(assert (bvult x y))(check-sat)(get-model)")
CODE = {
    "code_ok": ("def transform(x):\n    return [2 * v for v in x]\n", None),
    "code_loop": ("def transform(x):\n    while True:\n        pass\n", "timeout"),
    "code_memory": ("def transform(x):\n    return bytearray(10 ** 10)\n", "memory"),
    "code_fork_exec": ("import _posixsubprocess, os\ndef transform(x):\n    r, w = os.pipe()\n"
                       "    return _posixsubprocess.fork_exec([b'/bin/true'], [b'/bin/true'], True, (), None, None,"
                       " -1, -1, -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1, None, False)\n",
                       "permission"),
    "code_socket": ("import socket\ndef transform(x):\n    socket.create_connection(('127.0.0.1', 22), timeout=1)\n",
                    "permission"),
    "code_write_outside": ("def transform(x):\n    open('/work/soak_probe.txt', 'w').write('x')\n", "audit_hook"),
}
# kind -> fraction of the calls (the rest is valid SMT)
MIX = {"smt_refused": 0.04, "smt_memout": 0.01, "smt_malformed": 0.03, "smt_hang": 0.01,
       "code_ok": 0.02, "code_loop": 0.002, "code_memory": 0.008, "code_fork_exec": 0.01, "code_socket": 0.01,
       "code_write_outside": 0.01}


def add_arguments(parser) -> None:
    parser.add_argument("--soak", type=int, default=0, help="run N mixed (valid, hostile, hanging) calls instead")
    parser.add_argument("--soak-seed", type=int, default=0)


def _valid_scripts() -> list[tuple[str, str]]:
    from reasoner.benchmarks.verifier import entailment_chain, integer_puzzle, pigeonhole

    return [(pigeonhole(4), "unsat"), (pigeonhole(5), "unsat"), (entailment_chain(8, negate_goal=True), "unsat"),
            (entailment_chain(8, negate_goal=False), "sat"), (integer_puzzle(8), "sat")]


def plan(n: int, seed: int) -> list[str]:
    """The kinds of the N calls, in the order they are submitted."""
    kinds = [kind for kind, share in MIX.items() for _ in range(round(share * n))]
    kinds += ["smt_valid"] * max(0, n - len(kinds))
    random.Random(seed).shuffle(kinds)
    return kinds[:n]


def _orphaned_nobody_pids() -> set[int]:
    """Processes of uid nobody whose parent is PID 1 (re-parented: a sandbox or jail left them behind).
    Live sandboxes of other programs on the host keep their parent (the jail's reaper)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid != 65534:
                    continue
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) in (0, 1):
                        pids.add(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def _outcome_ok(kind: str, value, expected_verdict: str | None) -> bool:
    if kind == "smt_valid":
        return value.success and value.sat_result == expected_verdict
    if kind == "smt_refused":
        return (value.error or "").startswith("refused before Z3 ran")
    if kind == "smt_memout":
        return (value.error or "").startswith("memory:")
    if kind == "smt_malformed":
        return not value.success and value.error is not None
    if kind == "smt_hang":
        return value.sat_result == "unknown" and "timeout" in (value.error or "")
    if not value.ok:  # code kinds: the pool call itself must succeed
        return False
    outcome = value.value.tests[0]
    expected = CODE[kind][1]
    return outcome.passed if expected is None else outcome.limit == expected


def run_soak(args) -> int:
    from reasoner.verifiers.pool import VerifierPool, descendant_pids, resident_bytes
    from reasoner.verifiers.sandbox import SandboxLimits
    from reasoner.verifiers.z3_runner import Z3Runner

    if args.soak < 10 or args.workers < 1:
        raise SystemExit(f"bench verifier: --soak must be >= 10 and --workers >= 1, got {args.soak}, {args.workers}")
    kinds = plan(args.soak, args.soak_seed)
    valid = _valid_scripts()
    limits = SandboxLimits(timeout_s=3.0)
    nobody_before, descendants_before = _orphaned_nobody_pids(), descendant_pids()
    latencies, wrong, counts = [], collections.Counter(), collections.Counter(kinds)
    samples = {"parent": [], "workers": []}
    lock = threading.Lock()
    start = time.perf_counter()
    with Z3Runner(workers=args.workers, timeout_s=1.0, memory_mb=64, isolate="auto") as z3, \
            VerifierPool(workers=args.workers, deadline_s=limits.timeout_s + 3.0, memory_mb=512) as code_pool:
        # Warm-up, not measured: every worker imports z3 / the sandbox once, so the first decile of
        # the RSS samples is a warm pool, as the last one is.
        z3.solve_batch([valid[0][0]] * (2 * args.workers))
        code_pool.map("reasoner.verifiers.sandbox:run_transform_tests",
                      [(CODE["code_ok"][0], [([1], [2])])] * (2 * args.workers), task_kwargs={"limits": limits})
        slots = {"z3": threading.Semaphore(2 * args.workers), "code": threading.Semaphore(2 * args.workers)}
        remaining = [len(kinds)]
        finished = threading.Event()
        for index, kind in enumerate(kinds):
            which = "code" if kind.startswith("code") else "z3"
            slots[which].acquire()
            expected = None
            if kind == "smt_valid":
                script, expected = valid[index % len(valid)]
            submitted = time.perf_counter()
            if which == "z3":
                script = {"smt_refused": ['(set-option :regular-output-channel "/work/soak.txt")(check-sat)',
                                          '(include "/etc/passwd")(check-sat)'][index % 2],
                          "smt_memout": MEMOUT, "smt_malformed": '(assert (> x" (((',
                          "smt_hang": FERMAT}.get(kind, script if kind == "smt_valid" else None)
                # Only the hanging kind meets Z3's 1 s timeout; the others get 10 s, so that a starved
                # host (load 30 on 2 cores was seen) cannot turn a verdict or a memory-out into a timeout.
                future = z3.submit(script, timeout_s=1.0 if kind == "smt_hang" else 10.0)
            else:
                future = code_pool.submit("reasoner.verifiers.sandbox:run_transform_tests", CODE[kind][0],
                                          [([1], [2])], task_kwargs={"limits": limits})

            def done(f, kind=kind, expected=expected, submitted=submitted, which=which):
                elapsed = time.perf_counter() - submitted
                ok = _outcome_ok(kind, f.result(), expected)
                with lock:
                    latencies.append(elapsed)
                    if not ok:
                        wrong[kind] += 1
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        finished.set()
                slots[which].release()
            future.add_done_callback(done)  # no list of futures kept: the parent's RSS is the pools' own
            if index % max(1, len(kinds) // 50) == 0:
                pids = z3.pool.worker_pids() + code_pool.worker_pids()
                samples["parent"].append(resident_bytes(os.getpid()))
                samples["workers"].append(sum(resident_bytes(p) for p in pids) / max(1, len(pids)))
        finished.wait()
        elapsed = time.perf_counter() - start
        z3_stats, code_stats = z3.pool.stats(), code_pool.stats()
    time.sleep(0.5)
    leaked_descendants = len(descendant_pids() - descendants_before)
    leaked_orphans = len(_orphaned_nobody_pids() - nobody_before)
    leaked = leaked_descendants + leaked_orphans
    ordered = sorted(latencies)

    def pct(q):
        return round(1e3 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    mb = 1 / (1024 * 1024)
    k = max(1, len(samples["parent"]) // 10)  # samples in a decile of the run
    first = {name: statistics.fmean(values[:k]) * mb for name, values in samples.items()}
    last = {name: statistics.fmean(values[-k:]) * mb for name, values in samples.items()}
    report = {"soak_calls": len(kinds), "workers": args.workers, "cpus": os.cpu_count(), "seconds": round(elapsed, 2),
              "calls_per_s": round(len(kinds) / elapsed, 2), "latency_p50_ms": pct(0.5),
              "latency_p95_ms": pct(0.95), "latency_p99_ms": pct(0.99),
              "latency_mean_ms": round(1e3 * statistics.fmean(ordered), 2),
              "kinds": dict(sorted(counts.items())), "wrong_outcomes": dict(wrong),
              "z3_restarts": z3_stats["restarts"], "z3_recycled": z3_stats["recycled"],
              "code_pool_restarts": code_stats["restarts"], "leaked_processes": leaked,
              "leaked_descendants": leaked_descendants, "leaked_nobody_orphans": leaked_orphans,
              "parent_rss_first_decile_mb": round(first["parent"], 1),
              "parent_rss_last_decile_mb": round(last["parent"], 1),
              "parent_rss_growth_mb": round(last["parent"] - first["parent"], 1),
              "worker_rss_first_decile_mb": round(first["workers"], 1),
              "worker_rss_last_decile_mb": round(last["workers"], 1),
              "worker_rss_growth_mb": round(last["workers"] - first["workers"], 1),
              "z3_pool": z3_stats, "code_pool": code_stats, "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0 if leaked == 0 and not wrong else 1
