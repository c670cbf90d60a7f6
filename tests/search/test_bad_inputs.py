"""Malformed programs and goals raise LogicError naming the input and what was expected."""

import pytest

from search.astar import shortest_depth, solve
from search.hypergraph import compile_program
from search.logic import Atom, LogicError, Program, Rule

X = "?x"
BASE = Program(axioms=(Atom("red", ("bob",)),), rules=(Rule((Atom("red", (X,)),), Atom("big", (X,))),))


def test_not_range_restricted_rule():
    bad = Program(axioms=BASE.axioms, rules=(Rule((Atom("red", (X,)),), Atom("likes", (X, "?y"))),))
    with pytest.raises(LogicError, match=r"rule 0 .*not range-restricted.*\?y"):
        compile_program(bad)


@pytest.mark.parametrize(
    "goal, pattern",
    [
        (Atom("green", ("bob",)), r"outside the Herbrand base: predicate green/1"),
        (Atom("red", ("alice",)), r"outside the Herbrand base: constant\(s\) \['alice'\]"),
        (Atom("red", ("bob", "bob")), r"predicate red/2 does not occur .*red/1"),
        (Atom("red", (X,)), r"not ground"),
    ],
)
def test_goal_outside_herbrand_base(goal, pattern):
    with pytest.raises(LogicError, match=pattern):
        solve(BASE, goal)
    with pytest.raises(LogicError, match=pattern):
        shortest_depth(BASE, goal)


def test_goal_in_base_but_unprovable_is_not_an_error():
    prog = Program(axioms=BASE.axioms + (Atom("blue", ("amy",)),), rules=BASE.rules)
    res = solve(prog, Atom("big", ("amy",)), heuristic="dependency")
    assert not res.proved and res.weight == float("inf") and res.depth is None
    assert res.pops == 3  # Alg. 1 exhausts the agenda: all of M = {red(bob), blue(amy), big(bob)}


def test_empty_program():
    with pytest.raises(LogicError, match="empty program: no axioms"):
        compile_program(Program(axioms=(), rules=()))
    with pytest.raises(LogicError, match="empty program: no axioms \\(and 1 rules\\)"):
        compile_program(Program(axioms=(), rules=BASE.rules))


def test_cyclic_rule():
    bad = Program(axioms=BASE.axioms, rules=(Rule((Atom("red", (X,)), Atom("big", (X,))), Atom("red", (X,))),))
    with pytest.raises(LogicError, match=r"rule 0 .*is cyclic: its conclusion red\(\?x\) is one of its premises"):
        compile_program(bad)


def test_non_ground_axiom_and_wrong_types():
    with pytest.raises(LogicError, match=r"axiom 0 red\(\?x\) is not a ground atom"):
        compile_program(Program(axioms=(Atom("red", (X,)),), rules=()))
    with pytest.raises(LogicError, match="expected a search.logic.Program"):
        compile_program("red(bob)")
    with pytest.raises(LogicError, match="expected search.logic.Atom"):
        solve(BASE, "big(bob)")


def test_bad_heuristic_and_cost_names():
    with pytest.raises(ValueError, match="heuristic 'manhattan' is not one of"):
        solve(BASE, Atom("big", ("bob",)), heuristic="manhattan")
    with pytest.raises(ValueError, match="cost 'min' is not one of"):
        solve(BASE, Atom("big", ("bob",)), cost="min")


def test_recursive_programs_are_fine():
    """Cycles between rules (ProofWriter has them) are legal Datalog: only a rule concluding its own premise is not."""
    prog = Program(
        axioms=(Atom("red", ("bob",)),),
        rules=(Rule((Atom("red", (X,)),), Atom("big", (X,))), Rule((Atom("big", (X,)),), Atom("red", (X,)))),
    )
    assert solve(prog, Atom("big", ("bob",))).weight == 1
