"""The one table mapping the model's logical axis names to mesh axes `data, fsdp, tensor`.

A logical axis maps to one mesh axis, a tuple of mesh axes, or None (replicated).
`reasoner.sharding` drops a mesh axis from a dimension it does not divide (e.g. SmolLM2's 9
heads on tensor=2), so every preset loads on every mesh; that dimension is then replicated.
"""

MESH_AXES = ("data", "fsdp", "tensor")

RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    ("batch", ("data", "fsdp")),
    ("seq", None),
    ("cache_seq", None),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
    ("lora_rank", None),
)
