"""Host-side verifiers: a CPU-only process pool, the Z3 runner, entailment statuses, the code sandbox,
SMT-LIB structure helpers and trajectory curation.

Importing this package imports nothing heavy: the pool's workers import only the standard library,
`z3` and the task modules they are asked to run (never JAX or transformers).
"""
