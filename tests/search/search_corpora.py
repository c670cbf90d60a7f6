"""Test corpora for search/: random small Datalog programs, DeepRD-style chains, and the paper's Fig. 1 program."""

from __future__ import annotations

import itertools
import math
import random

from search.logic import Atom, Program, Rule

VARS = ("?x", "?y", "?z")


def random_program(rng: random.Random) -> tuple[Program, list[Atom]]:
    """A random range-restricted program over <= 5 predicates (arity 0-2) and <= 3 constants, and goals in H.

    Rule premises favour predicates that are already derivable, so that derivations go several steps deep; the
    goals are mostly derived non-axiom atoms (some unprovable or axioms, for coverage).
    """
    n_consts = rng.randint(1, 3)
    consts = [f"c{i}" for i in range(n_consts)]
    preds = [(f"p{i}", rng.choice((0, 1, 1, 1, 2, 2))) for i in range(rng.randint(2, 5))]

    def atom(pred: tuple[str, int], vars_allowed: tuple[str, ...]) -> Atom:
        p, n = pred
        pool = list(vars_allowed) * 3 + consts if vars_allowed else consts
        return Atom(p, tuple(rng.choice(pool) for _ in range(n)))

    axioms = tuple(atom(pr, ()) for pr in rng.choices(preds[:2], k=rng.randint(2, 6)))
    reachable = [pr for pr in preds[:2]]
    rules = []
    for _ in range(rng.randint(3, 12)):
        k = rng.choice((1, 1, 1, 2, 2, 3))
        vs = VARS[: rng.randint(1, 3)]
        prems = tuple(atom(rng.choice(reachable if rng.random() < 0.85 else preds), vs) for _ in range(k))
        bound = tuple(sorted({v for p in prems for v in p.variables()}))
        concl_pred = rng.choice(preds)
        concl = atom(concl_pred, bound)
        if concl in prems:
            continue
        rules.append(Rule(prems, concl))
        if concl_pred not in reachable:
            reachable.append(concl_pred)
    prog = Program(axioms=axioms, rules=tuple(rules))
    # H: predicates and constants that occur in the program
    occurring = sorted(
        {t for a in axioms for t in a.args}
        | {t for r in rules for a in (*r.premises, r.conclusion) for t in a.args if not t.startswith("?")}
    )
    used = {(a.predicate, len(a.args)) for a in axioms} | {
        (a.predicate, len(a.args)) for r in rules for a in (*r.premises, r.conclusion)
    }
    goals = [Atom(p, args) for p, n in preds if (p, n) in used for args in itertools.product(occurring, repeat=n)]
    derived = [g for g in brute_force_weights(prog, cost="max")[0] if g not in axioms]
    if derived and rng.random() < 0.8:
        goals = derived
    return prog, goals


def brute_force_weights(program: Program, *, cost: str) -> tuple[dict[Atom, float], list]:
    """Exhaustive fixpoint weights: every substitution of every rule over all constants, relaxed to convergence.

    Returns (weights of provable atoms, every ground instantiation as (rule index, premises, conclusion))."""
    consts = sorted(
        {t for a in program.axioms for t in a.args}
        | {t for r in program.rules for a in (*r.premises, r.conclusion) for t in a.args if not t.startswith("?")}
    )
    insts = []
    for ri, r in enumerate(program.rules):
        vs = sorted({v for a in r.premises for v in a.variables()})
        for combo in itertools.product(consts, repeat=len(vs)):
            th = dict(zip(vs, combo))
            sub = lambda a: Atom(a.predicate, tuple(th.get(t, t) for t in a.args))  # noqa: E731
            insts.append((ri, tuple(sub(p) for p in r.premises), sub(r.conclusion)))
    a0 = 0 if cost == "max" else 1
    w: dict[Atom, float] = {a: a0 for a in program.axioms}
    changed = True
    while changed:
        changed = False
        for _, prems, c in insts:
            ws = [w.get(p, math.inf) for p in prems]
            if math.inf in ws:
                continue
            g = 1 + (max(ws) if cost == "max" else sum(ws))
            if g < w.get(c, math.inf):
                w[c] = g
                changed = True
    return w, insts


def brute_force_on_path(program: Program, goal: Atom, *, cost: str) -> set[Atom]:
    """Atoms in some optimal proof of the goal: backward closure over tight instantiations."""
    w, insts = brute_force_weights(program, cost=cost)
    if goal not in w:
        return set()
    on, frontier = {goal}, [goal]
    while frontier:
        c = frontier.pop()
        for _, prems, head in insts:
            if head != c or any(p not in w for p in prems) or head in prems:
                continue
            ws = [w[p] for p in prems]
            if 1 + (max(ws) if cost == "max" else sum(ws)) == w[c]:
                for p in prems:
                    if p not in on:
                        on.add(p)
                        frontier.append(p)
    return on


def fig1_program() -> tuple[Program, Atom]:
    """The biblical ancestry program of the paper (§2.1, Fig. 7) and its goal ancestor(terah, jacob)."""
    par = [("terah", "abraham"), ("abraham", "ishmael"), ("abraham", "isaac"), ("isaac", "jacob")]
    prog = Program(
        axioms=tuple(Atom("parent", p) for p in par),
        rules=(
            Rule((Atom("parent", ("?x", "?y")),), Atom("ancestor", ("?x", "?y"))),
            Rule((Atom("parent", ("?x", "?y")), Atom("ancestor", ("?y", "?z"))), Atom("ancestor", ("?x", "?z"))),
        ),
    )
    return prog, Atom("ancestor", ("terah", "jacob"))


def deeprd_like(rng: random.Random, *, depth: int, branches: int, entity: str = "Alice") -> tuple[Program, Atom]:
    """A DeepRD-shaped program: one axiom, `branches` unary chains of length depth or depth+1, goal at `depth`."""
    names = iter(f"w{i}" for i in range(10_000))
    start = next(names)
    rules = []
    goal = None
    for b in range(branches):
        length = depth if b == 0 else rng.choice((depth, depth + 1))
        prev = start
        for _ in range(length):
            nxt = next(names)
            rules.append(Rule((Atom(prev, ("?x",)),), Atom(nxt, ("?x",))))
            prev = nxt
        if b == 0:
            goal = Atom(prev, (entity,))
    rng.shuffle(rules)
    return Program(axioms=(Atom(start, (entity,)),), rules=tuple(rules)), goal


def _rep_atom(tokens: list[str]) -> tuple[Atom, bool]:
    """('Bob','is','smart','+') -> (Atom, negation-as-failure?) in the encoding documented in search.verbalize."""
    subj, verb, obj, pol = tokens
    var = lambda t: "?x" if t == "something" else t  # noqa: E731
    if verb == "is":
        a = Atom(obj if pol != "-" else "not_" + obj, (var(subj),))
    else:
        a = Atom(verb if pol != "-" else "not_" + verb, (var(subj), var(obj)))
    return a, pol == "~"


def proofwriter_raw(path) -> list[tuple[Program, Atom, int, tuple[str, ...], str]]:
    """(program, goal, QDep, rule sentences, question id) for every `proof`/`inv-proof` question of a raw
    ProofWriter file whose proof uses no negation-as-failure; NAF rules are left out of the program."""
    import json
    import re

    out = []
    for line in open(path):
        d = json.loads(line)
        axioms = tuple(_rep_atom(re.findall(r'"([^"]*)"', t["representation"]))[0] for t in d["triples"].values())
        rules, texts = [], []
        for r in d["rules"].values():
            lhs, rhs = r["representation"].split("->")
            prem = [_rep_atom(re.findall(r'"([^"]*)"', g)) for g in re.findall(r"\(([^()]*)\)", lhs)]
            concl, _ = _rep_atom(re.findall(r'"([^"]*)"', rhs))
            if any(naf for _, naf in prem):
                continue
            rules.append(Rule(tuple(a for a, _ in prem), concl))
            texts.append(r["text"])
        prog = Program(axioms=axioms, rules=tuple(rules))
        for qid, q in d["questions"].items():
            if q["strategy"] not in ("proof", "inv-proof") or "NAF" in q["proofs"]:
                continue
            goal, _ = _rep_atom(re.findall(r'"([^"]*)"', q["representation"]))
            goal = Atom(goal.predicate.removeprefix("not_"), goal.args)  # inv-proof: the positive statement is proved
            out.append((prog, goal, q["QDep"], tuple(texts), f"{d['id']}/{qid}"))
    return out
