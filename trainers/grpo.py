"""Group Relative Policy Optimization (DeepSeekMath; TRL 1.16's GRPOTrainer semantics) on the jitted sampler.

One generation step: P prompts -> G completions each from `reasoner.sampling.Sampler` (one shared prefill per
prompt; optionally several turns with a tool whose response tokens are masked out of the loss) -> rewards from the
weighted registry `reasoner.rewards.CompositeReward` in a host thread, overlapped with the device computing the
reference log-probs -> group advantages -> `num_iterations` optimizer steps on that batch. The math (advantages,
per-token loss for grpo / bnpo / dr_grpo / dapo, clipping, k3 KL) is `trainers.grpo_loss`; this file wires it.

    from trainers import grpo
    result = grpo.train(config, workdir="runs/grpo", examples=train_rows, eval_examples=val_rows)
    result.state, result.history[-1]["reward"], result.eval_history

`train(config, *, workdir, model=None, tokenizer=None, examples=None, eval_examples=None, reward=None, tool=None)`:
  config: `configs/grpo_*.py` (sections mesh, model, lora, data, grpo, rewards, optim, train).
  model: a Decoder to start from (e.g. the SFT result); default `config.model`. LoRA adapters are added when
    `config.lora.rank > 0`; then only they train and the reference is the adapter-free base (adapter B = 0).
  examples / eval_examples: dataset rows, each with `prompt` (chat messages or a string) and whatever fields the
    reward functions read; default from `config.data`. With `config.data.task == "astar"` rows are A* records
    (`reasoner.tasks.astar`), turned into prompts here and scored by the registry's "astar" rewards; with "smt"
    they are Logic-LLM records prompted as the SMT scratchpad evaluation does (`reasoner.tasks.logic_llm`).
  reward: a CompositeReward (default: `CompositeReward.from_config(config.rewards)`).
  tool: a `ScratchpadTool` for multi-turn rollouts in the SMT scratchpad protocol (Hermes tool calls z3_solve /
    finish, observations as tool messages, finish() ends the row); default from `config.grpo.tool`
    ("" = single turn, "scratchpad").
  Resumes from `workdir/checkpoints` (state, rng, prompt-stream position, metrics log). Returns `GRPOResult`.

Choices where TRL leaves room: a completion is truncated iff the sampler stopped it on length (TRL: the last token is
not EOS), and `mask_truncated` zeroes those rows in the loss. Old log-probs for num_iterations > 1 are the sampler's
(temperature-scaled, hence top-k/top-p must be off). Rewards are scored on the host for the batch just generated
(on-policy); the next rollout needs the updated weights, so the overlap is with the reference forward instead.

Sections: config, mesh, data, model, state, rollout, reward, step, checkpoint, eval, loop.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from trainers import common
from trainers import grpo_loss as gl
from trainers.optim import make_optimizer
from trainers.state import TrainState
from trainers.step import jit_train_step, make_train_step

# ============================================================================================== config
def loss_config(config) -> gl.GRPOLossConfig:
    """The static loss settings of `config.grpo` (delta 0 = off)."""
    g = config.grpo
    return gl.GRPOLossConfig(loss_type=g.loss_type, beta=float(g.beta), epsilon_low=float(g.epsilon_low),
                             epsilon_high=float(g.epsilon_high), delta=float(g.delta) if g.delta else None,
                             use_bias_correction_kl=bool(g.use_bias_correction_kl),
                             max_completion_length=completion_budget(config))


def completion_budget(config) -> int:
    """Completion tokens per row in the train batch (all turns and tool responses of a multi-turn rollout)."""
    g = config.grpo
    return int(g.max_completion_tokens or g.max_new_tokens)


def check_config(config) -> None:
    """Raises ValueError naming the setting when the GRPO section cannot work."""
    g = config.grpo
    rows = g.prompts_per_step * g.num_generations
    if g.num_generations < 2:
        raise ValueError(f"grpo.num_generations={g.num_generations}: expected >= 2 (advantages compare a group)")
    if g.prompts_per_step < 1 or g.num_iterations < 1 or g.grad_accum < 1:
        raise ValueError(f"grpo.prompts_per_step={g.prompts_per_step}, num_iterations={g.num_iterations}, "
                         f"grad_accum={g.grad_accum}: expected positive ints")
    if rows % g.grad_accum:
        raise ValueError(f"grpo.grad_accum={g.grad_accum}: expected a divisor of prompts x generations = {rows}")
    if g.temperature <= 0:
        raise ValueError(f"grpo.temperature={g.temperature}: training samples need a temperature > 0")
    if g.num_iterations > 1 and (g.top_k or g.top_p < 1):
        raise ValueError("grpo.num_iterations > 1 takes old log-probs from the sampler, which are those of the "
                         f"truncated distribution when top_k={g.top_k} / top_p={g.top_p}; set top_k=0, top_p=1.0")
    if completion_budget(config) < g.max_new_tokens:
        raise ValueError(f"grpo.max_completion_tokens={g.max_completion_tokens}: expected >= max_new_tokens")
    loss_config(config)


# ============================================================================================== mesh
def make_mesh(config):
    from reasoner.sharding import make_mesh as _make_mesh

    return _make_mesh(config.mesh)


# ============================================================================================== data
def _read_jsonl(path: pathlib.Path) -> list[dict]:
    rows = []
    for i, line in enumerate(path.read_text().splitlines()):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{i + 1}: not a JSON object ({err})") from None
    return rows


def load_examples(data_cfg, *, split: str) -> list[dict]:
    """Rows of `split` from `data.source` "jsonl" (`data.path`/<split>.jsonl) or "tfds" (`data.name`)."""
    if data_cfg.source == "jsonl":
        path = pathlib.Path(data_cfg.path)
        path = path / f"{split}.jsonl" if path.is_dir() else path
        if not path.exists():
            raise FileNotFoundError(f"data.path: {path} does not exist; expected a .jsonl file or a directory "
                                    f"holding {split}.jsonl")
        rows = _read_jsonl(path)
    elif data_cfg.source == "tfds":
        import tensorflow_datasets as tfds

        builder = tfds.builder(data_cfg.name, data_dir=data_cfg.tfds_dir or None, file_format="array_record")
        source = builder.as_data_source(split=split)
        rows = [dict(source[i]) for i in range(len(source))]
    else:
        raise ValueError(f"data.source={data_cfg.source!r}: expected 'jsonl' or 'tfds'")
    if data_cfg.get("limit"):
        rows = rows[: int(data_cfg.limit)]
    return [as_example(r, task=data_cfg.task, dataset=data_cfg.dataset) for r in rows]


def as_example(row: Mapping, *, task: str, dataset: str = "deeprd") -> dict:
    """A row ready for rollout and rewards: `prompt` plus the fields the rewards read."""
    if task == "astar":
        from reasoner.tasks.astar import problem_from_record, prompt_messages

        problem = problem_from_record(row, dataset=dataset)
        return {**problem.record, "prompt": prompt_messages(problem)}
    if task == "smt":  # a Logic-LLM record, prompted exactly as the SMT scratchpad evaluation prompts it
        from reasoner.rewards.match import logic_problem
        from reasoner.tasks.logic_llm import render_messages

        return {**row, "prompt": render_messages(logic_problem(row, dataset=dataset))}
    if task != "chat":
        raise ValueError(f"data.task={task!r}: expected 'chat', 'astar' or 'smt'")
    if "prompt" not in row:
        raise ValueError(f"row {str(row)[:120]}: expected a 'prompt' field (chat messages or a string)")
    return dict(row)


def prompt_token_ids(tokenizer, prompt) -> list[int]:
    """Chat messages -> the chat template with the generation prompt; a string -> its tokens as is."""
    from reasoner.tokenization import chat_ids, encode

    return encode(tokenizer, prompt) if isinstance(prompt, str) else chat_ids(tokenizer, list(prompt))


@dataclasses.dataclass
class PromptStream:
    """Prompt indices, `per_step` at a time, reshuffled every epoch from `seed`; checkpointable by `step`."""

    size: int
    per_step: int
    seed: int
    step: int = 0

    def __post_init__(self):
        if self.size < 1:
            raise ValueError("the prompt dataset is empty: expected at least one example")

    def next(self) -> list[int]:
        out = []
        for i in range(self.step * self.per_step, (self.step + 1) * self.per_step):
            epoch, pos = divmod(i, self.size)
            out.append(int(np.random.default_rng([self.seed, epoch]).permutation(self.size)[pos]))
        self.step += 1
        return out

    def get_state(self) -> dict:
        return {"step": self.step}

    def set_state(self, state: Mapping) -> None:
        self.step = int(state["step"])


# ============================================================================================== model
def build_policy(config, *, mesh, model=None):
    """The policy Decoder (given or from `config.model`), with LoRA adapters when `config.lora.rank > 0`."""
    from reasoner.models.lora import apply_lora

    model = model if model is not None else common.build_model(config.model, mesh=mesh)
    if config.lora.rank:
        apply_lora(model, pattern=config.lora.pattern, rank=int(config.lora.rank), alpha=float(config.lora.alpha),
                   rngs=nnx.Rngs(int(config.seed)))
        graphdef, state = nnx.split(model)
        from reasoner.sharding import state_shardings

        model = nnx.merge(graphdef, jax.device_put(state, state_shardings(state, mesh)))
    return model


def reference_params(params: dict, *, lora: bool) -> dict:
    """Frozen reference: the adapter-free base under LoRA (zero adapters add nothing), else a copy of the start."""
    return jax.tree.map(jnp.zeros_like if lora else jnp.copy, params)


# ============================================================================================== state
# TrainState {step, params, opt_state, rng} from trainers.state; built in `build_grpo` with common.init_state.


# ============================================================================================== rollout
@dataclasses.dataclass
class Rollout:
    """B = prompts x G rows (row b: sample b % G of prompt b // G), completion tokens of every turn.

    completion_ids / tool_mask (1 = model token, 0 = tool response) / old_logps: per row, the same length.
    completions: per row, the chat messages of its assistant turns (single turn), or its scratchpad `Trajectory`
    (multi-turn with `ScratchpadTool`: messages, tool calls, observations, answer), for the rewards.
    """

    prompt_ids: list[list[int]]
    completion_ids: list[np.ndarray]
    tool_mask: list[np.ndarray]
    old_logps: list[np.ndarray]
    truncated: np.ndarray
    completions: list
    examples: list[Mapping]

    @property
    def texts(self) -> list[str]:
        from reasoner.rewards import completion_text

        return [completion_text(c) for c in self.completions]


def rollout(sampler, *, prompt_ids: Sequence[Sequence[int]], examples: Sequence[Mapping], sampling,
            budget: int, tool: ScratchpadTool | None = None, max_turns: int = 1, tool_reserve: int = 256) -> Rollout:
    """Generates `sampling.n` completions per prompt, continuing rows through `tool` for up to `max_turns` turns.

    With a tool, `prompt_ids` must be `tool.prompt_ids(example["prompt"])`. A row ends when its turn stops on
    length, when the tool ends it (finish(), no tool call), or when its completion would exceed `budget` tokens
    (then it counts as truncated). Tool responses are appended to the same KV cache with tool_mask 0.
    """
    from reasoner.tokenization import encode

    n = sampling.n
    multi = tool is not None and max_turns > 1
    if tool is not None:
        sampling = sampling.replace(stop=tuple(dict.fromkeys((*sampling.stop, *tool.stop))))
        tool.begin([examples[b // n].get("prompt", "") for b in range(len(prompt_ids) * n)])
    longest = max(len(p) for p in prompt_ids)
    max_len = longest + budget + 1
    session = sampler.start([list(p) for p in prompt_ids], sampling, max_len=max_len,
                            reserve=tool_reserve if multi else 0)
    B = len(prompt_ids) * n
    ids = [[] for _ in range(B)]
    model_tok = [[] for _ in range(B)]
    logps = [[] for _ in range(B)]
    messages: list[list[dict]] = [[] for _ in range(B)]
    truncated = np.zeros(B, bool)
    rows = list(range(B))
    for turn in range(max_turns):
        done = session.run()
        replies = {}
        for b, comp in zip(rows, done):
            ids[b] += [int(t) for t in comp.tokens]
            model_tok[b] += [1] * comp.num_tokens
            logps[b] += [float(x) for x in comp.sample_logprobs]
            messages[b].append({"role": "assistant", "content": comp.text})
            truncated[b] |= comp.finish_reason == "length"
            # an end-of-turn token that stopped the row is in the cache, so it belongs to the row's text
            end = sampler.tokenizer.decode([int(comp.tokens[-1])]) if comp.finish_reason == "eos" else ""
            replies[b] = (comp.text, comp.text + end)
        if tool is None:
            break
        last = turn == max_turns - 1
        suffixes = tool.turn(replies, want_next=not last)
        appends = {}
        for b, suffix in suffixes.items():
            if truncated[b]:
                continue
            resp_ids = encode(sampler.tokenizer, suffix)
            if len(ids[b]) + len(resp_ids) + 1 > budget or len(session.history[b]) + len(resp_ids) + 2 >= max_len:
                truncated[b] = True  # no room for the response and another turn
                continue
            ids[b] += resp_ids
            model_tok[b] += [0] * len(resp_ids)
            logps[b] += [0.0] * len(resp_ids)
            appends[b] = resp_ids
        if not appends:
            break
        rows = sorted(appends)
        room = min(budget - len(ids[b]) for b in rows)
        session.extend(appends, max_new_tokens=max(1, min(sampling.max_new_tokens, room)))
    for b in range(B):
        if len(ids[b]) > budget:  # the last turn ran past the budget
            ids[b], model_tok[b], logps[b] = ids[b][:budget], model_tok[b][:budget], logps[b][:budget]
            truncated[b] = True
    return Rollout(prompt_ids=[list(prompt_ids[b // n]) for b in range(B)],
                   completion_ids=[np.asarray(x, np.int32) for x in ids],
                   tool_mask=[np.asarray(x, np.float32) for x in model_tok],
                   old_logps=[np.asarray(x, np.float32) for x in logps], truncated=truncated,
                   completions=tool.trajectories() if tool is not None else messages,
                   examples=[examples[b // n] for b in range(B)])


class ScratchpadTool:
    """Multi-turn GRPO rollouts in the SMT scratchpad protocol of `reasoner.agents.scratchpad` (Sequent-Prover).

    The same format the SMT evaluation (`run_scratchpad` over `SamplerPolicy`) runs: prompts rendered with the chat
    template and the `TOOLS` schema; a turn stops right after `</tool_call>`; its Hermes tool calls are parsed by
    `reasoner.agents.tool_calls` and run by `scratchpad.advance` (z3_solve through the verifier pool, every call of
    the turn submitted before any is awaited); observations come back as "tool" messages. The tokens appended to a
    row's cache are the chat template's rendering of what follows the reply (end of the assistant turn, the tool
    messages, the next generation prompt), so they are masked out of the loss. finish(), a reply without a tool
    call, or the turn limit ends the row. The rows' `Trajectory` objects are the completions the rewards see
    (e.g. the "smt_scratchpad" reward).
    """

    stop = ("</tool_call>",)

    def __init__(self, tokenizer, *, runner=None, timeout_cap_s: float = 30.0, tools=None):
        from reasoner.agents.policies import TOOLS

        self.tokenizer = tokenizer
        self.tools = TOOLS if tools is None else tools
        self.timeout_cap_s = float(timeout_cap_s)
        self._runner = runner
        self.episodes: list = []
        self._row_text: list[str] = []
        self.mismatches = 0  # rows ended because the re-rendered conversation did not extend the cache's text

    @property
    def runner(self):
        if self._runner is None:  # started on first use: single-turn configs never spawn the verifier pool
            from reasoner.verifiers.z3_runner import Z3Runner

            self._runner = Z3Runner(timeout_s=self.timeout_cap_s)
        return self._runner

    @staticmethod
    def messages(prompt) -> list[dict]:
        return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]

    def render(self, messages: list[dict]) -> str:
        from reasoner.tokenization import render_chat

        try:
            return render_chat(self.tokenizer, messages, add_generation_prompt=True, tools=self.tools)
        except Exception:  # templates without tool support reject `tools` (as SamplerPolicy does)
            return render_chat(self.tokenizer, messages, add_generation_prompt=True)

    def prompt_ids(self, prompt) -> list[int]:
        from reasoner.tokenization import encode

        return encode(self.tokenizer, self.render(self.messages(prompt)))

    def begin(self, prompts: Sequence) -> None:
        """One episode per row (row b answers prompts[b])."""
        from reasoner.agents.scratchpad import Episode

        self.episodes = [Episode(str(b), self.messages(p)) for b, p in enumerate(prompts)]
        self._row_text = [self.render(e.trajectory.messages) for e in self.episodes]

    def turn(self, replies: Mapping[int, tuple[str, str]], *, want_next: bool) -> dict[int, str]:
        """replies: row -> (reply text, reply as it stands in the cache, e.g. with its end-of-turn token). Runs the
        turn's tool calls; returns row -> text to append for the rows that go on (none when not `want_next`)."""
        from reasoner.agents.scratchpad import advance

        rows = [b for b in sorted(replies) if not self.episodes[b].done]
        advance([self.episodes[b] for b in rows], [replies[b][0] for b in rows], runner=self.runner,
                timeout_cap_s=self.timeout_cap_s)
        out = {}
        for b in rows:
            self._row_text[b] += replies[b][1]
            if self.episodes[b].done or not want_next:
                continue
            full = self.render(self.episodes[b].trajectory.messages)
            if not full.startswith(self._row_text[b]):
                self.mismatches += 1
                continue
            out[b], self._row_text[b] = full[len(self._row_text[b]):], full
        return out

    def trajectories(self) -> list:
        from reasoner.agents.scratchpad import close

        return close(self.episodes)


def tool_from_config(config, tokenizer) -> ScratchpadTool | None:
    name = config.grpo.tool
    if not name:
        return None
    if name == "scratchpad":
        return ScratchpadTool(tokenizer)
    raise ValueError(f"grpo.tool={name!r}: expected '' (single turn) or 'scratchpad' (the SMT scratchpad: "
                     "z3_solve / finish tool calls)")


# ============================================================================================== reward
def score(reward, r: Rollout):
    """Starts the host-side reward computation; `.result()` is a `RewardBatch` (total_B NaN = unscorable)."""
    return reward.submit(r.completions, examples=r.examples)


def advantages(total_B: np.ndarray, *, num_generations: int, scale_rewards: str) -> tuple[np.ndarray, dict]:
    """(advantages_B, stats) from the registry's weighted totals, TRL's group statistics."""
    adv, std, zero_std = gl.group_advantages(jnp.asarray(total_B), num_generations=num_generations,
                                             scale_rewards=scale_rewards)
    finite = np.isfinite(total_B)
    grouped = np.where(finite, total_B, np.nan).reshape(-1, num_generations)
    stats = {"reward": float(np.nanmean(total_B)) if finite.any() else float("nan"),
             "reward_std": float(np.nanmean(np.asarray(std))) if finite.any() else float("nan"),
             "frac_reward_zero_std": float(np.mean(np.asarray(zero_std))),
             "unscorable": int((~finite).sum()),
             "group_best": float(np.nanmean(np.nanmax(grouped, axis=1))) if finite.any() else float("nan")}
    return np.asarray(adv, np.float32), stats


# ============================================================================================== step
def pack(r: Rollout, adv_B: np.ndarray, *, prompt_len: int, budget: int, grad_accum: int, pad_id: int,
         mask_truncated: bool) -> dict[str, np.ndarray]:
    """Host arrays [A, B/A, ...]: prompts left-padded to `prompt_len`, completions right-padded to `budget`.

    tokens/positions/segment_ids [.., prompt_len + budget]; completion_ids, completion_mask, tool_mask, loss_mask,
    old_logps [.., budget]; advantages, truncated [..]. Positions restart at 0 at each row's first prompt token.
    """
    B = len(r.completion_ids)
    P, N = prompt_len, budget
    tokens = np.full((B, P + N), pad_id, np.int32)
    segments = np.zeros((B, P + N), np.int32)
    comp = np.full((B, N), pad_id, np.int32)
    cmask = np.zeros((B, N), np.float32)
    tmask = np.zeros((B, N), np.float32)
    old = np.zeros((B, N), np.float32)
    for b in range(B):
        p, c = r.prompt_ids[b], r.completion_ids[b]
        if len(p) > P:
            raise ValueError(f"row {b}: prompt of {len(p)} tokens exceeds prompt_len={P}")
        tokens[b, P - len(p):P] = p
        tokens[b, P:P + len(c)] = c
        segments[b, P - len(p):P + len(c)] = 1
        comp[b, :len(c)] = c
        cmask[b, :len(c)] = 1.0
        tmask[b, :len(c)] = r.tool_mask[b]
        old[b, :len(c)] = r.old_logps[b]
    positions = np.maximum(np.cumsum(segments, axis=1) - 1, 0).astype(np.int32)
    lmask = np.asarray(gl.loss_mask(cmask, tool_mask_BxT=tmask,
                                    is_truncated_B=r.truncated if mask_truncated else None), np.float32)
    A = grad_accum
    out = dict(tokens=tokens, positions=positions, segment_ids=segments, completion_ids=comp, completion_mask=cmask,
               tool_mask=tmask, loss_mask=lmask, old_logps=old, advantages=np.asarray(adv_B, np.float32),
               truncated=r.truncated.astype(np.float32))
    return {k: v.reshape(A, B // A, *v.shape[1:]) for k, v in out.items()}


LOGITS_CHUNK = 32  # completion positions projected to the vocabulary at a time


def completion_logps(model, mb: Mapping, *, prompt_len: int, temperature: float, chunk: int | None = None):
    """(log-probs, entropies) [B, N] of the completion tokens under `model` at the sampling temperature.

    Only the N positions that predict completion tokens are projected to the vocabulary, `chunk` positions at a
    time under `jax.checkpoint`, so neither the forward nor the backward pass holds [B, N, V] logits at once.
    """
    hidden, _ = model.hidden_states(mb["tokens"], positions_BxT=mb["positions"], segment_ids_BxT=mb["segment_ids"])
    ids_BxN = mb["completion_ids"]
    B, N = ids_BxN.shape
    h_BxNxD = jax.lax.dynamic_slice_in_dim(hidden, prompt_len - 1, N, axis=1)
    C = min(chunk or LOGITS_CHUNK, N)
    n = -(-N // C)
    pad = n * C - N
    h = jnp.pad(h_BxNxD, ((0, 0), (0, pad), (0, 0))).reshape(B, n, C, -1).swapaxes(0, 1)
    y = jnp.pad(ids_BxN, ((0, 0), (0, pad))).reshape(B, n, C).swapaxes(0, 1)

    @jax.checkpoint
    def one(args):
        h_BxCxD, y_BxC = args
        return gl.token_logps_and_entropy(model.logits(h_BxCxD), y_BxC, temperature=temperature)

    logps, entropy = jax.lax.map(one, (h, y))
    unchunk = lambda x: x.swapaxes(0, 1).reshape(B, n * C)[:, :N]  # noqa: E731
    return unchunk(logps), unchunk(entropy)


def grpo_loss_fn(graphdef, loss_cfg: gl.GRPOLossConfig, *, prompt_len: int, temperature: float, grad_accum: int,
                 num_iterations: int):
    """loss_fn(params, frozen, mb, denom) for `trainers.step.make_train_step`; frozen = the non-trainable rest.

    TRL's normalisation over A micro-batches of one generation batch: gradient_accumulation_steps =
    steps_per_generation = A, and dapo's num_items_in_batch = `denom` (loss tokens of the whole batch).
    Metrics are divided by A so the step's sums are means over micro-batches.
    """

    def loss_fn(params, frozen, mb: dict, denom: jax.Array):
        model = nnx.merge(graphdef, params, frozen)
        logps, entropy = completion_logps(model, mb, prompt_len=prompt_len, temperature=temperature)
        old = jax.lax.stop_gradient(logps) if num_iterations == 1 else mb["old_logps"]
        loss, metrics = gl.grpo_loss(logps, old_logps_BxT=old, ref_logps_BxT=mb.get("ref_logps"),
                                     advantages_B=mb["advantages"], mask_BxT=mb["loss_mask"], config=loss_cfg,
                                     num_items_in_batch=denom, gradient_accumulation_steps=grad_accum,
                                     steps_per_generation=grad_accum, entropies_BxT=entropy)
        return loss, {k: v / grad_accum for k, v in metrics.items()}

    return loss_fn


def loss_token_count(batch: dict) -> jax.Array:
    """Loss tokens of the whole [A, B, N] generation batch (dapo's num_items_in_batch)."""
    return jnp.sum(batch["loss_mask"])


def make_reference_fn(graphdef, *, prompt_len: int, temperature: float, batch_sharding, rest_sharding,
                      ref_sharding, mesh):
    """Jitted (ref_params, rest, batch) -> ref log-probs [A, B, N] of the frozen reference, one micro-batch a time."""

    def ref_logps(ref_params, rest, batch):
        model = nnx.merge(graphdef, ref_params, rest)

        def one(_, mb):
            return None, completion_logps(model, mb, prompt_len=prompt_len, temperature=temperature)[0]

        return jax.lax.scan(one, None, batch)[1]

    return jax.jit(ref_logps, in_shardings=(ref_sharding, rest_sharding, batch_sharding),
                   out_shardings=batch_sharding["old_logps"])


# ============================================================================================== checkpoint
def checkpoint_meta(state: TrainState) -> dict:
    from reasoner.checkpoint import fingerprint

    return {"trainer": "grpo", "fingerprint": fingerprint(state)}


# ============================================================================================== build
def build_grpo(config, *, model=None, tokenizer=None, mesh=None) -> dict[str, Any]:
    """Mesh (default from `config.mesh`), policy pieces, reference, optimizer, sharded state and sampler of a run."""
    check_config(config)
    g = config.grpo
    mesh = mesh if mesh is not None else make_mesh(config)
    tokenizer = tokenizer or common.load_tokenizer_for(config.model)
    model = build_policy(config, mesh=mesh, model=model)
    lora = bool(config.lora.rank)
    graphdef, params, rest, trainable_state, rest_state = common.split_trainable(model, lora=lora)
    params_sh = common.pure_shardings(trainable_state, mesh)
    rest_sh = common.pure_shardings(rest_state, mesh)
    loss_cfg = loss_config(config)
    ref = reference_params(params, lora=lora) if loss_cfg.beta else None

    total_steps = int(config.train.num_steps) * int(g.num_iterations)
    optimizer, schedule = make_optimizer(config.optim, total_steps=total_steps)
    state_sh = common.state_sharding(params_sh, optimizer, params, mesh)
    state = common.init_state(params, optimizer, seed=int(config.seed), sharding=state_sh)

    from reasoner.data.pipeline import batch_sharding
    from reasoner.sampling import Sampler

    keys2 = ("tokens", "positions", "segment_ids", "completion_ids", "completion_mask", "tool_mask", "loss_mask",
             "old_logps") + (("ref_logps",) if ref is not None else ())
    batch_sh = {k: batch_sharding(mesh, ndim=3) for k in keys2}
    batch_sh.update(advantages=batch_sharding(mesh, ndim=2), truncated=batch_sharding(mesh, ndim=2))
    sampler = Sampler(model, tokenizer, mesh=mesh)
    return dict(config=config, mesh=mesh, tokenizer=tokenizer, model_cfg=model.cfg, graphdef=graphdef, rest=rest,
                rest_sharding=rest_sh, params_sharding=params_sh, ref=ref, loss_cfg=loss_cfg, state=state,
                state_sharding=state_sh, optimizer=optimizer, schedule=schedule, batch_sharding=batch_sh,
                sampler=sampler, step_fns={}, ref_fns={})


def step_fn(parts: dict, *, prompt_len: int):
    """The jitted `step(state, rest, batch) -> (state, metrics)` for this prompt length (one compile per bucket)."""
    if prompt_len not in parts["step_fns"]:
        c = parts["config"]
        loss_fn = grpo_loss_fn(parts["graphdef"], parts["loss_cfg"], prompt_len=prompt_len,
                               temperature=float(c.grpo.temperature), grad_accum=int(c.grpo.grad_accum),
                               num_iterations=int(c.grpo.num_iterations))
        step = make_train_step(loss_fn=loss_fn, optimizer=parts["optimizer"], schedule=parts["schedule"],
                               denominator=loss_token_count)
        parts["step_fns"][prompt_len] = jit_train_step(
            step, state_sharding=parts["state_sharding"], frozen_sharding=parts["rest_sharding"],
            batch_sharding=parts["batch_sharding"], metrics_sharding=common.replicated(parts["mesh"]))
    return parts["step_fns"][prompt_len]


def reference_fn(parts: dict, *, prompt_len: int):
    if prompt_len not in parts["ref_fns"]:
        sh = {k: v for k, v in parts["batch_sharding"].items() if k not in ("ref_logps", "advantages", "truncated")}
        parts["ref_fns"][prompt_len] = make_reference_fn(
            parts["graphdef"], prompt_len=prompt_len, temperature=float(parts["config"].grpo.temperature),
            batch_sharding=sh, rest_sharding=parts["rest_sharding"], ref_sharding=parts["params_sharding"],
            mesh=parts["mesh"])
    return parts["ref_fns"][prompt_len]


def sync_sampler(parts: dict, params) -> None:
    """Points the sampler at the current weights (no copy: the merged state shares the arrays)."""
    parts["sampler"].params = nnx.state(nnx.merge(parts["graphdef"], params, parts["rest"]))


def prompt_bucket(n: int) -> int:
    """Prompt length rounded up to a multiple of 64, so a run compiles its step for a few lengths only."""
    return max(64, -(-n // 64) * 64)


# ============================================================================================== one iteration
def generation_step(parts: dict, state: TrainState, *, examples: Sequence[Mapping], reward, tool: ScratchpadTool | None,
                    seed: int) -> tuple[TrainState, dict[str, float]]:
    """Rollout -> rewards (host thread) || reference log-probs (device) -> advantages -> num_iterations updates."""
    from reasoner.data.pipeline import to_global_batch
    from reasoner.sampling import SamplingParams

    c, g = parts["config"], parts["config"].grpo
    tok = parts["tokenizer"]
    budget = completion_budget(c)
    t0 = time.perf_counter()
    prompt_ids = [tool.prompt_ids(e["prompt"]) if tool is not None else prompt_token_ids(tok, e["prompt"])
                  for e in examples]
    sampling = SamplingParams(max_new_tokens=int(g.max_new_tokens), temperature=float(g.temperature),
                              top_p=float(g.top_p), top_k=int(g.top_k), n=int(g.num_generations), seed=seed,
                              stop=tuple(g.stop), eos_ids=() if g.get("ignore_eos") else None)
    sync_sampler(parts, state.params)
    r = rollout(parts["sampler"], prompt_ids=prompt_ids, examples=examples, sampling=sampling, budget=budget,
                tool=tool, max_turns=int(g.max_turns), tool_reserve=int(g.tool_reserve))
    t1 = time.perf_counter()
    future = score(reward, r)
    P = prompt_bucket(max(len(p) for p in prompt_ids))
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    # Advantages are not known yet: pack with zeros, fill them in once the rewards arrive.
    host = pack(r, np.zeros(len(r.completion_ids), np.float32), prompt_len=P, budget=budget,
                grad_accum=int(g.grad_accum), pad_id=pad_id, mask_truncated=bool(g.mask_truncated))
    ref_logps = None
    if parts["ref"] is not None:
        no_ref = {k: v for k, v in host.items() if k not in ("advantages", "truncated")}
        ref_logps = reference_fn(parts, prompt_len=P)(parts["ref"], parts["rest"], to_global_batch(no_ref,
                                                                                                   parts["mesh"]))
    rewards = future.result()
    t2 = time.perf_counter()
    adv, stats = advantages(rewards.total_B, num_generations=int(g.num_generations),
                            scale_rewards=g.scale_rewards)
    host["advantages"] = adv.reshape(host["advantages"].shape)
    batch = to_global_batch(host, parts["mesh"])
    if ref_logps is not None:
        batch["ref_logps"] = ref_logps
    step = step_fn(parts, prompt_len=P)
    metrics = []
    for _ in range(int(g.num_iterations)):
        state, m = step(state, parts["rest"], batch)
        metrics.append(m)
    host_metrics = {k: float(np.mean([float(x[k]) for x in metrics])) for k in metrics[-1]}
    t3 = time.perf_counter()
    lengths = np.array([len(x) for x in r.completion_ids])
    out = {**host_metrics, **stats, **{f"rewards/{k}": v for k, v in rewards.means().items()},
           "completions/mean_length": float(lengths.mean()), "completions/clipped_ratio": float(r.truncated.mean()),
           "rollout_s": t1 - t0, "reward_wait_s": t2 - t1, "update_s": t3 - t2,
           "samples_s": len(lengths) / (t3 - t0)}
    for name, counts in reward.counter_dict().items():
        out[f"reward_failures/{name}"] = float(counts["errors"] + counts["timeouts"] + counts["non_finite"])
    return state, out


# ============================================================================================== eval
def evaluate(parts: dict, state: TrainState, *, examples: Sequence[Mapping], reward, batch_prompts: int = 8,
             tool: ScratchpadTool | None = None) -> dict[str, float]:
    """Greedy (temperature 0) completion of every example: mean weighted reward and each function's mean."""
    from reasoner.sampling import SamplingParams

    g = parts["config"].grpo
    sync_sampler(parts, state.params)
    totals, per_fn = [], []
    names = reward.names
    for start in range(0, len(examples), batch_prompts):
        chunk = list(examples[start:start + batch_prompts])
        ids = [tool.prompt_ids(e["prompt"]) if tool is not None else prompt_token_ids(parts["tokenizer"], e["prompt"])
               for e in chunk]
        sampling = SamplingParams(max_new_tokens=int(g.max_new_tokens), temperature=0.0, n=1, stop=tuple(g.stop))
        r = rollout(parts["sampler"], prompt_ids=ids, examples=chunk, sampling=sampling,
                    budget=completion_budget(parts["config"]), tool=tool, max_turns=int(g.max_turns),
                    tool_reserve=int(g.tool_reserve))
        rb = reward(r.completions, examples=r.examples)
        totals.append(np.nan_to_num(rb.total_B, nan=0.0))
        per_fn.append(rb.per_function_BxF)
    total = np.concatenate(totals)
    table = np.concatenate(per_fn)
    out = {"eval/reward": float(total.mean()), "eval/count": float(len(total))}
    for i, name in enumerate(names):
        col = table[:, i]
        out[f"eval/{name}"] = float(np.nanmean(col)) if np.any(~np.isnan(col)) else float("nan")
    return out


# ============================================================================================== loop
@dataclasses.dataclass
class GRPOResult:
    state: TrainState
    history: list[dict[str, float]]
    eval_history: list[dict[str, float]]
    resumed_from: int | None
    parts: dict

    @property
    def last_metrics(self) -> dict[str, float]:
        return self.history[-1] if self.history else {}

    def model(self):
        """The trained policy as an NNX Decoder (adapters included under LoRA)."""
        return nnx.merge(self.parts["graphdef"], self.state.params, self.parts["rest"])


def train(config, *, workdir, model=None, tokenizer=None, examples=None, eval_examples=None, reward=None,
          tool: ScratchpadTool | None = None, mesh=None, progress: bool = True) -> GRPOResult:
    """Runs (or resumes) GRPO for `config.train.num_steps` generation steps; see the module docstring."""
    from tqdm import tqdm

    from reasoner.checkpoint import RunCheckpoints, check_workdir
    from reasoner.metrics.curves import MetricsWriter, plot_curves
    from reasoner.rewards import CompositeReward

    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    check_workdir(workdir)
    if examples is None:  # from config.data, and the evaluation split with it
        examples = load_examples(config.data, split="train")
        if eval_examples is None and config.data.get("eval_split"):
            eval_examples = load_examples(config.data, split=config.data.eval_split)
    examples = [as_example(e, task="chat") if "prompt" in e else as_example(e, task=config.data.task,
                                                                                dataset=config.data.dataset)
                for e in examples]
    if eval_examples is not None:
        eval_examples = [as_example(e, task="chat") if "prompt" in e else
                         as_example(e, task=config.data.task, dataset=config.data.dataset) for e in eval_examples]
    own_reward = reward is None
    reward = reward or CompositeReward.from_config([dict(s) for s in config.rewards])
    parts = build_grpo(config, model=model, tokenizer=tokenizer, mesh=mesh)
    tool = tool if tool is not None else tool_from_config(config, parts["tokenizer"])
    state = parts["state"]
    stream = PromptStream(len(examples), int(config.grpo.prompts_per_step), int(config.seed))
    ckpt = RunCheckpoints(workdir, keep=int(config.train.keep_checkpoints),
                          async_save=bool(config.train.async_checkpoint))
    writer = MetricsWriter(workdir / "metrics.jsonl", enabled=jax.process_index() == 0)
    meta = checkpoint_meta(state)
    resumed_from = ckpt.latest_step()
    if resumed_from is not None:
        state, data_state, _ = ckpt.restore(state, expected_meta=meta)
        stream.set_state(data_state)
        writer.truncate_after(int(resumed_from))
    guard = common.NonFiniteGuard(int(config.train.max_nonfinite_steps))
    total = int(config.train.num_steps)
    eval_every = int(config.train.eval_every)
    history, eval_history = [], []
    bar = tqdm(total=total, initial=stream.step, desc="grpo", unit="step", file=sys.stderr, dynamic_ncols=True,
               disable=not progress or jax.process_index() != 0)
    try:
        while stream.step < total:
            indices = stream.next()
            state, m = generation_step(parts, state, examples=[examples[i] for i in indices], reward=reward,
                                       tool=tool, seed=(int(config.seed) * 1_000_003 + stream.step) % 2**32)
            k = stream.step
            writer.write(k, "train", **m)
            history.append({"step": k, **m})
            bar.set_postfix(reward=f"{m['reward']:.3f}", loss=f"{m['loss']:.4f}", smp_s=f"{m['samples_s']:.1f}",
                            refresh=False)
            bar.update(1)
            guard.update(bool(m["skipped"]), step=k)
            if eval_examples and eval_every and (k % eval_every == 0 or k == total):
                ev = evaluate(parts, state, examples=eval_examples, reward=reward, tool=tool)
                writer.write(k, "eval", **ev)
                eval_history.append({"step": k, **ev})
                bar.write(f"[grpo] step {k} " + ", ".join(f"{n}={v:.4f}" for n, v in ev.items()))
            if k % int(config.train.checkpoint_every) == 0 or k == total:
                ckpt.save(k, state, data_state=stream.get_state(), meta={**meta, "step": k})
    finally:
        bar.close()
        ckpt.wait()
        ckpt.close()
        if own_reward:
            reward.close()
    if writer.enabled and writer.path.exists():
        plot_curves(writer.path, workdir / "curves.png")
    if config.get("export_dir"):
        from reasoner.models.export import export_hf

        export_hf(GRPOResult(state, history, eval_history, resumed_from, parts).model(), str(config.export_dir))
    return GRPOResult(state=state, history=history, eval_history=eval_history, resumed_from=resumed_from, parts=parts)
