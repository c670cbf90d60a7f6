"""A trained navigator read back from its DQN run, to be used with another LLM (the paper's transfer across models).

    nav = load_navigator("runs/rlot/navigator")   # or the demo's workdir, or `reasoner train configs/rlot.py` workdir
    actions = nav.act(obs_Nx7)                     # greedy int32[n]; nav.q_values(obs) float32[n, 5]

The navigator sees only the 7 self-evaluation scores, never the LLM, so the network trained with one model can steer
another: `reasoner demo rlot --config.demo.navigator=DIR --config.demo.model=OTHER` evaluates it that way.

What is read: the newest checkpoint of `<run>/checkpoints` (`trainers.dqn` on the run loop writes them with
`reasoner.checkpoint.RunCheckpoints`: the flattened `DQNState`, its JSON meta with a checksum per array) whose arrays
read back and match their checksums; older ones are tried when a newer one is damaged. Nothing in the run directory
is moved or written (this is a reader, unlike a resuming trainer). The network's sizes come from the stored arrays,
so a navigator of any buffer size or width loads; its `online` parameters are the navigator (the greedy policy
`train_dqn` returns).
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax.numpy as jnp
from flax import nnx

from reasoner.agents.rlot.navigator import GreedyNavigator, Navigator


class NavigatorLoadError(ValueError):
    """The path holds no readable navigator."""


@dataclasses.dataclass(frozen=True)
class TrainedNavigator(GreedyNavigator):
    """A navigator restored from a DQN run: `act` / `q_values` as `trainers.dqn.DQNResult`'s (both a
    `GreedyNavigator`), and where it came from (`source` checkpoint directory, the run loop's `step`, `episodes`
    trained, optimizer `updates`)."""

    graphdef: object
    params: object
    source: str
    step: int
    episodes: int
    updates: int

    @property
    def online_params(self):
        return self.params


def run_directory(path) -> pathlib.Path:
    """The DQN run directory at `path` or at `path/navigator` (a demo's workdir): the one holding `checkpoints/`."""
    path = pathlib.Path(path)
    for candidate in (path, path / "navigator"):
        if (candidate / "checkpoints").is_dir():
            return candidate
    raise NavigatorLoadError(f"navigator {path}: no checkpoints/ in it or in {path / 'navigator'}; expected the "
                             f"workdir of a navigator training run (reasoner train configs/rlot.py, or a demo's)")


def _read(manager, step: int) -> tuple[dict, dict]:
    import orbax.checkpoint as ocp

    from reasoner.checkpoint import state_checksums

    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                                             meta=ocp.args.JsonRestore()))
    flat, meta = dict(restored["state"]), dict(restored["meta"])
    saved = meta.get("checksums")
    if saved is not None and state_checksums(flat) != saved:
        raise NavigatorLoadError("array checksums differ from the saved ones")
    return flat, meta


def _navigator_from(flat: dict, where: str):
    """(graphdef, params) of a `Navigator` sized by the stored `online/...` arrays."""
    from reasoner.checkpoint import flatten_state, unflatten_state

    online = {k[len("online/"):]: v for k, v in flat.items() if k.startswith("online/")}
    try:
        inputs, hidden = online["trunk/kernel/value"].shape
        actions = online["adv_out/kernel/value"].shape[1]
    except KeyError as err:
        raise NavigatorLoadError(f"{where}: no navigator parameter {err} among the stored arrays; expected a DQN "
                                 f"checkpoint of reasoner's trainers.dqn") from None
    graphdef, params = nnx.split(Navigator(rngs=nnx.Rngs(0), num_inputs=int(inputs), num_actions=int(actions),
                                           hidden=int(hidden)))
    template = flatten_state(params)
    bad = [k for k, v in template.items() if k not in online or tuple(online[k].shape) != tuple(v.shape)]
    if bad or len(online) != len(template):
        raise NavigatorLoadError(f"{where}: stored navigator arrays do not form a Dueling navigator "
                                 f"({inputs} -> {hidden} -> {actions}); first mismatch {(bad or sorted(online))[0]!r}")
    return graphdef, unflatten_state(params, {k: jnp.asarray(online[k], v.dtype) for k, v in template.items()})


def load_navigator(path) -> TrainedNavigator:
    """The navigator of the newest intact checkpoint of the DQN run at `path` (module docstring)."""
    import orbax.checkpoint as ocp

    run = run_directory(path).absolute()
    manager = ocp.CheckpointManager(run / "checkpoints", item_names=("state", "data", "meta"),
                                    options=ocp.CheckpointManagerOptions(read_only=True))
    problems = []
    try:
        for step in sorted(manager.all_steps(), reverse=True):
            where = f"{run / 'checkpoints' / str(step)}"
            try:
                flat, meta = _read(manager, step)
            except Exception as err:  # noqa: BLE001 - any read failure: try the next older checkpoint
                problems.append(f"step {step}: {type(err).__name__}: {' '.join(str(err).split())[:120]}")
                continue
            if meta.get("trainer") != "dqn":
                raise NavigatorLoadError(f"{where}: a checkpoint of trainer {meta.get('trainer')!r}; expected a "
                                         f"navigator (trainer 'dqn')")
            graphdef, params = _navigator_from(flat, where)
            return TrainedNavigator(graphdef=graphdef, params=params, source=where, step=int(meta.get("step", step)),
                                    episodes=int(flat["episodes"]), updates=int(flat["updates"]))
    finally:
        manager.close()
    raise NavigatorLoadError(f"navigator {run}: no intact checkpoint in {run / 'checkpoints'}"
                             + (f" ({'; '.join(problems)})" if problems else " (it is empty)"))
