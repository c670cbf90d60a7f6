"""A*-post-training rewards scored on device: host parse -> padded hyperedge ids -> ONE jitted kernel call.

The host path (`reasoner.rewards.astar`) builds a `search.rewards.ProblemScorer` per record (two host A* searches)
and scores each completion in Python. Here only parsing stays on the host: each completion is parsed with
`search.parse.parse_trace` (never raises) and mapped to hyperedge ids with `search.verify.step_edges` (-1 for a
step that is no instantiation, which the kernel marks invalid); then the whole batch goes through one jitted
function that runs `search.kernel_score.score_tables` (device A* under the dependency and true heuristics) and
`score_traces` (validity, correctness, pushes, |V_pops|, x_delta, the four rewards).

Shapes are bucketed so a run compiles a few of them and the compile is cached across GRPO steps:
P distinct problems -> next power of two (padding problems are empty, goal -1); G candidates per problem -> next
power of two (padding candidates are empty traces, discarded); T steps -> next power of two (`pack_traces`);
atoms / hyperedges / premise slots -> `search.kernel_tensors.bucket_size`.

Efficiency (pushes, pops) is computed on the host from the kernel's integer counts with the host formula
(`search.verify.efficiency`), so it equals the host path exactly; rewards are float32 (within 1e-6 of the host).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Mapping, Sequence

import jax
import numpy as np

from reasoner.tasks.astar import TaskScore
from search.kernel_score import REWARDS

__all__ = ["CompiledProblem", "DeviceScore", "compiled_problem", "score_on_device", "score_records"]

_CACHE_SIZE = 512


@dataclasses.dataclass(frozen=True, eq=False)
class CompiledProblem:
    """A (program, goal) ready for the kernel: host hypergraph, goal id, verbalizer (for parsing), kernel arrays."""

    hg: object        # search.hypergraph.Hypergraph
    goal_id: int
    verbalizer: object  # search.verbalize.Verbalizer
    arrays: object    # search.kernel_tensors.HypergraphArrays


@dataclasses.dataclass(frozen=True)
class DeviceScore(TaskScore):
    """Scores of one completion: a `reasoner.tasks.astar.TaskScore` plus the kernel's flags."""

    flags: int = 0


def compile_for_kernel(program, goal, verbalizer, *, name: str = "") -> CompiledProblem:
    """Program + goal Atom + its Verbalizer -> CompiledProblem (raises on a malformed program or a goal outside H)."""
    from search.hypergraph import compile_program
    from search.kernel import from_hypergraph

    hg = compile_program(program)
    goal_id = hg.goal_id(goal)
    return CompiledProblem(hg, goal_id, verbalizer, from_hypergraph(hg, goal_id, name=name))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def compiled_problem(program_json: str, goal_json: str, dataset: str,
                     rule_texts: tuple[str, ...] | None) -> CompiledProblem:
    """Cached CompiledProblem of a record's JSON fields (the G completions of a prompt share it)."""
    from reasoner.data.program_json import atom_from_json, program_from_json
    from search.verbalize import Verbalizer

    program = program_from_json(program_json)
    verbalizer = Verbalizer(program, dataset=dataset, rule_texts=list(rule_texts) if rule_texts else None)
    return compile_for_kernel(program, atom_from_json(goal_json), verbalizer, name=goal_json)


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@functools.partial(jax.jit, static_argnames=("cost",))
def _score_batch(batch, ids_BxGxT, lengths_BxG, *, cost: str):
    """Tables (device A* x2) and trace scores in one compiled program."""
    from search.kernel_score import score_tables, score_traces

    tables = score_tables(batch, cost=cost)
    return score_traces(batch, tables, ids_BxGxT, lengths_BxG), tables.ref_pushes_B, tables.ref_pops_B


def score_on_device(items: Sequence[tuple[CompiledProblem, str]], *, cost: str = "max") -> list[DeviceScore]:
    """Score (problem, completion text) pairs in one jitted call; results in input order. Never raises on text."""
    from search.kernel_score import pack_traces
    from search.kernel_tensors import pack_batch
    from search.parse import parse_trace
    from search.verify import step_edges

    if not items:
        return []
    slot: dict[int, int] = {}
    problems: list[CompiledProblem] = []
    traces: list[list[list[int]]] = []
    where, parsed_steps = [], []
    for problem, text in items:
        p = slot.setdefault(id(problem), len(problems))
        if p == len(problems):
            problems.append(problem)
            traces.append([])
        steps = parse_trace(text if isinstance(text, str) else "", problem.verbalizer).steps
        where.append((p, len(traces[p])))
        traces[p].append(step_edges(problem.hg, steps))
        parsed_steps.append(len(steps))
    g = _pow2(max(len(t) for t in traces))
    padded = [t + [[]] * (g - len(t)) for t in traces]
    n_problems = _pow2(len(problems))
    padded += [[[]] * g] * (n_problems - len(problems))
    batch = pack_batch([p.arrays for p in problems], pad_batch_to=n_problems)
    ids, lengths = pack_traces(padded)
    out, ref_pushes, ref_pops = _score_batch(batch, ids, lengths, cost=cost)
    correct, pushes, v_pops = (np.asarray(x) for x in (out.correct_BxG, out.pushes_BxG, out.v_pops_BxG))
    rewards, flags = np.asarray(out.rewards_BxGx4), np.asarray(out.flags_BxG)
    ref_pushes, ref_pops = np.asarray(ref_pushes), np.asarray(ref_pops)
    scores = []
    for (p, j), n_steps in zip(where, parsed_steps):
        ok, push, pop = bool(correct[p, j]), int(pushes[p, j]), int(v_pops[p, j])
        # the host formula (search.verify.efficiency) on the kernel's integer counts: identical to the host path
        eff_push = (1.0 if push == 0 else min(1.0, int(ref_pushes[p]) / push)) if ok else None
        eff_pop = (1.0 if pop == 0 else min(1.0, int(ref_pops[p]) / pop)) if ok else None
        scores.append(DeviceScore(correct=ok, steps_parsed=n_steps, pushes=push, v_pops=pop,
                                  efficiency_pushes=eff_push, efficiency_pops=eff_pop,
                                  rewards={k: float(rewards[p, j, i]) for i, k in enumerate(REWARDS)},
                                  flags=int(flags[p, j])))
    return scores


_LAST_LOCK = threading.Lock()
_LAST: dict = {}


def score_records(texts: Sequence[str], examples: Sequence[Mapping], *, dataset: str, cost: str = "max") -> list:
    """DeviceScore per completion against its A* record; a record that fails to compile gives a
    `RewardFailure` for its completions (reward 0, counted). The last batch is remembered, so several A*
    rewards of one CompositeReward (e.g. correctness + astar_true) share one kernel call."""
    from reasoner.rewards.astar import _key, _rule_texts
    from reasoner.rewards.registry import RewardFailure

    key = (dataset, cost, tuple(texts), tuple((_key(e.get("program")), _key(e.get("goal"))) for e in examples))
    with _LAST_LOCK:
        if _LAST.get("key") == key:
            return _LAST["scores"]
    out: list = [None] * len(texts)
    items, index = [], []
    for i, (text, example) in enumerate(zip(texts, examples)):
        try:
            for field in ("program", "goal"):
                if field not in example:
                    raise KeyError(f"example has no {field!r} field (keys: {sorted(example)}): expected an A* record")
            problem = compiled_problem(_key(example["program"]), _key(example["goal"]), dataset,
                                       _rule_texts(example.get("rule_texts")))
        except Exception as err:  # noqa: BLE001 - one bad record scores 0 and is counted, the batch goes on
            out[i] = RewardFailure("error", f"{type(err).__name__}: {err}")
            continue
        items.append((problem, text))
        index.append(i)
    for i, s in zip(index, score_on_device(items, cost=cost)):
        out[i] = s
    with _LAST_LOCK:
        _LAST.clear()
        _LAST.update(key=key, scores=out)
    return out
