"""Pieces every trainer uses: mesh and model from config, sharded state creation, MFU, NaN guard.

Parameters travel as pure nested dicts of arrays (`nnx.to_pure_dict`); the model is rebuilt inside
the jitted step with `nnx.merge(graphdef, trainable, frozen)` (DESIGN: split at the jit boundary).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from trainers.state import TrainState, create_state


class NonFiniteLossError(RuntimeError):
    """Too many consecutive steps had a NaN/inf loss or gradient."""


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
    from reasoner.sharding import state_shardings

    if model_cfg.get("name"):
        return load_model(model_cfg.name, mesh=mesh, param_dtype="float32", dtype=model_cfg.dtype,
                          remat=bool(model_cfg.remat))
    cfg = model_config_from(model_cfg)
    model = Decoder(cfg, rngs=nnx.Rngs(int(model_cfg.seed)))
    graphdef, state = nnx.split(model)
    state = jax.device_put(state, state_shardings(state, mesh))
    return nnx.merge(graphdef, state)


def add_lora(model, lora_cfg) -> bool:
    """Adds LoRA adapters when `lora.rank > 0` (returns whether it did). Only the adapters are then trained;
    adapter dropout needs an RNG carried through the step, which these trainers do not do, so it must be 0."""
    if not lora_cfg.rank:
        return False
    if lora_cfg.get("dropout", 0.0):
        raise ValueError(f"lora.dropout={lora_cfg.dropout}: the SFT/DPO trainers support only 0 (no adapter dropout)")
    from reasoner.models.lora import apply_lora

    apply_lora(model, pattern=lora_cfg.pattern, rank=int(lora_cfg.rank), alpha=float(lora_cfg.alpha), dropout=0.0,
               rngs=nnx.Rngs(int(lora_cfg.get("seed", 0))))
    return True


def merged_for_export(graphdef, params, frozen):
    """The model with `params`; LoRA adapters (if any) folded into the base kernels, ready for export."""
    from reasoner.models.lora import merge_lora

    model = nnx.merge(graphdef, params, frozen)
    if any(isinstance(v, nnx.LoRAParam) for _, v in nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))):
        merge_lora(model)
    return model


def load_tokenizer_for(model_cfg):
    """The tokenizer of `model.tokenizer` (or the model itself); preset names resolve to their files first."""
    from reasoner.models.presets import resolve
    from reasoner.tokenization import load_tokenizer

    return load_tokenizer(resolve(model_cfg.tokenizer or model_cfg.name))


def split_trainable(model, *, lora: bool):
    """(graphdef, trainable pure dict, frozen pure dict, trainable nnx.State for sharding lookups)."""
    graphdef, trainable, frozen = nnx.split(model, nnx.LoRAParam if lora else nnx.Param, ...)
    return graphdef, nnx.to_pure_dict(trainable), nnx.to_pure_dict(frozen), trainable, frozen


def _nest(flat: dict[tuple, Any]) -> dict:
    out: dict = {}
    for path, value in flat.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def pure_shardings(state: nnx.State, mesh: Mesh) -> dict:
    """Pure-dict tree of NamedShardings matching `nnx.to_pure_dict(state)` (logical axes -> mesh axes)."""
    from reasoner.sharding import logical_sharding

    flat = {}
    for path, var in nnx.to_flat_state(state):
        axes = var.get_metadata().get("logical_axes")
        shape = var[...].shape if hasattr(var, "__getitem__") else var.shape
        flat[path] = (NamedSharding(mesh, PartitionSpec()) if axes is None
                      else logical_sharding(axes, shape, mesh))
    return _nest(flat)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def state_sharding(params_sharding: dict, optimizer: optax.GradientTransformation, params: dict,
                   mesh: Mesh) -> TrainState:
    """TrainState of shardings: optimizer moments follow their parameter; counters and rng replicated."""
    opt_shape = jax.eval_shape(optimizer.init, params)
    opt_sharding = optax.tree_map_params(
        optimizer, lambda _, s: s, opt_shape, params_sharding,
        transform_non_params=lambda _: replicated(mesh))
    return TrainState(step=replicated(mesh), params=params_sharding, opt_state=opt_sharding, rng=replicated(mesh))


def init_state(params: dict, optimizer, *, seed: int, sharding: TrainState) -> TrainState:
    """A fresh state laid out on `sharding` (built inside jit, so no full copy lands on one device)."""
    return jax.jit(lambda p: create_state(p, optimizer, seed=seed), out_shardings=sharding)(params)


# ---------------------------------------------------------------------------------------------- MFU
# Dense bf16 peak FLOP/s per chip (vendor datasheets); unknown kinds (CPU) report no MFU.
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "TPU v5 lite": 197e12, "TPU v5e": 197e12,
              "TPU v5p": 459e12, "TPU v4": 275e12, "TPU v6 lite": 918e12, "TPU v6e": 918e12}


def peak_flops_per_device() -> float | None:
    kind = jax.devices()[0].device_kind
    for name, flops in PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return flops
    return None


def train_flops_per_token(model_cfg, *, seq_len: int, passes: float = 3.0) -> float:
    """FLOPs per trained token: `passes` x 2 x (matmul params + attention). 3 = forward + backward
    (PaLM appendix B: 6N + 12 L H Dh T for training; attention counted over the full T, causal halves it
    in practice but the convention counts it whole)."""
    c = model_cfg
    attn_proj = c.hidden_size * c.head_dim * (2 * c.num_heads + 2 * c.num_kv_heads)
    mlp = 3 * c.hidden_size * c.intermediate_size
    head = c.hidden_size * c.vocab_size
    matmul_params = c.num_layers * (attn_proj + mlp) + head
    attention = 2 * c.num_layers * c.num_heads * c.head_dim * seq_len
    return passes * 2.0 * (matmul_params + attention)


@dataclasses.dataclass
class NonFiniteGuard:
    """Counts consecutive skipped steps; raises after `max_in_a_row`."""

    max_in_a_row: int
    in_a_row: int = 0
    total: int = 0

    def update(self, skipped: bool, *, step: int) -> None:
        if not skipped:
            self.in_a_row = 0
            return
        self.in_a_row += 1
        self.total += 1
        if self.in_a_row >= self.max_in_a_row:
            raise NonFiniteLossError(
                f"step {step}: loss or gradient was NaN/inf for {self.in_a_row} steps in a row "
                f"(train.max_nonfinite_steps={self.max_in_a_row}); stopping. Lower the learning rate or check the data")


def sequence_logprobs(model, *, tokens, positions, segment_ids, loss_mask):
    """(per-token log-probs [B, T-1], trained-target mask [B, T-1]) of `model` on a padded/packed batch."""
    from trainers.losses import next_token_logprobs, target_mask

    hidden, _ = model.hidden_states(tokens, positions_BxT=positions, segment_ids_BxT=segment_ids)
    # the last position predicts nothing: drop it before the vocabulary projection, not after (a [B, T, V] copy)
    logits = model.logits(hidden[:, :-1])
    return next_token_logprobs(logits, tokens[:, 1:]), target_mask(loss_mask, segment_ids)

