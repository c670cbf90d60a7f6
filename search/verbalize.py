"""Verbalizers: atoms and rules -> strings, traces -> the text an SFT'd model is trained to produce (paper §3.1).

A trace is verbalized as one proof step per block, blocks separated by "\\n\\n"; axioms stay in the prompt and are
never repeated. Every step uses the same skeleton, whatever the dataset:

    Since <premise 1> and <premise 2>, by the rule "<rule text>", <conclusion>.

Datasets differ in how atoms and rules read (each verbalization set is disjoint: distinct atoms and distinct rules
get distinct strings; two rules with the same text are resolved to the lower rule index):

* "proofwriter": atoms follow ProofWriter's triples. Encoding contract for programs built from ProofWriter:
  `Atom(attr, (entity,))` = "entity is attr"; `Atom("not_" + attr, (entity,))` = "entity is not attr";
  `Atom("can_" + verb, (entity,))` = "entity can verb"; `Atom("not_can_" + verb, (entity,))` = "entity cannot verb";
  `Atom(rel, (subj, obj))` = "subj rel obj" (rel as written, e.g. "chases"); `Atom("not_" + rel, (subj, obj))` =
  "subj does not chase obj" (rel minus its final "s"). Entities as written in the theory ("Bob", "the bear").
  Rule text: the theory's own sentence when given (`rule_texts`), else "If something is A and B then it is C.".
* "deeprd": DeepRD logic mode, one entity: `Atom(p, (entity,))` = "entity is p"; rules read
  "If someone is A and B, they are C." (the generated sentence, or `rule_texts`).
* "logic": any program, atoms as "p(a, b)", rules as "p(?x), q(?x) -> r(?x)" (used for random test programs).

`Verbalizer.context(goal)` renders the prompt side (facts, rules, question).
"""

from __future__ import annotations

import re
from typing import Sequence

from search.ground import axioms_of
from search.logic import Atom, Program, Rule

__all__ = ["STEP_SEPARATOR", "Verbalizer", "make_verbalizer", "normalize_text", "DATASETS"]

STEP_SEPARATOR = "\n\n"
_MODAL = "can_"  # ProofWriter's Birds theories: can_fly(Bob) = "Bob can fly" (reasoner.data.proofwriter_atoms)
DATASETS = ("proofwriter", "deeprd", "logic")

_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'", "`": "'"})


def normalize_text(text: str) -> str:
    """Case, quotes, commas, spacing and final period do not distinguish two verbalizations."""
    t = text.translate(_QUOTES).lower().replace('"', " ").replace(",", " ")
    t = re.sub(r"\s+", " ", t).strip()
    return t.rstrip(" .!;:").strip()


def _negated_relation(rel: str) -> str:
    """'chases' -> 'chase' (ProofWriter writes "does not chase")."""
    return rel[:-1] if rel.endswith("s") else rel


class Verbalizer:
    """Maps atoms and rules of one program to strings and back (the inverse maps feed search.parse)."""

    def __init__(self, program: Program, *, dataset: str = "logic", rule_texts: Sequence[str] | None = None):
        if dataset not in DATASETS:
            raise ValueError(f"dataset {dataset!r} is not one of {DATASETS}")
        if rule_texts is not None and len(rule_texts) != len(program.rules):
            raise ValueError(f"rule_texts has {len(rule_texts)} entries, expected one per rule ({len(program.rules)})")
        self.program = program
        self.dataset = dataset
        consts = {t for a in axioms_of(program) for t in a.args}
        consts |= {t for r in program.rules for a in (*r.premises, r.conclusion) for t in a.args if t[:1] != "?"}
        self.constants = {c.lower(): c for c in sorted(consts)}
        binary = {a.predicate for r in program.rules for a in (*r.premises, r.conclusion) if len(a.args) == 2}
        binary |= {a.predicate for a in axioms_of(program) if len(a.args) == 2}
        self._relation_of_base = {}
        for p in sorted(binary):
            base = p[4:] if p.startswith("not_") else p
            self._relation_of_base.setdefault(_negated_relation(base).lower(), base)
        self._rule_text = [
            (rule_texts[i] if rule_texts is not None else self._default_rule_text(r)).strip()
            for i, r in enumerate(program.rules)
        ]
        self.rule_index: dict[str, int] = {}
        for i, r in enumerate(program.rules):
            for v in (self._rule_text[i], *self._rule_variants(r)):
                self.rule_index.setdefault(normalize_text(v), i)
        alts = sorted(self.constants, key=len, reverse=True)
        const_re = "(" + "|".join(re.escape(c) for c in alts) + ")" if alts else "(?!)"
        self._unary_re = re.compile(const_re + r" (?:is|are) (not )?([\w\-]+(?: [\w\-]+)*)")
        self._binary_re = re.compile(const_re + r" (does not |doesn't )?([\w\-]+) " + const_re)
        self._modal_re = re.compile(const_re + r" (can|cannot|can not|can't) ([a-z]+)")
        # GRPO scores many completions of one problem: their atom strings repeat, so parses are memoized (bounded).
        self._atom_cache: dict[str, Atom | None] = {}
        self.block_cache: dict[str, object] = {}

    # ---- atoms -------------------------------------------------------------------------------------------
    def atom(self, a: Atom, *, var_names: dict[str, str] | None = None) -> str:
        """The verbalization of an atom (variables rendered by `var_names`, e.g. {"?x": "something"})."""
        args = tuple((var_names or {}).get(t, t) for t in a.args)
        if self.dataset == "logic":
            return f"{a.predicate}({', '.join(args)})" if args else a.predicate
        neg = a.predicate.startswith("not_")
        base = a.predicate[4:] if neg else a.predicate
        if _is_modal(a):  # "Bob can fly" / "Bob cannot fly"
            return f"{args[0]} {'cannot' if neg else 'can'} {base[len(_MODAL):]}"
        if len(args) == 1:
            return f"{args[0]} is {'not ' if neg else ''}{base}"
        if len(args) == 2:
            verb = f"does not {_negated_relation(base)}" if neg else base
            return f"{args[0]} {verb} {args[1]}"
        if not args:
            return f"it is {'not ' if neg else ''}{base}"
        return f"{base}({', '.join(args)})"

    def parse_atom(self, text: str) -> Atom | None:
        """Inverse of `atom` for ground atoms (case-insensitive); None when the text is no atom. Never raises."""
        hit = self._atom_cache.get(text, self)
        if hit is not self:
            return hit
        out = self._parse_atom(text)
        if len(self._atom_cache) < 100_000:
            self._atom_cache[text] = out
        return out

    def _parse_atom(self, text: str) -> Atom | None:
        t = re.sub(r"\s+", " ", text.translate(_QUOTES)).strip().strip("\"'").strip().rstrip(".!;:").strip()
        if not t:
            return None
        m = re.fullmatch(r"([A-Za-z_][\w\-]*)\s*\((.*)\)", t)
        if m and (self.dataset == "logic" or "(" in t):
            args = tuple(x.strip() for x in m.group(2).split(",")) if m.group(2).strip() else ()
            if all(args) and not any("(" in x or ")" in x for x in args):
                return Atom(m.group(1), args)
            return None
        if self.dataset == "logic":
            return Atom(t, ()) if re.fullmatch(r"[A-Za-z_][\w\-]*", t) else None
        low = t.lower()
        m = self._unary_re.fullmatch(low)
        if m:
            subj = self.constants[m.group(1)]
            attr = m.group(3)
            return Atom(("not_" + attr) if m.group(2) else attr, (subj,))
        m = self._modal_re.fullmatch(low)
        if m:
            attr = _MODAL + m.group(3)
            return Atom(("not_" + attr) if m.group(2) != "can" else attr, (self.constants[m.group(1)],))
        m = self._binary_re.fullmatch(low)
        if m:
            subj, obj = self.constants[m.group(1)], self.constants[m.group(4)]
            verb = m.group(3)
            if m.group(2):
                rel = self._relation_of_base.get(verb, verb + "s")
                return Atom("not_" + rel, (subj, obj))
            return Atom(verb, (subj, obj))
        m = re.fullmatch(r"it is (not )?([\w\-]+)", low)
        if m:
            return Atom(("not_" if m.group(1) else "") + m.group(2), ())
        return None

    # ---- rules -------------------------------------------------------------------------------------------
    def rule(self, index: int) -> str:
        return self._rule_text[index]

    def _var_names(self, r: Rule, *, in_conclusion: bool) -> dict[str, str]:
        vs = list(dict.fromkeys(v for a in (*r.premises, r.conclusion) for v in a.variables()))
        if self.dataset == "logic":
            return {}
        if len(vs) == 1:
            word = "someone" if self.dataset == "deeprd" else "something"
            return {vs[0]: ("they" if self.dataset == "deeprd" else "it") if in_conclusion else word}
        return {v: v[1:].upper() for v in vs}

    def _default_rule_text(self, r: Rule) -> str:
        if self.dataset == "logic":
            return f"{', '.join(self.atom(p) for p in r.premises)} -> {self.atom(r.conclusion)}"
        prem_names = self._var_names(r, in_conclusion=False)
        concl_names = self._var_names(r, in_conclusion=True)
        concl = self.atom(r.conclusion, var_names=concl_names)
        if self.dataset == "deeprd":
            concl = re.sub(r"^they is ", "they are ", concl)
        joined = self._join_premises(r, prem_names)
        if self.dataset == "deeprd":
            return f"If {joined}, {concl}."
        return f"If {joined} then {concl}."

    def _join_premises(self, r: Rule, names: dict[str, str]) -> str:
        """'something is A and B' when all premises are unary on the same variable, else full atoms joined."""
        ps = r.premises
        single = {a.args for a in ps}
        if (len(single) == 1 and all(len(a.args) == 1 and a.args[0][:1] == "?" and not _is_modal(a) for a in ps)
                and len(ps) > 1):
            subj = names[ps[0].args[0]]
            attrs = [self.atom(Atom(a.predicate, ("\x00",))).split(" is ", 1)[1] for a in ps]
            return f"{subj} is {' and '.join(attrs)}"
        return " and ".join(self.atom(p, var_names=names) for p in ps)

    def _rule_variants(self, r: Rule) -> list[str]:
        """Other phrasings the parser accepts for the same rule (unambiguous: they name the same atoms)."""
        if self.dataset == "logic":
            return [" and ".join(self.atom(p) for p in r.premises) + " -> " + self.atom(r.conclusion)]
        out = []
        saved = self.dataset
        for style in ("proofwriter", "deeprd"):
            self.dataset = style
            try:
                out.append(self._default_rule_text(r))
            finally:
                self.dataset = saved
        ps, c = r.premises, r.conclusion
        unary_one_var = all(len(a.args) == 1 and a.args[0][:1] == "?" for a in (*ps, c)) and len({a.args for a in (*ps, c)}) == 1
        if unary_one_var and not any(a.predicate.startswith("not_") or _is_modal(a) for a in (*ps, c)):
            attrs = [a.predicate for a in ps]
            cw = self.atom(Atom(c.predicate, ("\x00",))).split(" is ", 1)[1]
            out.append(f"All {' '.join(attrs)} things are {cw}.")
            out.append(f"{', '.join(attrs)} things are {cw}.")
            out.append(f"{', '.join(attrs)} people are {cw}.")
        return out

    # ---- steps and traces ----------------------------------------------------------------------------------
    def step(self, rule: int, premises: Sequence[Atom], conclusion: Atom) -> str:
        prem = " and ".join(self.atom(p) for p in premises)
        return f'Since {prem}, by the rule "{self.rule(rule)}", {self.atom(conclusion)}.'

    def trace(self, steps: Sequence) -> str:
        """Steps (objects with .rule, .premises, .conclusion, e.g. search.astar.TraceStep) -> one text block each."""
        return STEP_SEPARATOR.join(self.step(s.rule, s.premises, s.conclusion) for s in steps)

    def context(self, goal: Atom | None = None) -> str:
        """The prompt side: facts, then rules, then the statement to prove."""
        cap = self.dataset != "logic"
        facts = " ".join(_sentence(self.atom(a), cap) for a in dict.fromkeys(self.program.axioms))
        rules = " ".join(_sentence(self.rule(i), cap) for i in range(len(self.program.rules)))
        out = f"Facts: {facts}\nRules: {rules}"
        if goal is not None:
            out += f"\nProve: {_sentence(self.atom(goal), cap)}"
        return out


def _is_modal(a: Atom) -> bool:
    """can_fly(x) / not_can_fly(x): read "x can fly" / "x cannot fly", not "x is ..."."""
    base = a.predicate[4:] if a.predicate.startswith("not_") else a.predicate
    return len(a.args) == 1 and base.startswith(_MODAL) and len(base) > len(_MODAL)


def _sentence(text: str, capitalize: bool = True) -> str:
    text = text.strip()
    if capitalize:
        text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def make_verbalizer(program: Program, dataset: str = "logic", rule_texts: Sequence[str] | None = None) -> Verbalizer:
    return Verbalizer(program, dataset=dataset, rule_texts=rule_texts)
