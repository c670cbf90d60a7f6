"""Reasoning problems for RL-of-Thoughts and its baselines: GSM8K, StrategyQA, MATH-500 and the logic sets.

    problems = load_task("/work/shared/data", "gsm8k", split="test", limit=100)
    problems[0].question, problems[0].gold, problems[0].kind        # str, "18", "number"
    score(problems[0], "... The answer is 18.")                     # 1.0

Each loader reads the staged files in their authors' formats (see ../shared/data/README.md):
  gsm8k      gsm8k/{train,test}.jsonl   {"question", "answer": "... #### N"}       kind number
  strategyqa strategyqa/train.json      [{"qid", "question", "answer": bool}]     kind boolean
  math500    math500/test.jsonl         {"problem", "answer", "unique_id"}        kind text (\\boxed{})
  proofwriter / folio / prontoqa        Logic-LLM json via `reasoner.tasks.logic_llm`; kind choice (options
                                        are listed in the question and kept in `Problem.options`)

A logic problem's reply is read by `extract`, which is `logic_llm.extract_answer`: the same rule as the SMT
rewards' `check_correct`, so "The answer is False." scores like "The answer is (B)." (the format instruction asks
for the letter; the letter-only `answers.extract_answer("choice", ...)` scored the label word 0), and a reply naming
two different labels names no option. Every caller that reads a reply (the RL-of-Thoughts environment and
baselines) goes through `extract(problem, text)`, not `answers.extract_answer(problem.kind, text)`.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from reasoner.data.jsonl import read_jsonl
from reasoner.tasks.answers import extract_answer, gold_number, is_correct

TASKS = ("gsm8k", "strategyqa", "math500", "proofwriter", "folio", "prontoqa")

FORMAT_INSTRUCTIONS = {
    "number": 'End your answer with "The answer is N", where N is a number.',
    "choice": 'End your answer with "The answer is (X)", where X is the letter of the correct option.',
    "boolean": 'End your answer with "The answer is yes" or "The answer is no".',
    "text": "Put the final answer in \\boxed{}.",
}


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem: `question` (options included for choice tasks), `gold` in the kind's canonical form;
    `options` ("A) True", ...) for the Logic-LLM sets, whose replies `extract` reads by their labels too."""

    id: str
    task: str
    question: str
    gold: str
    kind: str
    options: tuple[str, ...] = ()


def load_task(data_root, task: str, *, split: str = "test", limit: int | None = None) -> list[Problem]:
    """The problems of `task` from the staged data under `data_root` (first `limit`, file order)."""
    root = pathlib.Path(data_root)
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")
    if task == "gsm8k":
        if split not in ("train", "test"):
            raise ValueError(f"gsm8k split {split!r}: expected train or test")
        rows = read_jsonl(root / "gsm8k" / f"{split}.jsonl", what="one GSM8K problem (question, answer)")[:limit]
        return [Problem(id=f"gsm8k/{split}/{i}", task=task, question=r["question"].strip(),
                        gold=gold_number(r["answer"]), kind="number") for i, r in enumerate(rows)]
    if task == "strategyqa":
        rows = json.loads((root / "strategyqa" / "train.json").read_text(encoding="utf-8"))[:limit]
        return [Problem(id=f"strategyqa/{r['qid']}", task=task, question=r["question"].strip(),
                        gold="yes" if r["answer"] else "no", kind="boolean") for r in rows]
    if task == "math500":
        rows = read_jsonl(root / "math500" / "test.jsonl", what="one MATH-500 problem (problem, answer)")[:limit]
        return [Problem(id=r.get("unique_id", f"math500/{i}"), task=task, question=r["problem"].strip(),
                        gold=str(r["answer"]).strip(), kind="text") for i, r in enumerate(rows)]
    from reasoner.tasks.logic_llm import load_problems

    out = []
    for p in load_problems(root, task, limit=limit):
        question = f"{p.context}\n\nQuestion: {p.question}\nOptions:\n" + "\n".join(p.options)
        out.append(Problem(id=f"{task}/{p.id}", task=task, question=question, gold=p.answer, kind="choice",
                           options=p.options))
    return out


def extract(problem: Problem, text: str) -> str | None:
    """The answer `text` commits to, in the kind's canonical form (an option letter for choice), or None."""
    if problem.options:
        from reasoner.tasks.logic_llm import LogicProblem, extract_answer as extract_option

        return extract_option(text, LogicProblem(id=problem.id, dataset=problem.task, context="", question="",
                                                 options=problem.options, answer=problem.gold))
    return extract_answer(problem.kind, text)


def score(problem: Problem, text: str) -> float:
    """1.0 when the answer `text` commits to equals the gold answer, else 0.0."""
    return float(is_correct(problem.kind, extract(problem, text), problem.gold))
