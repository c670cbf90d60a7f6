"""DeepRD generator: the published spec, checked with an independent breadth-first search and with host A*."""

import dataclasses

import pytest

from reasoner.data.deeprd import DeepRDSpec, check_problem, generate_problem, problem_record
from reasoner.data.proofwriter_english import parse_statement, parse_theory_text
from search.astar import shortest_depth
from tests.data.reference import bfs_distances


def _bfs_depth(edges, start, goal):
    children = {}
    for a, b in edges:
        children.setdefault(a, []).append(b)
    return bfs_distances(children, start).get(goal)


def _is_acyclic(edges, n):
    indeg = [0] * n
    children = {}
    for a, b in edges:
        indeg[b] += 1
        children.setdefault(a, []).append(b)
    ready = [v for v in range(n) if indeg[v] == 0]
    seen = 0
    while ready:
        u = ready.pop()
        seen += 1
        for c in children.get(u, ()):
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    return seen == n


@pytest.fixture(scope="module")
def problems():
    return [generate_problem(seed=7, split="train", index=i) for i in range(150)]


def test_spec_holds_by_independent_bfs_and_host_astar(problems):
    for p in problems:
        assert 5 <= p.lookahead <= 10 and 4 <= p.branches <= 8
        assert sum(1 for a, _ in p.edges if a == p.start) == p.branches
        assert _bfs_depth(p.edges, p.start, p.goal) == p.lookahead
        assert shortest_depth(p.program, p.goal_atom) == p.lookahead
        assert _is_acyclic(p.edges, len(p.vertices))
        assert len(set(p.vertices)) == len(p.vertices)
        assert len(p.program.axioms) == 1 and p.program.axioms[0].predicate == p.vertices[p.start]
        assert check_problem(p) == []


def test_distractor_branches_have_length_l_or_l_plus_one(problems):
    # Before extra vertices, every start successor but one heads a chain of L or L + 1 vertices that does not
    # reach the goal; extras only add edges. So each distractor successor reaches a vertex at BFS depth >= L
    # from the start through the successor, and the main successor reaches the goal in L - 1 more steps.
    for p in problems[:40]:
        succ = [b for a, b in p.edges if a == p.start]
        edges_wo_start = [(a, b) for a, b in p.edges if a != p.start]
        to_goal = [s for s in succ if _bfs_depth(edges_wo_start, s, p.goal) == p.lookahead - 1]
        assert len(to_goal) >= 1
        for s in succ:
            children = {}
            for a, b in edges_wo_start:
                children.setdefault(a, []).append(b)
            longest, frontier, d = 0, {s}, 0
            while frontier and d <= p.lookahead + 1:
                longest, d = d, d + 1
                frontier = {c for u in frontier for c in children.get(u, ())}
            assert longest >= p.lookahead - 1


def test_full_ranges_are_sampled(problems):
    assert {p.lookahead for p in problems} == set(range(5, 11))
    assert {p.branches for p in problems} == set(range(4, 9))


def test_reproducible_by_seed_split_index():
    a = generate_problem(seed=3, split="test", index=11)
    assert a == generate_problem(seed=3, split="test", index=11)
    assert a != generate_problem(seed=4, split="test", index=11)
    assert a != generate_problem(seed=3, split="validation", index=11)


def test_logic_mode_text_parses_back_to_the_program(problems):
    p = problems[0]
    text = p.context
    assert text.startswith(f"{p.entity} is {p.vertices[p.start]}. If someone is ")
    program, failures = parse_theory_text(text)
    assert failures == [] and program == p.program
    assert parse_statement(p.question) == p.goal_atom


def test_record_matches_a_fresh_search():
    p = generate_problem(seed=1, split="train", index=0, spec=DeepRDSpec(lookahead=(3, 3), branches=(2, 2)))
    rec = problem_record(p)
    assert rec["depth"] == 3 and rec["pushes"][0] >= rec["pushes"][2] >= 3


def test_a_problem_that_breaks_the_spec_is_rejected_by_name():
    p = generate_problem(seed=1, split="train", index=0)
    with pytest.raises(ValueError, match=r"deeprd-train-1-0 violates the spec: start out-degree"):
        problem_record(dataclasses.replace(p, branches=p.branches + 1))
    with pytest.raises(ValueError, match="shortest proof depth"):
        problem_record(dataclasses.replace(p, lookahead=p.lookahead - 1))


@pytest.mark.parametrize("kwargs", [dict(lookahead=(6, 5)), dict(branches=(0, 3)),
                                    dict(branches=(2,)), dict(lookahead=(2.5, 4)), dict(extra_ratio=-1.0)])
def test_bad_spec(kwargs):
    with pytest.raises(ValueError, match="expected"):
        DeepRDSpec(**kwargs)
