"""Eq. 7 rewards and efficiency metrics against hand-derived numbers (values below, at and above 1)."""

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from search.astar import TraceStep, solve
from search.logic import Atom, Program, Rule
from search.rewards import ProblemScorer, decay_reward
from search.verbalize import Verbalizer
from tests.search.search_corpora import deeprd_like, fig1_program, random_program


def diamond_program():
    """Axiom a(e); rules (canonical edge order) 0: a -> b, 1: b -> g, 2: a -> c, 3: a -> d, 4: c & d -> g.

    Two proofs of g(e) of depth 2 (cost "max": w(a) = 0, w(b) = w(c) = w(d) = 1, w(g) = 2), so every edge is
    tight and every atom lies on a shortest proof: h_true = w(g) - w, i.e. a 2, b/c/d 1, g 0. The dependency
    heuristic (rule steps to the goal, co-premises ignored) gives the same numbers here. So f = w + h = 2 for every
    atom, and x_delta = 2 * |V_pops| for both A* rewards.
    """
    x = ("?x",)
    rules = (Rule((Atom("a", x),), Atom("b", x)), Rule((Atom("b", x),), Atom("g", x)),
             Rule((Atom("a", x),), Atom("c", x)), Rule((Atom("a", x),), Atom("d", x)),
             Rule((Atom("c", x), Atom("d", x)), Atom("g", x)))
    return Program(axioms=(Atom("a", ("e",)),), rules=rules), Atom("g", ("e",))


def diamond_step(rule: int) -> TraceStep:
    """Rule `rule` of `diamond_program` applied to the constant e."""
    prog, _ = diamond_program()
    r = prog.rules[rule]
    ground = lambda atom: Atom(atom.predicate, ("e",))  # noqa: E731
    return TraceStep(rule=rule, premises=tuple(ground(p) for p in r.premises), conclusion=ground(r.conclusion))


# A* on the diamond (either heuristic): pops a, pushes b, c, d (edges 0, 2, 3, ascending ids); ties (f = 2, h = 1)
# go last-in-first-out, so it pops d (completes nothing: edge 4 still needs c), then c (completes edge 4: pushes g),
# then g. Its trace is [0, 2, 3, 4] with V_pops = {a, c, d}: alpha = 3 * 2 = 6. The shortest proof is [0, 1]
# (2 steps), so the step-count alpha is 2.
DIAMOND_CASES = [
    # (steps, step_count reward, A* reward (both heuristics)), each derived by hand:
    # [0, 1]: the short route, NOT A*'s trace: V_pops {a, b}, x = 4 < alpha: 0.5 ** ((4 - 6) / 6) = 2 ** (1 / 3);
    #   2 steps = the shortest proof: 0.5 ** 0 = 1
    ((0, 1), 1.0, 1.2599210498948732),
    # [2, 3, 4]: the conjunctive route without A*'s detour to b: V_pops {a, c, d}, x = 6 = alpha -> 1;
    #   3 steps: 0.5 ** ((3 - 2) / 2) = 0.5 ** 0.5
    ((2, 3, 4), 0.7071067811865476, 1.0),
    # [0, 1, 2, 3, 4]: both routes: V_pops {a, b, c, d}, x = 8: 0.5 ** ((8 - 6) / 6) = 0.5 ** (1 / 3);
    #   5 steps: 0.5 ** ((5 - 2) / 2) = 0.5 ** 1.5
    ((0, 1, 2, 3, 4), 0.3535533905932738, 0.7937005259840998),
    # [1]: b is never proved: incorrect, every reward 0
    ((1,), 0.0, 0.0),
]


@pytest.mark.parametrize("steps,step_reward,astar_reward", DIAMOND_CASES)
def test_hand_derived_rewards_on_the_diamond(steps, step_reward, astar_reward):
    prog, goal = diamond_program()
    sc = ProblemScorer(prog, goal)
    assert [s.rule for s in sc.astar["true"].trace] == [0, 2, 3, 4] == [s.rule for s in sc.astar["dependency"].trace]
    assert sc.alpha == {"step_count": 2.0, "astar_dependency": 6.0, "astar_true": 6.0}
    s = sc.score_steps([diamond_step(r) for r in steps])
    # float64 pow of a short exponent is correctly rounded to within 1 ulp on any libm: 2 eps64 relative
    tol = dict(rel_tol=2 * np.finfo(np.float64).eps, abs_tol=0.0)
    assert math.isclose(s.rewards["step_count"], step_reward, **tol), s.rewards
    assert math.isclose(s.rewards["astar_true"], astar_reward, **tol), s.rewards
    assert math.isclose(s.rewards["astar_dependency"], astar_reward, **tol), s.rewards
    assert s.rewards["correctness"] == (1.0 if step_reward else 0.0)


@settings(max_examples=200, deadline=None)
@given(alpha=st.floats(0.5, 500), x=st.floats(0, 2000))
def test_decay_halves_per_alpha(alpha, x):
    """Eq. 7's stated behaviour as properties (not a restatement of the formula): 1 at x = alpha, 1/2 at 2 alpha,
    each further alpha halves it, never negative, 0 for an incorrect trace."""
    assert decay_reward(alpha, alpha, correct=True) == 1.0
    assert decay_reward(2 * alpha, alpha, correct=True) == 0.5  # doubling x_delta halves the reward
    # exponents (x + alpha - alpha) / alpha and (x - alpha) / alpha + 1 differ by a few eps64 * (x / alpha + 1);
    # pow turns that into ln 2 times as much relative error; subnormal results are exact to one spacing (5e-324)
    half = decay_reward(x, alpha, correct=True) / 2
    rel = 8 * np.finfo(np.float64).eps * (x / alpha + 2)
    assert math.isclose(decay_reward(x + alpha, alpha, correct=True), half, rel_tol=rel, abs_tol=1e-323)
    assert decay_reward(x, alpha, correct=True) >= 0.0
    assert decay_reward(x, alpha, correct=False) == 0.0


def test_decay_edge_cases():
    assert decay_reward(0.0, 0.0, correct=True) == 1.0 and decay_reward(2.0, 0.0, correct=True) == 0.25
    assert decay_reward(math.inf, 3.0, correct=True) == 0.0


def test_scorer_f_is_astar_priority_at_pop_time_and_incorrect_traces_score_zero():
    """Two computations of x_delta agree on A*'s own traces: the scorer's w + h (inside weights plus heuristic) and
    the A* search's priorities at pop time; a proof missing its last step is incorrect and scores 0 everywhere."""
    rng = random.Random(3)
    problems = [fig1_program()] + [deeprd_like(rng, depth=rng.randint(5, 10), branches=rng.randint(4, 8)) for _ in range(20)]
    for _ in range(200):
        prog, goals = random_program(rng)
        problems.append((prog, rng.choice(goals)))
    n = 0
    for prog, goal in problems:
        sc = ProblemScorer(prog, goal)
        if sc.goal_id < 0 or not sc.astar["true"].proved:
            assert sc.score_edges([]).rewards == dict.fromkeys(sc.score_edges([]).rewards, 0.0)
            continue
        for h in ("dependency", "true"):
            s = sc.score_edges(sc.astar[h].edge_trace)
            assert s.correct and s.x_delta[f"astar_{h}"] == sc.astar[h].x_delta, (prog, goal, h)
        s = sc.score_edges(sc.shortest)
        assert s.correct and s.pushes == len(sc.shortest) and s.efficiency_pops == 1.0
        if sc.shortest:  # drop the step that concludes the goal: incorrect, every reward 0
            bad = sc.score_edges(sc.shortest[:-1])
            assert not bad.correct and set(bad.rewards.values()) == {0.0} and bad.efficiency_pushes is None
        n += 1
    assert n > 100


def test_dijkstra_on_deeprd_numbers():
    """Unary chains: the shortest proof has exactly L steps, so the step reward is 0.5 ** ((pushes - L) / L)."""
    rng = random.Random(5)
    for _ in range(20):
        depth = rng.randint(5, 10)
        prog, goal = deeprd_like(rng, depth=depth, branches=rng.randint(4, 8))
        sc = ProblemScorer(prog, goal)
        assert len(sc.shortest) == depth
        dij = solve(sc.hg, goal, heuristic="zero")
        s = sc.score_text(Verbalizer(prog, dataset="deeprd").trace(dij.trace), Verbalizer(prog, dataset="deeprd"))
        assert s.correct and s.pushes == dij.pushes
        # Eq. 7 with x = pushes and alpha = depth: the same float64 operations, so equal exactly
        assert s.rewards["step_count"] == 0.5 ** ((dij.pushes - depth) / depth)
        assert s.efficiency_pushes == depth / dij.pushes  # one float64 division on both sides: exact
        assert s.efficiency_pops == depth / dij.v_pops  # a chain of L steps has L distinct premises


def test_fig1_efficiency_by_hand():
    prog, goal = fig1_program()
    sc = ProblemScorer(prog, goal)
    # shortest proof: anc(isaac,jacob), anc(abraham,jacob), anc(terah,jacob): 3 steps over 5 distinct premises
    assert len(sc.shortest) == 3
    dij = sc.score_edges(solve(prog, goal).edge_trace)  # Dijkstra: 8 pushes over 8 distinct premises
    assert (dij.pushes, dij.v_pops) == (8, 8)
    assert dij.efficiency_pushes == 3 / 8 and dij.efficiency_pops == 5 / 8
    assert dij.rewards["step_count"] == 0.5 ** ((8 - 3) / 3)
    # it pops ancestor(abraham, ishmael), which cannot reach the goal: f = inf under both A* heuristics
    assert dij.rewards["astar_dependency"] == 0.0 and dij.rewards["astar_true"] == 0.0
