"""Shared pieces of the SFT/DPO training benchmarks: our jitted step on SmolLM2 and TRL step timing.

Both sides train the same model (SmolLM2-135M-Instruct: ours dequantized from the GGUF, the baseline
from our safetensors export of exactly those weights), in float32, with AdamW (weight decay 0,
clipping at 1.0, constant lr), the same batch, sequence length and gradient-checkpointing setting.
Throughput is trained tokens per second (rows x seq_len per step), the median over measured steps
after one warm-up step (compilation on our side, allocator warm-up on theirs).

The baseline runs in child processes (`baseline_child`): once under glibc's default malloc settings, as TRL users
run it, and once under this process's own (`reasoner.allocator`'s tuned settings when started by the `reasoner`
command). `ratio` compares with the first, `ratio_same_env` with the second. Five measured steps each.
"""

from __future__ import annotations

import statistics
import time

LR = 1e-6


def optim_config():
    import ml_collections

    return ml_collections.ConfigDict(dict(name="adamw", lr=LR, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0,
                                          max_grad_norm=1.0, schedule="constant", warmup_ratio=0.0,
                                          min_lr_ratio=0.0))


def load_ours(*, remat: bool):
    from reasoner.models import load_model
    from reasoner.sharding import make_mesh

    mesh = make_mesh("fsdp=-1")
    return load_model("smollm2-135m-instruct", mesh=mesh, remat=remat), mesh


def build_our_step(model, mesh, *, loss_fn_factory, denominator, example_batch, total_steps: int, lora: bool = False):
    """(jitted step, state, frozen) for `model` with the benchmark optimizer (`lora`: train only its adapters)."""
    from reasoner.data.pipeline import batch_sharding
    from trainers import run as common
    from trainers.optim import make_optimizer
    from trainers.step import jit_train_step, make_train_step

    graphdef, params, frozen, trainable_state, frozen_state = common.split_trainable(model, lora=lora)
    optimizer, schedule = make_optimizer(optim_config(), total_steps=total_steps)
    params_sh = common.pure_shardings(trainable_state, mesh)
    state_sh = common.state_sharding(params_sh, optimizer, params, mesh)
    state = common.init_state(params, optimizer, sharding=state_sh)
    frozen_sh = common.pure_shardings(frozen_state, mesh)
    # the factory may extend the frozen inputs (DPO adds the reference parameters)
    extra = loss_fn_factory(graphdef=graphdef, params=params, frozen=frozen, params_sharding=params_sh,
                            frozen_sharding=frozen_sh)
    frozen_all = extra.get("frozen", common.Frozen(base=frozen))
    frozen_all_sh = extra.get("frozen_sharding", common.Frozen(base=frozen_sh))
    step = jit_train_step(
        make_train_step(loss_fn=extra["loss_fn"], optimizer=optimizer, schedule=schedule, denominator=denominator),
        state_sharding=state_sh, frozen_sharding=frozen_all_sh,
        batch_sharding={k: batch_sharding(mesh, ndim=v.ndim) for k, v in example_batch.items()},
        metrics_sharding=common.replicated(mesh))
    return step, state, frozen_all


def time_ours(step, state, frozen, batch, *, steps: int, mesh) -> tuple[list[float], float]:
    """(seconds per measured step, first loss); one warm-up (compile) step first."""
    import jax

    from reasoner.data.pipeline import to_global_batch

    device_batch = to_global_batch(batch, mesh)
    state, metrics = step(state, frozen, device_batch)
    first_loss = float(metrics["loss"])
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        state, metrics = step(state, frozen, device_batch)
        jax.block_until_ready(metrics["loss"])
        times.append(time.perf_counter() - t)
    return times, first_loss


def step_timer_callback():
    """A transformers TrainerCallback recording the wall time of every optimizer step."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self._start)

    return StepTimer()


def train_trl(trainer_cls, config, data, *, model_dir: str) -> dict:
    """The baseline child's result for TRL's `trainer_cls` (SFTTrainer, DPOTrainer) trained with `config` on the
    `datasets.Dataset` `data`, from our export in `model_dir`, with SmolLM2's tokenizer: {"step_s": wall seconds of
    every step after the first (allocator warm-up), "first_loss": TRL's logged loss of the first step}."""
    from reasoner.benchmarks import baseline_child
    from reasoner.models.presets import resolve
    from reasoner.tokenization import load_tokenizer

    timer = step_timer_callback()
    trainer = trainer_cls(model=baseline_child.load_model(model_dir), args=config, train_dataset=data,
                          processing_class=load_tokenizer(resolve("smollm2-135m-instruct")), callbacks=[timer])
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"step_s": timer.times[1:], "first_loss": losses[0] if losses else float("nan")}


def trl_common_args(out_dir: str, *, batch: int, steps: int, remat: bool) -> dict:
    return dict(output_dir=out_dir, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
                learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
                optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
                max_steps=steps + 1, logging_steps=1, save_strategy="no", report_to=[],
                gradient_checkpointing=remat, bf16=False, fp16=False, use_cpu=True, dataloader_num_workers=0,
                seed=0, disable_tqdm=True,
                # in order: every step trains on exactly our batch (the default random sampler draws 4 of the
                # repeated rows with replacement-like duplicates, so the first losses differed by 0.04)
                train_sampling_strategy="sequential")


def add_baseline_args(parser) -> None:
    parser.add_argument("--baseline-env", choices=("both", "default", "same"), default="both",
                        help="malloc environment(s) of the baseline's process (see baseline_child)")
    parser.add_argument("--skip-baseline", action="store_true")


def measure_baselines(args, request: dict, arrays: dict | None = None) -> dict[str, dict]:
    """{environment kind: child result} for the kinds `--baseline-env` asks for ({} with --skip-baseline)."""
    from reasoner.benchmarks import baseline_child

    if args.skip_baseline:
        return {}
    kinds = baseline_child.ENVS if args.baseline_env == "both" else (args.baseline_env,)
    return {kind: baseline_child.run(request, kind=kind, arrays=arrays) for kind in kinds}


def export_weights(model, out_dir: str) -> str:
    """Our weights as an HF safetensors directory for the baseline's process."""
    from reasoner.models.export import export_hf

    export_hf(model, out_dir)
    return out_dir


def summary(*, ours_times, baselines: dict[str, dict], units_per_step: int, unit: str, extra: dict) -> dict:
    """JSON report: ours_{unit}_s, baseline_{unit}_s and ratio (baseline under glibc defaults), the same under our
    malloc settings with a `_same_env` suffix, step times, first losses and both processes' malloc settings.
    With only one baseline kind measured, `ratio` refers to that one."""
    from reasoner import allocator

    ours = units_per_step / statistics.median(ours_times)
    out = {f"ours_{unit}_s": round(ours, 3)}
    suffix = {"default": "", "same": "_same_env"}
    for kind in sorted(baselines, key=lambda k: k != "default"):
        res = baselines[kind]
        base = units_per_step / statistics.median(res["step_s"])
        tag = suffix[kind]
        out[f"baseline{tag}_{unit}_s"] = round(base, 3)
        out[f"ratio{tag}"] = round(ours / base, 3)
        out[f"baseline{tag}_step_s"] = [round(t, 3) for t in res["step_s"]]
        out[f"baseline{tag}_malloc"] = res["malloc"]
        if "first_loss" in res:
            out[f"baseline{tag}_first_loss"] = round(res["first_loss"], 5)
    if "ratio" not in out and "ratio_same_env" in out:
        out["ratio"] = out["ratio_same_env"]
    out["ours_step_s"] = [round(t, 3) for t in ours_times]
    out["ours_malloc"] = allocator.describe()
    return {**out, **extra}


# ------------------------------------------------------------------------------------------- roofline
def step_gemms(cfg, *, tokens: int, backward: bool = True) -> list[tuple[int, int, int, int]]:
    """(m, k, n, count) of the matmuls of one forward (and backward) over `tokens` tokens: every
    projection of every layer and the vocabulary head; backward adds dX [m, n] x [n, k] and dW
    [k, m] x [m, n] per forward GEMM. Model FLOPs only: remat's recomputation is not counted."""
    D, H, KV, Dh, inner, L = (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                              cfg.intermediate_size, cfg.num_layers)
    weights = [(D, H * Dh, L), (D, KV * Dh, 2 * L), (H * Dh, D, L), (D, inner, 2 * L), (inner, D, L),
               (D, cfg.vocab_size, 1)]
    out = []
    for k, n, count in weights:
        out.append((tokens, k, n, count))
        if backward:
            out += [(tokens, n, k, count), (k, tokens, n, count)]
    return out


def _chain_layers(x, layers, mm):
    """The layers of `decode_matmul_chain`'s chain, written once for every backend: `mm(a, layer, name)` multiplies
    `a` by `layer`'s weight `name`; `x` and the products are jax arrays or torch tensors alike (both have `.mean()`)."""
    for layer in layers:
        q, k, v = mm(x, layer, "q"), mm(x, layer, "k"), mm(x, layer, "v")
        x = x + mm(q, layer, "o") + 1e-3 * (k.mean() + v.mean())
        x = x + mm(mm(x, layer, "gate") * mm(x, layer, "up"), layer, "down")
    return x


def decode_matmul_chain(cfg, *, rows: int, seed: int = 0):
    """(fn, weights): the matmuls of one decode step of `rows` rows alone, as one jitted chain over weights of the
    model's shapes (fresh random ones, each its own array, so the step streams as many bytes as the real one):
    per layer q, k, v, o, gate, up and down, then the vocabulary head as `Decoder.logits` stores it ([V, D]).
    Each matmul takes the previous one's output as a real decode step does (k and v feed a scalar into the
    residual so nothing is dead code); no attention, norms, RoPE or sampling. `fn(x_RxD, weights)` -> logits.
    Its time is the floor a decode step cannot go under with XLA's matmuls on this machine (`bench generate`'s
    `projection_floor_ms`); the dot shapes are `step_gemms(cfg, tokens=rows, backward=False)`'s."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    D, H, KV, Dh, inner = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
    rng = np.random.default_rng(seed)

    def w(k, n):
        return jnp.asarray(rng.standard_normal((k, n), np.float32) / np.sqrt(k))

    layers = [dict(q=w(D, H * Dh), k=w(D, KV * Dh), v=w(D, KV * Dh), o=w(H * Dh, D), gate=w(D, inner),
                   up=w(D, inner), down=w(inner, D)) for _ in range(cfg.num_layers)]
    head = w(cfg.vocab_size, D)

    @jax.jit
    def fn(x, weights):
        layers, head = weights
        return _chain_layers(x, layers, lambda a, p, name: a @ p[name]) @ head.T

    return fn, (layers, head)


def torch_matmul_chain(weights):
    """`decode_matmul_chain`'s chain in PyTorch over copies of its `weights`, each stored as `nn.Linear` stores it
    ([out, in], applied by `F.linear`, as transformers' SmolLM2 runs its projections): `fn(x_RxD)` -> logits (a
    torch tensor). The same matmuls through the baseline's own GEMM library (MKL / oneDNN on CPU), so the two
    floors side by side say whether a gap between the frameworks lies in the matmuls or around them."""
    import numpy as np
    import torch

    F = torch.nn.functional
    layers, head = weights
    layers = [{k: torch.from_numpy(np.ascontiguousarray(np.asarray(v).T)) for k, v in p.items()} for p in layers]
    head = torch.from_numpy(np.array(head))

    @torch.inference_mode()
    def fn(x):
        return F.linear(_chain_layers(x, layers, lambda a, p, name: F.linear(a, p[name])), head)

    return fn


def packed_matmul_chain(weights):
    """`decode_matmul_chain`'s chain through the rollout engine's packed small-row matmul (`native.packed_matmul`,
    each weight packed once by `native.pack`, the head as the engine packs a tied one): `fn(x_RxD, packed)` ->
    logits, and `packed`; None where the native kernels are unavailable. The floor under the engine's decode step."""
    import jax

    from reasoner.sampling import native

    if not native.available():
        return None
    layers, head = weights
    sizes = [{k: int(v.shape[1]) for k, v in p.items()} for p in layers]
    packed = ([{k: native.pack(v) for k, v in p.items()} for p in layers], native.pack(head.T))
    vocab = int(head.shape[0])

    @jax.jit
    def fn(x, packed):
        layers, head = packed
        x = _chain_layers(x, zip(layers, sizes), lambda a, pn, name: native.packed_matmul(a, pn[0][name], pn[1][name]))
        return native.packed_matmul(x, head, vocab)

    return fn, packed


def attention_flops(cfg, *, rows: int, seq_len: int, backward: bool = True) -> float:
    """Causal attention scores and weighted values (half the T x T square), times 3 with a backward."""
    fwd = 2 * 2 * rows * cfg.num_heads * cfg.head_dim * seq_len * seq_len / 2 * cfg.num_layers
    return fwd * (3 if backward else 1)


def gemm_flops(gemms) -> float:
    return float(sum(2 * m * k * n * c for m, k, n, c in gemms))


GEMM_TIMED_RUN_S = 0.02  # each timed run of a shape's loop lasts about this long, so launch costs amortize


def gemm_loop(reps: int):
    """`f(a, b) -> a @ b` computed `reps` times in one compiled program: a `fori_loop` with a static trip count
    (XLA knows it: no host round trip per iteration on a GPU) whose carry passes an `optimization_barrier`, so the
    dot is neither hoisted out of the loop as invariant nor merged with another iteration's after unrolling. One
    launch for `reps` GEMMs: on an accelerator a lone microsecond GEMM is timed by its launch and host sync."""
    import jax
    import jax.numpy as jnp

    def run(a, b):
        def body(_, carry):
            a, b, _ = jax.lax.optimization_barrier(carry)
            return a, b, jnp.dot(a, b)

        init = (a, b, jnp.zeros((a.shape[0], b.shape[1]), jnp.result_type(a, b)))
        return jax.lax.fori_loop(0, reps, body, init)[2]

    return jax.jit(run)


def gemm_reps(single_s: float) -> int:
    """How many GEMMs one timed run needs to last ~`GEMM_TIMED_RUN_S`, from the time of one run of a single
    GEMM (launch included): 1 where that already lasts long enough (a CPU, large shapes), at most 4,096."""
    return max(1, min(4096, int(-(-GEMM_TIMED_RUN_S // max(single_s, 1e-7)))))


def measure_gemm_rate(gemms, *, repeats: int = 3, dtype: str = "float32") -> float:
    """FLOP/s that XLA reaches on exactly these matmul shapes here, in the step's compute `dtype` (a bfloat16 step
    is held to the bfloat16 rate), weighted by each shape's count: each distinct shape jitted alone in a loop of
    `gemm_reps` GEMMs (`gemm_loop`; a GPU report timed a lone dispatch per GEMM and read 28 TFLOP/s on an H200
    whose step ran 57), the median of `repeats` timed runs after a compile run, divided by the loop's length."""
    import jax.numpy as jnp
    import numpy as np

    total_flops, total_s = 0.0, 0.0
    counts: dict[tuple[int, int, int], int] = {}
    for m, k, n, c in gemms:
        counts[(m, k, n)] = counts.get((m, k, n), 0) + c
    rng = np.random.default_rng(0)

    def timed(f, a, b):
        f(a, b).block_until_ready()  # compile
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            f(a, b).block_until_ready()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    for (m, k, n), c in counts.items():
        a = jnp.asarray(rng.standard_normal((m, k), np.float32), dtype=dtype)
        b = jnp.asarray(rng.standard_normal((k, n), np.float32), dtype=dtype)
        single = timed(gemm_loop(1), a, b)
        reps = gemm_reps(single)
        per_gemm = single if reps == 1 else timed(gemm_loop(reps), a, b) / reps
        total_s += c * per_gemm
        total_flops += c * 2.0 * m * k * n
    return total_flops / total_s


def add_roofline(result: dict, cfg, *, ours_times, rows: int, seq_len: int, forward_only_rows: int = 0,
                 extra_gemms=(), extra_flops: float = 0.0) -> dict:
    """Adds `roofline_fraction` (ours) and `baseline_roofline_fraction` (the same FLOPs over the baseline's step
    time) to a `summary` result. `extra_gemms`/`extra_flops`: work outside the training step (GRPO's rollout)."""
    step_s = statistics.median(ours_times)
    tokens = rows * seq_len
    gemms = step_gemms(cfg, tokens=tokens) + list(extra_gemms)
    flops = gemm_flops(gemms) + attention_flops(cfg, rows=rows, seq_len=seq_len) + extra_flops
    if forward_only_rows:
        fwd = step_gemms(cfg, tokens=forward_only_rows * seq_len, backward=False)
        flops += gemm_flops(fwd) + attention_flops(cfg, rows=forward_only_rows, seq_len=seq_len, backward=False)
        gemms += fwd
    rate = measure_gemm_rate(gemms, dtype=cfg.dtype)
    out = dict(result)
    out["roofline_fraction"] = round(flops / step_s / rate, 4)
    if "ratio" in result:
        out["baseline_roofline_fraction"] = round(out["roofline_fraction"] / result["ratio"], 4)
    out["model_gflop_per_step"] = round(flops / 1e9, 2)
    out["gemm_gflop_s"] = round(rate / 1e9, 2)
    return out
