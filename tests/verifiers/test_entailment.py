"""Entailment statuses and equivalence against brute-force truth tables (an independent reference)."""

import itertools
import random

import pytest

from reasoner.verifiers.entailment import classify, equivalent

VARS = ("p", "q", "r")
SIGNATURE = "".join(f"(declare-const {v} Bool)" for v in VARS)


def random_formula(rng: random.Random, depth: int):
    """(SMT-LIB text, Python evaluator) of a random propositional formula over VARS."""
    if depth == 0 or rng.random() < 0.3:
        v = rng.choice(VARS)
        return v, lambda env, v=v: env[v]
    op = rng.choice(["not", "and", "or", "=>"])
    a_text, a = random_formula(rng, depth - 1)
    if op == "not":
        return f"(not {a_text})", lambda env: not a(env)
    b_text, b = random_formula(rng, depth - 1)
    fn = {"and": lambda x, y: x and y, "or": lambda x, y: x or y, "=>": lambda x, y: (not x) or y}[op]
    return f"({op} {a_text} {b_text})", lambda env: fn(a(env), b(env))


def brute_status(context_fns, claim_fn) -> str:
    models = [dict(zip(VARS, bits)) for bits in itertools.product([False, True], repeat=len(VARS))]
    models = [m for m in models if all(f(m) for f in context_fns)]
    if not models:
        return "inconsistent"
    holds = [claim_fn(m) for m in models]
    return "entailed" if all(holds) else "contradicted" if not any(holds) else "possible"


def test_statuses_match_truth_tables():
    rng = random.Random(0)
    seen = set()
    for _ in range(40):
        context = [random_formula(rng, 2) for _ in range(rng.randint(1, 3))]
        claim_text, claim_fn = random_formula(rng, 2)
        context_smt = SIGNATURE + "".join(f"(assert {t})" for t, _ in context)
        result = classify(context_smt, claim_text, timeout_s=5)
        expected = brute_status([f for _, f in context], claim_fn)
        assert result.status == expected, (context_smt, claim_text, result)
        seen.add(expected)
    assert seen == {"inconsistent", "entailed", "contradicted", "possible"}


def test_unresolved_on_errors_and_bad_claim():
    result = classify(SIGNATURE + "(assert p)", "(undeclared_symbol p)", timeout_s=5)
    assert result.status == "unresolved" and any("unknown" in e for e in result.errors)
    broken = classify("(declare-const p Bool)(assert (p", "p", timeout_s=5)
    assert broken.status == "unresolved"
    with pytest.raises(ValueError, match="claim_term is empty"):
        classify(SIGNATURE, "  ")


def test_equivalence_matches_truth_tables():
    rng = random.Random(1)
    for _ in range(25):
        (a_text, a), (b_text, b) = random_formula(rng, 2), random_formula(rng, 2)
        models = [dict(zip(VARS, bits)) for bits in itertools.product([False, True], repeat=3)]
        assert equivalent(SIGNATURE, formula_a=a_text, formula_b=b_text, timeout_s=5) == all(a(m) == b(m) for m in models)
    assert equivalent(SIGNATURE, formula_a="(=> p q)", formula_b="(or (not p) q)") is True
    assert equivalent(SIGNATURE, formula_a="p", formula_b="(undeclared)") is None


def test_through_the_pool_runner():
    from reasoner.verifiers.z3_runner import Z3Runner

    with Z3Runner(timeout_s=5, workers=2) as runner:
        assert classify(SIGNATURE + "(assert (=> p q))(assert p)", "q", runner=runner).status == "entailed"
        assert equivalent(SIGNATURE, formula_a="(and p q)", formula_b="(and q p)", runner=runner) is True
