"""The project's table mapping the model's logical axis names to mesh axes `data, fsdp, tensor`.

A logical axis maps to one mesh axis, a tuple of mesh axes, or None (replicated). `trainers.run.use_config_rules`
installs this table (or a config's own `config.sharding_rules`) in `reasoner.sharding` (`set_rules`) at every
trainer's setup and every `reasoner train / demo / eval`; the library never imports `configs`. A mesh axis that does
not divide its dimension is an error naming the parameter (e.g. SmolLM2's 9 heads on tensor=2):
pick a mesh that divides it, or map that logical axis to None here.
"""

from reasoner.sharding import DEFAULT_RULES, MESH_AXES  # noqa: F401 - MESH_AXES re-exported for configs

RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = DEFAULT_RULES
