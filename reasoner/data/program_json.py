"""JSON round trip for `search.logic` programs and atoms, the form datasets store them in.

An atom is `[predicate, [arg, ...]]`; a rule is `{"name", "premises": [atom, ...], "conclusion": atom}`;
a program is `{"axioms": [atom, ...], "rules": [rule, ...]}`. Order is kept: rule order is the canonical
hyperedge order of `search`.
"""

from __future__ import annotations

import json
from typing import Any

from search.logic import Atom, Program, Rule

__all__ = ["atom_to_obj", "atom_from_obj", "program_to_json", "program_from_json", "atom_to_json", "atom_from_json"]


def atom_to_obj(atom: Atom) -> list:
    return [atom.predicate, list(atom.args)]


def atom_from_obj(obj: Any) -> Atom:
    if not (isinstance(obj, (list, tuple)) and len(obj) == 2 and isinstance(obj[0], str)
            and isinstance(obj[1], (list, tuple)) and all(isinstance(a, str) for a in obj[1])):
        raise ValueError(f"bad atom {obj!r}: expected [predicate, [arg, ...]] with string entries")
    return Atom(obj[0], tuple(obj[1]))


def program_to_json(program: Program) -> str:
    return json.dumps({
        "axioms": [atom_to_obj(a) for a in program.axioms],
        "rules": [{"name": r.name, "premises": [atom_to_obj(p) for p in r.premises],
                   "conclusion": atom_to_obj(r.conclusion)} for r in program.rules],
    }, separators=(",", ":"))


def program_from_json(text: str | dict) -> Program:
    obj = json.loads(text) if isinstance(text, str) else text
    if not isinstance(obj, dict) or "axioms" not in obj or "rules" not in obj:
        raise ValueError("bad program: expected a JSON object with 'axioms' and 'rules'")
    axioms = tuple(atom_from_obj(a) for a in obj["axioms"])
    rules = tuple(Rule(tuple(atom_from_obj(p) for p in r["premises"]), atom_from_obj(r["conclusion"]),
                       r.get("name", "")) for r in obj["rules"])
    return Program(axioms, rules)


def atom_to_json(atom: Atom) -> str:
    return json.dumps(atom_to_obj(atom), separators=(",", ":"))


def atom_from_json(text: str) -> Atom:
    return atom_from_obj(json.loads(text))
