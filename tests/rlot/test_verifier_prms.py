"""The verifier PRMs of the navigator against their references: the Z3 step PRM against the verdicts Z3's own
regression suite expects (`../shared/data/smtlib/z3test_sample/expected.tsv`), the A* step PRM against host A*'s
own proofs of real ProofWriter / ProntoQA theories, and both built from `configs/rlot.py`."""

import pathlib

import numpy as np
import pytest

from reasoner.agents.rlot.prm import AStarStepPRM, ProofContext
from reasoner.agents.rlot.z3_prm import SmtScript, Z3StepPRM, smt_scripts

SAT, UNSAT, TRIVIAL_UNSAT, STRINGS_SAT = "3862.smt2", "3917.smt2", "3973.smt2", "3100.smt2"


@pytest.fixture(scope="module")
def z3test(shared_data):
    root = pathlib.Path(shared_data) / "smtlib" / "z3test_sample"
    rows = [line.split("\t") for line in (root / "expected.tsv").read_text().splitlines()[1:] if line.strip()]
    expected = {name: verdict.strip() for name, verdict in rows}
    return {name: ((root / name).read_text(), expected[name]) for name in (SAT, UNSAT, TRIVIAL_UNSAT, STRINGS_SAT)}


@pytest.fixture(scope="module")
def z3_prm():
    from reasoner.verifiers.z3_runner import Z3Runner

    with Z3Runner(timeout_s=10.0, workers=1) as runner:
        yield Z3StepPRM(runner)


def fenced(code, after=""):
    return f"I formalise the step:\n```smt2\n{code}\n```\n{after}"


def test_scripts_are_read_from_fences_or_bare_commands():
    assert smt_scripts("No code here (just a remark).") == []
    assert smt_scripts("```python\nprint('(assert x)')\n```") == []  # another language's fence
    got = smt_scripts("```smt2\n(declare-const x Int)\n(check-sat)\n```\nZ3 says unsat.\n```\n(assert false)\n```"
                      "\nIt is satisfiable; done")
    assert got == [SmtScript("(declare-const x Int)\n(check-sat)", "unsat"), SmtScript("(assert false)", "sat")]
    bare = smt_scripts('We write (declare-fun E () String) and (assert (= E ")(")) then (check-sat); unsat (x).')
    assert bare == [SmtScript('(declare-fun E () String)\n(assert (= E ")("))\n(check-sat)', "unsat")]


def test_z3_prm_scores_follow_z3s_expected_verdicts(z3_prm, z3test):
    (sat, want_sat), (unsat, want_unsat) = z3test[SAT], z3test[UNSAT]
    trivial, want_trivial = z3test[TRIVIAL_UNSAT]
    strings, want_strings = z3test[STRINGS_SAT]
    assert (want_sat, want_unsat, want_trivial, want_strings) == ("sat", "unsat", "unsat", "sat")
    steps = [
        [fenced(sat, f"Z3 returns {want_sat}.")],                    # claimed verdict = Z3's
        [fenced(unsat, "So this is satisfiable.")],                   # claimed verdict is wrong
        ["earlier step", fenced(unsat)],                              # no claim: a real verdict is enough
        [fenced(trivial, "unsat")],                                   # right verdict, but checks nothing declared
        [fenced(sat) + fenced("(assert (> y 1))\n(check-sat)")],      # one good, one error (y undeclared)
        ["Let me think about the problem first."],                    # nothing to check
        [strings.replace("\n", " ") + f" gives {want_strings}"],      # bare commands in prose, string literals
        [fenced('(set-option :produce-proofs true)\n(include "secret.smt2")\n(declare-const p Bool)\n(assert p)'
                '\n(check-sat)')],                                    # touches a file: refused before Z3
    ]
    scores = z3_prm.score(["q"] * len(steps), steps)
    np.testing.assert_array_equal(scores, np.float32([1.0, 0.0, 1.0, 0.0, 0.5, 0.0, 1.0, 0.0]))
    assert z3_prm.calls == 1
    verdicts = {(row, r.sat_result) for row, _, r in z3_prm.results}
    # the pool's verdicts are the ones the regression suite expects
    assert {(0, want_sat), (1, want_unsat), (2, want_unsat), (3, want_trivial), (6, want_strings)} <= verdicts
    assert "y" in next(r.error for row, _, r in z3_prm.results if row == 4 and not r.success)
    lenient = Z3StepPRM(z3_prm.runner, unverifiable=0.5)
    assert lenient.score(["q"], [["no script"]])[0] == 0.5 and lenient.score(["q"], [[]])[0] == 0.5


def astar_steps(context: ProofContext, goal):
    """Host A*'s own proof of `goal`, one verbalized inference per step."""
    from search.astar import solve

    result = solve(context.program, goal)
    assert result.proved
    return [context.verbalizer.step(s.rule, s.premises, s.conclusion) for s in result.trace]


@pytest.mark.parametrize("task", ["proofwriter", "prontoqa"])
def test_astar_prm_accepts_astar_proofs_of_real_theories_and_rejects_broken_steps(shared_data, task):
    from reasoner.data.proofwriter_english import parse_statement
    from reasoner.tasks.logic_llm import load_problems
    from search.logic import Atom

    checked = 0
    for p in load_problems(shared_data, task, limit=60):
        context = ProofContext.from_theory(p.context, theory_id=p.id)
        goal = parse_statement(p.question)
        from search.hypergraph import compile_program

        if goal not in compile_program(context.program).atom_ids or goal in context.program.axioms:
            continue  # not derivable, or a fact: no inference to check
        steps = astar_steps(context, goal)
        if len(steps) < 2:
            continue
        prm = AStarStepPRM({p.question: context})
        assert [prm.score([p.question], [steps[:k + 1]])[0] for k in range(len(steps))] == [1.0] * len(steps)
        # the last inference without the ones it rests on, and one with a changed conclusion, are not valid
        assert prm.score([p.question], [steps[-1:]])[0] == 0.0
        wrong = Atom(goal.predicate, ("Nobody",)) if goal.args[0] != "Nobody" else Atom("tall", goal.args)
        bad = steps[-1].rsplit(", ", 1)[0] + ", " + context.verbalizer.atom(wrong) + "."
        assert prm.score([p.question], [steps[:-1] + [bad]])[0] == 0.0
        assert prm.score([p.question], [steps[:1] + ["Let me look at the rules again."]])[0] == prm.unverifiable == 0
        checked += 1
        if checked == 3:
            break
    assert checked == 3
    with pytest.raises(ValueError, match="sentence"):
        ProofContext.from_theory("Bob is red. Colourless green ideas sleep furiously.", theory_id="x")


def test_prms_are_built_from_the_config(shared_data):
    from configs.rlot import get_config
    from reasoner.agents.rlot.setup import make_prm, split_problems

    config = get_config("demo_tiny")
    config.demo.update(dict(task="proofwriter", data_root=str(shared_data), train_pool=4, test=2))
    config.env.prm = "astar"
    pool, test = split_problems(config)
    prm = make_prm(config, model=None, tokenizer=None, problems=pool + test)
    assert isinstance(prm, AStarStepPRM) and set(prm.problems) == {p.question for p in pool + test}
    assert prm.score([pool[0].question], [["nothing to check"]])[0] == 0.0
    config.env.update(dict(prm="z3", prm_unverifiable=0.5, prm_timeout_s=3.0, prm_workers=1))
    z3 = make_prm(config, model=None, tokenizer=None)
    assert isinstance(z3, Z3StepPRM) and z3.unverifiable == 0.5 and z3.timeout_s == 3.0
    z3.close()
    config.env.prm = "astar"
    config.demo.task = "gsm8k"
    with pytest.raises(ValueError, match="no logic programs"):
        make_prm(config, model=None, tokenizer=None, problems=pool)
    config.env.prm = "judge"
    with pytest.raises(ValueError, match="expected one of"):
        make_prm(config, model=None, tokenizer=None)


def test_z3_prm_reads_verdicts_under_curations_executability_rule(z3_prm):
    """A refutation followed by a failing `(get-model)` (Z3 prints unsat, then an error) is a real unsat verdict, as
    curation reads it; an error before the only check-sat is not, even though Z3 then answers."""
    unsat_then_error = "(declare-const x Int)\n(assert (> x 1))\n(assert (< x 0))\n(check-sat)\n(get-model)"
    error_then_sat = "(declare-const x Int)\n(assert (> y 1))\n(assert (> x 0))\n(check-sat)"
    scores = z3_prm.score(["q"] * 3, [[fenced(unsat_then_error, "Z3 says unsat.")],
                                       [fenced(unsat_then_error, "Z3 says sat.")],
                                       [fenced(error_then_sat)]])
    np.testing.assert_array_equal(scores, np.float32([1.0, 0.0, 0.0]))
    first = z3_prm.results[0][2]
    assert first.verdicts == ("unsat",) and not first.success  # Z3's own output: the verdict, then the error
