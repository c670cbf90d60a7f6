"""Entailment statuses of Sequent-Prover §2.1/§2.3 and the equivalence check of two formulas.

Given SMT-LIB text for a context encoding phi_C (declarations + assertions) and a claim encoding
phi_c (one Boolean term over the context's signature):
  * inconsistent  if SAT(phi_C) = unsat;
  * entailed      if SAT(phi_C) = sat and SAT(phi_C and not phi_c) = unsat;
  * contradicted  if SAT(phi_C) = sat and SAT(phi_C and phi_c) = unsat;
  * possible      if both SAT(phi_C and phi_c) and SAT(phi_C and not phi_c) are sat;
  * unresolved    otherwise (unknown, timeout, solver failure, parse or sort error).
Equivalence of phi_a and phi_b over a shared signature: SAT(not (phi_a <=> phi_b)) = unsat.
All three checks run as separate scripts, through a `Z3Runner` when one is given (so they run in
the pool and can overlap) or in this process otherwise.
"""

from __future__ import annotations

import dataclasses

STATUSES = ("inconsistent", "entailed", "contradicted", "possible", "unresolved")


@dataclasses.dataclass(frozen=True)
class EntailmentResult:
    status: str
    context: str | None   # verdict of SAT(phi_C)
    with_claim: str | None  # verdict of SAT(phi_C and phi_c)
    with_negation: str | None  # verdict of SAT(phi_C and not phi_c)
    errors: tuple[str, ...] = ()


def _solve_all(scripts: list[str], runner, timeout_s: float):
    if runner is not None:
        return runner.solve_batch(scripts)
    from reasoner.verifiers.z3_runner import run_script

    return [run_script(s, timeout_s=timeout_s) for s in scripts]


def _verdict(result) -> str | None:
    return result.sat_result if result.success else None


def classify(context_smt: str, claim_term: str, *, runner=None, timeout_s: float = 30.0) -> EntailmentResult:
    """The status of `claim_term` under `context_smt` (see module docstring)."""
    if not claim_term.strip():
        raise ValueError("claim_term is empty; expected one Boolean SMT-LIB term such as '(P a)'")
    scripts = [f"{context_smt}\n(check-sat)",
               f"{context_smt}\n(assert {claim_term})\n(check-sat)",
               f"{context_smt}\n(assert (not {claim_term}))\n(check-sat)"]
    results = _solve_all(scripts, runner, timeout_s)
    base, pos, neg = (_verdict(r) for r in results)
    errors = tuple(r.error for r in results if r.error)
    if base == "unsat":
        status = "inconsistent"
    elif base != "sat":
        status = "unresolved"
    elif neg == "unsat":
        status = "entailed"
    elif pos == "unsat":
        status = "contradicted"
    elif pos == "sat" and neg == "sat":
        status = "possible"
    else:
        status = "unresolved"
    return EntailmentResult(status=status, context=base, with_claim=pos, with_negation=neg, errors=errors)


def equivalent(signature_smt: str, *, formula_a: str, formula_b: str, runner=None,
               timeout_s: float = 30.0) -> bool | None:
    """True/False when Z3 decides (not (a = b)) unsat/sat; None when it cannot (unknown or error)."""
    script = f"{signature_smt}\n(assert (not (= {formula_a} {formula_b})))\n(check-sat)"
    verdict = _verdict(_solve_all([script], runner, timeout_s)[0])
    return {"unsat": True, "sat": False}.get(verdict)
