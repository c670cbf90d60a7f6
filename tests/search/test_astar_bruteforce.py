"""A* against exhaustive fixpoint weights on 2,000 random programs, every heuristic and both costs."""

import math
import random

from search.astar import shortest_depth, solve
from search.heuristics import heuristic_values
from search.hypergraph import compile_program
from tests.search.search_corpora import brute_force_on_path, brute_force_weights, fig1_program, random_program

N_PROGRAMS = 2000


def test_fig7_example():
    prog, goal = fig1_program()
    hg = compile_program(prog)
    assert hg.num_atoms == 12  # Fig. 7: all 12 atoms of M
    h = heuristic_values(hg, hg.goal_id(goal), heuristic="true")
    finite = sorted(v for v in h if v != math.inf)
    assert finite == [0, 1, 2, 3, 3, 3]  # goal, ancestor chain (2 items), its 3 parent axioms
    res = solve(prog, goal, heuristic="true")
    assert res.weight == 3 and shortest_depth(prog, goal) == 3
    assert [str(s.conclusion) for s in res.trace][-1] == "ancestor(terah, jacob)"


def test_bruteforce_random_programs():
    rng = random.Random(1234)
    checked = provable = 0
    for _ in range(N_PROGRAMS):
        prog, goals = random_program(rng)
        hg = compile_program(prog)
        (w_max, insts), (w_sum, _) = (brute_force_weights(prog, cost=c) for c in ("max", "sum"))
        ref = {"max": w_max, "sum": w_sum}
        assert set(hg.atoms) == set(ref["max"]), prog  # minimal model == brute-force fixpoint support
        # hyperedges == every ground instantiation over M (self-loops dropped), each once, in canonical order
        want_edges = {(ri, ps, c) for ri, ps, c in insts if all(p in ref["max"] for p in ps) and c not in ps}
        got_edges = [
            (ri, tuple(hg.atoms[p] for p in ps), hg.atoms[c])
            for ri, ps, c in zip(hg.edge_rule, hg.edge_premises, hg.edge_head)
        ]
        assert len(got_edges) == len(set(got_edges)) and set(got_edges) == want_edges
        assert list(zip(hg.edge_rule, hg.edge_premises)) == sorted(zip(hg.edge_rule, hg.edge_premises))
        assert list(hg.atoms[: hg.num_axioms]) == list(dict.fromkeys(prog.axioms))
        goal = rng.choice(goals)
        for cost in ("max", "sum"):
            want = ref[cost].get(goal, math.inf)
            pops = {}
            for heur in ("zero", "dependency", "true"):
                res = solve(hg, goal, heuristic=heur, cost=cost)
                assert res.weight == want, (prog, goal, heur, cost, res.weight, want)
                assert res.proved == (want != math.inf)
                pops[heur] = res.pops
                if heur == "true" and res.proved:
                    on = brute_force_on_path(prog, goal, cost=cost)
                    popped = {hg.atoms[i] for i in res.popped}
                    assert popped <= on, (prog, goal, cost, popped - on)
            if want != math.inf:
                assert pops["dependency"] <= pops["zero"], (prog, goal, cost, pops)
                assert pops["true"] <= pops["zero"], (prog, goal, cost, pops)
                provable += 1
            checked += 1
    assert checked == 2 * N_PROGRAMS
    assert provable > N_PROGRAMS // 3  # the corpus is not trivially unprovable
