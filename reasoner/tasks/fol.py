"""First-order logic in FOLIO's notation -> SMT-LIB 2, for the symbolic teacher (Sequent-Prover on FOLIO).

FOLIO (`folio/folio-validation.jsonl`) annotates each premise and conclusion in FOL with the symbols
`∀ ∃ ¬ ∧ ∨ ⊕ → ↔` (also `⟷`), predicates `Name(t1, ..., tn)`, lower-case constants and bound variables.
Precedence, tightest first: `¬`, `∧`, `∨`, `⊕`, `→` (right-associative), `↔`. A quantifier binds the unary
formula after it (FOLIO always parenthesises the body: `∀x (P(x) → Q(x))`); `∀x ∀y φ` nests.
All terms share one sort `Entity`; a predicate used with two arities is an error naming it.

`to_smt(premises, conclusion)` parses every formula and returns the declarations, one assertion per premise and
the conclusion as a Bool term. Malformed input (FOLIO v0.0 has unbalanced parentheses in a few records) raises
`FolError` naming the formula and the position; nothing here recurses on the input's nesting depth beyond the
formula's own structure, and a formula nested deeper than `MAX_DEPTH` is refused.
"""

from __future__ import annotations

import dataclasses
import re

MAX_DEPTH = 200
_BINARY = {"∧": ("and", 4), "∨": ("or", 3), "⊕": ("xor", 2), "→": ("=>", 1), "↔": ("=", 0), "⟷": ("=", 0)}
_TOKEN = re.compile(r"\s*(?:(?P<sym>[∀∃¬(),∧∨⊕→↔⟷])|(?P<name>[\w’'.\-]+))")
_RESERVED = {"and", "or", "not", "xor", "true", "false", "ite", "let", "forall", "exists", "distinct", "assert",
             "declare", "define", "check", "as", "par", "match", "bool", "int", "real", "entity"}


class FolError(ValueError):
    """A formula outside the notation above."""


def smt_symbol(name: str) -> str:
    """A plain SMT-LIB symbol for a FOL name: non-alphanumerics -> `_`, reserved words and leading digits prefixed."""
    symbol = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_") or "x"
    if symbol[0].isdigit() or symbol.lower() in _RESERVED:
        symbol = "s_" + symbol
    return symbol


@dataclasses.dataclass
class _Signature:
    predicates: dict[str, int] = dataclasses.field(default_factory=dict)  # SMT name -> arity
    constants: set[str] = dataclasses.field(default_factory=set)


class _Parser:
    def __init__(self, text: str, signature: _Signature):
        self.text, self.sig = text, signature
        self.tokens: list[tuple[str, str, int]] = []  # (kind, value, position)
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise FolError(f"formula {text!r}: unexpected character {text[pos:].strip()[:1]!r} at {pos}")
            kind = "sym" if m.group("sym") else "name"
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i = 0

    def fail(self, what: str):
        at = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        raise FolError(f"formula {self.text!r}: {what} at {at}")

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        if self.i >= len(self.tokens):
            self.fail(f"expected {expected or 'more'}, found the end")
        value = self.tokens[self.i][1]
        if expected is not None and value != expected:
            self.fail(f"expected {expected!r}, found {value!r}")
        self.i += 1
        return value

    def formula(self) -> str:
        out = self.binary(0, bound=(), depth=0)
        if self.i != len(self.tokens):
            self.fail(f"unexpected {self.peek()!r}")
        return out

    def binary(self, level: int, *, bound: tuple[str, ...], depth: int) -> str:
        """Operators of precedence >= level, by precedence climbing (a loop per level, not recursion per token)."""
        if depth > MAX_DEPTH:
            self.fail(f"nesting deeper than {MAX_DEPTH}")
        left = self.unary(bound=bound, depth=depth + 1)
        while self.peek() in _BINARY and _BINARY[self.peek()][1] >= level:
            op, prec = _BINARY[self.take()]
            # "→" is right-associative: its right side may hold another "→"; the others are left-associative
            right = self.binary(prec if op == "=>" else prec + 1, bound=bound, depth=depth + 1)
            left = f"({op} {left} {right})"
        return left

    def unary(self, *, bound: tuple[str, ...], depth: int) -> str:
        token = self.peek()
        if token == "¬":
            self.take()
            return f"(not {self.unary(bound=bound, depth=depth + 1)})"
        if token in ("∀", "∃"):
            self.take()
            variable = self.take()
            if not re.fullmatch(r"[a-z][A-Za-z0-9_]*", variable):
                self.fail(f"expected a variable after {token}, found {variable!r}")
            body = self.unary(bound=bound + (variable,), depth=depth + 1)
            quantifier = "forall" if token == "∀" else "exists"
            return f"({quantifier} (({smt_symbol('v_' + variable)} Entity)) {body})"
        if token == "(":
            self.take()
            inner = self.binary(0, bound=bound, depth=depth + 1)
            self.take(")")
            return inner
        if token is None:
            self.fail("expected a formula, found the end")
        if token in _BINARY or token in (")", ","):
            self.fail(f"expected a formula, found {token!r}")
        return self.atom(bound)

    def atom(self, bound: tuple[str, ...]) -> str:
        name = self.take()
        args: list[str] = []
        if self.peek() == "(":
            self.take()
            while True:
                term = self.take()
                if term in ("(", ")", ",") or term in _BINARY or term in ("¬", "∀", "∃"):
                    self.fail(f"expected a term in {name}(...), found {term!r}")
                args.append(smt_symbol("v_" + term) if term in bound else self.constant(term))
                if self.take() == ")":
                    break
                if self.tokens[self.i - 1][1] != ",":
                    self.fail("expected ',' or ')'")
        symbol = smt_symbol(name)
        known = self.sig.predicates.setdefault(symbol, len(args))
        if known != len(args):
            raise FolError(f"formula {self.text!r}: predicate {name} used with {len(args)} and {known} arguments")
        return f"({symbol} {' '.join(args)})" if args else symbol

    def constant(self, term: str) -> str:
        symbol = smt_symbol(term)
        self.sig.constants.add(symbol)
        return symbol


@dataclasses.dataclass(frozen=True)
class FolEncoding:
    """SMT-LIB of a FOL problem: `declarations` (sort, constants, predicates), one assertion per premise, and the
    conclusion as a Bool term."""

    declarations: tuple[str, ...]
    assertions: tuple[str, ...]
    conclusion: str


def to_smt(premises: list[str], conclusion: str) -> FolEncoding:
    """Parses FOLIO premises and conclusion (raises FolError naming the formula) into one shared signature."""
    signature = _Signature()
    terms = [_Parser(text, signature).formula() for text in premises]
    goal = _Parser(conclusion, signature).formula()
    clash = signature.constants & set(signature.predicates)
    if clash:
        raise FolError(f"names used both as constant and predicate: {sorted(clash)}")
    declarations = ["(declare-sort Entity 0)"]
    declarations += [f"(declare-const {c} Entity)" for c in sorted(signature.constants)]
    declarations += [f"(declare-fun {p} ({' '.join(['Entity'] * n)}) Bool)" for p, n in sorted(signature.predicates.items())]
    return FolEncoding(tuple(declarations), tuple(f"(assert {t})" for t in terms), goal)
