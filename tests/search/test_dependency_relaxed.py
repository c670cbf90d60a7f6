"""The dependency heuristic over the relaxed Herbrand-base graph (paper §3.2): non-derivable atoms give shortcuts."""

import itertools
import math
import random

from search.astar import solve
from search.heuristics import heuristic_values, relaxed_graph
from search.hypergraph import compile_program
from search.logic import Atom, Program, Rule
from tests.search.search_corpora import random_program


def _a(pred, *args):
    return Atom(pred, tuple(args))


def _shortcut_program():
    """p(k) -> q -> r -> g(k) derivable chain; p(?x), z(?y) -> u(?x) -> g(?x) never fires (z has no facts)."""
    rules = (
        Rule((_a("p", "?x"),), _a("q", "?x")),
        Rule((_a("q", "?x"),), _a("r", "?x")),
        Rule((_a("r", "?x"),), _a("g", "?x")),
        Rule((_a("p", "?x"), _a("z", "?y")), _a("u", "?x")),
        Rule((_a("u", "?x"),), _a("g", "?x")),
    )
    return Program(axioms=(_a("p", "k"), _a("p", "m")), rules=rules), _a("g", "k")


def test_non_derivable_atom_creates_shortcut():
    prog, goal = _shortcut_program()
    hg = compile_program(prog)
    gid = hg.goal_id(goal)
    h = dict(zip(hg.atoms, heuristic_values(hg, gid, heuristic="dependency")))
    assert _a("u", "k") not in hg.atom_ids  # not derivable, yet on the relaxed path
    assert h[_a("p", "k")] == 2  # p(k) -> u(k) -> g(k); the M-only reading gives 3 (p -> q -> r -> g)
    assert h[_a("q", "k")] == 2 and h[_a("r", "k")] == 1 and h[goal] == 0
    assert h[_a("p", "m")] == math.inf and h[_a("q", "m")] == math.inf  # other constant: no relaxed path
    rg = relaxed_graph(hg, gid)
    extra = set(rg.extra_atoms)
    assert _a("u", "k") in extra and {_a("z", "k"), _a("z", "m")} <= extra  # ?y grounded over both constants
    assert all(0 <= s < rg.num_vertices and 0 <= d < rg.num_vertices for s, d in zip(rg.src, rg.dst))
    for cost in ("max", "sum"):
        assert solve(prog, goal, heuristic="dependency", cost=cost).weight == solve(prog, goal, cost=cost).weight


def _herbrand_distances(prog, goal):
    """Brute force: ground every rule over all constants (no laziness), BFS from the goal over all of H."""
    consts = sorted({t for a in prog.axioms for t in a.args}
                    | {t for r in prog.rules for a in (*r.premises, r.conclusion) for t in a.args
                       if not t.startswith("?")})
    rev = {}
    for r in prog.rules:
        vs = sorted({v for a in (*r.premises, r.conclusion) for v in a.variables()})
        for combo in itertools.product(consts, repeat=len(vs)):
            b = dict(zip(vs, combo))
            c = Atom(r.conclusion.predicate, tuple(b.get(t, t) for t in r.conclusion.args))
            for p in r.premises:
                rev.setdefault(c, set()).add(Atom(p.predicate, tuple(b.get(t, t) for t in p.args)))
    return _bfs_distances(rev, goal)


def _bfs_distances(rev, start):
    """Unit-cost distance from `start` to every node reachable through `rev` (node -> its predecessors)."""
    dist = {start: 0}
    frontier = [start]
    while frontier:
        nxt = []
        for c in frontier:
            for p in rev.get(c, ()):
                if p not in dist:
                    dist[p] = dist[c] + 1
                    nxt.append(p)
        frontier = nxt
    return dist


def test_matches_full_herbrand_grounding_and_shortcuts_occur():
    rng = random.Random(77)
    shorter = 0
    for _ in range(300):
        prog, goals = random_program(rng)
        hg = compile_program(prog)
        goal = rng.choice(goals)
        gid = hg.goal_id(goal)
        if gid < 0:
            continue
        h = heuristic_values(hg, gid, heuristic="dependency")
        ref = _herbrand_distances(prog, goal)
        assert h == [ref.get(a, math.inf) for a in hg.atoms], (prog, goal)
        # the M-only reading (BFS over M's hyperedges) is never smaller, and sometimes larger
        rev = {}
        for ps, c in zip(hg.edge_premises, hg.edge_head):
            for p in ps:
                rev.setdefault(c, set()).add(p)
        d = _bfs_distances(rev, gid)
        m_h = [d.get(i, math.inf) for i in range(hg.num_atoms)]
        assert all(a <= b for a, b in zip(h, m_h))
        shorter += any(a < b for a, b in zip(h, m_h))
    assert shorter > 0
