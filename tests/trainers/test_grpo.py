"""The GRPO trainer's wiring: loss, advantages and KL of the jitted step against TRL's formulas in NumPy
(`grpo_loss_reference.np_trl_loss`, with log-probs from an independent unpadded forward), masking of truncated rows and
tool responses, sharded == unsharded, configs, and bad rewards. Runs use a random 1-layer model over a word-level
vocabulary (tests/trainers/traces.py).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.trainers import traces
from tests.tolerances import EPS32, grpo_loss_atol, logprob_atol, model_depth, prob_factor, relative_bound
from tests.trainers.grpo_loss_reference import advantage_bounds, np_advantages, np_trl_loss
from reasoner.models import scoring
from trainers import grpo
from trainers import grpo_loss as gl
from trainers.run import Frozen

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"
WORDS = "yes no maybe apple banana cherry dog cat red blue green one two three say something".split()
G = 4


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return traces.word_tokenizer(tmp_path_factory.mktemp("grpo_tok"), texts=[" ".join(WORDS)])


def tiny(tok_dir, *extra, file="grpo_astar.py"):
    from reasoner.config import load_config

    return load_config(f"{CONFIGS / file}:tiny", [
        f"--config.model.tokenizer={tok_dir}", "--config.model.random.vocab_size=32",
        "--config.model.random.num_layers=1", "--config.model.random.hidden_size=32",
        "--config.model.random.intermediate_size=64", "--config.data.task=chat", *extra])


def one_device_mesh():
    from reasoner.sharding import make_mesh

    return make_mesh("fsdp=1", devices=jax.devices()[:1])


def fixed_rollout(*, truncated=(3,), seed=0, budget=12):
    """2 prompts of different lengths x G completions, a tool span in rows 1 and 6, drifted old log-probs."""
    rng = np.random.default_rng(seed)
    prompts = [[2, 5, 9, 11, 3], [2, 7, 8, 3]]
    comps, tool, old = [], [], []
    for b in range(2 * G):
        n = int(rng.integers(3, budget + 1))
        comps.append(rng.integers(4, 20, size=n).astype(np.int32))
        m = np.ones(n, np.float32)
        if b in (1, 6):
            m[1:3] = 0.0
        tool.append(m)
        old.append((-rng.uniform(0.5, 4.0, size=n)).astype(np.float32))
    trunc = np.zeros(2 * G, bool)
    trunc[list(truncated)] = True
    return grpo.Rollout(prompt_ids=[prompts[b // G] for b in range(2 * G)], completion_ids=comps, tool_mask=tool,
                        old_logps=old, truncated=trunc, completions=[[] for _ in comps], examples=[{}] * len(comps))


def independent_logps(model, rollout, *, temperature, scaled_logits: list | None = None):
    """Completion-token log-probs from a right-padded forward from position 0 (no left padding, no segment ids,
    no slicing of hidden states), log-softmax in float64 NumPy. `scaled_logits`, when given, receives the
    [B, L, V] logits / temperature (for the float32 error bound of what is compared)."""
    seqs = [list(p) + list(c) for p, c in zip(rollout.prompt_ids, rollout.completion_ids)]
    L = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), L), np.int32)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = s
    graphdef, state = nnx.split(model)
    logits = _forward(graphdef, state, ids)
    z = np.asarray(logits, np.float64) / temperature
    if scaled_logits is not None:
        scaled_logits.append(z)
    z = z - z.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return [np.array([logp[b, len(p) - 1 + j, t] for j, t in enumerate(c)])
            for b, (p, c) in enumerate(zip(rollout.prompt_ids, rollout.completion_ids))]


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, state, ids):
    positions = jnp.broadcast_to(jnp.arange(ids.shape[1])[None], ids.shape)
    return nnx.merge(graphdef, state)(ids, positions_BxT=positions)[0]


def padded(rows, width):
    out = np.zeros((len(rows), width))
    for b, r in enumerate(rows):
        out[b, :len(r)] = r
    return out


BUDGET, A = 12, 2


@pytest.fixture(scope="module")
def wired(tok_dir):
    """One build for the wiring tests: (GRPOSteps, a pristine copy of the initial state; steps donate theirs)."""
    cfg = tiny(tok_dir, "--config.grpo.beta=0.04", "--config.grpo.num_iterations=2", f"--config.grpo.grad_accum={A}",
               "--config.grpo.mask_truncated=True", f"--config.grpo.max_new_tokens={BUDGET}",
               "--config.grpo.epsilon_high=0.28", "--config.grpo.temperature=0.7")
    steps = grpo.build_grpo(cfg, mesh=one_device_mesh())
    # A reference that differs from the policy, so the KL term is not trivially 0.
    run = steps.run
    ref = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.key(1), x.shape), run.frozen.reference)
    steps = dataclasses.replace(steps, run=run.replace(frozen=Frozen(base=run.frozen.base, reference=ref)))
    saved, scoring.LOGITS_CHUNK = scoring.LOGITS_CHUNK, 5  # 12 completion positions -> 3 vocabulary chunks, one padded
    yield steps, jax.tree.map(jnp.copy, run.state)
    scoring.LOGITS_CHUNK = saved


def with_loss_type(steps, loss_type):
    """The same run with another loss type (fresh jit caches: the loss settings are baked into the step)."""
    return grpo.GRPOSteps(run=steps.run, loss_cfg=dataclasses.replace(steps.loss_cfg, loss_type=loss_type))


@pytest.mark.parametrize("loss_type", gl.LOSS_TYPES)
def test_step_loss_advantages_and_kl_match_numpy_trl(wired, loss_type):

    steps, initial = wired
    steps = with_loss_type(steps, loss_type)
    run = steps.run
    r = fixed_rollout()
    rewards = np.array([1.0, 0.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25], np.float32)  # second group all equal
    adv, stats = grpo.advantages(rewards, num_generations=G, scale_rewards="group")
    want = np_advantages(rewards, num_generations=G, scale_rewards="group")
    assert np.all(np.abs(adv - want) <= advantage_bounds(rewards, want, num_generations=G, scale_rewards="group"))
    assert np.all(adv[4:] == 0.0) and stats["frac_reward_zero_std"] == 0.5

    host = grpo.pack(r, adv, prompt_len=8, budget=BUDGET, grad_accum=A, pad_id=0, mask_truncated=True)
    ref_logps = steps.reference(8)(run.frozen, host.on_mesh(run.mesh))
    policy = run.model(initial.params)
    reference = run.model(reference=True)
    scaled = []
    logps = padded(independent_logps(policy, r, temperature=0.7, scaled_logits=scaled), BUDGET)
    ref = padded(independent_logps(reference, r, temperature=0.7, scaled_logits=scaled), BUDGET)
    in_completion = host.completion_mask.reshape(-1, BUDGET) > 0
    # the trainer's packed, left-padded passes vs a plain forward: the float32 error of a log-prob at this depth
    # and (temperature-scaled) logit scale, for the policy and the reference alike
    atol = max(logprob_atol(z, run.model_cfg, seq_len=z.shape[1]) for z in scaled)
    np.testing.assert_allclose(np.asarray(ref_logps).reshape(-1, BUDGET)[in_completion], ref[in_completion], atol=atol)

    mask = host.loss_mask.reshape(-1, BUDGET)
    expected_mask = padded([m * (0.0 if t else 1.0) for m, t in zip(r.tool_mask, r.truncated)], BUDGET)
    np.testing.assert_array_equal(mask, expected_mask)
    old = host.old_logps.reshape(-1, BUDGET)
    num_items = float(mask.sum())
    want_loss, want_kl = 0.0, 0.0
    for a in range(A):  # TRL: each micro-batch normalised with gradient_accumulation_steps = steps_per_generation = A
        rows = slice(a * (2 * G // A), (a + 1) * (2 * G // A))
        lo, m = np_trl_loss(logps[rows], old[rows], ref[rows], adv[rows], mask[rows], cfg=steps.loss_cfg,
                            num_items=num_items, ga=A, spg=A)
        want_loss += lo
        want_kl += m["kl"] / A

    batch = host.on_mesh(run.mesh).replace(ref_logps=ref_logps)
    if loss_type == "dapo":  # the whole jitted step (TRL's default loss); the step code is loss-type agnostic
        state = jax.tree.map(jnp.copy, initial)
        state, metrics = steps.update(8)(state, run.frozen, batch)
        assert float(metrics["denom"]) == num_items and int(state.step) == 1
    else:  # the trainer's loss function over the micro-batches (compiles faster than the step)
        c = run.config.grpo
        loss_fn = jax.jit(grpo.grpo_loss_fn(run.graphdef, steps.loss_cfg, prompt_len=8,
                                            temperature=float(c.temperature), grad_accum=A, num_iterations=2))
        metrics = {"loss": 0.0, "kl": 0.0}
        for a in range(A):
            mb = jax.tree.map(lambda x, a=a: x[a], batch)
            loss, sums = loss_fn(initial.params, run.frozen, mb, jnp.float32(num_items))
            metrics["loss"] += float(loss)
            metrics["kl"] += float(sums["kl"])
    loss_tol, kl_tol = grpo_loss_atol(logps=logps, old=old, ref=ref, adv=adv, mask=mask, beta=steps.loss_cfg.beta,
                                      bias_correction=steps.loss_cfg.use_bias_correction_kl, logp_atol=atol)
    np.testing.assert_allclose(float(metrics["loss"]), want_loss, rtol=0, atol=loss_tol)
    np.testing.assert_allclose(float(metrics["kl"]), want_kl, rtol=0, atol=kl_tol)


def test_all_truncated_batch_with_masking_has_zero_loss_and_no_update(wired):

    steps, initial = wired
    r = fixed_rollout(truncated=range(2 * G))
    adv, _ = grpo.advantages(np.arange(2 * G, dtype=np.float32), num_generations=G, scale_rewards="group")
    host = grpo.pack(r, adv, prompt_len=8, budget=BUDGET, grad_accum=A, pad_id=0, mask_truncated=True)
    assert host.loss_mask.sum() == 0
    batch = host.on_mesh(steps.run.mesh)
    batch = batch.replace(ref_logps=jnp.zeros_like(batch.old_logps))
    state, metrics = steps.update(8)(jax.tree.map(jnp.copy, initial), steps.run.frozen, batch)
    assert float(metrics["loss"]) == 0.0 and float(metrics["grad_norm"]) == 0.0 and float(metrics["skipped"]) == 0
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, state.params),
                 jax.tree.map(np.asarray, initial.params))


def test_sharded_step_equals_unsharded(tok_dir):
    from reasoner.sharding import make_mesh

    cfg = tiny(tok_dir, "--config.grpo.beta=0.04", "--config.grpo.max_new_tokens=12", "--config.grpo.loss_type=grpo",
               "--config.model.random.num_kv_heads=4", "--config.model.random.num_heads=8",
               "--config.model.random.head_dim=8")
    r = fixed_rollout(truncated=())
    adv, _ = grpo.advantages(np.linspace(0, 1, 2 * G).astype(np.float32), num_generations=G, scale_rewards="group")
    host = grpo.pack(r, adv, prompt_len=8, budget=12, grad_accum=1, pad_id=0, mask_truncated=False)
    host = host.replace(old_logps=np.zeros_like(host.old_logps))
    results, bounds = [], None
    for mesh in (one_device_mesh(), make_mesh("fsdp=8")):
        steps = grpo.build_grpo(cfg, mesh=mesh)
        run = steps.run
        batch = host.on_mesh(mesh)
        moved = Frozen(base=run.frozen.base, reference=jax.tree.map(lambda x: x * 1.01, run.frozen.reference))
        batch = batch.replace(ref_logps=steps.reference(8)(moved, batch))
        if bounds is None:  # from an independent forward of the same start (before the step donates the state)
            temperature, scaled = float(cfg.grpo.temperature), []
            logps = padded(independent_logps(run.model(run.state.params), r, temperature=temperature,
                                             scaled_logits=scaled), 12)
            ref = padded(independent_logps(run.model(moved.reference), r, temperature=temperature,
                                           scaled_logits=scaled), 12)
            atol = max(logprob_atol(z, run.model_cfg, seq_len=z.shape[1]) for z in scaled)
            # one iteration: the loss's old log-probs are stop_gradient(logps) (ratio 1), not the packed zeros
            old = logps if int(cfg.grpo.num_iterations) == 1 else host.old_logps.reshape(-1, 12)
            bounds = grpo_loss_atol(logps=logps, old=old, ref=ref, adv=adv,
                                    mask=host.loss_mask.reshape(-1, 12), beta=0.04, bias_correction=True,
                                    logp_atol=atol)
            depth = model_depth(run.model_cfg, seq_len=scaled[0].shape[1])
        state, metrics = steps.update(8)(run.state, run.frozen, batch)
        results.append({k: float(v) for k, v in metrics.items()})
    m1, m8 = results
    # One step from the same parameters on one device and on fsdp=8: the two programs differ only in the order of
    # their reductions. Every log-prob is then within `logprob_atol` (policy and reference alike), so the loss and
    # the KL are within `grpo_loss_atol` of each other (twice: each run against the exact value). The gradient is
    # the backward pass over the same chain plus the sum over the batch's tokens, each component within
    # prob_factor(2 depth + tokens) EPS32 of its accumulation scale; taking the norm as that scale (first order),
    # the norms agree within twice that relative bound. Parameters after the step are not compared: Adam's first
    # step is lr * g / (|g| + eps), about lr * sign(g), so they differ only where a gradient component is within
    # its rounding of 0, and the loss and gradient norm above already carry the information.
    loss_tol, kl_tol = bounds
    np.testing.assert_allclose(m8["loss"], m1["loss"], rtol=0, atol=2 * loss_tol)
    np.testing.assert_allclose(m8["kl"], m1["kl"], rtol=0, atol=2 * kl_tol)
    grad_rel = 2 * relative_bound(prob_factor(2 * depth + host.loss_mask.size))
    np.testing.assert_allclose(m8["grad_norm"], m1["grad_norm"], rtol=grad_rel, atol=0)
    assert m1["grad_norm"] > 0 and m1["kl"] > 0  # the step had something to compare


def test_multi_turn_rollout_masks_tool_response_tokens(tok_dir):
    cfg = tiny(tok_dir, "--config.grpo.max_new_tokens=6", "--config.grpo.max_completion_tokens=24",
               "--config.grpo.max_turns=3")
    steps = grpo.build_grpo(cfg, mesh=one_device_mesh())
    from reasoner.sampling import SamplingParams
    from reasoner.tokenization import encode

    calls = []

    class Tool:  # the ScratchpadTool interface, scripted: answers every turn that did not end the row
        stop = ("yes", "no", "dog", "cat")  # frequent words, so turns end by "stop" and the tool is called

        def begin(self, prompts):
            self.messages = [[] for _ in prompts]

        def turn(self, completions, *, want_next):
            for b, comp in completions.items():
                self.messages[b].append({"role": "assistant", "content": comp.text})
            out = {b: " apple banana" for b in completions if want_next}
            calls.extend(out)
            for b in out:
                self.messages[b].append({"role": "tool", "content": " apple banana"})
            return out

        def trajectories(self):
            return self.messages

    tok = steps.run.tokenizer
    prompts = [encode(tok, "say something"), encode(tok, "one two three")]
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0, n=G, seed=3)
    r = grpo.rollout(grpo.sampler_for(steps.run), prompt_ids=prompts, examples=[{}, {}], sampling=sampling, budget=24,
                     tool=Tool(), max_turns=3, tool_reserve=8)
    response = encode(tok, " apple banana")
    assert calls, "no turn ended on a stop string; pick other stop words"
    tool_messages = 0
    for ids, m, lp, msgs, cut in zip(r.completion_ids, r.tool_mask, r.old_logps, r.completions, r.truncated):
        assert len(ids) == len(m) == len(lp) <= 24
        zeros = np.flatnonzero(m == 0)
        for start in zeros[:: len(response)]:  # every masked span is exactly the tool's tokens
            np.testing.assert_array_equal(ids[start:start + len(response)], response)
        assert np.all(lp[zeros] == 0.0)
        n_tool = sum(x["role"] == "tool" for x in msgs)
        tool_messages += n_tool
        # every tool reply is in the ids, whole; only a truncated row's last one is left out (the row ended on its
        # length, or the reply and another turn would not fit the budget)
        assert len(zeros) % len(response) == 0
        shown = len(zeros) // len(response)
        assert shown == n_tool or (shown == n_tool - 1 and cut), (shown, n_tool, len(ids), cut)
    assert tool_messages == len(calls)  # one tool message per call, none lost
    host = grpo.pack(r, np.ones(2 * G, np.float32), prompt_len=64, budget=24, grad_accum=1, pad_id=0,
                     mask_truncated=False)
    assert host.loss_mask.sum() == sum(float(m.sum()) for m in r.tool_mask)


def test_configs_carry_the_paper_settings():
    from reasoner.config import load_config

    astar = load_config(f"{CONFIGS / 'grpo_astar.py'}:astar_true")
    assert (astar.grpo.beta, astar.optim.lr, astar.grpo.num_generations) == (0.04, 1e-6, 16)
    assert (astar.optim.b1, astar.optim.b2) == (0.9, 0.999) and astar.rewards[0]["options"]["reward"] == "astar_true"
    cedar = load_config(f"{CONFIGS / 'grpo_cedar.py'}:paper")
    g = cedar.grpo
    assert (g.num_generations, g.beta, g.epsilon_low, g.epsilon_high, g.temperature) == (4, 0.01, 0.2, 0.2, 0.7)
    assert (cedar.optim.lr, cedar.optim.max_grad_norm, cedar.lora.rank, cedar.lora.alpha) == (1e-5, 0.1, 64, 64.0)
    for file, variants in (("grpo_astar.py", [None, "smollm2", "llama1b", "llama3b", "proofwriter", "correctness",
                                              "step_count", "astar_dependency", "astar_true", "tiny"]),
                           ("grpo_cedar.py", [None, "smollm2", "paper", "tiny"])):
        for v in variants:
            c = load_config(f"{CONFIGS / file}" + (f":{v}" if v else ""))
            grpo.check_config(c)
    with pytest.raises(ValueError, match="grad_accum"):
        grpo.check_config(load_config(f"{CONFIGS / 'grpo_astar.py'}:tiny", ["--config.grpo.grad_accum=3"]))
    with pytest.raises(ValueError, match="top_p"):
        grpo.check_config(load_config(f"{CONFIGS / 'grpo_astar.py'}:tiny", ["--config.grpo.num_iterations=2",
                                                                           "--config.grpo.top_p=0.9"]))


def test_tiny_run_learns_a_trivial_reward_despite_failing_reward_functions(tok_dir, tmp_path):
    """Reward: share of the word "yes" among the completion's words. A second reward (weight 0) raises on
    completions without "yes" and returns NaN on those with "no": those count as failures and score 0."""
    from reasoner.rewards import CompositeReward, WeightedReward, completion_text

    def yes_share(completions, *, examples):
        words = [completion_text(c).split() for c in completions]
        return [w.count("yes") / max(len(w), 1) for w in words]

    def flaky(completions, *, examples):
        out = []
        for c in completions:
            text = completion_text(c)
            if "yes" not in text.split():
                raise RuntimeError("verifier crashed")
            out.append(float("nan") if "no" in text.split() else 1.0)
        return out

    reward = CompositeReward([WeightedReward("yes", yes_share), WeightedReward("flaky", flaky, weight=0.0)])
    cfg = tiny(tok_dir, "--config.grpo.num_generations=8", "--config.grpo.max_new_tokens=8",
               "--config.train.num_steps=10", "--config.optim.lr=0.03", "--config.train.checkpoint_every=5",
               "--config.train.async_checkpoint=False")
    examples = [{"prompt": [{"role": "user", "content": "say something"}]},
                {"prompt": [{"role": "user", "content": "one two three"}]}]
    result = grpo.train(cfg, workdir=tmp_path, examples=examples, reward=reward, progress=False,
                        mesh=one_device_mesh())
    rewards = [h["reward"] for h in result.history]
    assert len(rewards) == 10 and all(np.isfinite(h["loss"]) for h in result.history)
    assert np.mean(rewards[-3:]) > np.mean(rewards[:3]) + 0.15, rewards
    counters = reward.counter_dict()["flaky"]
    assert counters["errors"] > 0 and result.history[-1]["reward_failures/flaky"] >= counters["errors"]
    # Resume: the workdir holds step 10; asking for 11 runs exactly one more generation step.
    more = tiny(tok_dir, "--config.grpo.num_generations=8", "--config.grpo.max_new_tokens=8",
                "--config.train.num_steps=11", "--config.optim.lr=0.03", "--config.train.checkpoint_every=5",
                "--config.train.async_checkpoint=False")
    resumed = grpo.train(more, workdir=tmp_path, examples=examples, reward=reward, progress=False,
                         mesh=one_device_mesh())
    assert resumed.resumed_from == 10 and [h["step"] for h in resumed.history] == [11]


def test_lora_trains_only_adapters_against_the_adapter_free_base(tok_dir):
    """CEDAR tiny (LoRA rank 4, beta 0.01): the state holds only adapters, the reference is the base model (so the
    KL of the first step is 0: adapter B starts at 0), one step moves the adapters and leaves the base alone."""
    from reasoner.rewards import CompositeReward, WeightedReward, completion_text

    cfg = tiny(tok_dir, "--config.grpo.max_new_tokens=8", "--config.optim.lr=0.01", file="grpo_cedar.py")
    steps = grpo.build_grpo(cfg, mesh=one_device_mesh())
    run = steps.run
    leaves = jax.tree_util.tree_flatten_with_path(run.state.params)[0]
    assert leaves and all(str(path[-1].key) in ("a", "b") for path, _ in leaves)
    assert all(float(jnp.abs(x).max()) == 0.0 for x in jax.tree.leaves(run.frozen.reference))
    rest_before = jax.tree.map(np.asarray, run.frozen.base)
    def hangs(completions, *, examples):  # a verifier that never answers in time
        time.sleep(2.0)
        return [1.0] * len(completions)

    reward = CompositeReward([WeightedReward("len", lambda cs, *, examples: [
        float(len(completion_text(c).split())) for c in cs]), WeightedReward("slow", hangs, 1.0, timeout_s=0.2)])
    examples = [{"prompt": "say something"}, {"prompt": "one two three"}]
    state, m = grpo.generation_step(steps, grpo.sampler_for(run), run.state, examples=examples, reward=reward,
                                    tool=None, seed=0)
    reward.close()
    # policy = reference: d = ref - logp is 0 up to the two forwards' rounding (|d| ~ logprob_atol ~ 1e-5 here, so
    # d^2 / 2 ~ 1e-10), and kl = e^d - d - 1 is then the float32 rounding of e^d near 1: a few EPS32 per token
    assert abs(m["kl"]) <= 4 * EPS32 and np.isfinite(m["loss"]) and m["skipped"] == 0
    assert m["reward_failures/slow"] == 2 * G and m["rewards/slow"] == 0.0  # timeouts score 0 and are counted
    b_after = [np.asarray(x) for path, x in jax.tree_util.tree_flatten_with_path(state.params)[0]
               if str(path[-1].key) == "b"]
    assert max(float(np.abs(b).max()) for b in b_after) > 0
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, run.frozen.base), rest_before)


def test_single_turn_rollouts_run_on_the_paged_engine_and_draw_the_static_samplers_tokens(tok_dir):
    """`grpo.rollout_engine="auto"` on one device, one turn: the RolloutEngine, whose rollout (tokens, old
    log-probs, truncation) equals the static Sampler's from the same seed; multi-turn runs on one device take it too
    (tests/trainers/test_grpo_engine_turns.py), multi-device runs keep the static Sampler, and forcing the engine
    there is refused with the reason."""
    from reasoner.sampling import Sampler, SamplingParams
    from reasoner.sampling.rollout_engine import RolloutEngine
    from reasoner.sharding import make_mesh
    from reasoner.tokenization import encode

    cfg = tiny(tok_dir, "--config.grpo.max_new_tokens=9", "--config.grpo.max_completion_tokens=9")
    steps = grpo.build_grpo(cfg, mesh=one_device_mesh())
    engine = grpo.sampler_for(steps.run)
    assert isinstance(engine, RolloutEngine) and engine.slots == G * int(cfg.grpo.prompts_per_step)
    static = Sampler(steps.run.model(), steps.run.tokenizer)
    tok = steps.run.tokenizer
    prompts = [encode(tok, "say something"), encode(tok, "one two three four"), encode(tok, "yes")]
    sampling = SamplingParams(max_new_tokens=9, temperature=1.0, n=G, seed=5)
    got = [grpo.rollout(s, prompt_ids=prompts, examples=[{}] * 3, sampling=sampling, budget=9)
           for s in (engine, static)]
    assert [x.tolist() for x in got[0].completion_ids] == [x.tolist() for x in got[1].completion_ids]
    assert got[0].truncated.tolist() == got[1].truncated.tolist() and got[0].truncated.any()
    # the two paths' logits differ by float32 rounding of the attention alone: the forward's log-prob bound
    model = steps.run.model()
    longest = max((list(p) + list(c) for p, c in zip(got[1].prompt_ids, got[1].completion_ids)), key=len)
    z = model(jnp.asarray([longest]), positions_BxT=jnp.arange(len(longest))[None])[0]
    atol = logprob_atol(z, steps.run.model_cfg, seq_len=len(longest))
    for a, b in zip(got[0].old_logps, got[1].old_logps):
        np.testing.assert_allclose(a, b, rtol=0, atol=atol)

    multi = tiny(tok_dir, "--config.grpo.max_turns=3")
    assert isinstance(grpo.sampler_for(grpo.build_grpo(multi, mesh=one_device_mesh()).run), RolloutEngine)
    static_multi = tiny(tok_dir, "--config.grpo.max_turns=3", "--config.grpo.rollout_engine=static")
    assert isinstance(grpo.sampler_for(grpo.build_grpo(static_multi, mesh=one_device_mesh()).run), Sampler)
    wide = grpo.build_grpo(tiny(tok_dir), mesh=make_mesh("fsdp=2", devices=jax.devices()[:2]))
    assert isinstance(grpo.sampler_for(wide.run), Sampler)
    forced = grpo.build_grpo(tiny(tok_dir, "--config.grpo.rollout_engine=paged"),
                             mesh=make_mesh("fsdp=2", devices=jax.devices()[:2]))
    with pytest.raises(ValueError, match="needs a one-device mesh .* this run has 2 devices"):
        grpo.sampler_for(forced.run)
    with pytest.raises(ValueError, match="expected 'auto', 'paged' or 'static'"):
        grpo.sampler_for(grpo.build_grpo(tiny(tok_dir, "--config.grpo.rollout_engine=fast"),
                                         mesh=one_device_mesh()).run)
