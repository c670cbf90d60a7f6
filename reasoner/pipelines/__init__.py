"""End-to-end pipelines that chain data, evaluation and trainers (one module per experiment family)."""
