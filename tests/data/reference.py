"""Independent reference for tests: naive (not semi-naive) fixpoint iteration of T_P over all substitutions.

depth(atom) = the first n with atom in T_P^n(A); under cost g = 1 + max this is the shortest proof depth.
Brute force over every substitution of the program's constants: fine for the small theories of the tests.
"""

from __future__ import annotations

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
