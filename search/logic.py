"""Logic programs: atoms, range-restricted Horn rules, programs (paper §2, Eq. 1).

Terms are plain strings: a constant is any string that does not start with "?"; a variable starts with "?" (e.g. "?x").
Negation is not part of the language: a polarity-tagged predicate is its own name (ProofWriter's "not red" becomes the
predicate "not_red"). Grounding, the minimal Herbrand model and the hypergraph live in `search.ground`/`search.hypergraph`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Atom", "Rule", "Program", "LogicError", "is_variable", "check_range_restricted"]


class LogicError(ValueError):
    """A malformed logic program or goal (not range-restricted, empty, cyclic, goal outside the Herbrand base)."""


def is_variable(term: str) -> bool:
    """A variable is a term that starts with "?"."""
    return term.startswith("?")


@dataclass(frozen=True, order=True)
class Atom:
    """predicate(arg1, ..., argn). Constants are plain strings, variables start with "?" (e.g. "?x")."""

    predicate: str
    args: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.args, tuple):
            object.__setattr__(self, "args", tuple(self.args))

    @property
    def is_ground(self) -> bool:
        return not any(a.startswith("?") for a in self.args)

    def variables(self) -> tuple[str, ...]:
        return tuple(a for a in self.args if a.startswith("?"))

    def __str__(self) -> str:
        return f"{self.predicate}({', '.join(self.args)})" if self.args else self.predicate


@dataclass(frozen=True)
class Rule:
    """premises |- conclusion. Must be range-restricted: every conclusion variable occurs in some premise.

    A rule with no premises must have a ground conclusion (it then acts as an axiom).
    """

    premises: tuple[Atom, ...]
    conclusion: Atom
    name: str = ""

    def __post_init__(self):
        if not isinstance(self.premises, tuple):
            object.__setattr__(self, "premises", tuple(self.premises))

    def __str__(self) -> str:
        body = ", ".join(str(p) for p in self.premises)
        return f"{self.name + ': ' if self.name else ''}{body} |- {self.conclusion}"


@dataclass(frozen=True)
class Program:
    """Ground facts (axioms) and rules. Rule index i is `rules[i]`; it fixes the canonical hyperedge order."""

    axioms: tuple[Atom, ...]
    rules: tuple[Rule, ...]

    def __post_init__(self):
        if not isinstance(self.axioms, tuple):
            object.__setattr__(self, "axioms", tuple(self.axioms))
        if not isinstance(self.rules, tuple):
            object.__setattr__(self, "rules", tuple(self.rules))


def check_range_restricted(rule: Rule, *, index: int | None = None) -> None:
    """Raise LogicError if a conclusion variable of `rule` appears in no premise."""
    bound = {v for p in rule.premises for v in p.variables()}
    free = [v for v in rule.conclusion.variables() if v not in bound]
    if free:
        where = f"rule {index} " if index is not None else "rule "
        raise LogicError(
            f"{where}{rule!s} is not range-restricted: conclusion variable(s) {free} occur in no premise "
            "(expected every conclusion variable to be bound by a premise)"
        )
