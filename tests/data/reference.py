"""Independent references for tests.

`naive_depths`: naive (not semi-naive) fixpoint iteration of T_P over all substitutions. depth(atom) = the first n
with atom in T_P^n(A); under cost g = 1 + max this is the shortest proof depth. Brute force over every substitution
of the program's constants: fine for the small theories of the tests.
`bfs_distances`: plain breadth-first search in a digraph, the depths of unary (one-premise, one-entity) programs
such as DeepRD's, where the hypergraph is a plain graph.
"""

from __future__ import annotations

import collections
import itertools


def naive_depths(program) -> dict:
    constants = sorted({t for a in program.axioms for t in a.args}
                       | {t for r in program.rules for a in (*r.premises, r.conclusion) for t in a.args
                          if not t.startswith("?")})
    known = {a: 0 for a in program.axioms}
    n = 0
    while True:
        n += 1
        new = {}
        for rule in program.rules:
            variables = sorted({t for a in (*rule.premises, rule.conclusion) for t in a.args if t.startswith("?")})
            for values in itertools.product(constants, repeat=len(variables)):
                theta = dict(zip(variables, values))

                def ground(atom):
                    return type(atom)(atom.predicate, tuple(theta.get(t, t) for t in atom.args))

                if all(ground(p) in known for p in rule.premises):
                    c = ground(rule.conclusion)
                    if c not in known:
                        new[c] = n
        if not new:
            return known
        known.update(new)


def bfs_distances(children, source) -> dict:
    """{vertex: edges on a shortest path from `source`} for every vertex `source` reaches; `children` maps a vertex
    to its successors (a vertex without an entry has none)."""
    dist, frontier = {source: 0}, collections.deque([source])
    while frontier:
        u = frontier.popleft()
        for v in children.get(u, ()):
            if v not in dist:
                dist[v] = dist[u] + 1
                frontier.append(v)
    return dist
