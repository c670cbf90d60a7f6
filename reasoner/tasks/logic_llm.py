"""ProofWriter, FOLIO and ProntoQA in the Logic-LLM json format: loading, prompts and `check_correct`.

A record is {"id", "context", "question", "options": ["A) True", ...], "answer": "A"}; the option
labels are True/False (ProntoQA), True/False/Uncertain (FOLIO) or True/False/Unknown (ProofWriter).
`check_correct` reads a free-text or `finish` answer: an option letter ("B", "(B)", "B) False",
"Answer: B") or a label word ("False", "uncertain"; Unknown and Uncertain are the same answer).
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
}
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
    """One question. `labels[letter]` is the normalised option label: true, false or unknown."""

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
    """Problems of `dataset` (proofwriter, folio, prontoqa) from the Logic-LLM files under `data_root`."""
    if dataset not in FILES:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {sorted(FILES)}")
    path = pathlib.Path(data_root) / FILES[dataset]
    records = json.loads(path.read_text())
    problems = []
    for record in records[:limit]:
        missing = {"id", "context", "question", "options", "answer"} - set(record)
        if missing:
            raise ValueError(f"{path}: record {record.get('id', '?')} lacks fields {sorted(missing)}")
        problems.append(LogicProblem(id=record["id"], dataset=dataset, context=record["context"].strip(),
                                     question=record["question"].strip(), options=tuple(record["options"]),
                                     answer=record["answer"].strip()))
    return problems


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
    body = re.sub(r"<think>.*?</think>", " ", text, flags=re.DOTALL).strip()
    stripped = body.strip(" .*`'\"")
    if stripped.upper() in labels:
        return stripped.upper()
    # Prefer an explicit "answer is X" / "Answer: X" when the text argues before concluding.
    for pattern in (rf"answer\s*(?:is|:)?\s*\(?([{letters}])\)?(?![\w])",
                    rf"^\(?([{letters}])\)(?:\s|$)", rf"\boption\s*\(?([{letters}])\)?(?![\w])"):
        found = re.findall(pattern, body, flags=re.IGNORECASE | re.MULTILINE)
        if found:
            return found[-1].upper()
    words = {label: letter for letter, label in labels.items()}
    mentioned = []
    for phrase, label in _SYNONYMS.items():
        if label in words:
            mentioned += [(m.start(), words[label]) for m in re.finditer(rf"\b{phrase}\b", body, re.IGNORECASE)]
    distinct = {letter for _, letter in mentioned}
    if len(distinct) == 1:
        return distinct.pop()
    return None


def check_correct(answer_text: str | None, problem: LogicProblem) -> bool:
    """True when the extracted option letter equals the gold answer."""
    return extract_answer(answer_text, problem) == problem.answer
