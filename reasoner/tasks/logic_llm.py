"""The Logic-LLM json format (ProofWriter, FOLIO, ProntoQA, AR-LSAT, LogicalDeduction): loading, prompts, checking.

A record is {"id", "context", "question", "options": ["A) True", ...], "answer": "A"}. The option labels are
True/False (ProntoQA), True/False/Uncertain (FOLIO), True/False/Unknown (ProofWriter), or free statements: five
schedules or claims A-E (AR-LSAT), three, five or seven orderings A-G (LogicalDeduction).
`check_correct` reads a free-text or `finish` answer: an option letter ("B", "(B)", "B) False", "Answer: B",
"The answer is: **B**", "\\boxed{B}"), a
label word for the truth-value sets ("False", "uncertain"; Unknown and Uncertain are the same answer), or, for
statement options, the full text of exactly one option. `<think>` blocks are ignored. A negated label ("The answer is
not True.", "isn't true") is never read as that label, nor as another: only a label stated after it counts
(`_stated_labels` has the rule).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re

FILES = {
    "proofwriter": "proofwriter/logic_llm_owa_d5_dev.json",
    "folio": "folio/logic_llm_dev.json",
    "prontoqa": "prontoqa/logic_llm_dev.json",
    "arlsat": "arlsat/test.json",
    "logicaldeduction": "logicaldeduction/dev.json",
}
_FIELDS = ("id", "context", "question", "options", "answer")
_SYNONYMS = {"true": "true", "yes": "true", "false": "false", "no": "false", "unknown": "unknown",
             "uncertain": "unknown", "undetermined": "unknown", "cannot be determined": "unknown"}

SYSTEM_PROMPT = """You are a careful logician with an SMT scratchpad. Tools:
- z3_solve(smt_code: str, timeout: int): runs a self-contained SMT-LIB 2 script (declarations,
  assertions, (check-sat)) with Z3 and returns {success, output, sat_result, error}.
- finish(answer: str): ends the episode with your final answer (an option letter).
Call a tool as <tool_call>{"name": "z3_solve", "arguments": {"smt_code": "...", "timeout": 30}}</tool_call>.
To test whether the question's statement follows from the premises, assert the premises and the
negation of the statement: unsat means it is entailed. Check both directions before answering."""


@dataclasses.dataclass(frozen=True)
class LogicProblem:
    """One question. `labels[letter]` is the normalised option label: true, false or unknown for the truth-value
    sets; the option's text, lower-cased, for statement options."""

    id: str
    dataset: str
    context: str
    question: str
    options: tuple[str, ...]
    answer: str

    @property
    def labels(self) -> dict[str, str]:
        out = {}
        for option in self.options:
            letter, _, text = option.partition(")")
            out[letter.strip()] = _SYNONYMS.get(text.strip().lower(), text.strip().lower())
        return out


def load_problems(data_root: str | pathlib.Path, dataset: str, *, limit: int | None = None) -> list[LogicProblem]:
    """Problems of `dataset` (one of `FILES`) from the Logic-LLM files under `data_root` (`../shared/data`)."""
    if dataset not in FILES:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {sorted(FILES)}")
    return load_file(pathlib.Path(data_root) / FILES[dataset], dataset=dataset, limit=limit)


def load_file(path: str | pathlib.Path, *, dataset: str | None = None, limit: int | None = None) -> list[LogicProblem]:
    """Problems from any file in the Logic-LLM format: a JSON list of records (or JSON lines of them).

    `dataset` names them (default: the file's stem). Raises ValueError naming the file and the record (its id, or
    its 0-based position) when a record lacks a field, has options not of the form "X) text", or an answer that is
    not one of its option letters.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such Logic-LLM file (expected a JSON list of {{{', '.join(_FIELDS)}}})")
    text = path.read_text(encoding="utf-8")
    try:
        records = json.loads(text) if text.lstrip().startswith("[") else [
            json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err.msg} at line {err.lineno}); expected a JSON list of records") from None
    problems = []
    for i, record in enumerate(records[:limit]):
        where = f"{path}: record {record.get('id', i) if isinstance(record, dict) else i}"
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected an object with {', '.join(_FIELDS)}")
        missing = set(_FIELDS) - set(record)
        if missing:
            raise ValueError(f"{where} lacks fields {sorted(missing)}")
        options = tuple(str(o) for o in record["options"])
        letters = [o.partition(")")[0].strip() for o in options]
        if not options or not all(len(x) == 1 and x.isalpha() and x.isupper() for x in letters):
            raise ValueError(f"{where}: options {list(options)[:3]}... are not of the form 'A) text'")
        answer = str(record["answer"]).strip()
        if answer not in letters:
            raise ValueError(f"{where}: answer {answer!r} is not one of the option letters {letters}")
        problems.append(LogicProblem(id=str(record["id"]), dataset=dataset or path.stem,
                                     context=str(record["context"]).strip(), question=str(record["question"]).strip(),
                                     options=options, answer=answer))
    return problems


def strip_think(text: str) -> str:
    """`text` without its `<think>...</think>` blocks (an unclosed one runs to the end); one left-to-right scan."""
    out, pos = [], 0
    while True:
        start = text.find("<think>", pos)
        if start < 0:
            out.append(text[pos:])
            return " ".join(out)
        out.append(text[pos:start])
        end = text.find("</think>", start + 7)
        if end < 0:
            return " ".join(out)
        pos = end + 8


def _normalise(text: str) -> str:
    return " ".join("".join(c.lower() if c.isalnum() else " " for c in text).split())


def render_prompt(problem: LogicProblem) -> str:
    """The user message: premises, question and options, asking for an option letter via finish."""
    options = "\n".join(problem.options)
    return (f"Premises:\n{problem.context}\n\nQuestion: {problem.question}\n\nOptions:\n{options}\n\n"
            "Use z3_solve to check your formalization, then call finish with the option letter.")


def render_messages(problem: LogicProblem) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": render_prompt(problem)}]


def extract_answer(text: str | None, problem: LogicProblem) -> str | None:
    """The option letter that `text` commits to, or None when it names none or several."""
    if not text:
        return None
    labels = problem.labels
    letters = "".join(labels)
    body = strip_think(text).strip()
    stripped = body.strip(" .*`'\"")
    if stripped.upper() in labels:
        return stripped.upper()
    # Prefer an explicit "answer is X" / "Answer: X" when the text argues before concluding. The words match in any
    # case, the letter only as a capital (or in parentheses): "my answer is a definite False" names no option.
    lower = letters.lower()
    letter = rf"(?:\(([{letters}{lower}])\)|([{letters}]))(?![\w])"
    line = rf"^\(?([{letters}])\)(?:\s|$)"  # "B) ..." opening a line
    # "\boxed{B}" (also "\boxed{\text{(B)}}") first; "answer is: **B**" (markdown bold, "is" and ":" together),
    # 'answer is "B"' as well as "Answer: B"
    boxed = rf"\\boxed\{{\s*(?:\\text(?:bf)?\{{\s*{letter}\s*\}}|{letter})\s*\}}"
    for pattern in (boxed, rf"(?i:answer)(?:\s+(?i:is))?[\s:*_\"'`]*{letter}", line, rf"\b(?i:option)\s*{letter}"):
        found = [m if isinstance(m, str) else "".join(m) for m in re.findall(pattern, body, flags=re.MULTILINE)]
        if pattern == line and set(found) >= set(letters):
            # the options echoed back, one a line: not a choice, and their words are not the reply's either
            body = re.sub(line + ".*$", "", body, flags=re.MULTILINE)
            continue
        if found:
            return found[-1].upper()
    # a label word: the one the sentence after the last "answer is" / "Answer:" names (a "true" argued about before
    # "The answer is False." does not count), else the one the whole reply names; two different ones name no option;
    # a negated label ("not True") is never read, see `_stated_labels`
    said = list(re.finditer(r"(?i:\banswer(?:\s+is\b\s*:?|\s*:))", body))
    conclusion = re.split(r"\n|[.!?](?:\s|$)", body[said[-1].end():], maxsplit=1)[0] if said else ""
    stated, negated = _stated_labels(conclusion, labels)
    if negated and not stated:  # "The answer is not True. It is Unknown.": the label stated after the conclusion,
        # never one the conclusion negates ("The answer is not True. A premise makes it true only if ...": none)
        stated, _ = _stated_labels(body[said[-1].end() + len(conclusion):], labels)
        stated -= negated
    elif not stated:
        stated, negated = _stated_labels(body, labels)
    if len(stated) == 1:
        return stated.pop()
    if stated or negated:
        return None
    if not set(labels.values()) <= set(_SYNONYMS.values()):
        # statement options (AR-LSAT, LogicalDeduction): the full text of exactly one option
        # ("one Russian novel" is inside "one Russian novel, one Russian play": an option named only as part of a
        # longer option that is named too does not count)
        said = _normalise(body)
        named = {letter: _normalise(label) for letter, label in labels.items()
                 if _normalise(label) and _normalise(label) in said}
        outer = [x for x, t in named.items() if not any(t != u and t in u for u in named.values())]
        if len(outer) == 1:
            return outer[0]
    return None


def _stated_labels(text: str, labels: dict[str, str]) -> tuple[set[str], set[str]]:
    """(stated, negated): the option letters whose truth-value label (or a synonym: "uncertain" is "unknown") `text`
    states after its last negated label, and those it negates.

    "yes" and "no" count only opening `text` ("No, Tom is not big.", a conclusion "no"): inside a sentence they are
    words of the argument ("no premise contradicts it" made "The statement is true; no premise contradicts it." a
    hedge between True and False, scored wrong).

    Negation (the papers this project follows and the data's README give no convention; Logic-LM's prompts ask for
    an option letter; the rule is ours). A label directly negated ("not True", "isn't true", "is not False", "cannot
    be true", "not necessarily true", "neither true nor false", `_NEGATED`) is never read as that label: "The answer is not True."
    was read as True. Nor is it read as another one: in the three-way sets (FOLIO True/False/Uncertain, ProofWriter
    OWA True/False/Unknown) "not True" leaves False and Unknown open, and in ProntoQA's two-way set we read it the
    same way rather than guess False. So only the labels stated after the last negated one count ("It is not true;
    it is false." is False), and a text whose last label is negated states none: "Premise 3 is false, so the
    statement is not true." and "True, not False" state no label (the latter was a True/False hedge before, also
    none). A label negated and followed by "that" ("it is not true that all birds land") negates a clause of the
    argument, not the answer: it is never read, and it does not end the labels stated before it. Only labels are
    read so: "entailed" is no label of these sets, and a negated option letter ("not (A)") is not read as a label."""
    words = {label: letter for letter, label in labels.items()}
    mentions = []  # (position, letter, negated: None for a clause "not true that ...")
    for phrase, label in _SYNONYMS.items():
        if label not in words:
            continue
        for m in re.finditer(rf"^[\W_]*{phrase}\b" if phrase in ("yes", "no") else rf"\b{phrase}\b", text,
                             re.IGNORECASE):
            negated = _NEGATED.search(text[max(0, m.start() - 80):m.start()]) is not None
            clause = negated and re.match(r"[\s*_\"'`]*that\b", text[m.end():], re.IGNORECASE) is not None
            mentions.append((m.start(), words[label], None if clause else negated))
    mentions.sort()
    last = max((i for i, (_, _, negated) in enumerate(mentions) if negated), default=-1)
    return ({letter for _, letter, negated in mentions[last + 1:] if negated is False},
            {letter for _, letter, negated in mentions if negated is not False})


# a negation directly before a label, through words that keep it on the label ("is not necessarily true", "cannot
# be shown to be true", "**not** True"); matched against the 80 characters before each label (linear time)
_FILLER = ("be", "been", "being", "necessarily", "definitely", "certainly", "actually", "really", "entirely", "strictly",
           "always", "provably", "proven", "proved", "shown", "known", "to", "deemed", "considered", "quite", "exactly",
           "absolutely", "simply", "just")
_NEGATED = re.compile(rf"(?:\b(?:not|never|cannot|neither|nor)|n['\u2019]t)(?:[\s*_\"'`]+(?:{'|'.join(_FILLER)}))*"
                      rf"[\s*_\"'`]+$", re.IGNORECASE)


def check_correct(answer_text: str | None, problem: LogicProblem) -> bool:
    """True when the extracted option letter equals the gold answer."""
    return extract_answer(answer_text, problem) == problem.answer
