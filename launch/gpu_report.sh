#!/usr/bin/env bash
# One run on an accelerator machine (GPU or TPU; runs on CPU too, for a check): decode tokens/s of the rollout
# engine at batch 1 and 64, and the SFT step's MFU, on the embedded SmolLM2-135M and on a randomly initialised
# Llama-3.2-1B-shaped config. Prints one JSON object per measurement.
#
#   launch/gpu_report.sh                 # full sizes (prompt 128, 128 new tokens, SFT batch 8 x 1024)
#   GPU_REPORT_TINY=1 launch/gpu_report.sh   # tiny sizes: proves the script runs (CPU, a minute)
#
# MFU = the step's model FLOPs per second (train_common.step_gemms + attention, no remat recompute) over the
# device's dense peak for the compute dtype (a table below for known devices; "peak_tflops": null otherwise), and
# `roofline_fraction` = the same FLOPs over the GEMM rate XLA reaches here on the step's own matmul shapes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PY" - <<'EOF'
import json, os, statistics, time

import jax
import numpy as np
from flax import nnx

from reasoner.benchmarks import train_common as tc
from reasoner.models import Decoder, ModelConfig, load_model
from reasoner.sampling import SamplingParams
from reasoner.sampling.rollout_engine import RolloutEngine

TINY = os.environ.get("GPU_REPORT_TINY") == "1"
DEVICE = jax.devices()[0].device_kind
# dense peak TFLOP/s per chip (vendor figures): (float32 or TF32 matmul, bfloat16)
PEAKS = {"NVIDIA H100 80GB HBM3": (494.7, 989.4), "NVIDIA H200": (494.7, 989.4), "NVIDIA A100-SXM4-80GB": (156.0, 312.0),
         "NVIDIA A100-SXM4-40GB": (156.0, 312.0), "TPU v4": (275.0, 275.0), "TPU v5 lite": (197.0, 197.0),
         "TPU v5": (459.0, 459.0), "TPU v6 lite": (918.0, 918.0)}
LLAMA_1B = ModelConfig(family="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_layers=16,
                       num_heads=32, num_kv_heads=8, head_dim=64, rope_theta=500000.0, tie_embeddings=True)
TINY_1B = ModelConfig(family="llama", vocab_size=4096, hidden_size=128, intermediate_size=256, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=32, tie_embeddings=True)


def models():
    yield "smollm2-135m-instruct", lambda: load_model("smollm2-135m-instruct")
    cfg = TINY_1B if TINY else LLAMA_1B
    yield "llama-1b-shape (random)" if not TINY else "tiny (random)", lambda: Decoder(cfg, rngs=nnx.Rngs(0))


def decode(name, model, batch):
    prompt_len, new = (16, 8) if TINY else (128, 128)
    rng = np.random.default_rng(0)
    prompts = rng.integers(0, model.cfg.vocab_size, size=(batch, prompt_len)).tolist()
    params = SamplingParams(max_new_tokens=new, temperature=0.0, eos_ids=())
    engine = RolloutEngine(model, slots=batch, chunk_steps=new)
    engine.generate(prompts, params)  # compile
    times = []
    for _ in range(3):
        t = time.perf_counter()
        out = engine.generate(prompts, params)
        times.append(time.perf_counter() - t)
        assert all(c.num_tokens == new for c in out)
    s = statistics.median(times)
    return {"report": "decode", "model": name, "device": DEVICE, "batch": batch, "prompt_len": prompt_len,
            "new_tokens": new, "tok_s": round(batch * new / s, 2), "seconds": [round(x, 3) for x in times]}


def sft(name, model):
    from reasoner.sharding import make_mesh
    from trainers.sft import sft_denominator, sft_loss_fn

    rows, seq = (2, 64) if TINY else (8, 1024)
    mesh = make_mesh("fsdp=-1")
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, model.cfg.vocab_size, size=(1, rows, seq)).astype(np.int32)
    mask = np.ones_like(tokens)
    mask[..., :32] = 0
    batch = {"tokens": tokens, "positions": np.broadcast_to(np.arange(seq, dtype=np.int32), tokens.shape).copy(),
             "segment_ids": np.ones_like(tokens), "loss_mask": mask}
    cfg = model.cfg
    step, state, frozen = tc.build_our_step(
        model, mesh, loss_fn_factory=lambda graphdef, **_: {"loss_fn": sft_loss_fn(graphdef)},
        denominator=sft_denominator, example_batch=batch, total_steps=6)
    times, _ = tc.time_ours(step, state, frozen, batch, steps=3 if TINY else 5, mesh=mesh)
    out = tc.add_roofline({}, cfg, ours_times=times, rows=rows, seq_len=seq)
    flops = out["model_gflop_per_step"] * 1e9 / statistics.median(times)
    peak = PEAKS.get(DEVICE, (None, None))[0 if cfg.dtype == "float32" else 1]
    return {"report": "sft", "model": name, "device": DEVICE, "dtype": cfg.dtype, "rows": rows, "seq_len": seq,
            "step_s": round(statistics.median(times), 4), "model_tflop_s": round(flops / 1e12, 3),
            "peak_tflops": peak, "mfu": round(flops / 1e12 / peak, 4) if peak else None,
            "roofline_fraction": out["roofline_fraction"], "gemm_tflop_s": round(out["gemm_gflop_s"] / 1e3, 3)}


for name, make in models():
    for batch in (1, 64):
        print(json.dumps(decode(name, make(), batch)), flush=True)
    print(json.dumps(sft(name, make())), flush=True)
EOF
