"""Host-side verifiers.

Modules:
  pool          persistent CPU-only worker processes (deadline, absolute memory cap, recycling, kill
                escalation, crash isolation, bounded queue, futures, counters, optional jail);
                `worker` is their entry point
  z3_runner     SMT-LIB scripts through Z3 (`run_script` in a worker, `Z3Runner` over a jailed pool);
                file-touching options and `include` refused before Z3 sees them
  entailment    inconsistent / entailed / contradicted / possible / unresolved, and equivalence
  sandbox       model-written `transform(x)` on held-out tests, each test in a locked-down process;
                `isolation_report()` lists the layers this host gives (CI checks EXPECTED_LAYERS)
  sandbox_child the sandbox's child program and `lock_down` (namespaces, hidden host dirs, read-only /,
                private /tmp, uid nobody, rlimits, seccomp), shared with the jailed pool workers
  smtlib        S-expression parsing, comments, triviality, grammar productions, Jensen-Shannon
  curation      grounding, per-call attributes, Gold / Silver / Rejected, DPO pairs
  probe_tasks   tiny tasks exercising every pool outcome (tests, health checks, benchmark)

Importing this package imports nothing heavy: the pool's workers import only the standard library,
`z3` and the task modules they are asked to run (never JAX or transformers).
"""
