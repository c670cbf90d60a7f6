"""ProofWriter statements as `search.logic` atoms: one convention shared by the raw and the English loaders.

- Constants are the surface noun phrases: proper names keep their case ("Bob"), animals keep their article in
  lower case ("the cat", "the bald eagle"). A verbalizer can then print atoms without a lexicon.
- Attributes are unary: "Bob is red" -> red(Bob). Relations are binary with the verb's third-person form as
  predicate: "The cat sees the dog" -> sees(the cat, the dog).
- Open-world negation is a polarity tag on the predicate: "Bob is not red" -> not_red(Bob),
  "The cat does not see the dog" -> not_sees(the cat, the dog). `negate` flips the tag.
- Modal abilities (ProofWriter's Birds theories) are unary with a `can_` prefix: "Bob can fly" -> can_fly(Bob),
  "Bob cannot fly" -> not_can_fly(Bob) (the same polarity tag as any attribute).
- ProofWriter's rules quantify over one entity ("something", "someone"); that variable is `?x`.
"""

from __future__ import annotations

from search.logic import Atom

__all__ = ["VARIABLE", "NEGATION_PREFIX", "MODAL_PREFIX", "modal_atom", "negate", "is_negative", "literal_atom", "entity_constant",
           "third_person"]

VARIABLE = "?x"
NEGATION_PREFIX = "not_"
MODAL_PREFIX = "can_"
_VARIABLE_WORDS = {"something", "someone", "somebody", "it", "they", "he", "she"}


def is_negative(atom: Atom) -> bool:
    return atom.predicate.startswith(NEGATION_PREFIX)


def negate(atom: Atom) -> Atom:
    """The atom of the opposite polarity: red(x) <-> not_red(x)."""
    if is_negative(atom):
        return Atom(atom.predicate[len(NEGATION_PREFIX):], atom.args)
    return Atom(NEGATION_PREFIX + atom.predicate, atom.args)


def entity_constant(name: str) -> str:
    """Raw-release entity ("Bob", "cat", "bald eagle", "something") -> our term ("Bob", "the cat", "?x")."""
    name = " ".join(name.split())
    low = name.lower()
    if low in _VARIABLE_WORDS:
        return VARIABLE
    if low.startswith("the "):
        return "the " + low[4:]
    if name[:1].isupper():
        return name
    return "the " + low


def modal_atom(subject: str, verb: str, *, positive: bool) -> Atom:
    """"Bob can fly" -> can_fly(Bob); "Bob cannot fly" -> not_can_fly(Bob)."""
    atom = Atom(MODAL_PREFIX + verb.lower(), (subject,))
    return atom if positive else negate(atom)


def third_person(verb: str) -> str:
    """Base form -> third-person singular ("see" -> "sees", "chase" -> "chases", "kiss" -> "kisses")."""
    if verb.endswith(("s", "sh", "ch", "x", "z")):
        return verb + "es"
    if len(verb) > 1 and verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def literal_atom(subject: str, relation: str, obj: str, *, positive: bool) -> Atom:
    """One raw-release triple (subject, "is" | verb, attribute | object, polarity) -> atom.

    `relation` is "is" for attributes (obj is the adjective), "can" for abilities (obj is the verb), and the
    third-person verb otherwise.
    """
    subj = entity_constant(subject)
    if relation.strip().lower() == "can":  # Birds theories: ("Arthur", "can", "fly", "+")
        return modal_atom(subj, obj.strip(), positive=positive)
    if relation == "is":
        atom = Atom(obj.strip().lower().replace(" ", "_"), (subj,))
    else:
        atom = Atom(relation.strip().lower().replace(" ", "_"), (subj, entity_constant(obj)))
    return atom if positive else negate(atom)
