"""Unit tests of the A* kernel pieces on hand-made inputs: the two agendas against heapq, a hypergraph worked by
hand (trace, pops, f, V_pops, heuristics), the bad-input list of issue 5."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from search.kernel import astar_batch, device_heuristic
from search.kernel_queue import BlockedQueue, DenseQueue, PackedQueue, choose_queue
from search.kernel_score import (FLAG_BAD_ID, FLAG_BAD_LENGTH, FLAG_EMPTY, FLAG_INF_X_TRUE, pack_traces,
                                 score_tables, score_traces)
from search.kernel_tensors import BucketError, Buckets, HypergraphArrays, pack_batch
from tests.tolerances import score_atol

INF = math.inf

# a=0, b=1 axioms; c=2, d=3, g=4.  e0: a->c  e1: a,b->d  e2: c->d  e3: c->g  e4: d->g
HAND = HypergraphArrays(n_atoms=5, axiom_order=(0, 1), premises=((0,), (0, 1), (2,), (2,), (3,)),
                        heads=(2, 3, 3, 4, 4), goal=4, name="hand")


def _pack(problems):
    """One padded shape (B=8, N=M=8, K=D=2, E=8) for every hand-made batch: the jitted searches compile once per
    (cost, queue) for the whole module instead of once per test."""
    return pack_batch(problems, min_sizes=(8, 8, 2, 2, 8), pad_batch_to=8)


def _pad_cands(cands):
    return cands + [[[]] * len(cands[0])] * (8 - len(cands))


def _reference_pops(h, init, pushes, do_pop):
    """Python agenda: dict atom -> (f, h, stamp), pop = min by (f, h, -stamp); popped atoms never come back."""
    live, done, out = {}, set(), []
    for a, (f, st) in init.items():
        live[a] = (f, h[a], st)
    for step, batch in enumerate(pushes):
        for a, f, st in batch:
            live[a] = (f, h[a], st)
        if do_pop[step] and live:
            a = min(live, key=lambda x: (live[x][0], live[x][1], -live[x][2]))
            out.append((a, live.pop(a)[0]))
            done.add(a)
    return out


def _random_agenda_script(rng, n, steps, d):
    """Initial entries and per-step pushes that obey the kernel's invariants: a re-push only lowers the key (or,
    with h = inf, repeats f = inf with a newer stamp) and a popped atom is never pushed again."""
    h = rng.integers(0, 3, n).astype(np.float32)
    h[rng.random(n) < 0.1] = np.inf
    live, popped, stamp, init = {}, set(), 0, {}
    for a in rng.choice(n, 4, replace=False):
        init[int(a)] = live[int(a)] = (float(rng.integers(0, 4)) + h[a], stamp)
        stamp += 1
    pushes, do_pop = [], rng.random(steps) < 0.6
    for step in range(steps):
        batch = []
        for a in map(int, rng.choice(n, d, replace=False)):
            if a in popped or rng.random() < 0.3:
                continue
            if a in live:
                f = live[a][0] - (0.0 if np.isinf(h[a]) else float(rng.integers(1, 3)))
            else:
                f = float(rng.integers(0, 5)) + h[a]
            live[a] = (f, stamp)
            batch.append((a, f, stamp))
            stamp += 1
        pushes.append(batch)
        if do_pop[step] and live:
            a = min(live, key=lambda x: (live[x][0], h[x], -live[x][1]))
            del live[a]
            popped.add(a)
    return h, init, pushes, do_pop


@pytest.mark.parametrize("make", [lambda n: DenseQueue(), lambda n: BlockedQueue(n, block=4),
                                  lambda n: PackedQueue(**dict(zip(("f_bits", "h_bits", "stamp_bits"),
                                                                   PackedQueue.bits_for(n_atoms=n, n_edges=200,
                                                                                        max_h=2))))],
                         ids=["dense", "blocked", "packed"])
def test_queue_pops_like_a_reference_agenda_with_f_h_lifo_ties(make):
    rng = np.random.default_rng(0)
    n, steps, d, b = 32, 40, 3, 3
    scripts = [_random_agenda_script(rng, n, steps, d) for _ in range(b)]
    f0 = np.full((b, n), np.inf, np.float32)
    s0 = np.full((b, n), -1, np.int32)
    hh = np.stack([sc[0] for sc in scripts])
    atoms = np.zeros((steps, b, d), np.int32)
    fs = np.zeros((steps, b, d), np.float32)
    st = np.zeros((steps, b, d), np.int32)
    mask = np.zeros((steps, b, d), bool)
    for r, (_, init, pushes, _) in enumerate(scripts):
        for a, (f, stamp) in init.items():
            f0[r, a], s0[r, a] = f, stamp
        for t, batch in enumerate(pushes):
            for j, (a, f, stamp) in enumerate(batch):
                atoms[t, r, j], fs[t, r, j], st[t, r, j], mask[t, r, j] = a, f, stamp, True
    pops = np.stack([sc[3] for sc in scripts], axis=1)  # [steps, b]
    queue = make(n)

    def step(q, xs):
        a, f, s, mk, p = xs
        q = queue.decrease(q, a, f, s, mk)
        q2, atom, fo, ok = queue.pop(q)
        q = jax.tree.map(lambda x, y: jnp.where(p.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), q2, q)
        return q, (atom, fo, ok & p)

    run = jax.jit(lambda *xs: jax.lax.scan(step, queue.init(f0, hh, s0, s0 >= 0), xs)[1])
    atom, fo, ok = (np.asarray(x) for x in run(atoms, fs, st, mask, pops))
    for r, (h, init, pushes, do_pop) in enumerate(scripts):
        got = [(int(atom[t, r]), float(fo[t, r])) for t in range(steps) if ok[t, r]]
        assert got == _reference_pops(h, init, pushes, do_pop), f"row {r}"


def test_choose_queue_by_size():
    assert isinstance(choose_queue(256), DenseQueue)
    assert isinstance(choose_queue(256, packed_bits=(9, 9, 10)), PackedQueue)
    assert isinstance(choose_queue(1 << 14, packed_bits=(9, 9, 10)), BlockedQueue)
    assert PackedQueue.bits_for(n_atoms=4096, n_edges=8192, max_h=4096) is None  # keys would not fit an int32
    with pytest.raises(ValueError, match="queue 'packed' needs integer keys"):
        choose_queue(256, kind="packed")
    with pytest.raises(ValueError, match="unknown queue kind 'heap'"):
        choose_queue(8, kind="heap")


@pytest.mark.parametrize("queue", ["dense", "blocked", "packed"])
def test_hand_example_trace_pops_and_f(queue):
    res = astar_batch(_pack([HAND]), heuristic="zero", queue=queue)
    # worked by hand: pop b, a (LIFO among f=0), push c, d; pop d (LIFO), push g; pop c (c->g: 2 is not < 2); pop g
    assert float(res.weight_B[0]) == 2.0
    assert res.trace_BxM[0, : int(res.pushes_B[0])].tolist() == [0, 1, 4]
    assert res.popped_BxN[0, : int(res.pops_B[0])].tolist() == [1, 0, 3, 2, 4]
    assert res.popped_f_BxN[0, :5].tolist() == [0, 0, 1, 1, 2]
    assert res.v_pops_BxN[0].tolist()[:5] == [True, True, False, True, False]
    assert int(res.v_pops_B[0]) == 3 and float(res.x_delta_B[0]) == 1.0
    # cost "sum" (axioms weigh 1): c=2, d=3 via e1; c->d gives 3 (not < 3); g=3 via e3 is popped before d (LIFO)
    if queue == "packed":  # sum weights can grow past any fixed key width: the packed agenda refuses them
        with pytest.raises(ValueError, match="queue 'packed' needs integer keys"):
            astar_batch(_pack([HAND]), heuristic="zero", cost="sum", queue=queue)
        return
    res = astar_batch(_pack([HAND]), heuristic="zero", cost="sum", queue=queue)
    assert float(res.weight_B[0]) == 3.0
    assert res.trace_BxM[0, : int(res.pushes_B[0])].tolist() == [0, 1, 3]
    assert res.popped_BxN[0, : int(res.pops_B[0])].tolist() == [1, 0, 2, 4]


def test_frontier_window_and_sub_batches_match_host_on_random_programs():
    """Width 2 truncates most frontiers to a prefix of the host's pop order, and sub-batches reorder the rows and
    must put every result back in place; cost "sum" gives heads cheaper completions in later rows (the cut for
    pushes that tie the frontier's key is checked on 512 problems in the agreement test)."""
    from search.astar import solve
    from search.kernel import from_hypergraph
    from reasoner.benchmarks.kernel_corpus import random_programs

    problems = random_programs(64, seed=11, n_preds=7, n_rules=14)
    batch = pack_batch([from_hypergraph(hg, hg.goal_id(g)) for _, hg, g in problems], min_sizes=(64, 64, 4, 16, 64))
    host = [solve(hg, g, heuristic="zero", cost="sum") for _, hg, g in problems]
    r = astar_batch(batch, heuristic="zero", cost="sum", queue="frontier", frontier_width=2, sub_batches=2)
    got = [(float(r.weight_B[i]), r.trace_BxM[i, : int(r.pushes_B[i])].tolist(),
            r.popped_BxN[i, : int(r.pops_B[i])].tolist(), r.popped_f_BxN[i, : int(r.pops_B[i])].tolist())
           for i in range(len(problems))]
    want = [(float(x.weight), list(x.edge_trace), list(x.popped), list(x.popped_f)) for x in host]
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not bad, f"problem {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"


def test_frontier_one_premise_path_and_event_budget_match_host():
    """Programs of one-premise rules take the frontier's one-premise path (g shared by a row's events, c's first
    event pushes). A given heuristic with ties and +inf makes pushes tie or beat the frontier's key (the cut after
    that row fires; without it this test fails), and the smallest event budget (the padded out-degree) cuts windows
    of two rows whenever their out-edges do not fit (without that cut it fails too)."""
    from search.astar import search
    from search.kernel import from_hypergraph
    from reasoner.benchmarks.kernel_corpus import random_programs

    problems = random_programs(64, seed=5, n_preds=6, n_rules=14, max_premises=1)
    batch = pack_batch([from_hypergraph(hg, hg.goal_id(g)) for _, hg, g in problems], min_sizes=(64, 64, 1, 1, 64))
    assert batch.sizes[2] == 1
    n = batch.sizes[0]
    rng = np.random.default_rng(0)
    h = rng.integers(0, 3, (batch.batch, n)).astype(np.float32)
    h[rng.random(h.shape) < 0.2] = np.inf
    r = astar_batch(batch, heuristic="given", h_BxN=h, cost="sum", queue="frontier", frontier_width=2,
                    frontier_events=1)
    got = [(float(r.weight_B[i]), r.trace_BxM[i, : int(r.pushes_B[i])].tolist(),
            r.popped_BxN[i, : int(r.pops_B[i])].tolist(), r.popped_f_BxN[i, : int(r.pops_B[i])].tolist())
           for i in range(len(problems))]
    want = []
    for i, (_, hg, g) in enumerate(problems):
        wg, edges, popped, popped_f = search(hg, hg.goal_id(g), h[i, : hg.num_atoms].tolist(), cost="sum")
        want.append((float(wg), list(edges), list(popped), [float(x) for x in popped_f]))
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not bad, f"problem {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"


def test_hand_example_heuristics():
    batch = _pack([HAND])
    dep = np.asarray(device_heuristic(batch, heuristic="dependency"))[0, :5]
    np.testing.assert_array_equal(dep, [2, 2, 1, 1, 0])  # unary relaxed distances to g
    true = np.asarray(device_heuristic(batch, heuristic="true"))[0, :5]
    np.testing.assert_array_equal(true, [2, 2, 1, 1, 0])  # all on a shortest proof: w_G - w with w = 0,0,1,1,2
    # drop e1 (a,b->d): b is off-path, d only via c (w=2) so e4 is not tight and d is off-path
    no_e1 = HypergraphArrays(5, (0, 1), ((0,), (2,), (2,), (3,)), (2, 3, 4, 4), 4)
    true = np.asarray(device_heuristic(_pack([no_e1]), heuristic="true"))[0, :5]
    np.testing.assert_array_equal(true, [2, INF, 1, INF, 0])  # w = 0, -, 1, 2, 2
    # a=0, b=1 axioms; c=2, d=3, x=4, g=5; hyperedges a->c->g, b->d->x->g (M-only distance of b: 3). The relaxed
    # graph adds a non-derivable vertex y=6 with b -> y -> g: a shortcut, h(b) = 2
    chain = HypergraphArrays(6, (0, 1), ((0,), (2,), (1,), (3,), (4,)), (2, 5, 3, 4, 5), 5)
    relaxed = dataclasses.replace(chain, relaxed_extra=1, relaxed_src=(0, 2, 1, 3, 4, 1, 6),
                                  relaxed_dst=(2, 5, 3, 4, 5, 6, 5))
    dep = np.asarray(device_heuristic(_pack([chain, relaxed]), heuristic="dependency"))[:2, :6]
    np.testing.assert_array_equal(dep, [[2, 3, 1, 2, 1, 0], [2, 2, 1, 2, 1, 0]])
    with pytest.raises(ValueError, match=r"relaxed vertex ids \[6\] outside \[0, 6\)"):
        HypergraphArrays(5, (0,), ((0,),), (1,), 1, relaxed_extra=1, relaxed_src=(6,), relaxed_dst=(1,))


def test_unprovable_goal_runs_until_the_agenda_is_empty():
    unreachable = HypergraphArrays(3, (0,), ((1,),), (2,), -1, name="goal not a theorem")
    res = astar_batch(_pack([unreachable]), heuristic="dependency")
    assert float(res.weight_B[0]) == INF and int(res.pops_B[0]) == 1 and int(res.pushes_B[0]) == 0


def test_bucket_overflow_names_problem_and_sizes():
    big = HypergraphArrays(40, (0,), tuple((i,) for i in range(39)), tuple(range(1, 40)), 39, name="chain40")
    with pytest.raises(BucketError, match=r"problem 1 \(chain40\).*atoms=40 > 32.*hyperedges=39"):
        pack_batch([HAND, big], buckets=Buckets(max_atoms=32, max_edges=32))


def test_bad_hypergraph_arrays_and_batches():
    with pytest.raises(ValueError, match=r"atom ids \[7\] outside \[0, 5\)"):
        HypergraphArrays(5, (0,), ((7,),), (1,), 1, name="bad id")
    with pytest.raises(ValueError, match="2 premise tuples but 1 heads"):
        HypergraphArrays(5, (0,), ((0,), (1,)), (1,), 1)
    with pytest.raises(ValueError, match="empty list of problems"):
        pack_batch([])
    with pytest.raises(ValueError, match="not one of"):
        astar_batch(_pack([HAND]), heuristic="oracle")
    with pytest.raises(ValueError, match="cost 'prod'"):
        astar_batch(_pack([HAND]), cost="prod")
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    with pytest.raises(ValueError, match="does not split over mesh axis 'data' of size 8"):
        astar_batch(pack_batch([HAND] * 3), mesh=mesh)


def test_batch_split_over_the_project_mesh_data_and_fsdp_axes():
    from reasoner.sharding import make_mesh

    mesh = make_mesh("data=2,fsdp=4")
    batch = _pack([HAND] * 8)
    res = astar_batch(batch, mesh=mesh, axis=("data", "fsdp"))
    assert res.trace_BxM.sharding.spec == jax.sharding.PartitionSpec(("data", "fsdp"))
    assert res.trace_BxM[:, :3].tolist() == [[0, 1, 4]] * 8 and res.pops_B.tolist() == [5] * 8
    with pytest.raises(ValueError, match=r"mesh axes \['rows'\] not in the mesh"):
        astar_batch(batch, mesh=mesh, axis="rows")


@pytest.mark.parametrize("value", [np.nan, -1.0])
def test_nan_or_negative_given_heuristic_raises(value):
    batch = _pack([HAND, HAND])
    h = np.zeros((batch.batch, batch.sizes[0]), np.float32)
    h[1, 3] = value
    with pytest.raises(ValueError, match=r"h\[1, 3\] = .* problem 1, atom 3"):
        astar_batch(batch, heuristic="given", h_BxN=h)
    with pytest.raises(ValueError, match="expected \\(8, 8\\)"):
        astar_batch(batch, heuristic="given", h_BxN=h[:, :4])


def test_given_inf_heuristic_is_a_defined_result():
    batch = _pack([HAND])
    h = np.zeros((batch.batch, batch.sizes[0]), np.float32)
    h[0, 2] = np.inf  # c can never be expanded before g: the search still proves g through d
    res = astar_batch(batch, heuristic="given", h_BxN=h)
    assert float(res.weight_B[0]) == 2.0 and res.trace_BxM[0, : int(res.pushes_B[0])].tolist() == [0, 1, 4]


def test_bad_traces_score_zero_and_are_flagged():
    axiom_goal = HypergraphArrays(5, (0, 1), HAND.premises, HAND.heads, goal=1, name="goal is an axiom")
    batch = _pack([HAND, axiom_goal])
    tables = score_tables(batch)
    cands = [[[0, 1, 4], [-1, 1, 4], [0, 1, 99], [0, 1, 2**40], [], [0, 3]],
             [[], [0, 1, 4], [5], [], [], []]]
    ids, lengths = pack_traces(_pad_cands(cands))
    out = score_traces(batch, tables, ids, lengths)
    correct = np.asarray(out.correct_BxG)
    flags = np.asarray(out.flags_BxG)
    rewards = np.asarray(out.rewards_BxGx4)
    assert correct[0].tolist() == [True, False, False, False, False, True]
    assert flags[0, 1] & FLAG_BAD_ID and flags[0, 2] & FLAG_BAD_ID and flags[0, 3] & FLAG_BAD_ID
    assert not flags[0, 0] and flags[0, 4] & FLAG_EMPTY
    assert np.all(rewards[0, 1:5] == 0.0)
    assert np.asarray(out.valid_BxGxT)[0, 2, :3].tolist() == [True, True, False]
    # [a->c, c->g] is another correct proof (on the shortest path: no infinite f)
    assert rewards[0, 5, 0] == 1.0 and not flags[0, 5] & FLAG_INF_X_TRUE
    # an empty trace is correct exactly when the goal is an axiom (host verifier semantics)
    assert correct[1].tolist()[:3] == [True, True, False] and flags[1, 0] & FLAG_EMPTY
    assert flags[1, 2] & FLAG_BAD_ID
    # a length beyond T is clamped on device and flagged; the host packer refuses it
    bad_len = score_traces(batch, tables, ids, np.where(lengths == 3, 50, lengths))
    assert np.asarray(bad_len.flags_BxG)[0, 0] & FLAG_BAD_LENGTH
    with pytest.raises(ValueError, match="candidate 0 has 3 steps, more than max_len=2"):
        pack_traces(cands, max_len=2)
    with pytest.raises(ValueError, match=r"expected \[B, G, T\]"):
        score_traces(batch, tables, ids[0], lengths)


def test_off_path_premise_under_true_heuristic_scores_zero():
    # a=0, b=1 axioms; c=2, d=3, x=4, g=5.  e0: a->c  e1: c->g  e2: b->d  e3: d->x  e4: x->g  (w_G = 2 via c)
    graph = HypergraphArrays(6, (0, 1), ((0,), (2,), (1,), (3,), (4,)), (2, 5, 3, 4, 5), 5)
    batch = _pack([graph])
    out = score_traces(batch, score_tables(batch), *pack_traces(_pad_cands([[[2, 3, 4], [0, 1]]])))
    # both prove g; the long one pops b, d, x, which are off every shortest proof: f = inf under the true
    # cost-to-go, so its A*-true reward is 0 (flagged); A*'s own trace [0, 1] scores exactly 1
    assert np.asarray(out.correct_BxG)[0].tolist() == [True, True]
    assert np.asarray(out.flags_BxG)[0, 0] & FLAG_INF_X_TRUE
    assert float(out.rewards_BxGx4[0, 0, 3]) == 0.0 and float(out.rewards_BxGx4[0, 1, 3]) == 1.0
    # step count: alpha = 2 steps, the 3-step trace gets 0.5 ** ((3 - 2) / 2)
    assert abs(float(out.rewards_BxGx4[0, 0, 1]) - 0.5 ** 0.5) <= score_atol(0.5 ** 0.5)
