"""Host-side verifiers.

Modules:
  pool          persistent CPU-only worker processes (deadline, memory cap, recycling, kill escalation,
                crash isolation, bounded queue, futures, counters); `worker` is their entry point
  z3_runner     SMT-LIB scripts through Z3 (`run_script` in a worker, `Z3Runner` over the pool)
  entailment    inconsistent / entailed / contradicted / possible / unresolved, and equivalence
  sandbox       model-written `transform(x)` on held-out tests, each test in a locked-down process
  smtlib        S-expression parsing, comments, triviality, grammar productions, Jensen-Shannon
  curation      grounding, per-call attributes, Gold / Silver / Rejected, DPO pairs
  probe_tasks   tiny tasks exercising every pool outcome (tests, health checks, benchmark)

Importing this package imports nothing heavy: the pool's workers import only the standard library,
`z3` and the task modules they are asked to run (never JAX or transformers).
"""
