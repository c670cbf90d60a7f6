"""Pieces around the rollout engine: the FLOP count behind `roofline_fraction`, the rollout bench's budget
draw, and `reasoner generate` on the engine writing what the static batches write."""

import argparse
import json
import re

import numpy as np
import pytest

from reasoner.benchmarks.rollout import budgets
from reasoner.benchmarks.train_common import gemm_flops, step_gemms
from reasoner.models import ModelConfig
from reasoner.sampling import Sampler, SamplingParams


def test_step_gemms_count_six_flops_per_matmul_weight_and_token():
    cfg = ModelConfig(family="llama", vocab_size=100, hidden_size=16, intermediate_size=40, num_layers=3, num_heads=4,
                      num_kv_heads=2, head_dim=4, tie_embeddings=True)
    per_layer = 16 * 16 + 2 * 16 * 8 + 16 * 16 + 3 * 16 * 40  # q, k+v, o, gate+up+down
    weights = 3 * per_layer + 16 * 100  # and the (tied) vocabulary head
    assert gemm_flops(step_gemms(cfg, tokens=7)) == 6 * 7 * weights
    assert gemm_flops(step_gemms(cfg, tokens=7, backward=False)) == 2 * 7 * weights


def test_decode_matmul_chain_runs_the_forward_gemms_of_one_decode_step():
    """`bench generate`'s projection floor multiplies exactly the shapes `step_gemms` counts for a forward of
    `rows` tokens (the head as the decoder stores it, [V, D], transposed in the dot), and nothing else."""
    import collections

    import jax
    import jax.numpy as jnp

    from reasoner.benchmarks.train_common import decode_matmul_chain

    cfg = ModelConfig(family="llama", vocab_size=100, hidden_size=16, intermediate_size=40, num_layers=3, num_heads=4,
                      num_kv_heads=2, head_dim=6, tie_embeddings=True)
    fn, weights = decode_matmul_chain(cfg, rows=5)
    x = jnp.ones((5, 16), jnp.float32)
    dots = collections.Counter()
    for eqn in jax.make_jaxpr(fn)(x, weights).eqns[0].params["jaxpr"].eqns:
        if eqn.primitive.name == "dot_general":
            (lhs_contract, rhs_contract), _ = eqn.params["dimension_numbers"]
            a, b = (v.aval.shape for v in eqn.invars)
            n = b[1 - rhs_contract[0]]
            dots[(a[0], a[lhs_contract[0]], n)] += 1
    assert dots == collections.Counter({(m, k, n): c for m, k, n, c in step_gemms(cfg, tokens=5, backward=False)})
    logits = fn(x, weights)
    assert logits.shape == (5, 100) and bool(jnp.all(jnp.isfinite(logits)))


def test_torch_and_packed_matmul_chains_compute_the_xla_chain_on_the_same_weights():
    """The baseline's floor and the engine's packed one multiply the same weights in the same order: all three
    chains equal a float64 reference
    within float32 rounding. Bound: a dot of K terms rounds within K * eps of the sum of |terms| (Higham's gamma_K);
    the chain has 4 dots in sequence per layer plus the head, each output feeding the next, so a relative error of
    (4 * layers + 1) * K_max * eps of the logits' scale is a worst-case allowance, not a fit to one CPU."""
    import torch

    from reasoner.benchmarks.train_common import decode_matmul_chain, packed_matmul_chain, torch_matmul_chain
    from reasoner.sampling import native

    cfg = ModelConfig(family="llama", vocab_size=100, hidden_size=16, intermediate_size=40, num_layers=3, num_heads=4,
                      num_kv_heads=2, head_dim=6, tie_embeddings=True)
    fn, weights = decode_matmul_chain(cfg, rows=5, seed=3)
    x = np.random.default_rng(4).standard_normal((5, 16), np.float32)
    layers, head = weights

    ref = x.astype(np.float64)
    for p in layers:
        p = {k: np.asarray(v, np.float64) for k, v in p.items()}
        q, k, v = ref @ p["q"], ref @ p["k"], ref @ p["v"]
        ref = ref + q @ p["o"] + 1e-3 * (k.mean() + v.mean())
        ref = ref + ((ref @ p["gate"]) * (ref @ p["up"])) @ p["down"]
    ref = ref @ np.asarray(head, np.float64).T

    tol = (4 * cfg.num_layers + 1) * cfg.intermediate_size * np.finfo(np.float32).eps * np.abs(ref).max()
    ours = np.asarray(fn(x, weights), np.float64)
    theirs = torch_matmul_chain(weights)(torch.from_numpy(x)).double().numpy()
    assert theirs.shape == ours.shape == (5, 100)
    assert np.abs(ours - ref).max() < tol and np.abs(theirs - ref).max() < tol
    if native.available():
        packed_fn, packed = packed_matmul_chain(weights)
        assert np.abs(np.asarray(packed_fn(x, packed), np.float64) - ref).max() < tol
    assert np.abs(ref).max() > 1.0  # the chain is not vanishing: the bound is not met trivially


def test_rollout_budgets_are_seeded_capped_geometric_draws():
    plan = np.asarray(budgets(prompts=512, samples=4, mean=16.0, cap=64))
    assert plan.shape == (512, 4) and plan.min() >= 1 and plan.max() == 64
    assert np.array_equal(plan, budgets(prompts=512, samples=4, mean=16.0, cap=64))
    # mean of min(Geometric(1/16), 64) = 16 (1 - (15/16)^64) = 15.69; 2048 draws of sd <= 15.5: 4 sd = 1.37
    assert abs(plan.mean() - 16 * (1 - (15 / 16) ** 64)) < 4 * 15.5 / np.sqrt(plan.size)


@pytest.mark.parametrize("speculate", [0, 3])
def test_generate_cli_on_the_engine_writes_the_static_batches_lines(small_vocab_model, tmp_path, speculate):
    from reasoner.cli.generate import _run_engine

    prompts = [[5, 17, 9, 23, 2, 11, 7], [12, 3], [8, 8, 20, 1, 19], [3, 1, 4]]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, n=2, seed=7, eos_ids=())
    args = argparse.Namespace(batch_size=3, max_len=None, output=str(tmp_path / "out.jsonl"), speculate=speculate)
    assert _run_engine(args, small_vocab_model, None, prompts, params, total=48) == 0
    lines = [json.loads(line) for line in open(args.output)]
    sampler = Sampler(small_vocab_model)
    expect = []
    for start in range(0, len(prompts), 3):  # what the static path does: batches of 3, seed + first line
        for c in sampler.generate(prompts[start:start + 3], params.replace(seed=7 + start)):
            expect.append((start + c.prompt_index, c.sample_index, [int(t) for t in c.tokens]))
    assert [(r["line"], r["sample_index"], r["tokens"]) for r in lines] == expect


def test_batch_buckets_waste_at_most_a_third_and_stay_within_the_slots():
    from reasoner.sampling.buckets import batch_bucket

    sizes = [batch_bucket(n, cap=256) for n in range(1, 257)]
    assert sorted(set(sizes)) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
    for n, b in zip(range(1, 257), sizes):
        assert n <= b <= 256 and (b - n) / b < 1 / 3 + 1e-9, (n, b)
    assert batch_bucket(100, cap=100) == 100 and batch_bucket(5, cap=4) == 4


def test_rollout_bench_sessions_draw_the_same_turns_on_the_engine_and_the_static_sampler(smollm2, tokenizer):
    """`bench rollout`'s multi-turn systems: every row runs `turns` turns (EOS on, the appended user turn between
    them) and, one session after another on the same runner, both systems draw the same number of tokens."""
    from reasoner.benchmarks.rollout import APPEND, _sessions

    spec = {"session_prompts": 2, "samples": 2, "turns": 2, "session_tokens": 4, "chunk_steps": 2}
    go_engine, kv_engine = _sessions(smollm2, tokenizer, spec, engine=True)
    go_static, kv_static = _sessions(smollm2, tokenizer, spec, engine=False)
    drawn = go_engine()
    assert 4 <= drawn <= 2 * 2 * 2 * 4  # at least one token a row in the first turn, at most the caps
    assert go_engine() == drawn == go_static()  # the engine's session closes and frees its slots for the next
    assert len(tokenizer.encode(APPEND, add_special_tokens=False)) == 20
    assert kv_engine() > 0 and kv_static() > 0


def test_generate_bench_step_ratio_alternates_the_batches_and_divides_their_medians(small_vocab_model, monkeypatch):
    """`bench generate`'s last line: every round times each engine once (the smallest batch first), and the ratio
    is the largest batch's median step over the smallest's; each timed decode finishes all of its requests."""
    from reasoner.benchmarks import generate
    from reasoner.sampling.rollout_engine import RolloutEngine

    params = SamplingParams(max_new_tokens=5, temperature=0.0, eos_ids=())
    prompts = {1: [[5, 17, 9]], 3: [[5, 17, 9], [12, 3], [8, 8, 20, 1]]}
    engines = {b: (RolloutEngine(small_vocab_model, slots=b, block_size=4, chunk_steps=5), prompts[b]) for b in (3, 1)}
    for engine, p in engines.values():
        engine.generate(p, params)
    real, calls, fake = generate._engine_step_s, [], {1: [0.010, 0.030, 0.020], 3: [0.050, 0.020, 0.070]}

    def timed(engine, p, params, *, steps, repeats):
        batch = len(p)
        assert steps == 4 and repeats == 1 and engines[batch][0] is engine
        real(engine, p, params, steps=steps, repeats=repeats)  # really decodes (and asserts every request ends)
        calls.append(batch)
        return fake[batch][sum(c == batch for c in calls) - 1]

    monkeypatch.setattr(generate, "_engine_step_s", timed)
    row = generate._step_ratio_row(engines, params, rounds=3)
    assert calls == [1, 3, 1, 3, 1, 3]
    assert row == {"engine_step_ratio_batches": [1, 3], "engine_step_ms_interleaved": {"1": 20.0, "3": 50.0},
                   "engine_step_ratio": 2.5, "rounds": 3}


def test_gemm_loop_computes_every_gemm_inside_one_program():
    """The roofline's GEMM rate times `reps` GEMMs per launch: the compiled loop keeps its dot inside the while
    body (not hoisted as loop-invariant), its trip count is the static `reps`, and it returns a @ b."""
    import jax.numpy as jnp
    import numpy as np

    from reasoner.benchmarks.train_common import gemm_loop, gemm_reps

    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((8, 16), np.float32))
    b = jnp.asarray(rng.standard_normal((16, 4), np.float32))
    loop = gemm_loop(5)
    np.testing.assert_allclose(np.asarray(loop(a, b)), np.asarray(a) @ np.asarray(b), rtol=1e-5, atol=1e-5)
    hlo = loop.lower(a, b).compile().as_text()
    computations = {c.split(" ", 1)[0].lstrip("%"): c for c in hlo.split("\n\n") if c.startswith(("%", "ENTRY"))}
    entry = computations["ENTRY"]
    body = computations[re.search(r"body=%([\w.]+)", entry).group(1)]
    assert "dot_general" in body and "dot_general" not in entry  # the optimized loop computes its GEMM each time
    assert '"known_trip_count":{"n":"5"}' in entry
    assert gemm_reps(1.0) == 1 and gemm_reps(0.05e-3) == 400 and gemm_reps(1e-12) == 4096
