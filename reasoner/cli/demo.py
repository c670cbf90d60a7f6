"""`reasoner demo [astar|rlot] --workdir DIR [--config FILE[:VARIANT]] [--config.a.b=v ...]`: the main job.

Runs the A* post-training pipeline (`reasoner.pipelines.astar`) on the embedded SmolLM2-135M-Instruct: a CPU-sized
DeepRD split, A* traces, greedy evaluation of the base model, SFT on the traces, GRPO with the A*-dependency reward,
evaluation again; prints the before/after table (accuracy, efficiency pushes / pops, 95% intervals) and writes
DIR/report/astar.json and DIR/report/astar.png. Default config: configs/astar_demo.py:cpu (`make demo`).
`reasoner demo rlot` runs RL-of-Thoughts (`reasoner.pipelines.rlot`, default configs/rlot.py:cpu): navigator vs
direct / CoT / CoT-SC table, block patterns, DIR/report/report.json and DIR/report/rlot_training.png.
`reasoner demo smt` runs Sequent-Prover (`reasoner.pipelines.smt`, default configs/smt_demo.py:cpu): teacher
trajectories, curation, SFT, student rollouts, DPO and the K = 4 evaluation table, DIR/report/smt.json and smt.png;
`--teacher-endpoint URL` takes the teacher from an OpenAI-compatible server, `--data-dir` the staged data.
`reasoner demo cedar` runs CEDAR-GRPO (`reasoner.pipelines.cedar`, default configs/cedar_demo.py:cpu): the scaled
App. A.1 mixture, base eval, GRPO with the judged composite reward, eval again; DIR/report/report.json,
cedar_table.md and cedar_rewards.png; `--judge-endpoint URL` judges through an OpenAI-compatible server.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import pathlib
import sys


@dataclasses.dataclass(frozen=True)
class Method:
    """How `reasoner demo METHOD` starts its pipeline; every pipeline has run(config, workdir=, progress=) -> dict."""

    config: str  # default config under configs/ (FILE:VARIANT)
    pipeline: str  # module of the pipeline
    done_key: str  # the report's entry a finished run fills (empty or missing: the run produced nothing: exit 1)
    endpoint: tuple[str, str] | None = None  # (argument, config section): `--x-endpoint URL` sets section.endpoint
    data_key: str | None = None  # the config entry ("section.key") that `--data-dir` sets
    user_errors: tuple[type[Exception], ...] = ()  # raised for bad input (data, config): one line on stderr, exit 2


METHODS = {
    "astar": Method("astar_demo.py:cpu", "reasoner.pipelines.astar", "reports"),
    "rlot": Method("rlot.py:cpu", "reasoner.pipelines.rlot", "methods", data_key="demo.data_root"),
    "smt": Method("smt_demo.py:cpu", "reasoner.pipelines.smt", "reports", endpoint=("teacher_endpoint", "teacher"),
                  data_key="data.data_root", user_errors=(FileNotFoundError,)),
    "cedar": Method("cedar_demo.py:cpu", "reasoner.pipelines.cedar", "models", endpoint=("judge_endpoint", "judge"),
                    data_key="data.data_dir", user_errors=(FileNotFoundError, ValueError)),
}


def _flags_of(method: Method) -> set[str]:
    return ({method.endpoint[0]} if method.endpoint else set()) | ({"data_dir"} if method.data_key else set())


def default_config(method: str = "astar") -> str:
    import configs

    return str(pathlib.Path(configs.__file__).resolve().parent / METHODS[method].config)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="A* post-training end to end on the embedded model (before/after table)",
        description="Data -> base eval -> SFT -> eval -> GRPO -> eval; --config.KEY=VALUE overrides any entry.")
    parser.add_argument("method", nargs="?", default=None, choices=sorted(METHODS),
                        help="astar (default): A* post-training; rlot: RL-of-Thoughts navigator vs baselines; "
                             "smt: Sequent-Prover teacher -> SFT -> DPO; cedar: CEDAR-GRPO (mixture -> eval -> GRPO "
                             "-> eval)")
    parser.add_argument("--teacher-endpoint", default=None, metavar="URL",
                        help="smt: an OpenAI-compatible teacher (e.g. a `reasoner serve` URL ending in /v1) instead "
                             "of the symbolic teacher")
    parser.add_argument("--data-dir", default=None, help="rlot, smt, cedar: the staged data (default ../shared/data)")
    parser.add_argument("--judge-endpoint", default=None, metavar="URL",
                        help="cedar: an OpenAI-compatible judge (e.g. a `reasoner serve` URL ending in /v1) instead "
                             "of the embedded model in-process")
    from reasoner.cli.arg_types import local_workdir

    parser.add_argument("--workdir", required=True, type=local_workdir,
                        help="output directory (data, checkpoints, report)")
    parser.add_argument("--config", default=None, metavar="FILE[:VARIANT]",
                        help="default: the method's configs/<method config>:cpu (astar_demo.py, rlot.py, smt_demo.py, "
                             "cedar_demo.py); without a method, the config's own pipeline is run")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.set_defaults(func=run)
    from reasoner.cli.overrides import accept_config_overrides

    accept_config_overrides(parser)


def load(spec: str | None, overrides, method: str = "astar") -> object:
    from reasoner.config import load_config

    return load_config(spec or default_config(method), list(overrides or []))


def use_single_device(config) -> None:
    """Drops the simulated-device flag before JAX starts when the config asks for one device: on a CPU the
    simulated devices split the same cores and only add collectives."""
    if not config.get("single_device") or "jax" in sys.modules:
        return
    flags = os.environ.get("XLA_FLAGS", "").split()
    kept = [f for f in flags if not f.startswith("--xla_force_host_platform_device_count")]
    if len(kept) != len(flags):
        os.environ["XLA_FLAGS"] = " ".join(kept)


def method_of(config) -> str | None:
    """The demo a config is for: its `pipeline`, or "rlot" for the navigator's config (a dqn trainer with a demo
    section); None when it names none of them."""
    if config.get("pipeline") in METHODS:
        return config.pipeline
    if config.get("trainer") == "dqn" and "demo" in config:
        return "rlot"
    return None


def _refused(name: str, message: str) -> int:
    print(f"reasoner demo {name}: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from reasoner.config import ConfigKeyError

    asked = getattr(args, "method", None)
    try:
        if getattr(args, "config", None):  # the method may come from the config (`demo --config configs/smt_demo.py`)
            config = load(args.config, getattr(args, "config_overrides", []))
            found = method_of(config)
            if asked and found and found != asked:
                return _refused(asked, f"{args.config} is a config of the {found} demo; run `reasoner demo {found}` "
                                       f"or give a {asked} config (default {METHODS[asked].config})")
            name = asked or found or "astar"
        else:
            name = asked or "astar"
            config = load(None, getattr(args, "config_overrides", []), name)
    except (ConfigKeyError, FileNotFoundError, ValueError) as err:
        print(f"reasoner demo: {err}", file=sys.stderr)
        return 2
    method = METHODS[name]
    # a flag this demo does not read is an error, not silently ignored
    flags = {"teacher_endpoint": "--teacher-endpoint", "judge_endpoint": "--judge-endpoint", "data_dir": "--data-dir"}
    for attr, flag in flags.items():
        if getattr(args, attr, None) and attr not in _flags_of(method):
            return _refused(name, f"{flag} is not used by this demo (it is for: "
                                  f"{', '.join(m for m, spec in METHODS.items() if attr in _flags_of(spec))})")
    use_single_device(config)
    from trainers.run import use_config_rules  # starts JAX: after the device choice above

    use_config_rules(config)  # the config's sharding table, before any model is laid out
    if method.endpoint and getattr(args, method.endpoint[0], None):
        config[method.endpoint[1]].endpoint = getattr(args, method.endpoint[0])
    if method.data_key and getattr(args, "data_dir", None):
        section, key = method.data_key.split(".")
        config[section][key] = args.data_dir
    try:
        report = importlib.import_module(method.pipeline).run(config, workdir=args.workdir,
                                                              progress=not args.no_progress)
    except method.user_errors as err:
        print(f"reasoner demo {name}: {err}", file=sys.stderr)
        return 2
    return 0 if report.get("preempted") or report.get(method.done_key) else 1  # preempted: checkpointed, resumable
