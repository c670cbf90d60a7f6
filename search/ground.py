"""Validation, Herbrand base and the minimal Herbrand model by semi-naive forward chaining (paper Eq. 1).

`minimal_model(program)` returns the atoms of M in canonical order and every ground rule instantiation whose
premises lie in M (each found exactly once: semi-naive evaluation fires an instantiation only in the round after
its newest premise appeared, with the first premise of that round taken from the delta).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from search.logic import Atom, LogicError, Program, Rule, check_range_restricted

__all__ = ["axioms_of", "validate_program", "check_goal", "in_herbrand_base", "herbrand_signature", "minimal_model", "substitute", "match"]


def axioms_of(program: Program) -> list[Atom]:
    """The program's axioms followed by the conclusions of premise-free rules (paper §2.1: those are axioms)."""
    return list(program.axioms) + [r.conclusion for r in program.rules if not r.premises]


def validate_program(program: Program) -> None:
    """Raise LogicError for an empty program, a non-ground axiom, a rule that is not range-restricted, or a
    cyclic rule (its conclusion is one of its own premises: it can never prove anything new)."""
    if not isinstance(program, Program):
        raise LogicError(f"expected a search.logic.Program, got {type(program).__name__}")
    if not axioms_of(program):
        raise LogicError(
            f"empty program: no axioms (and {len(program.rules)} rules); its minimal model is empty, "
            "expected at least one ground fact"
        )
    for i, a in enumerate(program.axioms):
        if not isinstance(a, Atom) or not a.is_ground:
            raise LogicError(f"axiom {i} {a!s} is not a ground atom (expected constants only, no '?' variables)")
    for i, r in enumerate(program.rules):
        if not isinstance(r, Rule):
            raise LogicError(f"rule {i} is a {type(r).__name__}, expected search.logic.Rule")
        check_range_restricted(r, index=i)
        if r.conclusion in r.premises:
            raise LogicError(
                f"rule {i} {r!s} is cyclic: its conclusion {r.conclusion!s} is one of its premises "
                "(expected a conclusion distinct from every premise)"
            )


def herbrand_signature(program: Program) -> tuple[frozenset[str], frozenset[tuple[str, int]]]:
    """(constants, {(predicate, arity)}) occurring in the program: they span the Herbrand base H."""
    consts: set[str] = set()
    preds: set[tuple[str, int]] = set()
    atoms = list(program.axioms)
    for r in program.rules:
        atoms.extend(r.premises)
        atoms.append(r.conclusion)
    for a in atoms:
        preds.add((a.predicate, len(a.args)))
        consts.update(t for t in a.args if not t.startswith("?"))
    return frozenset(consts), frozenset(preds)


def check_goal(program: Program, goal: Atom) -> None:
    """Raise LogicError unless `goal` is a ground atom of the program's Herbrand base."""
    if not isinstance(goal, Atom):
        raise LogicError(f"goal {goal!r} is a {type(goal).__name__}, expected search.logic.Atom")
    if not goal.is_ground:
        raise LogicError(f"goal {goal!s} is not ground (expected constants only, no '?' variables)")
    consts, preds = herbrand_signature(program)
    if (goal.predicate, len(goal.args)) not in preds:
        known = sorted(f"{p}/{n}" for p, n in preds if p == goal.predicate) or "none"
        raise LogicError(
            f"goal {goal!s} is outside the Herbrand base: predicate {goal.predicate}/{len(goal.args)} does not "
            f"occur in the program (arities of that name in the program: {known})"
        )
    unknown = [t for t in goal.args if t not in consts]
    if unknown:
        raise LogicError(
            f"goal {goal!s} is outside the Herbrand base: constant(s) {unknown} do not occur in the program"
        )


def in_herbrand_base(program: Program, atom: Atom) -> bool:
    """True iff `atom` is a ground atom of the program's Herbrand base (no exception; see check_goal)."""
    try:
        check_goal(program, atom)
    except LogicError:
        return False
    return True


def match(pattern: Atom, args: tuple[str, ...], binding: dict[str, str]) -> dict[str, str] | None:
    """Extend `binding` so that pattern/binding has arguments `args` (same predicate assumed); None if impossible."""
    out = binding
    copied = False
    for p, a in zip(pattern.args, args):
        if p.startswith("?"):
            bound = out.get(p)
            if bound is None:
                if not copied:
                    out = dict(out)
                    copied = True
                out[p] = a
            elif bound != a:
                return None
        elif p != a:
            return None
    return out


def substitute(atom: Atom, binding: dict[str, str]) -> Atom:
    return Atom(atom.predicate, tuple(binding.get(t, t) for t in atom.args))


def _join(
    rule: Rule, order: list[int], k: int, binding: dict, facts: dict, max_round: list[int], rounds: dict
) -> Iterator[dict]:
    """Bindings for premises order[k:], premise j drawing facts of round <= max_round[j]."""
    if k == len(order):
        yield binding
        return
    j = order[k]
    prem = rule.premises[j]
    limit = max_round[j]
    for args in facts.get((prem.predicate, len(prem.args)), ()):
        if rounds[(prem.predicate, args)] > limit:
            continue
        b = match(prem, args, binding)
        if b is not None:
            yield from _join(rule, order, k + 1, b, facts, max_round, rounds)


def _atom_key(a: Atom) -> tuple[str, tuple[str, ...]]:
    return (a.predicate, a.args)


def minimal_model(program: Program) -> tuple[list[Atom], list[tuple[int, tuple[Atom, ...], Atom]]]:
    """Semi-naive fixpoint of T_P from the axioms.

    Returns (atoms, instantiations): atoms of M in canonical order (axioms first in program order without
    duplicates, then derived atoms by the round that first derived them, sorted within a round), and all ground
    instantiations (rule index, premise atoms in rule order, conclusion) with premises in M, excluding those whose
    conclusion is one of their premises (they can never push anything).
    """
    validate_program(program)
    rounds: dict[tuple[str, tuple[str, ...]], int] = {}
    facts: dict[tuple[str, int], list[tuple[str, ...]]] = defaultdict(list)
    atoms: list[Atom] = []
    for a in axioms_of(program):
        key = (a.predicate, a.args)
        if key not in rounds:
            rounds[key] = 0
            facts[(a.predicate, len(a.args))].append(a.args)
            atoms.append(a)
    delta = list(atoms)
    insts: list[tuple[int, tuple[Atom, ...], Atom]] = []
    new: set[Atom] = set()
    # Which (rule, premise position) can consume a new fact of a given predicate/arity.
    consumers: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for ri, rule in enumerate(program.rules):
        for i, prem in enumerate(rule.premises):
            consumers[(prem.predicate, len(prem.args))].append((ri, i))
    t = 0
    while delta:
        t += 1
        delta_by_pred: dict[tuple[str, int], list[tuple[str, ...]]] = defaultdict(list)
        for a in delta:
            delta_by_pred[(a.predicate, len(a.args))].append(a.args)
        for key, cands in delta_by_pred.items():
            for ri, i in consumers.get(key, ()):
                rule = program.rules[ri]
                kp = len(rule.premises)
                prem = rule.premises[i]
                # premises before i: strictly older than the delta; after i: anything known so far.
                max_round = [t - 2 if j < i else t - 1 for j in range(kp)]
                order = [j for j in range(kp) if j != i]
                for args in cands:
                    b0 = match(prem, args, {})
                    if b0 is None:
                        continue
                    for b in _join(rule, order, 0, b0, facts, max_round, rounds):
                        prems = tuple(substitute(p, b) for p in rule.premises)
                        concl = substitute(rule.conclusion, b)
                        if concl in prems:
                            continue
                        insts.append((ri, prems, concl))
                        if (concl.predicate, concl.args) not in rounds:
                            new.add(concl)
        delta = sorted(new, key=_atom_key)  # == Atom's dataclass order, without per-comparison overhead
        for a in delta:
            rounds[(a.predicate, a.args)] = t
            facts[(a.predicate, len(a.args))].append(a.args)
        atoms.extend(delta)
        new = set()
    return atoms, insts
