"""Eq. 7 rewards and efficiency metrics against hand-derived numbers and a NumPy transcription."""

import math
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from search.astar import solve
from search.rewards import ProblemScorer, decay_reward
from search.verbalize import Verbalizer
from tests.search.search_corpora import deeprd_like, fig1_program, random_program


def numpy_eq7(x, alpha):
    """The paper's exp(beta * (alpha - x)) with the positive beta = log(2) / alpha that its text describes."""
    return float(np.exp(np.log(2.0) / alpha * (alpha - x)))


@settings(max_examples=200, deadline=None)
@given(alpha=st.floats(0.5, 500), x=st.floats(0, 2000))
def test_decay_matches_numpy_and_halves_per_alpha(alpha, x):
    assert math.isclose(decay_reward(x, alpha, correct=True), numpy_eq7(x, alpha), rel_tol=1e-9, abs_tol=1e-300)
    assert decay_reward(alpha, alpha, correct=True) == 1.0
    assert decay_reward(2 * alpha, alpha, correct=True) == 0.5  # doubling x_delta halves the reward
    half = decay_reward(x, alpha, correct=True) / 2
    assert math.isclose(decay_reward(x + alpha, alpha, correct=True), half, rel_tol=1e-9, abs_tol=1e-300)
    assert decay_reward(x, alpha, correct=False) == 0.0


def test_decay_edge_cases():
    assert decay_reward(0.0, 0.0, correct=True) == 1.0 and decay_reward(2.0, 0.0, correct=True) == 0.25
    assert decay_reward(math.inf, 3.0, correct=True) == 0.0


def test_astar_traces_score_one_and_incorrect_zero():
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
            assert s.correct and s.rewards[f"astar_{h}"] == 1.0, (prog, goal, h)
            assert s.x_delta[f"astar_{h}"] == sc.astar[h].x_delta  # f at pop time == shortest weight + h
        s = sc.score_edges(sc.shortest)
        assert s.rewards["step_count"] == 1.0 and s.efficiency_pushes == 1.0 and s.efficiency_pops == 1.0
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
        assert math.isclose(s.rewards["step_count"], numpy_eq7(dij.pushes, depth), rel_tol=1e-12)
        assert math.isclose(s.efficiency_pushes, depth / dij.pushes)
        assert math.isclose(s.efficiency_pops, depth / dij.v_pops)  # a chain of L steps has L distinct premises


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
