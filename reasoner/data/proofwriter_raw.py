"""Loader for the raw ProofWriter release (`meta-*.jsonl`, proofwriter-dataset-V2020.12.3).

Each line is a theory: `triples` and `rules` with a `representation` field, and `questions` with `representation`,
`answer`, `QDep`, `strategy` and `proofs`. Representations are S-expressions of quoted strings:

    triple:   ("Bob" "is" "smart" "+")
    rule:     ((("something" "is" "nice" "+") ("something" "sees" "cat" "~")) -> ("something" "is" "red" "+"))

OWA theories become Horn programs with polarity-tagged predicates ("~" -> `not_` predicate, see
`proofwriter_atoms`). In CWA theories "~" in a premise is negation as failure, which Horn programs cannot express:
such rules are dropped and counted, and questions whose recorded proofs use NAF are skipped and counted.
A broken line, theory or question is reported with its id and the load continues.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from collections.abc import Iterable, Iterator

from reasoner.data.proofwriter_atoms import literal_atom
from search.logic import Atom, Program, Rule

__all__ = ["RawQuestion", "RawTheory", "LoadReport", "parse_representation", "parse_theory", "load_raw",
           "find_split_files", "SPLIT_FILE_STEMS"]

_TOKEN = re.compile(r'\s*(?:(\()|(\))|(->)|"([^"]*)")')


@dataclasses.dataclass(frozen=True)
class RawQuestion:
    """One question of a theory. `answer`: True, False, or None for OWA "Unknown"."""

    id: str
    theory_id: str
    text: str
    statement: Atom
    answer: bool | None
    qdep: int | None
    strategy: str
    needs_naf: bool

    @property
    def provable_goal(self) -> Atom | None:
        """The atom a Horn proof should reach: the statement (True), its negation (False), none (Unknown)."""
        from reasoner.data.proofwriter_atoms import negate

        if self.answer is None:
            return None
        return self.statement if self.answer else negate(self.statement)


@dataclasses.dataclass(frozen=True)
class RawTheory:
    id: str
    world: str  # "OWA" or "CWA"
    text: str
    program: Program
    questions: tuple[RawQuestion, ...]
    dropped_naf_rules: tuple[str, ...] = ()
    rule_texts: tuple[str, ...] = ()  # each kept rule's English sentence, in program rule order


@dataclasses.dataclass
class LoadReport:
    """What a load kept and left out; `as_dict` is the summary `reasoner data build proofwriter` prints (`load`)."""

    theories: int = 0
    """Theories parsed."""
    questions: int = 0
    """Questions kept in the parsed theories."""
    naf_questions: int = 0
    """CWA questions left out, their recorded proof using negation as failure (as_dict: `naf_questions_skipped`)."""
    naf_rules: int = 0
    """CWA rules dropped for a negated premise, which Horn programs cannot express (as_dict: `naf_rules_dropped`)."""
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(id, reason) of every file, line, theory or question left out, NAF questions included."""

    def as_dict(self) -> dict:
        return {"theories": self.theories, "questions": self.questions, "naf_questions_skipped": self.naf_questions,
                "naf_rules_dropped": self.naf_rules, "skipped": len(self.skipped)}


def _tokens(text: str) -> Iterator[str | tuple[str]]:
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"unexpected character {text[pos]!r} at {pos} in representation {text!r}")
        pos = m.end()
        if m.group(1):
            yield "("
        elif m.group(2):
            yield ")"
        elif m.group(3):
            yield "->"
        else:
            yield (m.group(4),)  # a quoted string, boxed to tell it from the punctuation


def parse_representation(text: str) -> list:
    """S-expression -> nested lists; quoted strings become `str`, `->` stays the string "->"."""
    stack: list[list] = [[]]
    for tok in _tokens(text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise ValueError(f"unbalanced ')' in representation {text!r}")
            done = stack.pop()
            stack[-1].append(done)
        elif tok == "->":
            stack[-1].append("->")
        else:
            stack[-1].append(tok[0])
    if len(stack) != 1 or len(stack[0]) != 1:
        raise ValueError(f"unbalanced or multiple expressions in representation {text!r}")
    return stack[0][0]


def _literal(expr) -> tuple[Atom, bool]:
    """["Bob", "is", "smart", "+"] -> (atom with polarity applied, negative?)."""
    if not (isinstance(expr, list) and len(expr) == 4 and all(isinstance(t, str) for t in expr)
            and expr[3] in ("+", "-", "~")):
        raise ValueError(f"bad literal {expr!r}: expected (subject relation object +|-|~)")
    subj, rel, obj, pol = expr
    return literal_atom(subj, rel, obj, positive=(pol == "+")), pol != "+"


def _rule(expr, name: str) -> tuple[Rule, bool]:
    """Returns the rule and whether a premise is negative."""
    if not (isinstance(expr, list) and len(expr) == 3 and expr[1] == "->" and isinstance(expr[0], list)):
        raise ValueError(f"bad rule {expr!r}: expected ((premise ...) -> conclusion)")
    premises = [_literal(p) for p in expr[0]]
    if not premises:
        raise ValueError(f"rule {name} has no premises")
    conclusion, _ = _literal(expr[2])
    return Rule(tuple(a for a, _ in premises), conclusion, name), any(neg for _, neg in premises)


def _world(theory_id: str, default: str) -> str:
    for w in ("OWA", "CWA"):
        if f"-{w}-" in theory_id or theory_id.startswith(f"{w}-"):
            return w
    return default


def _answer(value) -> bool | None:
    if value is True or value is False:
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "unknown"):
        return {"true": True, "false": False, "unknown": None}[value.lower()]
    raise ValueError(f"bad answer {value!r}: expected true, false or 'Unknown'")


def parse_theory(obj: dict, *, report: LoadReport, default_world: str = "OWA") -> RawTheory | None:
    """One `meta-*.jsonl` record -> RawTheory, or None (reported) when the theory itself is broken."""
    theory_id = str(obj.get("id", "<no id>"))
    try:
        world = _world(theory_id, default_world)
        axioms = []
        for key, triple in obj["triples"].items():
            atom, _ = _literal(parse_representation(triple["representation"]))
            axioms.append(atom)
        rules, dropped, texts = [], [], []
        for key, rule in obj["rules"].items():
            parsed, has_negative_premise = _rule(parse_representation(rule["representation"]), key)
            if world == "CWA" and has_negative_premise:
                dropped.append(key)
                continue
            rules.append(parsed)
            texts.append(str(rule.get("text", "")))
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        report.skipped.append((theory_id, f"theory not parsed: {err!r}"))
        return None
    questions = []
    raw_questions = obj.get("questions") or {}
    if not isinstance(raw_questions, dict):
        kind = type(raw_questions).__name__
        report.skipped.append((theory_id, f"questions not parsed: expected an object, got {kind}"))
        raw_questions = {}
    for qkey, q in raw_questions.items():
        qid = f"{theory_id}_{qkey}"
        try:
            statement, _ = _literal(parse_representation(q["representation"]))
            proofs = str(q.get("proofs", ""))
            needs_naf = world == "CWA" and "NAF" in proofs
            qdep = q.get("QDep")
            question = RawQuestion(id=qid, theory_id=theory_id, text=str(q.get("question", "")), statement=statement,
                                   answer=_answer(q["answer"]), qdep=None if qdep is None else int(qdep),
                                   strategy=str(q.get("strategy", "")), needs_naf=needs_naf)
        except (KeyError, TypeError, ValueError) as err:
            report.skipped.append((qid, f"question not parsed: {err!r}"))
            continue
        if needs_naf:
            report.naf_questions += 1
            report.skipped.append((qid, "proof needs negation as failure (CWA)"))
            continue
        questions.append(question)
    report.theories += 1
    report.questions += len(questions)
    report.naf_rules += len(dropped)
    return RawTheory(id=theory_id, world=world, text=str(obj.get("theory", "")),
                     program=Program(tuple(axioms), tuple(rules)), questions=tuple(questions),
                     dropped_naf_rules=tuple(dropped), rule_texts=tuple(texts))


def load_raw(paths: str | pathlib.Path | Iterable[str | pathlib.Path], *, report: LoadReport | None = None,
             default_world: str = "OWA") -> list[RawTheory]:
    """Read `meta-*.jsonl` files; every bad file, line, theory or question is added to `report.skipped`."""
    report = report if report is not None else LoadReport()
    if isinstance(paths, (str, pathlib.Path)):
        paths = [paths]
    theories = []
    for path in paths:
        path = pathlib.Path(path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            report.skipped.append((str(path), f"unreadable file: {err}"))
            continue
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("expected a JSON object per line")
            except ValueError as err:
                report.skipped.append((f"{path}:{lineno}", f"bad JSON line: {err}"))
                continue
            theory = parse_theory(obj, report=report, default_world=default_world)
            if theory is not None:
                theories.append(theory)
    return theories


SPLIT_FILE_STEMS = {"train": "train", "validation": "dev", "test": "test"}


def find_split_files(manual_dir: str | pathlib.Path, *, world: str = "OWA",
                     depth: str = "depth-5") -> dict[str, pathlib.Path]:
    """{split: meta-<stem>.jsonl} under a manual dir: the release root (`[proofwriter-dataset-V2020.12.3/]<world>/
    <depth>/`) or a folder of meta-*.jsonl files. Raises FileNotFoundError naming the places it looked."""
    root = pathlib.Path(manual_dir)
    folders = (root / world / depth, root / "proofwriter-dataset-V2020.12.3" / world / depth, root)
    for folder in folders:
        found = {split: folder / f"meta-{stem}.jsonl" for split, stem in SPLIT_FILE_STEMS.items()
                 if (folder / f"meta-{stem}.jsonl").is_file()}
        if found:
            return found
    raise FileNotFoundError(
        f"no raw ProofWriter split files under {root} (looked for meta-train/dev/test.jsonl in "
        f"{', '.join(str(f) for f in folders)}); expected the raw release proofwriter-dataset-V2020.12.3")
