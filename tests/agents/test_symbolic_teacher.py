"""The symbolic teacher on the real staged data: encodings Z3 decides as the labels say, and whole scratchpad
episodes through the real Z3 runner that curation accepts as Gold."""

import json

import pytest

from reasoner.agents.rollouts import rollout_logic
from reasoner.agents.symbolic_teacher import (SymbolicTeacher, decide, encode_folio, encode_logic_llm,
                                              encode_program)
from reasoner.data.proofwriter_english import parse_sentence
from reasoner.tasks.fol import FolError, to_smt
from reasoner.tasks.logic_llm import load_problems
from reasoner.verifiers.z3_runner import Z3Runner
from search.logic import Program


def _z3_answer(encoding, labels):
    import z3

    def check(negated):
        solver = z3.Solver()
        solver.set("timeout", 10_000)
        solver.from_string(encoding.script(negated=negated).replace("(check-sat)", ""))
        return str(solver.check())

    return decide(check(True), check(False), labels)


@pytest.mark.parametrize("dataset, least", [("proofwriter", 0.97), ("prontoqa", 1.0)])
def test_logic_llm_encodings_decide_as_the_labels(shared_data, dataset, least):
    problems = load_problems(shared_data, dataset, limit=200)
    encoded, failures = encode_logic_llm(problems)
    assert failures == [] and len(encoded) == 200
    agree = sum(_z3_answer(e, p.labels) == p.answer for p, e in encoded)
    # Z3 reads "not" classically (contraposition), ProofWriter's labels come from forward chaining: a few may differ
    assert agree / len(encoded) >= least, (agree, len(encoded))


def test_folio_encodings_decide_as_the_labels(shared_data):
    problems = load_problems(shared_data, "folio")
    records = [json.loads(line) for line in (shared_data / "folio" / "folio-validation.jsonl").open()]
    encoded, failures = encode_folio(problems, records)
    # FOLIO v0.0 carries a few malformed annotations (unbalanced parentheses, a comma for a conjunction)
    assert len(encoded) + len(failures) == 204 and len(failures) <= 8
    assert all("FOL annotation" in reason for _, reason in failures)
    agree = sum(_z3_answer(e, p.labels) == p.answer for p, e in encoded)
    assert agree / len(encoded) >= 0.93, (agree, len(encoded))  # measured 188 / 198 (v0.0 label noise)


def test_fol_parser_precedence_and_errors():
    enc = to_smt(["∀x (A(x) ∧ ¬B(x) → C(x) ∨ D(x))", "A(bob) ⊕ B(bob)"], "¬∃x (C(x) ↔ D(x))")
    assert enc.assertions[0] == "(assert (forall ((v_x Entity)) (=> (and (A v_x) (not (B v_x))) (or (C v_x) (D v_x)))))"
    assert enc.assertions[1] == "(assert (xor (A bob) (B bob)))"
    assert enc.conclusion == "(not (exists ((v_x Entity)) (= (C v_x) (D v_x))))"
    assert to_smt(["P(a) → Q(a) → R(a)"], "P(a)").assertions[0] == "(assert (=> (P a) (=> (Q a) (R a))))"
    for bad, message in [("P(a))", "unexpected ')'"), ("∀x (P(x), Q(x))", "expected ')'"), ("P(a) ∧", "found the end"),
                         ("P(a) ∧ P(a, b)", "used with 2 and 1 arguments"), ("(" * 300 + "P(a)" + ")" * 300, "nesting")]:
        with pytest.raises(FolError, match=message.replace("(", r"\(").replace(")", r"\)")):
            to_smt([bad], "P(a)")


def test_program_encoding_of_rules_and_negation():
    program = Program((parse_sentence("Bob is red."), parse_sentence("The cat does not see Bob.")),
                      (parse_sentence("If someone is red and not big then they can fly.", name="rule1"),))
    enc = encode_program(program, parse_sentence("Bob can fly."), rule_texts=["If someone is red and not big then "
                                                                              "they can fly."])
    assert "(assert (red Bob))" in enc.assertions and "(assert (not (sees the_cat Bob)))" in enc.assertions
    assert enc.assertions[-1] == ("; If someone is red and not big then they can fly.\n(assert (forall ((v_x Entity)) "
                                  "(=> (and (red v_x) (not (big v_x))) (can_fly v_x))))")
    assert enc.statement == "(can_fly Bob)"


@pytest.mark.slow
def test_teacher_episodes_through_real_z3_are_gold(shared_data):
    problems = load_problems(shared_data, "proofwriter", limit=12) + load_problems(shared_data, "prontoqa", limit=6)
    encoded, _ = encode_logic_llm(problems)
    with Z3Runner(timeout_s=20, workers=2) as runner:
        result = rollout_logic(SymbolicTeacher(encoded), [p for p, _ in encoded], runner=runner, samples=1)
    for row, traj in zip(result.rows, result.trajectories):
        assert traj.termination == "finish" and traj.turns == 2
        (call,) = traj.smt_observations
        assert call["success"] and call["output"].split() in (["unsat", "sat"], ["sat", "unsat"], ["sat", "sat"])
        assert row["label"] == ("gold" if traj.correct else "rejected"), row["reasons"]
    assert result.metrics["labels"]["gold"] >= 17  # 18 problems; ProofWriter's labels may differ classically


class _CountingPolicy:
    """Wraps a policy and records how many conversations each `respond` call advances together."""

    def __init__(self, policy):
        self.policy, self.batches = policy, []

    def respond(self, conversations):
        self.batches.append(len(conversations))
        return self.policy.respond(conversations)


@pytest.mark.slow
def test_rollout_chunks_problems_and_gives_the_unchunked_rows(shared_data):
    problems = load_problems(shared_data, "proofwriter", limit=5)
    encoded, _ = encode_logic_llm(problems)
    with Z3Runner(timeout_s=20, workers=2) as runner:
        whole = rollout_logic(SymbolicTeacher(encoded), [p for p, _ in encoded], runner=runner, samples=2)
        counting = _CountingPolicy(SymbolicTeacher(encoded))
        chunked = rollout_logic(counting, [p for p, _ in encoded], runner=runner, samples=2, problems_per_batch=2)
    # 5 problems x 2 samples in chunks of 2 problems: 4, 4 and 2 episodes advanced together, two turns each
    assert counting.batches == [4, 4, 4, 4, 2, 2]
    assert [(r["problem_id"], r["label"], r["answer"]) for r in chunked.rows] == \
        [(r["problem_id"], r["label"], r["answer"]) for r in whole.rows]
    assert chunked.metrics["labels"] == whole.metrics["labels"] and len(chunked.sft) == len(whole.sft)
    with pytest.raises(ValueError, match="problems_per_batch"):
        rollout_logic(counting, [p for p, _ in encoded], runner=runner, problems_per_batch=0)
