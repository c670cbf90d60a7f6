"""A symbolic teacher for the SMT scratchpad: complete Sequent-Prover trajectories with real Z3 observations.

For the datasets whose theories we parse (ProofWriter and ProntoQA through `reasoner.data.proofwriter_english`,
FOLIO through its FOL annotations and `reasoner.tasks.fol`) the teacher writes the SMT-LIB encoding of the theory
and question and plays the scratchpad protocol as a policy (`respond`), so `run_scratchpad` runs its call through the real Z3
runner and records the real observation. Its episode, for statement S over premises P:

  turn 1  the formalization, then one z3_solve call checking both directions in one script with push / pop:
          P + (not S) first (unsat: S is entailed), then P + S (unsat: S is refuted);
  turn 2  reads the two verdicts from Z3's output and calls finish with the option letter:
          entailed only -> True; refuted only -> False; neither (both sat) -> Unknown / Uncertain.

One call rather than two keeps the trajectories short (the premises are written once: ~1,100 SmolLM2 tokens for a
ProofWriter depth-5 theory instead of ~1,900), which is what a CPU-sized SFT can afford.

Choices where the paper is silent (its teachers are LLMs): the premises are read classically (the negation in
"Bob is not red" is logical negation, so Z3 may also reason by contraposition, which ProofWriter's own forward
chaining does not); premises that Z3 finds inconsistent (both checks unsat), a Z3 error or a timeout give Unknown
where the options have it, and False where they do not (ProntoQA's True/False: not entailed reads as false).
The answer is decided from the observations in the conversation, never from the gold label: a disagreement with
the label is a wrong trajectory that curation rejects. Agreement with the labels on the staged data (Z3 5.4):
ProofWriter OWA d5 587 / 600, ProntoQA 500 / 500, FOLIO v0.0 188 / 196 encodable (8 annotations do not parse);
`tests/agents/test_symbolic_teacher.py` holds these as lower bounds.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Sequence

from reasoner.agents.policies import Reply
from reasoner.data.jsonl import read_jsonl
from reasoner.data.proofwriter_atoms import is_negative, negate
from reasoner.tasks.fol import FolError, smt_symbol, to_smt
from reasoner.tasks.logic_llm import LogicProblem, render_prompt
from search.logic import Atom, Program


@dataclasses.dataclass(frozen=True)
class Encoding:
    """The SMT-LIB of one problem: declarations, one assertion per premise (with its sentence as a comment where
    known), and the statement as a Bool term."""

    declarations: tuple[str, ...]
    assertions: tuple[str, ...]
    statement: str

    def both_directions(self) -> str:
        """One script, the premises written once: (check-sat) of P + (not S), then of P + S, each in push / pop."""
        checks = [f"; {what}\n(push 1)\n(assert {goal})\n(check-sat)\n(pop 1)" for what, goal in (
            ("1. the premises with the negated statement: unsat means the statement is entailed",
             f"(not {self.statement})"),
            ("2. the premises with the statement: unsat means the statement is refuted", self.statement))]
        return "\n".join((*self.declarations, *self.assertions, *checks))

    def script(self, *, negated: bool) -> str:
        """A self-contained script: the premises plus the statement (negated: its negation), then (check-sat)."""
        goal = f"(not {self.statement})" if negated else self.statement
        what = "the negation of the statement (unsat: entailed)" if negated else "the statement (unsat: refuted)"
        return "\n".join((*self.declarations, *self.assertions, f"; {what}", f"(assert {goal})", "(check-sat)"))


def _term(t: str, variables: dict[str, str]) -> str:
    return variables[t] if t in variables else smt_symbol(t)


def _literal(atom: Atom, variables: dict[str, str]) -> str:
    base = negate(atom) if is_negative(atom) else atom
    args = " ".join(_term(t, variables) for t in base.args)
    core = f"({smt_symbol(base.predicate)} {args})" if args else smt_symbol(base.predicate)
    return f"(not {core})" if is_negative(atom) else core


def encode_program(program: Program, statement: Atom, *, rule_texts: Sequence[str] = ()) -> Encoding:
    """A ProofWriter / ProntoQA program (facts and one-entity rules, `not_` polarity tags) as SMT-LIB over one
    sort `Entity`; `rule_texts` (the theory's sentence per rule) become comments, as a careful formalizer writes."""
    atoms = [*program.axioms, statement, *(a for r in program.rules for a in (*r.premises, r.conclusion))]
    arity: dict[str, int] = {}
    constants: set[str] = set()
    for atom in atoms:
        base = negate(atom) if is_negative(atom) else atom
        arity.setdefault(smt_symbol(base.predicate), len(base.args))
        constants |= {smt_symbol(t) for t in base.args if not t.startswith("?")}
    declarations = ["(declare-sort Entity 0)"]
    declarations += [f"(declare-const {c} Entity)" for c in sorted(constants)]
    declarations += [f"(declare-fun {p} ({' '.join(['Entity'] * n)}) Bool)" for p, n in sorted(arity.items())]
    assertions = [f"(assert {_literal(a, {})})" for a in program.axioms]
    for i, rule in enumerate(program.rules):
        names = sorted({t for a in (*rule.premises, rule.conclusion) for t in a.args if t.startswith("?")})
        variables = {v: smt_symbol("v_" + v[1:]) for v in names}
        premises = [_literal(a, variables) for a in rule.premises]
        body = premises[0] if len(premises) == 1 else f"(and {' '.join(premises)})"
        implication = f"(=> {body} {_literal(rule.conclusion, variables)})"
        if variables:
            bound = " ".join(f"({x} Entity)" for x in variables.values())
            implication = f"(forall ({bound}) {implication})"
        comment = f"; {' '.join(rule_texts[i].split())}\n" if i < len(rule_texts) else ""
        assertions.append(f"{comment}(assert {implication})")
    return Encoding(tuple(declarations), tuple(assertions), _literal(statement, {}))


def encode_fol(premises: Sequence[str], conclusion: str, *, sentences: Sequence[str] = ()) -> Encoding:
    """FOLIO's FOL annotations as SMT-LIB (raises `reasoner.tasks.fol.FolError` for a malformed formula)."""
    fol = to_smt(list(premises), conclusion)
    assertions = tuple(f"; {' '.join(sentences[i].split())}\n{a}" if i < len(sentences) else a
                       for i, a in enumerate(fol.assertions))
    return Encoding(fol.declarations, assertions, fol.conclusion)


def _tool_call(name: str, arguments: dict) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _verdicts(messages: list[dict]) -> list[str]:
    """The verdict lines (sat / unsat / unknown) of the last tool observation's Z3 output, in order."""
    for message in reversed(messages):
        if message.get("role") == "tool":
            try:
                payload = json.loads(message.get("content") or "{}")
            except json.JSONDecodeError:
                return []
            output = payload.get("output") if isinstance(payload, dict) else None
            return [line.strip() for line in str(output or "").splitlines()
                    if line.strip() in ("sat", "unsat", "unknown")]
    return []


def decide(entailment: str | None, refutation: str | None, labels: dict[str, str]) -> str:
    """The option letter from the two verdicts (see the module docstring for the rule and its choices)."""
    by_label = {label: letter for letter, label in labels.items()}
    if entailment == "unsat" and refutation == "sat" and "true" in by_label:
        return by_label["true"]
    if refutation == "unsat" and entailment == "sat" and "false" in by_label:
        return by_label["false"]
    return by_label.get("unknown", by_label.get("false", next(iter(labels))))


class SymbolicTeacher:
    """A `Policy` that answers each problem's scratchpad conversation with the two turns above.

    `problems` pairs each `LogicProblem` with its `Encoding`; conversations are matched to problems by their user
    message (`render_prompt(problem)`), so several samples of one problem all get the same (deterministic) episode.
    """

    def __init__(self, problems: Sequence[tuple[LogicProblem, Encoding]], *, timeout_s: int = 30):
        self.timeout_s = timeout_s
        self._by_prompt = {render_prompt(p): (p, e) for p, e in problems}

    def respond(self, conversations: Sequence[list[dict]]) -> list[Reply]:
        return [self._reply(messages) for messages in conversations]

    def _reply(self, messages: list[dict]) -> Reply:
        prompt = next((m["content"] for m in messages if m["role"] == "user"), None)
        if prompt not in self._by_prompt:
            raise KeyError(f"SymbolicTeacher has no encoding for the conversation starting {str(prompt)[:80]!r}")
        problem, encoding = self._by_prompt[prompt]
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            text = ("I formalize the premises in SMT-LIB: one sort of entities, a Boolean predicate per property or "
                    "relation, each rule as a universally quantified implication. Then I check both directions: "
                    "if the premises with the negated statement are unsatisfiable, the statement is entailed; if "
                    "the premises with the statement are unsatisfiable, it is refuted.\n"
                    + _tool_call("z3_solve", {"smt_code": encoding.both_directions(), "timeout": self.timeout_s}))
        else:
            entailment, refutation = (_verdicts(messages) + [None, None])[:2]
            letter = decide(entailment, refutation, problem.labels)
            option = next((o for o in problem.options if o.startswith(letter + ")")), letter)
            text = (f"With the negated statement Z3 says {entailment}; with the statement, {refutation}. "
                    f"So the answer is {option}.\n" + _tool_call("finish", {"answer": letter}))
        return Reply(text, completion_tokens=len(text.split()))


def encode_logic_llm(problems: Sequence[LogicProblem]) -> tuple[list[tuple[LogicProblem, Encoding]], list[tuple[str, str]]]:
    """Encodings of ProofWriter / ProntoQA problems from their English theories, and (id, reason) for the rest."""
    from reasoner.data.proofwriter_english import SentenceError, parse_statement, parse_theory_sentences

    encoded, failures = [], []
    for problem in problems:
        program, errors, texts = parse_theory_sentences(problem.context, theory_id=problem.id)
        if errors:
            failures.append((problem.id, errors[0][1]))
            continue
        try:
            statement = parse_statement(problem.question)
        except SentenceError as err:
            failures.append((problem.id, str(err)))
            continue
        encoded.append((problem, encode_program(program, statement, rule_texts=texts)))
    return encoded, failures


def encode_folio(problems: Sequence[LogicProblem], fol_records: Sequence[dict]) -> tuple[list, list[tuple[str, str]]]:
    """FOLIO problems (Logic-LLM records, in file order) paired by position with `folio-validation.jsonl`'s FOL
    annotations; records whose conclusion text differs or whose FOL does not parse are reported, not encoded."""
    if len(problems) != len(fol_records):
        raise ValueError(f"FOLIO: {len(problems)} problems but {len(fol_records)} FOL records; expected one each")
    encoded, failures = [], []
    for problem, record in zip(problems, fol_records):
        if record.get("conclusion", "").strip() not in problem.question:
            failures.append((problem.id, "FOL record's conclusion is not this problem's statement"))
            continue
        try:
            encoding = encode_fol(record["premises-FOL"], record["conclusion-FOL"], sentences=record["premises"])
        except (FolError, KeyError, TypeError) as err:
            failures.append((problem.id, f"FOL annotation: {err}"))
            continue
        encoded.append((problem, encoding))
    return encoded, failures


def teacher_for(problems: Sequence[LogicProblem], data_root: str, *, timeout_s: int,
                ) -> tuple[SymbolicTeacher, list[LogicProblem], list[tuple[str, str]]]:
    """The teacher over what it can encode of `problems`: `(teacher, encoded problems, [(id, why not)])`.

    FOLIO's FOL annotations are read from `{data_root}/folio/folio-validation.jsonl` (paired by position, see
    `encode_folio`); every other dataset is parsed from its English theory (`encode_logic_llm`).
    """
    if problems and problems[0].dataset == "folio":
        records = read_jsonl(pathlib.Path(data_root) / "folio" / "folio-validation.jsonl",
                             what="FOLIO's records with their FOL annotations")
        encoded, failures = encode_folio(problems, records[:len(problems)])
    else:
        encoded, failures = encode_logic_llm(problems)
    return SymbolicTeacher(encoded, timeout_s=timeout_s), [p for p, _ in encoded], failures
