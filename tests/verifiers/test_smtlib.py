"""SMT-LIB parsing, comment stripping, the triviality definition, production counts and JSD."""

import collections
import math

import numpy as np
import pytest

from reasoner.verifiers import smtlib

PROGRAM = """; premises
(declare-sort Thing 0)
(declare-const max Thing)
(declare-fun yumpus (Thing) Bool) ; a category
(declare-fun sour (Thing) Bool)
(assert (forall ((x Thing)) (=> (yumpus x) (not (sour x)))))
(assert (yumpus max))
(assert (sour max))
(check-sat)
"""


def test_parse_and_strip_comments():
    commands = smtlib.parse(PROGRAM)
    assert [c[0].text for c in commands] == ["declare-sort", "declare-const", "declare-fun", "declare-fun",
                                               "assert", "assert", "assert", "check-sat"]
    stripped = smtlib.strip_comments(PROGRAM)
    assert "premises" not in stripped and "category" not in stripped and "(assert (yumpus max))\n" in stripped
    assert smtlib.parse('(echo "a ; not a comment")')[0][1] == smtlib.Atom('"a ; not a comment"', "string")
    assert smtlib.parse("(assert |odd symbol|)")[0][1] == smtlib.Atom("odd symbol", "symbol")
    assert smtlib.declared_symbols(commands) == {"Thing", "max", "yumpus", "sour"}


@pytest.mark.parametrize("text,message", [("(assert (> x 0)", "unclosed"), ("(check-sat))", "unbalanced"),
                                          ('(echo "open', "unterminated")])
def test_parse_errors_name_the_problem(text, message):
    with pytest.raises(smtlib.SmtParseError, match=message):
        smtlib.parse(text)


@pytest.mark.parametrize("script,trivial", [
    (PROGRAM, False),
    ("(check-sat)", True),                                                   # nothing asserted
    ("(assert true)(check-sat)", True),                                      # builtins only
    ("(declare-const p Bool)(check-sat)", True),                             # declared, never asserted
    ("(declare-const p Bool)(assert p)", True),                              # no check-sat
    ("(assert (forall ((x Int)) (> (+ x 1) x)))(check-sat)", True),          # bound variable only
    ("(declare-const p Bool)(assert (or p (not p)))(check-sat)", False),     # tautology: syntactic test
    ("(declare-datatypes ((Color 0)) (((red) (green))))(declare-const c Color)"
     "(assert (= c red))(check-sat)", False),
    ("(declare-const p Bool)(assert (and true true))(check-sat-assuming (p))", True),
    ("(assert (> x", False),                                                 # unparseable: not classified
])
def test_triviality_definition(script, trivial):
    assert smtlib.is_trivial(script) is trivial


def test_productions_ignore_comments_and_renaming():
    renamed = PROGRAM.replace("yumpus", "a1").replace("sour", "b2").replace("max", "c3").replace("; premises", "")
    assert smtlib.production_counts(PROGRAM) == smtlib.production_counts(renamed)
    counts = smtlib.production_counts(PROGRAM)
    assert counts["(assert) -> assert (ID)"] == 2
    assert counts["(ID) -> ID ID"] == 5  # (yumpus x) (sour x) (yumpus max) (sour max) and the binder (x Thing)
    assert counts["(forall) -> forall (LIST) (=>)"] == 1
    changed = PROGRAM.replace("(assert (sour max))", "(assert (not (sour max)))")
    assert smtlib.production_counts(changed) != counts


def numpy_jsd(p_counts, q_counts):
    keys = sorted(set(p_counts) | set(q_counts))
    p = np.array([p_counts.get(k, 0) for k in keys], float)
    q = np.array([q_counts.get(k, 0) for k in keys], float)
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2
    kl = lambda a, b: np.sum(np.where(a > 0, a * np.log2(np.where(a > 0, a, 1) / b), 0.0))  # noqa: E731
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def test_js_divergence_matches_numpy_and_bounds():
    a = smtlib.production_counts(PROGRAM)
    b = smtlib.production_counts("(declare-const p Bool)(declare-const q Bool)(assert (=> p q))(check-sat)")
    assert math.isclose(smtlib.js_divergence(a, b), numpy_jsd(a, b), rel_tol=1e-12)
    assert smtlib.js_divergence(a, a) == 0.0
    assert smtlib.js_divergence(collections.Counter(x=1), collections.Counter(y=3)) == 1.0
    assert math.isclose(smtlib.js_divergence(collections.Counter(x=1, y=1), collections.Counter(x=1)),
                        numpy_jsd({"x": 1, "y": 1}, {"x": 1}))
    with pytest.raises(ValueError, match="non-empty"):
        smtlib.js_divergence(collections.Counter(), a)


def test_parser_raises_only_smt_parse_errors():
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=100, deadline=None)
    @given(st.text(alphabet=list('()";| \nab:#x01.'), max_size=40))
    def check(text):
        try:
            smtlib.parse(text)
            smtlib.is_trivial(text)
        except smtlib.SmtParseError:
            pass

    check()
