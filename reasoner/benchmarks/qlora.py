"""`reasoner bench qlora --json`: LoRA training on an NF4 / int8 base (QLoRA) against a float32 / bfloat16 base.

Every setting trains the same rank-16 adapters (`trainers.run.add_lora`, all attention and MLP projections) with the
SFT loss on the same batch, built through the trainers' own path (`add_lora`, then `quantize_base`):

    f32        base float32, compute float32           bf16       base bfloat16, compute bfloat16 (adapters bf16 too)
    nf4        NF4 projections, compute float32        int8       int8 projections, compute float32
    nf4_bf16   NF4 projections, compute bfloat16 (the QLoRA paper's setting)
Embeddings, norms and the LM head stay float32 in the quantized settings.

Per setting, measured one after another in this process on one device: the median step time of `--steps` steps
after a warm-up; the first step's loss (B = 0, so the base model's loss: its difference to f32's / bf16's is the
quantization's effect); memory, three ways: the bytes of the arrays (adapters, optimizer state, frozen base, and the
projection kernels alone), XLA's compiled memory analysis of the step (arguments + outputs - donated aliases +
temporaries: the step's peak device buffers; `memory_stats()` is unavailable on CPU), and the process RSS after the
setting (process-wide, so only its growth means anything). Ratios are against f32.

Models: the real SmolLM2-135M-Instruct, and (`--llama1b-layers N`, 0 = skip) the first N layers of a randomly
initialised Llama-3.2-1B-shaped decoder (hidden 2048, MLP 8192, 32 heads, 8 KV heads, vocabulary 128256, tied).
"""

from __future__ import annotations

import dataclasses
import json
import statistics

from reasoner.benchmarks.sft import _batch

LLAMA_1B = dict(family="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_heads=32,
                num_kv_heads=8, head_dim=64, tie_embeddings=True, rope_theta=500000.0, rms_norm_eps=1e-5)


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    param_dtype: str
    dtype: str
    quantize: str


SETTINGS = (Setting("f32", "float32", "float32", "none"), Setting("bf16", "bfloat16", "bfloat16", "none"),
            Setting("nf4", "float32", "float32", "nf4"), Setting("int8", "float32", "float32", "int8"),
            Setting("nf4_bf16", "float32", "bfloat16", "nf4"))


def register(subparsers) -> None:
    parser = subparsers.add_parser("qlora", help="QLoRA: memory, step time and loss of NF4/int8 bases vs f32/bf16")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=64, help="the first 32 tokens are prompt (not trained)")
    parser.add_argument("--steps", type=int, default=2, help="measured steps per setting (after one warm-up)")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--settings", default="f32,bf16,nf4,int8", help=f"some of {[s.name for s in SETTINGS]}")
    parser.add_argument("--llama1b-layers", type=int, default=2, help="layers of the Llama-3.2-1B-shaped model")
    parser.add_argument("--llama1b-settings", default="f32,nf4")
    parser.add_argument("--llama1b-batch", type=int, default=1)
    parser.add_argument("--llama1b-seq-len", type=int, default=64)
    parser.set_defaults(func=run)


def _rss_mb() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = round(int(line.split()[1]) / 1024, 1)
    return {"rss_mb": out.get("VmRSS"), "rss_peak_mb": out.get("VmHWM")}


def _nbytes(tree, *, only: str | None = None) -> int:
    import jax

    total = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if only is None or any(getattr(k, "key", None) == only for k in path):
            total += leaf.size * leaf.dtype.itemsize
    return int(total)


def _model(source: str, setting: Setting, *, mesh, layers: int):
    from flax import nnx

    from reasoner.models import Decoder, ModelConfig, load_model

    if source == "smollm2-135m-instruct":
        return load_model(source, mesh=mesh, param_dtype=setting.param_dtype, dtype=setting.dtype)
    # make_param draws float32 normals from the seed and casts: every setting gets the same weights (rounded for bf16)
    cfg = ModelConfig(**LLAMA_1B, num_layers=layers, param_dtype=setting.param_dtype, dtype=setting.dtype)
    return Decoder(cfg, rngs=nnx.Rngs(0))


def measure(source: str, setting: Setting, *, args, mesh, batch_size: int, seq_len: int, layers: int = 0) -> dict:
    """One setting's step time, first loss and memory figures (see the module docstring)."""
    import jax
    import ml_collections

    from reasoner.benchmarks import train_common as tc
    from reasoner.data.pipeline import to_global_batch
    from trainers.run import add_lora, quantize_base
    from trainers.sft import sft_denominator, sft_loss_fn

    model = _model(source, setting, mesh=mesh, layers=layers)
    lora_cfg = ml_collections.ConfigDict(dict(rank=args.rank, alpha=2.0 * args.rank, pattern=r"(attn|mlp)\.\w+_proj",
                                              dropout=0.0, seed=0, quantize_base=setting.quantize))
    model, _ = add_lora(model, lora_cfg, mesh=mesh)
    model = quantize_base(model, lora_cfg, lora=True, mesh=mesh)
    batch = _batch(rows=batch_size, seq_len=seq_len, vocab=model.cfg.vocab_size)
    step, state, frozen = tc.build_our_step(
        model, mesh, loss_fn_factory=lambda graphdef, **_: {"loss_fn": sft_loss_fn(graphdef)},
        denominator=sft_denominator, example_batch=batch, total_steps=args.steps + 1, lora=True)
    del model
    compiled = step.lower(state, frozen, to_global_batch(batch, mesh)).compile()
    mem = compiled.memory_analysis()
    arrays = {"trainable": _nbytes(state.params), "optimizer": _nbytes(state.opt_state),
              "frozen_base": _nbytes(frozen.base), "projection_kernels": _nbytes(frozen.base, only="kernel")}
    compiled_mem = {"argument": int(mem.argument_size_in_bytes), "output": int(mem.output_size_in_bytes),
                    "alias": int(mem.alias_size_in_bytes), "temp": int(mem.temp_size_in_bytes)}
    compiled_mem["peak_estimate"] = (compiled_mem["argument"] + compiled_mem["output"] - compiled_mem["alias"]
                                     + compiled_mem["temp"])
    times, first_loss = tc.time_ours(compiled, state, frozen, batch, steps=args.steps, mesh=mesh)
    jax.clear_caches()
    return {"step_s_median": round(statistics.median(times), 4), "step_s": [round(t, 4) for t in times],
            "first_loss": round(first_loss, 6), "bytes": arrays, "compiled_bytes": compiled_mem, **_rss_mb()}


def compare(results: dict[str, dict]) -> dict:
    """Ratios against f32 (and nf4_bf16 against bf16) and loss differences."""
    out = {}
    for ref_name, names in (("f32", ("bf16", "nf4", "int8")), ("bf16", ("nf4_bf16",))):
        ref = results.get(ref_name)
        for name in names:
            res = results.get(name)
            if ref is None or res is None:
                continue
            out[f"{name}_vs_{ref_name}"] = {
                "step_time_ratio": round(res["step_s_median"] / ref["step_s_median"], 3),
                "peak_estimate_ratio": round(res["compiled_bytes"]["peak_estimate"]
                                             / ref["compiled_bytes"]["peak_estimate"], 3),
                "frozen_base_ratio": round(res["bytes"]["frozen_base"] / ref["bytes"]["frozen_base"], 3),
                "projection_kernel_ratio": round(res["bytes"]["projection_kernels"]
                                                 / ref["bytes"]["projection_kernels"], 4),
                "loss_diff": round(res["first_loss"] - ref["first_loss"], 6),
            }
    return out


def _settings(names: str) -> list[Setting]:
    by_name = {s.name: s for s in SETTINGS}
    unknown = [n for n in names.split(",") if n not in by_name]
    if unknown:
        raise SystemExit(f"bench qlora: unknown settings {unknown}; expected some of {sorted(by_name)}")
    return [by_name[n] for n in names.split(",")]


def run(args) -> int:
    import jax

    from reasoner.sharding import make_mesh

    mesh = make_mesh("fsdp=1", devices=jax.devices()[:1])
    report = {"benchmark": "qlora", "device": str(jax.devices()[0].device_kind), "rank": args.rank,
              "block_size": 64, "double_quant": False}
    runs = [("smollm2-135m-instruct", _settings(args.settings), args.batch, args.seq_len, 0)]
    if args.llama1b_layers:
        runs.append((f"llama-3.2-1b-shape-{args.llama1b_layers}-layers-random", _settings(args.llama1b_settings),
                     args.llama1b_batch, args.llama1b_seq_len, args.llama1b_layers))
    for source, settings, batch_size, seq_len, layers in runs:
        results = {}
        for setting in settings:
            results[setting.name] = measure("smollm2-135m-instruct" if not layers else "random", setting, args=args,
                                            mesh=mesh, batch_size=batch_size, seq_len=seq_len, layers=layers)
        report[source] = {"batch": batch_size, "seq_len": seq_len, "settings": results, "compare": compare(results)}
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0
