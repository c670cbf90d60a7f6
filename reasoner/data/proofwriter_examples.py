"""ProofWriter questions -> A* dataset records, with the paper's filter (§4.1): goal provable, shortest depth >= 3.

The goal is the atom a proof must reach: the statement for a True answer, its polarity-flipped negation for a
False answer; Unknown answers (and CWA answers that rest on failure) have no provable goal and are filtered out.
Programs are compiled once per theory and shared by its questions.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator

from reasoner.data.proofwriter_atoms import negate
from reasoner.data.proofwriter_english import LogicLLMQuestion
from reasoner.data.proofwriter_raw import RawTheory
from reasoner.data.records import make_record
from reasoner.data.solving import solve_in_base
from search.hypergraph import compile_program
from search.logic import Atom, LogicError

__all__ = ["FilterReport", "raw_records", "logic_llm_records"]


@dataclasses.dataclass
class FilterReport:
    """Counts per outcome ("kept", "unknown_answer", "not_provable", "too_shallow", "bad_program") and
    (id, reason) for questions left out for a problem rather than by the filter."""

    counts: Counter = dataclasses.field(default_factory=Counter)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def _record(*, qid, hg, goal: Atom | None, context, question, min_depth, report, source,
            rule_texts, cost: str = "max") -> dict | None:
    if goal is None:
        report.counts["unknown_answer"] += 1
        return None
    result = solve_in_base(hg, goal, heuristic="zero")
    if result is None or not result.proved:
        report.counts["not_provable"] += 1
        return None
    if result.depth < min_depth:
        report.counts["too_shallow"] += 1
        return None
    report.counts["kept"] += 1
    return make_record(qid=qid, context=context, question=question, hg=hg, goal=goal, depth=result.depth,
                       source=source, rule_texts=rule_texts, cost=cost)


def raw_records(theories: Iterable[RawTheory], *, min_depth: int = 3,
                report: FilterReport | None = None, cost: str = "max") -> Iterator[dict]:
    report = report if report is not None else FilterReport()
    for theory in theories:
        try:
            hg = compile_program(theory.program)
        except LogicError as err:
            report.counts["bad_program"] += len(theory.questions)
            report.skipped.append((theory.id, f"program rejected: {err}"))
            continue
        for q in theory.questions:
            goal = q.provable_goal
            rec = _record(qid=q.id, hg=hg, goal=goal, context=theory.text, question=q.text, min_depth=min_depth,
                          report=report, source={"theory_id": theory.id, "answer": q.answer, "qdep": q.qdep,
                                                 "strategy": q.strategy, "world": theory.world},
                          rule_texts=theory.rule_texts, cost=cost)
            if rec is not None:
                yield rec


def logic_llm_records(questions: Iterable[LogicLLMQuestion], *, min_depth: int = 3,
                      report: FilterReport | None = None, cost: str = "max") -> Iterator[dict]:
    report = report if report is not None else FilterReport()
    compiled: dict[int, object] = {}
    for q in questions:
        key = id(q.program)
        if key not in compiled:
            try:
                compiled[key] = compile_program(q.program)
            except LogicError as err:
                compiled[key] = err
        hg = compiled[key]
        if isinstance(hg, LogicError):
            report.counts["bad_program"] += 1
            report.skipped.append((q.id, f"program rejected: {hg}"))
            continue
        goal = None if q.answer is None else (q.statement if q.answer else negate(q.statement))
        rec = _record(qid=q.id, hg=hg, goal=goal, context=q.context, question=q.statement_text, min_depth=min_depth,
                      report=report, source={"answer": q.answer, "format": "logic-llm"}, rule_texts=q.rule_texts,
                      cost=cost)
        if rec is not None:
            yield rec
