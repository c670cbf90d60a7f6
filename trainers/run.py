"""`setup(config) -> Run`: the one way every trainer assembles a run (mesh, model, LoRA, frozen weights, optimizer,
state).

    run = setup(config, total_steps=iterator.total_steps)             # SFT / DPO / GRPO alike
    run = with_reference(run)                                         # DPO and GRPO: the frozen reference
    model = run.model(run.state.params)                               # the policy as an NNX Decoder

Parameters travel as pure nested dicts of arrays (`nnx.to_pure_dict`); the model is rebuilt inside a jitted step
with `nnx.merge(run.graphdef, params, frozen.base)` (DESIGN: split at the jit boundary). What the step reads but
never updates is ONE typed value, `Frozen(base, reference)`: `base` is the non-trainable part of the policy (the
whole model under LoRA except its adapters; nothing but buffers otherwise) and `reference` the trainable part of the
reference model (None when the trainer has none). `reference_params` is the one rule for it: the adapter-free base
under LoRA (zero adapters add exactly nothing), else a copy of the starting weights.

LoRA has one path (`add_lora`): adapters from `config.lora` with `lora.seed`, laid out on the mesh like the base;
`lora.quantize_base` (`quantize_base`) then stores the base's projection kernels in NF4 or int8 (QLoRA).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from trainers.optim import make_optimizer
from trainers.state import TrainState, create_state


@struct.dataclass(frozen=True)
class Frozen:
    """Weights a step reads and never updates. base: pure dict of the policy's non-trainable variables;
    reference: pure dict shaped like the trainable params (the reference model's), or None."""

    base: Any
    reference: Any = None


@dataclasses.dataclass(frozen=True)
class Shardings:
    """NamedSharding trees: params (like `state.params`), frozen (a `Frozen`), state (a `TrainState`), and the
    replicated sharding of scalars and metrics."""

    params: Any
    frozen: Frozen
    state: TrainState
    replicated: NamedSharding


@dataclasses.dataclass(frozen=True)
class Run:
    """Everything a trainer's step, loop and export need; built once by `setup`, never mutated (use `replace`)."""

    config: Any
    mesh: Mesh
    graphdef: nnx.GraphDef
    frozen: Frozen
    shardings: Shardings
    optimizer: optax.GradientTransformation
    schedule: optax.Schedule
    state: TrainState
    model_cfg: Any
    tokenizer: Any
    lora: bool

    def model(self, params=None, *, reference: bool = False):
        """The NNX Decoder with `params` (default: the state's; `reference=True`: the frozen reference)."""
        params = self.frozen.reference if reference else (self.state.params if params is None else params)
        return nnx.merge(self.graphdef, params, self.frozen.base)

    def replace(self, **changes) -> Run:
        return dataclasses.replace(self, **changes)


# ---------------------------------------------------------------------------------------------- model
def model_config_from(model_cfg):
    """`config.model` -> ModelConfig for a randomly initialised model (`model_cfg.random` section)."""
    from reasoner.models import ModelConfig

    fields = dict(model_cfg.random)
    return ModelConfig(**fields, param_dtype="float32", dtype=model_cfg.dtype, remat=bool(model_cfg.remat))


def build_model(model_cfg, *, mesh: Mesh):
    """The decoder named by `config.model`: `name` (preset / GGUF / HF dir) or `random` dims with `seed`.

    Master weights are float32; `model_cfg.dtype` is the compute dtype (bfloat16 for mixed precision).
    """
    from reasoner.models import Decoder, load_model

    if model_cfg.get("name"):
        return load_model(model_cfg.name, mesh=mesh, param_dtype="float32", dtype=model_cfg.dtype,
                          remat=bool(model_cfg.remat))
    model = Decoder(model_config_from(model_cfg), rngs=nnx.Rngs(int(model_cfg.seed)))
    return laid_out(model, mesh)


def laid_out(model, mesh: Mesh):
    """`model` with every variable placed by its logical axes on `mesh`."""
    from reasoner.sharding import state_shardings

    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.device_put(state, state_shardings(state, mesh)))


def add_lora(model, lora_cfg, *, mesh: Mesh):
    """(model, whether adapters were added): LoRA adapters when `lora.rank > 0`, seeded by `lora.seed`.

    Adapter dropout would need a key per step inside the jitted step, which these trainers do not thread through
    the model, so `lora.dropout` must be 0."""
    if not lora_cfg.rank:
        return model, False
    if lora_cfg.get("dropout", 0.0):
        raise ValueError(f"lora.dropout={lora_cfg.dropout}: the trainers support only 0 (no adapter dropout)")
    from reasoner.models.lora import apply_lora

    apply_lora(model, pattern=lora_cfg.pattern, rank=int(lora_cfg.rank), alpha=float(lora_cfg.alpha), dropout=0.0,
               rngs=nnx.Rngs(int(lora_cfg.get("seed", 0))))
    return laid_out(model, mesh), True


QUANTIZE_BASE = ("none", "nf4", "int8")


def quantize_base(model, lora_cfg, *, lora: bool, mesh: Mesh):
    """`model` whose projection kernels are stored quantized when `lora.quantize_base` is "nf4" or "int8" (QLoRA:
    the frozen base in `Frozen.base` is the quantized one; adapters, embeddings, norms stay float). Needs LoRA."""
    kind = lora_cfg.get("quantize_base", "none") or "none"
    if kind not in QUANTIZE_BASE:
        raise ValueError(f"lora.quantize_base={kind!r}: expected one of {QUANTIZE_BASE}")
    if kind == "none":
        return model
    if not lora:
        raise ValueError(f"lora.quantize_base={kind!r} needs LoRA (lora.rank > 0): a quantized base cannot be trained")
    from reasoner.models.quant import quantize_projections

    quantize_projections(model, kind=kind)
    return laid_out(model, mesh)


def load_tokenizer_for(model_cfg):
    """The tokenizer of `model.tokenizer` (or the model itself); preset names resolve to their files first."""
    from reasoner.models.presets import resolve
    from reasoner.tokenization import load_tokenizer

    return load_tokenizer(resolve(model_cfg.tokenizer or model_cfg.name))


def merged_for_export(run: Run, params):
    """The model with `params`; LoRA adapters (if any) folded into the base kernels, ready for export."""
    from reasoner.models.lora import merge_lora

    model = run.model(params)
    if run.lora:
        merge_lora(model)
    return model


def export_run(run: Run, params, out_dir, *, base_model: str | None = None) -> str:
    """Writes `params` as a complete HF checkpoint in `out_dir` (`reasoner.models.export.export_hf`: LoRA adapters
    folded in, and written apart in PEFT's format); returns out_dir.

    base_model: what the adapter names as its base; None = the run's `config.model.name`, the checkpoint it was
    trained on; "" = none (a caller that passed its own model in, whose base that name does not hold)."""
    from reasoner.models.export import export_hf

    if base_model is None:
        base_model = run.config.model.get("name")
    return export_hf(merged_for_export(run, params), str(out_dir), tokenizer=run.tokenizer,
                     base_model_name_or_path=base_model or None)


def best_params(result, *, workdir, best_metric: str, best_mode: str = "min", meta: dict):
    """(params, step): those of the checkpoint `workdir/best/` keeps for `best_metric`, or (the final params, None)
    when it holds none (no evaluation ran). `meta` is what the run's checkpoints must match (trainer, fingerprint)."""
    from reasoner.checkpoint import RunCheckpoints

    ckpt = RunCheckpoints(workdir, best_metric=best_metric, best_mode=best_mode, async_save=False)
    try:
        step = ckpt.best_step()
        if step is None:
            return result.state.params, None
        best, _, _ = ckpt.restore(result.state, expected_meta=meta, which="best")
        return best.params, step
    finally:
        ckpt.close()


# ---------------------------------------------------------------------------------------------- shardings
def split_trainable(model, *, lora: bool):
    """(graphdef, trainable pure dict, frozen pure dict, trainable nnx.State, frozen nnx.State)."""
    graphdef, trainable, frozen = nnx.split(model, nnx.LoRAParam if lora else nnx.Param, ...)
    return graphdef, nnx.to_pure_dict(trainable), nnx.to_pure_dict(frozen), trainable, frozen


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def pure_shardings(state: nnx.State, mesh: Mesh) -> dict:
    """Pure-dict tree of NamedShardings matching `nnx.to_pure_dict(state)` (logical axes -> mesh axes)."""
    from reasoner.sharding import logical_sharding

    out: dict = {}
    for path, var in nnx.to_flat_state(state):
        axes = var.get_metadata().get("logical_axes")
        shape = var[...].shape if hasattr(var, "__getitem__") else var.shape
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = replicated(mesh) if axes is None else logical_sharding(axes, shape, mesh)
    return out


def state_sharding(params_sharding: dict, optimizer: optax.GradientTransformation, params: dict,
                   mesh: Mesh) -> TrainState:
    """TrainState of shardings: optimizer moments follow their parameter; counters replicated."""
    opt_shape = jax.eval_shape(optimizer.init, params)
    opt_sharding = optax.tree_map_params(
        optimizer, lambda _, s: s, opt_shape, params_sharding,
        transform_non_params=lambda _: replicated(mesh))
    return TrainState(step=replicated(mesh), params=params_sharding, opt_state=opt_sharding)


def init_state(params: dict, optimizer, *, sharding: TrainState) -> TrainState:
    """A fresh state laid out on `sharding` (built inside jit, so no full copy lands on one device)."""
    return jax.jit(lambda p: create_state(p, optimizer), out_shardings=sharding)(params)


# ---------------------------------------------------------------------------------------------- setup
def use_config_rules(config) -> None:
    """Installs the sharding rules `config` names (`config.sharding_rules`, else configs/sharding_rules.RULES) as
    the process's table (`reasoner.sharding.set_rules`): the one place a config's table reaches the library."""
    from configs.sharding_rules import RULES
    from reasoner.sharding import set_rules

    set_rules(config.get("sharding_rules") or RULES)


def setup(config, *, total_steps: int, model=None, devices=None, mesh: Mesh | None = None, tokenizer=None) -> Run:
    """The run of `config` for `total_steps` optimizer steps (the schedule's length).

    model: a Decoder to start from (e.g. the SFT result); default `config.model`. devices: a subset for tests
    (default all); mesh: an already built mesh (wins over `devices`). tokenizer: default from `config.model`.
    """
    from reasoner.sharding import make_mesh

    use_config_rules(config)
    mesh = mesh if mesh is not None else make_mesh(config.mesh, devices=devices)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer_for(config.model)
    model = model if model is not None else build_model(config.model, mesh=mesh)
    model, lora = add_lora(model, config.lora, mesh=mesh)
    model = quantize_base(model, config.lora, lora=lora, mesh=mesh)
    graphdef, params, frozen, trainable_state, frozen_state = split_trainable(model, lora=lora)
    optimizer, schedule = make_optimizer(config.optim, total_steps=total_steps)
    params_sh = pure_shardings(trainable_state, mesh)
    state_sh = state_sharding(params_sh, optimizer, params, mesh)
    shardings = Shardings(params=params_sh, frozen=Frozen(base=pure_shardings(frozen_state, mesh)),
                          state=state_sh, replicated=replicated(mesh))
    state = init_state(params, optimizer, sharding=state_sh)
    return Run(config=config, mesh=mesh, graphdef=graphdef, frozen=Frozen(base=frozen), shardings=shardings,
               optimizer=optimizer, schedule=schedule, state=state, model_cfg=model.cfg, tokenizer=tokenizer,
               lora=lora)


@dataclasses.dataclass(frozen=True)
class RowsRun:
    """A run over a tokenized dataset (SFT, DPO): train rows (dict of [N, ...] arrays), validation rows or None,
    the preparation stats, the `BatchIterator` over the train rows and the jitted step."""

    run: Run
    rows: dict
    val_rows: dict | None
    stats: Any
    iterator: Any
    step: Any


def rows_update(s: RowsRun, *, reduce=None, token_keys=("segment_ids",)):
    """`update(state, host_batch) -> (state, host metrics)` for `run_loop` over `s.iterator`: `s.step` on the global
    batch, its metrics as floats through `reduce` (a trainer's host means; None: as they are), the preparation's
    truncated / dropped counts, the epoch, and the batch's non-padding tokens over `token_keys`."""
    import numpy as np

    from reasoner.data.pipeline import to_global_batch

    def update(state, host_batch):
        state, metrics = s.step(state, s.run.frozen, to_global_batch(host_batch, s.run.mesh))
        host = {k: float(v) for k, v in jax.device_get(metrics).items()}
        host = reduce(host) if reduce is not None else host
        host.update(truncated=s.stats.truncated, dropped=s.stats.dropped,
                    epoch=(s.iterator.step - 1) // s.iterator.steps_per_epoch,
                    batch_tokens=sum(int(np.count_nonzero(host_batch[k])) for k in token_keys))
        return state, host

    return update


def setup_rows(config, rows: dict, *, tokenizer, devices=None) -> tuple[Any, Run]:
    """(batch iterator over `rows`, the run set up for as many optimizer steps as the iterator yields)."""
    from reasoner.sharding import make_mesh
    from trainers.data import batch_iterator

    iterator = batch_iterator(config, rows)
    run = setup(config, total_steps=iterator.total_steps, tokenizer=tokenizer,
                mesh=make_mesh(config.mesh, devices=devices))
    return iterator, run


def reference_params(run: Run):
    """The one rule for a frozen reference: the adapter-free base under LoRA (zero adapters), else a copy of the
    starting weights (a separate buffer: the policy's is donated each step)."""
    return jax.tree.map(jnp.zeros_like if run.lora else jnp.copy, run.state.params)


def with_reference(run: Run, params=None) -> Run:
    """`run` whose `frozen.reference` holds `params` (default `reference_params(run)`), sharded like the policy."""
    params = reference_params(run) if params is None else jax.device_put(params, run.shardings.params)
    shardings = dataclasses.replace(run.shardings, frozen=Frozen(base=run.shardings.frozen.base,
                                                                 reference=run.shardings.params))
    return run.replace(frozen=Frozen(base=run.frozen.base, reference=params), shardings=shardings)
