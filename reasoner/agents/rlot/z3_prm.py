"""A process reward model for SMT-style steps: Z3's verdicts on the SMT-LIB scripts a step writes.

`Z3StepPRM(runner).score(questions, steps) -> float32[n]` scores the LAST step of each thought (the
`ProcessRewardModel` interface of `prm.py`). The step's scripts (`smt_scripts`) are

  * every fenced code block (```smt2 / smtlib / smt / z3 / lisp, or unlabelled) holding an SMT-LIB command, each
    one self-contained script (Sequent-Prover's scratchpad convention: a call states its whole problem);
  * else, when the step has no fenced block, the step's top-level S-expressions whose head is an SMT-LIB command
    (`(declare-const ...)`, `(assert ...)`, `(check-sat)`, ...), joined into one script.

A script may be followed by the verdict the step claims for it: the first whole word "sat"/"satisfiable" or
"unsat"/"unsatisfiable" after the script and before the next one (e.g. "Z3 returns unsat, so the claim holds").

Every script of every row goes to the `reasoner.verifiers.z3_runner.Z3Runner` at once (the persistent CPU pool:
deadline, memory cap, crash isolation; never in this process) and the futures are collected together. A script is
GOOD when Z3 reached a verdict of sat or unsat before any error or timeout (`curation.call_outcome`), it is not
trivial (`smtlib.is_trivial`: it checks something about symbols it declares), and the verdict the step claims, if
any, is Z3's. The step scores the fraction of its scripts that are good; a step with no script scores
`unverifiable` (default 0.0, as `AStarStepPRM`: on an SMT task a step that formalises nothing is not progress the
solver can confirm). Choice where the issue is silent: the claimed verdict is checked because a policy without a
tool loop has to state what Z3 would say, and stating it wrongly is the error a step verifier is for.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import numpy as np

from reasoner.verifiers.smtlib import top_level_spans

# The info string stops at a backtick (CommonMark: a backtick fence's info string has none), so an opening
# without a newline is rejected at the next backtick instead of scanning to the end of the line: a reply of
# backticks (~60 per token) took quadratic time (64,000 characters: 1.5 s).
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n`]*\n(.*?)```", re.DOTALL)
_FENCE_LANGS = {"", "smt2", "smt", "smtlib", "smtlib2", "smt-lib", "smt-lib2", "z3", "lisp", "scheme"}
_CLAIM = re.compile(r"\b(unsat(?:isfiable)?|sat(?:isfiable)?)\b", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class SmtScript:
    """One script of a step and the verdict the step claims for it ("sat", "unsat" or None)."""

    code: str
    claim: str | None


def _is_command(block: str) -> bool:
    from reasoner.verifiers.smtlib import COMMANDS

    head = block[1:].lstrip().split(None, 1)
    return bool(head) and head[0].rstrip(")") in COMMANDS


def _claim(text: str) -> str | None:
    m = _CLAIM.search(text)
    return None if m is None else ("unsat" if m.group(1).lower().startswith("unsat") else "sat")


def smt_scripts(step: str) -> list[SmtScript]:
    """The SMT-LIB scripts of one step with their claimed verdicts (module docstring)."""
    fences = [(m.start(), m.end(), m.group(2)) for m in _FENCE.finditer(step)
              if m.group(1).lower() in _FENCE_LANGS
              and any(_is_command(m.group(2)[a:b]) for a, b in top_level_spans(m.group(2), code=True))]
    if fences:
        out = []
        for k, (_, end, code) in enumerate(fences):
            after = step[end:fences[k + 1][0] if k + 1 < len(fences) else len(step)]
            out.append(SmtScript(code=code.strip(), claim=_claim(after)))
        return out
    commands = [(a, b) for a, b in top_level_spans(step, code=False) if _is_command(step[a:b])]
    if not commands:
        return []
    code = "\n".join(step[a:b] for a, b in commands)
    return [SmtScript(code=code, claim=_claim(step[commands[-1][1]:]))]


class Z3StepPRM:
    """Z3's verdicts on the SMT-LIB scripts of each thought's latest step (module docstring).

    runner: a `Z3Runner` (the caller closes it), or None to start one of `workers` processes with a per-script
    `timeout_s`, closed by `close()`. `results` keeps the last call's `(row, SmtScript, Z3Result)` triples.
    """

    def __init__(self, runner=None, *, timeout_s: float = 10.0, workers: int = 2, unverifiable: float = 0.0):
        self._runner, self._owns = runner, runner is None
        self.timeout_s, self.workers = float(timeout_s), int(workers)
        self.unverifiable = float(unverifiable)
        self.calls = 0
        self.results: list = []

    @property
    def runner(self):
        if self._runner is None:
            from reasoner.verifiers.z3_runner import Z3Runner

            self._runner = Z3Runner(timeout_s=self.timeout_s, workers=self.workers)
        return self._runner

    def script_good(self, script: SmtScript, result) -> bool:
        """A real sat/unsat verdict on a non-trivial script, equal to the verdict the step claims (if any). The verdict
        is read under curation's executability rule (`curation.call_outcome`: the last verdict before Z3's first
        error), as the Sequent-Prover metrics read it."""
        from reasoner.verifiers.curation import call_outcome
        from reasoner.verifiers.smtlib import is_trivial

        executable, verdict = call_outcome(result.to_dict())
        return (executable and verdict in ("sat", "unsat") and not is_trivial(script.code)
                and (script.claim is None or script.claim == verdict))

    def score(self, questions: Sequence[str], steps: Sequence[Sequence[str]]) -> np.ndarray:
        self.calls += 1
        per_row = [smt_scripts(s[-1] if s else "") for s in steps]
        jobs = [(i, sc, self.runner.submit(sc.code)) for i, scripts in enumerate(per_row) for sc in scripts]
        self.results = [(i, sc, future.result()) for i, sc, future in jobs]
        good = np.zeros((len(per_row),), np.float64)
        for i, sc, result in self.results:
            good[i] += self.script_good(sc, result)
        counts = np.asarray([len(s) for s in per_row], np.float64)
        return np.where(counts > 0, good / np.maximum(counts, 1), self.unverifiable).astype(np.float32)

    def close(self) -> None:
        if self._owns and self._runner is not None:
            self._runner.close()
            self._runner = None
