"""Verifier-conditioned trace curation (Sequent-Prover §2.3, App. A.4, B.3): Gold / Silver / Rejected
with reasons, grounding, per-call SMT attributes, and DPO pairs with Silver traces as hard negatives.

Per SMT call (one z3_solve with code):
  executable    the script ran without any failure, or Z3 reached sat/unsat before its first failure
                (`call_outcome`, below);
  verdict       the last check-sat verdict printed before the call's first failure (the last one of all
                when nothing failed);
  real_verdict  executable and that verdict is sat or unsat;
  trivial       `smtlib.is_trivial` (no check-sat, or no assertion mentions a declared symbol);
  grounding     fraction of the problem's entities found in the SMT text (below), with comments
                and (`grounding_no_comments`) without; grounded iff grounding >= LAMBDA_GND = 0.25.
A call is *evidence* when it is executable, non-trivial, grounded and has a real verdict (§2.2:
"at least one Z3 invocation with an executable, non-trivial, input-grounded SMT-LIB program that
obtains a real solver verdict").

Executability (`call_outcome`). The paper asks of Gold evidence "an executable z3-solve interaction that
obtains a solver verdict" (§2.3), "at least one Z3 invocation with an executable ... SMT-LIB program that obtains
a real solver verdict" (§2.2), "Z3 returns a real verdict" (App. A.4), and treats "parser errors, type errors,
timeouts, malformed scripts, and solver failures as unresolved observations" (§2.2, sigma_U). It does not say
what a script that first obtains a verdict and then fails is. Z3 keeps reading a script after an error, so its
output orders verdicts and errors, and we read it in that order. Our rule:
  * a call is executable when it ran without any failure (`success`: no error, no timeout), or when the last
    verdict Z3 printed before the call's first failure is sat or unsat: the obligation was decided, and only a
    later command failed, e.g. `(check-sat)` -> unsat followed by `(get-model)`, which Z3 answers with
    `(error "model is not available")` after an unsat. That refutation is real evidence; rejecting it would
    drop exactly the paper's "refutational unsat evidence" (§3) from Gold;
  * an error before any verdict makes the call not executable even when a later check-sat answers: Z3 skipped
    the failed command (e.g. an assertion naming an undeclared constant), so the verdict is about a different
    problem than the one written. The same holds when the last verdict before the failure is unknown;
  * the first failure is the first `(error "...")` Z3 printed; for a timeout it is the check-sat that gave up
    (its `unknown`); a call stopped by the pool (hard timeout, memout, crash), refused, or malformed fails
    before any verdict.
The verdict of a failed, non-executable call is the last one before its failure (a timeout's `unknown`).
Curation (this module), the SMT metrics (`reasoner.metrics.smt`) and the K-sample summary
(`reasoner.metrics.smt_eval`) all read a call through `call_attributes`, so they agree on this rule.

Labels, first matching rule wins (reasons say which conditions failed):
  Rejected: wrong answer ("wrong_answer"), not ended by finish ("unfinished"), no SMT call
            ("no_smt_call"), no SMT call executed ("no_executable_smt");
  Silver:   correct, finished, executable SMT, but no single evidence call; reasons among
            "trivial_smt", "ungrounded_smt", "no_real_verdict" (what every executable call lacked);
  Gold:     correct, finished, and at least one evidence call.

Entities: the paper counts "named entities" by substring match but gives no extractor. Ours: the
distinct content words of context and question (letters only, >= 3 characters, not in a stop list),
lower-cased and singularised by suffix rules ("jompuses" -> "jompus", "ponies" -> "pony",
"cats" -> "cat"); an entity is found when it occurs as a substring of the lower-cased SMT text,
so `Jompus`, `is_jompus` and `(jompus max)` all count.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping

from reasoner.verifiers import smtlib
from reasoner.verifiers.z3_runner import verdict_lines

LAMBDA_GND = 0.25
_Z3_ERROR = re.compile(r'\(error "')
_STOPWORDS = set("""
a an the and or nor but if then else not no yes is are was were be been being am do does did done has have
had having of in on at to for from by with without into onto about above below over under than that this
these those there here it its they them their he him his she her we us our you your i me my all any each
every some either neither both none one two three many much more most less least few only also too very
can could may might must shall should will would who whom whose which what when where why how true false
unknown uncertain statement following based information question answer option options premise premises
something someone people person thing things other another such same so just as because while who
""".split())


def singular(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("uses", "sses", "xes", "ches", "shes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def problem_entities(*texts: str) -> set[str]:
    """The entity set of a problem (see module docstring) from its context and question texts."""
    words = re.findall(r"[A-Za-z]+", " ".join(texts))
    return {singular(w.lower()) for w in words if len(w) >= 3 and w.lower() not in _STOPWORDS}


def grounding(smt_code: str, entities: set[str], *, without_comments: bool = False) -> float:
    """Fraction of `entities` occurring in the SMT text; 0.0 when there are no entities."""
    if not entities:
        return 0.0
    text = smt_code
    if without_comments:
        try:
            text = smtlib.strip_comments(smt_code)
        except smtlib.SmtParseError:
            text = re.sub(r";[^\n]*", " ", smt_code)
    text = text.lower()
    return sum(entity in text for entity in entities) / len(entities)


@dataclasses.dataclass(frozen=True)
class CallAttributes:
    executable: bool
    real_verdict: bool
    verdict: str | None
    trivial: bool
    grounding: float
    grounding_no_comments: float

    @property
    def grounded(self) -> bool:
        return self.grounding >= LAMBDA_GND

    @property
    def evidence(self) -> bool:
        return self.executable and self.real_verdict and not self.trivial and self.grounded


def call_outcome(observation: Mapping) -> tuple[bool, str | None]:
    """(executable, verdict) of one z3_solve record (or `Z3Result.to_dict()`) under the module's rule.

    Reads `success`, `sat_result`, `error` and `output` (Z3's printed text, in order); a record without
    `output` that failed is read as failing before any verdict.
    """
    if observation.get("success"):
        return True, observation.get("sat_result")
    output = observation.get("output") or ""
    error_at = _Z3_ERROR.search(output)
    if error_at is not None:
        before = verdict_lines(output[:error_at.start()])
        failed = before[-1] if before else None
    else:  # a timeout (its last check-sat printed unknown) or a call that never printed anything
        verdicts = verdict_lines(output)
        before = verdicts[:-1]
        failed = verdicts[-1] if verdicts else observation.get("sat_result")
    if before and before[-1] in ("sat", "unsat"):
        return True, before[-1]
    return False, failed


def call_attributes(observation: Mapping, entities: set[str]) -> CallAttributes:
    code = observation["smt_code"]
    executable, verdict = call_outcome(observation)
    return CallAttributes(executable=executable, real_verdict=executable and verdict in ("sat", "unsat"),
                          verdict=verdict, trivial=smtlib.is_trivial(code),
                          grounding=grounding(code, entities),
                          grounding_no_comments=grounding(code, entities, without_comments=True))


@dataclasses.dataclass(frozen=True)
class Curated:
    label: str  # "gold" | "silver" | "rejected"
    reasons: tuple[str, ...]
    calls: tuple[CallAttributes, ...]


def curate(trajectory, entities: set[str]) -> Curated:
    """The acceptance predicate A(x, y*, tau) with its Gold/Silver/Rejected label and reasons.

    `trajectory.correct` must already be set by the task's `check_correct`.
    """
    if trajectory.correct is None:
        raise ValueError(f"trajectory {trajectory.problem_id}: correct is unset; score it with the task first")
    calls = tuple(call_attributes(o, entities) for o in trajectory.smt_observations)
    rejected = []
    if not trajectory.correct:
        rejected.append("wrong_answer")
    if trajectory.termination != "finish":
        rejected.append("unfinished")
    if not calls:
        rejected.append("no_smt_call")
    elif not any(c.executable for c in calls):
        rejected.append("no_executable_smt")
    if rejected:
        return Curated("rejected", tuple(rejected), calls)
    if any(c.evidence for c in calls):
        return Curated("gold", (), calls)
    executable = [c for c in calls if c.executable]
    weak = []
    if all(c.trivial for c in executable):
        weak.append("trivial_smt")
    if all(not c.grounded for c in executable):
        weak.append("ungrounded_smt")
    if all(not c.real_verdict for c in executable):
        weak.append("no_real_verdict")
    # Each executable call fails some condition, but no single condition failed everywhere.
    return Curated("silver", tuple(weak) or ("no_single_evidence_call",), calls)


def _prompt_length(messages: list[dict]) -> int:
    return next((i + 1 for i, m in enumerate(messages) if m["role"] == "user"), 0)


def dpo_pairs(trajectories, curated: list[Curated], *, max_pairs_per_problem: int | None = None) -> list[dict]:
    """Triples (x, tau+, tau-) per problem: every Gold against Silver (hard negatives) then Rejected.

    Each pair is {"problem_id", "prompt", "chosen", "rejected", "rejected_label", "hard_negative"},
    where prompt is the messages up to the first user turn and chosen/rejected the rest.
    """
    if len(trajectories) != len(curated):
        raise ValueError(f"{len(trajectories)} trajectories but {len(curated)} curation results")
    by_problem: dict[str, list] = {}
    for traj, cur in zip(trajectories, curated):
        by_problem.setdefault(traj.problem_id, []).append((traj, cur))
    pairs = []
    for problem_id, items in by_problem.items():
        gold = [t for t, c in items if c.label == "gold"]
        negatives = ([(t, c) for t, c in items if c.label == "silver"]
                     + [(t, c) for t, c in items if c.label == "rejected"])
        made = 0
        for neg, neg_cur in negatives:
            for pos in gold:
                if max_pairs_per_problem is not None and made >= max_pairs_per_problem:
                    break
                cut = _prompt_length(pos.messages)
                pairs.append({"problem_id": problem_id, "prompt": pos.messages[:cut],
                              "chosen": pos.messages[cut:], "rejected": neg.messages[_prompt_length(neg.messages):],
                              "rejected_label": neg_cur.label, "hard_negative": neg_cur.label == "silver"})
                made += 1
    return pairs
