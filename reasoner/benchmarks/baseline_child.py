"""The PyTorch/TRL side of the training benchmarks, run in a child process under a chosen malloc environment.

Why a child process: glibc's malloc settings are fixed when a process starts (`reasoner.allocator`), and they
move PyTorch's step time as much as ours (TRL's SFT step in fresh processes of one run: 4.47 s under glibc
defaults, 3.59 s tuned).
So each benchmark measures the baseline twice, in fresh processes: as TRL users run it (glibc defaults: `default`)
and under the same settings as our side (`same`), and reports both ratios. A fresh process also keeps TRL's steps
away from XLA's live thread pool and buffers (in one process they measured 10-25% slower after our steps ran).

Protocol: the parent exports the weights as an HF directory, writes the request as JSON (plain values; arrays
go to an .npz beside it) and runs `python -m reasoner.benchmarks.baseline_child REQUEST.json RESULT.json`; the
child calls `reasoner.benchmarks.<request["benchmark"]>.baseline(request)`, which returns
{"step_s": [seconds per measured step], "first_loss": float}, and writes it to RESULT.json.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ENVS = ("default", "same")


def environ(kind: str) -> dict[str, str]:
    """The child's environment: `default` strips our malloc tunables, `same` is this process's own."""
    from reasoner import allocator

    if kind == "default":
        return allocator.default_environ(os.environ)
    if kind == "same":
        return dict(os.environ)
    raise ValueError(f"baseline environment {kind!r}: expected one of {ENVS}")


def run(request: dict, *, kind: str, arrays: dict | None = None, timeout_s: float = 3600.0) -> dict:
    """Runs `request` in a child process under `environ(kind)`; returns its result plus {"malloc": ...}."""
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="reasoner-baseline-") as tmp:
        req = dict(request)
        if arrays:
            np.savez(f"{tmp}/arrays.npz", **arrays)
            req["arrays"] = f"{tmp}/arrays.npz"
        pathlib.Path(f"{tmp}/request.json").write_text(json.dumps(req))
        cmd = [sys.executable, "-m", "reasoner.benchmarks.baseline_child", f"{tmp}/request.json",
               f"{tmp}/result.json"]
        proc = subprocess.run(cmd, env=environ(kind), timeout=timeout_s, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"baseline {request['benchmark']!r} ({kind} environment) exited with "
                               f"{proc.returncode}:\n{tail}")
        return json.loads(pathlib.Path(f"{tmp}/result.json").read_text())


def load_arrays(request: dict) -> dict:
    import numpy as np

    with np.load(request["arrays"]) as f:
        return {k: f[k] for k in f.files}


def load_model(model_dir: str):
    """The exported weights as a float32 transformers model (transformers refuses to train GGUF models)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def main(argv: list[str]) -> int:
    from reasoner import allocator

    request_path, result_path = argv
    request = json.loads(pathlib.Path(request_path).read_text())
    module = importlib.import_module(f"reasoner.benchmarks.{request['benchmark']}")
    result = dict(module.baseline(request))
    result["malloc"] = allocator.describe()
    pathlib.Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
