"""CEDAR-GRPO correctness per training source (Table 8), on records in each source's published format.

`load_records(source, path)` reads the source's own file and yields `CedarRecord(id, source, gold, tests)`:
  abductionrules  the authors' `dev.jsonl` contexts; one record per question, id = the question `id`, gold its `label`
  uniadilr        one JSON line per example, id = 0-based line number, gold = the set of `sentN` ids on the left of
                  `->` in `proof`; an answer is the set of its STANDALONE integers (Table 8; `match.integer_tokens`:
                  not glued to letters, digits or a decimal point), so "5, 13" is {5, 13} while "sent5, sent13"
                  holds none and scores 0, as the prompt's "Do not include the word 'sent'" asks (the details file's
                  "all integers" of the authors' code would count it; the paper is the specification)
  list_functions  id = `id`, tests = the 10 `test` pairs (int lists)
  crypto          id = `index`, tests = the `test` pairs (strings)
  balanced_copa   JSON lines (`id`, `label` 0/1): gold = label + 1 (choices are numbered 1 and 2)
  climate_fever   JSON lines (`claim_id`, `claim_label` 0-3 or its name): gold = SUPPORTS / REFUTES /
                  NOT ENOUGH INFO / DISPUTED
  causelogics     JSON lines (`id`, else the 0-based line number; `Label` TRUE / FALSE)
`score(record, completion) -> float` applies the source's verifier to the answer: the FIRST `<answer>...</answer>`
span, case-insensitive, across lines, stripped (the paper's code, cedar_grpo_details.md "Correctness verifiers";
a model that writes a draft answer and a revised one is scored on the first: it is told to give one). No complete
span (none, or only an unterminated one): 0. Code answers (Crypto, ListFunction) are the first fenced block of
that span, else the span itself (`answer_code`), and run every stored test in `reasoner.verifiers.sandbox`, 5 s
each; 1 only if all pass (a timeout scores 0 here).

`answer_span` / `answer_code` are CEDAR's one answer extractor: `cedar_correctness` (training), `reasoner cedar
check|eval` and the sandbox's `extract_answer_code` all read answers through them (the span scanner is
`reasoner.rewards.match.find_span`, shared with the generic matchers, which take the last span instead).
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

from reasoner.data.jsonl import iter_jsonl

SOURCES = ("abductionrules", "uniadilr", "list_functions", "crypto", "balanced_copa", "climate_fever", "causelogics")
CLIMATE_FEVER_LABELS = {0: "SUPPORTS", 1: "REFUTES", 2: "NOT ENOUGH INFO", 3: "DISPUTED"}
CODE_TIMEOUT_S = 5.0
_SENT_ID = re.compile(r"sent(\d+)")


@dataclasses.dataclass(frozen=True)
class CedarRecord:
    """One scorable row: `gold` (str, int or frozenset of ints) or `tests` ((input, output) pairs) for code."""

    id: str | int
    source: str
    gold: object = None
    tests: tuple = ()


def answer_span(text: str) -> str | None:
    """CEDAR's answer: the stripped content of the first complete `<answer>...</answer>` span (tags in any case,
    across lines), or None when there is none."""
    from reasoner.rewards.match import find_span

    span = find_span(text, "answer", first=True, ignore_case=True)
    return None if span is None else span.strip()


def answer_code(text: str) -> str:
    """The program of a CEDAR code answer (Crypto, ListFunction): the first fenced block of `answer_span`, else the
    span itself; "" when the completion has no complete answer span (it then defines no `transform`: reward 0)."""
    from reasoner.rewards.code_exec import extract_code

    span = answer_span(text)
    return "" if span is None else extract_code(span)


def _field(row: dict, key: str, where: str):
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object with field {key!r}, got {type(row).__name__}")
    if key not in row:
        raise ValueError(f"{where}: missing field {key!r} (has {sorted(row)})")
    return row[key]


def _test_pairs(pairs, where: str) -> tuple:
    """The (input, output) pairs of a code record's `test` list; ValueError naming `where` when one is not an
    {"input", "output"} object or there is none."""
    if not isinstance(pairs, list) or not pairs:
        raise ValueError(f"{where}: 'test' is {pairs!r:.60}, expected a non-empty list of {{input, output}} objects")
    for k, t in enumerate(pairs):
        if not (isinstance(t, dict) and "input" in t and "output" in t):
            raise ValueError(f"{where}: test[{k}] is {t!r:.60}, expected an object with 'input' and 'output'")
    return tuple((t["input"], t["output"]) for t in pairs)


def uniadilr_gold(proof: str) -> frozenset[int]:
    """The sentence ids a UniADILR proof uses: every `sentN` left of `->` ("sent5 & sent13 -> H" -> {5, 13})."""
    return frozenset(int(m) for m in _SENT_ID.findall(proof.split("->", 1)[0]))


def load_records(source: str, path: str | pathlib.Path) -> list[CedarRecord]:
    """The records of `path`, read in `source`'s published format (module docstring)."""
    if source not in SOURCES:
        raise ValueError(f"source {source!r}: expected one of {', '.join(SOURCES)}")
    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"--input {path}: no such file")
    out = []
    for lineno, row in iter_jsonl(path, what=f"{source} records"):
        n, where = lineno - 1, f"{path}:{lineno}"  # n: the 0-based line, the id of records that carry none
        if source == "abductionrules":
            for q in _field(row, "questions", where):
                out.append(CedarRecord(_field(q, "id", where), source, str(_field(q, "label", where))))
        elif source == "uniadilr":
            out.append(CedarRecord(n, source, uniadilr_gold(str(_field(row, "proof", where)))))
        elif source in ("list_functions", "crypto"):
            rid = _field(row, "id" if source == "list_functions" else "index", where)
            out.append(CedarRecord(rid, source, tests=_test_pairs(_field(row, "test", where), where)))
        elif source == "balanced_copa":
            label = _field(row, "label", where)
            if isinstance(label, bool) or label not in (0, 1):  # JSON true is no label (True == 1 in Python)
                raise ValueError(f"{where}: label {label!r}, expected 0 or 1")
            out.append(CedarRecord(_field(row, "id", where), source, int(label) + 1))
        elif source == "climate_fever":
            label = _field(row, "claim_label", where)
            if isinstance(label, int) and not isinstance(label, bool) and label in CLIMATE_FEVER_LABELS:
                gold = CLIMATE_FEVER_LABELS[label]
            elif isinstance(label, str) and label.replace("_", " ").upper() in CLIMATE_FEVER_LABELS.values():
                gold = label.replace("_", " ").upper()
            else:
                raise ValueError(f"{where}: claim_label {label!r}, expected 0-3 or one of {CLIMATE_FEVER_LABELS}")
            out.append(CedarRecord(_field(row, "claim_id", where), source, gold))
        else:  # causelogics
            label = str(_field(row, "Label", where)).strip().upper()
            if label not in ("TRUE", "FALSE"):
                raise ValueError(f"{where}: Label {row['Label']!r}, expected TRUE or FALSE")
            out.append(CedarRecord(row.get("id", n), source, label))
    return out


def score(record: CedarRecord, completion: str) -> float:
    """Table 8 correctness of one completion: 1.0 or 0.0 (never raises for any completion text)."""
    answer = answer_span(completion)
    if answer is None:
        return 0.0
    source = record.source
    if source == "abductionrules":
        return float(" ".join(answer.split()).lower() == " ".join(record.gold.split()).lower())
    if source == "uniadilr":  # canonical text ("007" is "7"): no int() of an arbitrarily long run of digits
        from reasoner.rewards.match import integer_tokens

        return float(frozenset(integer_tokens(answer)) == frozenset(str(g) for g in record.gold))
    if source == "balanced_copa":
        try:
            return float(int(answer) == record.gold)
        except ValueError:
            return 0.0
    if source in ("climate_fever", "causelogics"):
        return float(answer.upper() == record.gold)
    return _score_code(record, answer)


def _score_code(record: CedarRecord, answer: str) -> float:
    """1.0 when `transform` passes every stored test (each its own sandbox process, CODE_TIMEOUT_S), else 0.0.

    The tests run in order and the first failure decides: the reward needs all of them, so the rest cannot change
    it. An answer that hangs then costs one timeout (5 s), not one per test (10 x 5 s): with 16 completions per
    GRPO step over 2 workers, a few hanging answers would otherwise push the batch past its reward deadline
    (`timeout_s`), and the registry scores every completion of a late batch 0."""
    from reasoner.rewards.code_exec import extract_code, outputs_match
    from reasoner.verifiers.sandbox import SandboxLimits, run_transform_tests

    kind = "int_list" if record.source == "list_functions" else "string"
    code, limits = extract_code(answer), SandboxLimits(timeout_s=CODE_TIMEOUT_S)
    for test in record.tests:
        (outcome,) = run_transform_tests(code, [test], limits=limits).tests
        if outcome.error is not None or not outputs_match(outcome.got, test[1], kind=kind):
            return 0.0
    return float(bool(record.tests))


def example_of(record: CedarRecord) -> dict:
    """A training/eval example row carrying its source and preprocessed gold (`answer`; `tests` for code)."""
    row = {"source": record.source, "id": record.id}
    if record.tests:
        row["tests"] = [{"input": i, "output": o} for i, o in record.tests]
    else:
        row["answer"] = sorted(record.gold) if isinstance(record.gold, frozenset) else record.gold
    return row


def record_of(example) -> CedarRecord:
    """Inverse of `example_of`: the record an example row describes (ValueError naming what is missing)."""
    source = example.get("source")
    if source not in SOURCES:
        raise ValueError(f"example source {source!r}: expected one of {', '.join(SOURCES)}")
    where = f"{source} example {example.get('id')!r}"
    if source in ("list_functions", "crypto"):
        if not example.get("tests"):
            raise ValueError(f"{where} has no 'tests'")
        return CedarRecord(example.get("id", ""), source, tests=_test_pairs(example["tests"], where))
    if "answer" not in example:
        raise ValueError(f"{where} has no 'answer'")
    gold = example["answer"]
    try:  # the gold in the type `score` compares with: a row written by hand ("answer": "2") must not score 0
        if source == "uniadilr":
            gold = uniadilr_gold(gold) if isinstance(gold, str) else frozenset(int(g) for g in gold)
        elif source == "balanced_copa":
            gold = int(str(gold).strip())  # 2 or "2"; not True, 2.5 or "two"
            if isinstance(example["answer"], bool) or gold not in (1, 2):
                raise ValueError
        elif source in ("climate_fever", "causelogics"):
            gold = str(gold).strip().upper()
        elif not isinstance(gold, str):
            raise ValueError
    except (TypeError, ValueError):
        expected = {"uniadilr": "a proof string or a list of sentence ids", "balanced_copa": "the choice 1 or 2",
                    "abductionrules": "the missing fact as a string"}[source]
        raise ValueError(f"{where}: answer {example['answer']!r:.60} is not {expected}") from None
    return CedarRecord(example.get("id", ""), source, gold)
