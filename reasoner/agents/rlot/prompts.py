"""The prompts of RL-of-Thoughts and the parsers of their replies (our wording of the authors' templates).

A thought is the problem plus a list of reasoning steps. Every prompt starts with the same prefix
(`thought_prefix`): "Here is a problem and several reasoning steps.", the problem, the steps so far.

Self-evaluation state (7 scores, keys in this order): A1 correctness of modelling, A2 clarity for further
reasoning, A3 correctness of calculation; B1 complexity still needed, B2 alternative methods exist; C1
closeness to the final solution, C2 completeness within the step. 1 = false, 2 = unsure, 3 = true,
0 = not involved. Parsing follows the authors' code: per key the regular expression
`KEY[:=\\[a-zA-Z \\n]*(0|1|2|3)`; a key not found scores 0; a reply in which no key is found is "unparsed"
(the all-zero state; the environment counts these).
"""

from __future__ import annotations

import re

import numpy as np

SCORE_KEYS = ("A1", "A2", "A3", "B1", "B2", "C1", "C2")
_KEY_PATTERNS = [re.compile(key + r"[:=\[a-zA-Z \n]*(0|1|2|3)") for key in SCORE_KEYS]

EVALUATE = """Evaluate only the current (last) reasoning step above; if there are no steps yet, evaluate the problem itself.
Score each aspect with 1 = false, 2 = unsure, 3 = true, or 0 when the aspect is not involved:
A1 correctness of modelling: the step follows from the original problem.
A2 clarity: the step is clear enough for further reasoning.
A3 correctness of calculation: the calculations in the step are correct.
B1 complexity: much complex reasoning is still needed to reach the final answer.
B2 alternatives: alternative methods exist for the further reasoning.
C1 closeness: the step is close to the final solution.
C2 completeness: all elements the step needs are known.
Reply with exactly one line per key in the format:
A1 score=[SCORE] reason=[REASON]
A2 score=[SCORE] reason=[REASON]
A3 score=[SCORE] reason=[REASON]
B1 score=[SCORE] reason=[REASON]
B2 score=[SCORE] reason=[REASON]
C1 score=[SCORE] reason=[REASON]
C2 score=[SCORE] reason=[REASON]"""

REASON = "Write exactly one more reasoning step towards the answer. Do not reason too many steps."
DECOMPOSE = ("Decompose the rest of the problem into simpler subtasks. Only list the subtasks; do not calculate "
             "anything. Use the format:\n### Subtask1: [SUBTASK]\n### Subtask2: [SUBTASK]")
SOLVE_SUBTASK = "Solve only this subtask, using the reasoning above. Do not decompose it further.\nSubtask: {subtask}"
SUMMARISE = "Summarise the reasoning and results of the subtasks above concisely, as one reasoning step."
DEBATE = ("Propose three different plans for the next reasoning step. Only describe the plans; do not reason or "
          "calculate. Use the format:\n### Plan1: [PLAN]\n### Plan2: [PLAN]\n### Plan3: [PLAN]")
AGGREGATE = ("Here are three plans for the next step:\n{plans}\nCompare them and choose the most promising one. "
             "Answer in the form: The most promising plan is Plan[INDEX]: [REASON]")
FOLLOW_PLAN = "Following this plan, write exactly one more reasoning step.\nPlan: {plan}"
REFINE = ("Check the current (last) reasoning step for errors and rewrite it correctly. Do not reason further and do "
          "not calculate anything new. Write only the refined step.")
TERMINATE = "Based on the reasoning steps above, give the final answer to the problem. {format}"
CHECK_FINISHED = "Has a final answer to the problem already been given in the reasoning steps above? Reply yes or no."

# Linear in the reply's length: a header's "#" run is read only from its first "#" (`(?<!#)`), and the optional
# separators are possessive (`*+`, no backtracking). Without them a degenerate reply ("#" or " " repeated, ~60
# characters per token) took quadratic time: 16,000 characters 3.5 s, a 4,096-token reply minutes, per row.
_SUBTASK = re.compile(r"(?<!#)#+\s*+Subtask\s*+\d+\s*+[:.]\s*+(.*?)(?=(?<!#)#+\s*+Subtask\s*+\d|\Z)",
                      re.IGNORECASE | re.DOTALL)
_PLAN = re.compile(r"(?<!#)#+\s*+Plan\s*+\d+\s*+[:.]\s*+(.*?)(?=(?<!#)#+\s*+Plan\s*+\d|\Z)", re.IGNORECASE | re.DOTALL)
_BEST_PLAN = re.compile(r"most promising plan is\s*+\**+\s*+Plan\s*+\[?\s*+(\d{1,4})(?!\d)", re.IGNORECASE)


def thought_prefix(question: str, steps: list[str]) -> str:
    """The common prefix of every prompt: the problem and the numbered steps so far."""
    lines = ["Here is a problem and several reasoning steps.", "", f"Problem: {question}", ""]
    if steps:
        lines += [f"Step {i + 1}: {s.strip()}" for i, s in enumerate(steps)]
    else:
        lines.append("(no reasoning steps yet)")
    return "\n".join(lines) + "\n\n"


def parse_scores(reply: str) -> tuple[np.ndarray, bool]:
    """(float32[7] scores, parsed): per key the first match of the authors' pattern, 0 when absent;
    `parsed` is False when no key matched (the all-zero state)."""
    scores = np.zeros(len(SCORE_KEYS), np.float32)
    found = False
    for i, pattern in enumerate(_KEY_PATTERNS):
        m = pattern.search(reply)
        if m:
            scores[i] = float(m.group(1))
            found = True
    return scores, found


def parse_subtasks(reply: str, *, limit: int) -> list[str]:
    """The `### SubtaskK:` items (at most `limit`); a reply without that format is one subtask (choice: the
    block then solves the remaining problem as a whole rather than failing)."""
    items = [s.strip() for s in _SUBTASK.findall(reply) if s.strip()]
    return (items or [reply.strip() or "Solve the remaining problem."])[:limit]


def parse_plans(reply: str) -> list[str]:
    """The `### PlanK:` items (up to three); a reply without that format is one plan."""
    items = [s.strip() for s in _PLAN.findall(reply) if s.strip()]
    return (items or [reply.strip() or "Continue the reasoning."])[:3]


def parse_best_plan(reply: str, num_plans: int) -> int:
    """0-based index of "The most promising plan is PlanK"; plan 1 (index 0) when absent or out of range."""
    m = _BEST_PLAN.search(reply)
    if not m:
        return 0
    k = int(m.group(1)) - 1
    return k if 0 <= k < num_plans else 0


def says_finished(reply: str) -> bool:
    """The authors' rule: the check-finished reply contains "yes"."""
    return "yes" in reply.lower()
