"""The jitted batched A* kernel and device scoring agree EXACTLY with the host reference (search.astar, search.verify,
search.rewards) on > 5,000 problems: DeepRD from the generator, ProofWriter theories from ../shared/data, random
programs. The batch is split over 8 simulated CPU devices (mesh axis "data"), so this is also the sharded check.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from search.astar import solve
from search.heuristics import heuristic_values
from search.kernel import astar_batch, from_hypergraph
from reasoner.benchmarks.kernel_corpus import deeprd_problems, proofwriter_problems, random_programs
from search.kernel_score import REWARDS, pack_traces, score_tables, score_traces
from search.kernel_tensors import pack_batch, to_device
from search.rewards import ProblemScorer
from tests.conftest import SHARED_DATA
from tests.tolerances import score_atol

HEURISTICS = ("zero", "dependency", "true")


@pytest.fixture(scope="module")
def mesh():
    devices = jax.devices()
    assert len(devices) >= 8, "tests/conftest.py should give 8 simulated CPU devices"
    return Mesh(np.array(devices[:8]), ("data",))


@pytest.fixture(scope="module")
def corpus():
    """> 5,000 problems. The DeepRD and random programs need no data; ProofWriter's real theories join when
    ../shared/data is there (CI requires it, tests/conftest.py), and random programs make up the count otherwise."""
    pw = proofwriter_problems(SHARED_DATA) if SHARED_DATA.is_dir() else []
    deeprd = deeprd_problems(1700, seed=3)
    rnd = random_programs(max(0, 5050 - len(pw) - len(deeprd)), seed=1)
    assert (len(pw) > 600 or not SHARED_DATA.is_dir()) and len(pw) + len(deeprd) + len(rnd) >= 5000
    # two size groups so small problems are not padded to DeepRD sizes: one compile per group
    return {"small": pw + rnd, "deeprd": deeprd}


@pytest.fixture(scope="module")
def group_batches(corpus, mesh):
    """One packed, sharded batch per size group, built once (host compile of the relaxed graphs included) and
    shared by the search and scoring tests, so each group's search compiles once per (cost, queue)."""
    return {group: _device_batch(problems, mesh) for group, problems in corpus.items()}


def _device_batch(problems, mesh):
    batch = pack_batch([from_hypergraph(hg, hg.goal_id(g), name=name) for name, hg, g in problems], pad_batch_to=8)
    return to_device(batch, NamedSharding(mesh, PartitionSpec("data")))


def _host(problems, heuristic, cost="max"):
    return [solve(hg, g, heuristic=heuristic, cost=cost) for _, hg, g in problems]


def _assert_same_search(problems, res, host, *, what):
    r = {k: np.asarray(v) for k, v in vars(res).items()}
    bad = []
    for i, ((name, hg, g), ref) in enumerate(zip(problems, host)):
        got = dict(
            weight=float(r["weight_B"][i]),
            trace=r["trace_BxM"][i, : r["pushes_B"][i]].tolist(),
            popped=r["popped_BxN"][i, : r["pops_B"][i]].tolist(),
            popped_f=r["popped_f_BxN"][i, : r["pops_B"][i]].tolist(),
            v_pops=int(r["v_pops_B"][i]),
            x_delta=float(r["x_delta_B"][i]),
        )
        want = dict(weight=float(ref.weight), trace=list(ref.edge_trace), popped=list(ref.popped),
                    popped_f=[float(x) for x in ref.popped_f], v_pops=ref.v_pops, x_delta=float(ref.x_delta))
        if got != want and not (math.isnan(got["x_delta"]) and math.isnan(want["x_delta"])):
            bad.append((name, {k: (got[k], want[k]) for k in got if got[k] != want[k]}))
    assert not bad, f"{what}: {len(bad)} of {len(problems)} problems differ from host A*, first: {bad[:2]}"


@pytest.mark.parametrize("group", ["small", "deeprd"])
def test_search_and_heuristics_match_host_sharded(corpus, group_batches, mesh, group):
    problems = corpus[group]
    batch = group_batches[group]
    host = {}
    for heuristic in HEURISTICS:
        res = astar_batch(batch, heuristic=heuristic, mesh=mesh)
        assert res.weight_B.sharding.spec == PartitionSpec("data")
        h = np.asarray(res.h_BxN)
        for i, (_, hg, g) in enumerate(problems):
            ref = np.asarray(heuristic_values(hg, hg.goal_id(g), heuristic=heuristic), np.float32)
            np.testing.assert_array_equal(h[i, : hg.num_atoms], ref, err_msg=f"{heuristic} h of problem {i}")
        host[heuristic] = _host(problems, heuristic)
        _assert_same_search(problems, res, host[heuristic], what=f"{group}/{heuristic}")
    if group == "deeprd":
        # DeepRD's one-premise rules take the frontier's one-premise path; the dependency heuristic makes pushes
        # tie or beat the frontier's key there (the zero heuristic never does). Same compiled search as zero's.
        res = astar_batch(batch, heuristic="dependency", queue="frontier", mesh=mesh)
        _assert_same_search(problems, res, host["dependency"], what="deeprd/dependency/frontier")


def test_blocked_queue_matches_host_on_deeprd(corpus, mesh):
    problems = corpus["deeprd"][:256]
    batch = _device_batch(problems, mesh)
    res = astar_batch(batch, heuristic="zero", queue="blocked", mesh=mesh)
    _assert_same_search(problems, res, _host(problems, "zero"), what="deeprd/zero/blocked")


def test_sum_cost_matches_host(corpus, mesh):
    problems = corpus["small"][:512]
    batch = _device_batch(problems, mesh)
    # auto runs zero on the frontier queue (cost "sum" fires its cut for a cheaper completion in a later row);
    # dependency on the frontier queue too fires the cut for pushes that tie or beat the frontier's key; true on
    # the one-pop dense queue. Two compiled searches, as auto alone would compile.
    for heuristic, queue in (("zero", "auto"), ("dependency", "frontier"), ("true", "auto")):
        res = astar_batch(batch, heuristic=heuristic, cost="sum", queue=queue, mesh=mesh)
        _assert_same_search(problems, res, _host(problems, heuristic, "sum"), what=f"sum/{heuristic}/{queue}")


def _candidates(scorer: ProblemScorer, rng: random.Random) -> list[list[int]]:
    """A* traces under the three heuristics, the shortest proof minus its first step, and random ids (some -1 or
    out of range): correct, incorrect and malformed traces."""
    m = scorer.hg.num_edges
    zero = list(solve(scorer.hg, scorer.goal, heuristic="zero").edge_trace)
    short = list(scorer.shortest)
    return [zero, list(scorer.astar["dependency"].edge_trace), list(scorer.astar["true"].edge_trace), short[1:],
            [rng.randint(-1, m) for _ in range(rng.randint(0, 6))]]


@pytest.mark.parametrize("group", ["small", "deeprd"])
def test_scores_match_host_verifier_and_rewards_sharded(corpus, group_batches, mesh, group):
    problems = corpus[group]
    rng = random.Random(7)
    scorers = [ProblemScorer(hg, g) for _, hg, g in problems]
    cands = [_candidates(s, rng) for s in scorers]
    cands += [[[]] * 5] * (-len(cands) % 8)  # padding problems of the batch
    batch = group_batches[group]
    tables = score_tables(batch, mesh=mesh)
    ids, lengths = pack_traces(cands)
    out = {k: np.asarray(v) for k, v in vars(score_traces(batch, tables, ids, lengths, mesh=mesh)).items()}
    worst, bad = 0.0, []
    for b, (scorer, cs) in enumerate(zip(scorers, cands)):
        for j, c in enumerate(cs):
            ref = scorer.score_edges([e if 0 <= e < scorer.hg.num_edges else -1 for e in c])
            same = (bool(out["correct_BxG"][b, j]) == ref.correct and int(out["pushes_BxG"][b, j]) == ref.pushes
                    and int(out["v_pops_BxG"][b, j]) == ref.v_pops
                    and out["valid_BxGxT"][b, j, : len(c)].tolist() == list(ref.verdict.valid))
            for k, name in enumerate(REWARDS):
                worst = max(worst, abs(float(out["rewards_BxGx4"][b, j, k]) - ref.rewards[name])
                            - score_atol(ref.rewards[name]))
            for k, name in enumerate(REWARDS[1:], 1):
                got, want = float(out["x_delta_BxGx4"][b, j, k]), ref.x_delta[name]
                same &= got == want or abs(got - want) <= score_atol(want)
            for key, want in (("efficiency_pushes_BxG", ref.efficiency_pushes), ("efficiency_pops_BxG",
                                                                                  ref.efficiency_pops)):
                got = float(out[key][b, j])
                same &= math.isnan(got) if want is None else abs(got - want) <= score_atol(want)
            if not same:
                bad.append((problems[b][0], j, c, ref))
    assert not bad, f"{len(bad)} candidate scores differ from the host verifier, first: {bad[:2]}"
    assert worst <= 0.0, f"a reward differs from the host's by {worst} more than its float32 bound (score_atol)"
    # A*'s own traces score exactly 1 on their reward whenever the goal is provable
    proved = np.array([s.goal_id >= 0 for s in scorers])
    rewards = out["rewards_BxGx4"][: len(scorers)]
    np.testing.assert_allclose(rewards[proved, 1, 2], 1.0, rtol=0, atol=score_atol())
    np.testing.assert_allclose(rewards[proved, 2, 3], 1.0, rtol=0, atol=score_atol())
