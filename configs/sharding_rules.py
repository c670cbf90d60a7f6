"""The project's table mapping the model's logical axis names to mesh axes `data, fsdp, tensor`.

A logical axis maps to one mesh axis, a tuple of mesh axes, or None (replicated). Callers pass
this table to `reasoner.sharding` (`logical_spec`, `state_shardings`, ...; the library never
imports `configs`); a config can carry another as `config.sharding_rules`. A mesh axis that does
not divide its dimension is an error naming the parameter (e.g. SmolLM2's 9 heads on tensor=2):
pick a mesh that divides it, or map that logical axis to None here.
"""

from reasoner.sharding import DEFAULT_RULES, MESH_AXES  # noqa: F401 - MESH_AXES re-exported for configs

RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = DEFAULT_RULES
