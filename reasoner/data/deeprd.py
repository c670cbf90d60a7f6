"""DeepRD-style problem generator (Rameshkumar et al., 2025, after Saparov et al.'s lookahead graphs) as logic programs.

Spec implemented (one problem):
  * a DAG over made-up attribute words; the start vertex is the only axiom and has exactly B successors;
  * one successor begins the main path start -> ... -> goal of exactly L edges: the goal's shortest proof depth is L;
  * the other B - 1 successors begin distractor branches, chains of L or L + 1 edges that, as built, do not reach
    the goal, so the right first step is only visible L steps ahead (the lookahead);
  * extra vertices (Saparov et al.'s recipe): a chain of ancestors of the start (rules whose premise is never
    derived), then vertices with random children and random non-descendant parents; they may join a distractor
    branch to the main path, but never lower the goal's depth below L, never add a start successor, never close
    a cycle.
Logic mode (the paper's verbalization): one entity; the start is the fact "Alex is X." and each edge u -> v is the
rule "If someone is u, they are v." (`u(?x) |- v(?x)`), in a shuffled order; the question is "Alex is <goal>.".

Every problem is reproducible from (seed, split, index) alone (Python's `random.Random` seeded with a string), so
splits can be built in any order or in parallel. `check_problem` re-derives depth and out-degree with host A*.
"""

from __future__ import annotations

import dataclasses
import random

from search.logic import Atom, Program, Rule

__all__ = ["DeepRDSpec", "DeepRDProblem", "WordGraphProblem", "generate_problem", "generate_split", "check_problem",
           "problem_record", "DEFAULT_SPLIT_SIZES"]

DEFAULT_SPLIT_SIZES = {"train": 2000, "validation": 200, "test": 500}
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "gr", "st", "tr", "sl")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "", "n", "r", "s", "m", "x")
_ENTITIES = ("Alex", "Sam", "Max", "Fae", "Rex", "Polly", "Wren", "Stella", "Sally", "Jo")


@dataclasses.dataclass(frozen=True)
class DeepRDSpec:
    """Up to `extra_ratio * B * L` extra vertices (DeepRD sizes its graphs for about twice the branch vertices), each
    with fewer than `max_degree` children and fewer than `max_degree` parents."""

    lookahead: tuple[int, int] = (5, 10)
    """Inclusive range (min, max) of L, the goal's proof depth; each problem draws one uniformly."""
    branches: tuple[int, int] = (4, 8)
    """Inclusive range (min, max) of B, the start's out-degree (1 main path + B - 1 distractors)."""
    extra_ratio: float = 1.0
    max_degree: int = 4

    def __post_init__(self):
        for name in ("lookahead", "branches"):
            value = getattr(self, name)
            if isinstance(value, list):  # a config or JSON pair; frozen into a tuple so specs stay hashable
                object.__setattr__(self, name, value := tuple(value))
            if (not isinstance(value, tuple) or len(value) != 2 or not all(isinstance(v, int) for v in value)
                    or not 1 <= value[0] <= value[1]):
                raise ValueError(f"DeepRDSpec {name}={value!r}: expected a pair of ints (min, max), 1 <= min <= max")
        if self.extra_ratio < 0 or self.max_degree < 1:
            raise ValueError(f"extra_ratio={self.extra_ratio}, max_degree={self.max_degree}: "
                             "expected >= 0 and >= 1")


class WordGraphProblem:
    """Logic mode of a DeepRD graph, for the problems we generate and the generator's own (`deeprd_generator`):
    `words[v]` is vertex v's attribute word, `entity` the one constant, `edges` the (u, v) vertex ids in program
    rule order, `start` the vertex of the only axiom, `goal` the goal's."""

    @property
    def program(self) -> Program:
        w = self.words
        rules = tuple(Rule((Atom(w[a], ("?x",)),), Atom(w[b], ("?x",)), f"rule{i + 1}")
                      for i, (a, b) in enumerate(self.edges))
        return Program((Atom(w[self.start], (self.entity,)),), rules)

    @property
    def goal_atom(self) -> Atom:
        return Atom(self.words[self.goal], (self.entity,))

    @property
    def question(self) -> str:
        return f"{self.entity} is {self.words[self.goal]}."

    @property
    def rule_sentences(self) -> list[str]:
        """"If someone is u, they are v." for each edge, in program rule order."""
        w = self.words
        return [f"If someone is {w[a]}, they are {w[b]}." for a, b in self.edges]

    @property
    def context(self) -> str:
        """Logic-mode theory text: the start fact, then one rule sentence per edge, in program order."""
        return " ".join([f"{self.entity} is {self.words[self.start]}.", *self.rule_sentences])


@dataclasses.dataclass(frozen=True)
class DeepRDProblem(WordGraphProblem):
    """vertices[i] is the attribute word of vertex i; vertex 0 is the start; edges are (u, v) vertex ids."""

    id: str
    lookahead: int
    branches: int
    entity: str
    vertices: tuple[str, ...]
    edges: tuple[tuple[int, int], ...]
    start: int
    goal: int

    @property
    def words(self) -> tuple[str, ...]:
        return self.vertices


def _words(rng: random.Random, count: int) -> list[str]:
    seen: set[str] = set()
    out = []
    while len(out) < count:
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.choice((2, 2, 3))))
        word += rng.choice(_CODAS)
        if word not in seen:
            seen.add(word)
            out.append(word)
    return out


def _descendants(edges: list[tuple[int, int]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for a, b in edges:
        children.setdefault(a, []).append(b)
    seen, stack = {root}, [root]
    while stack:
        for c in children.get(stack.pop(), ()):
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return seen


def _distance(edges: list[tuple[int, int]], source: int, target: int) -> int | None:
    """Breadth-first shortest path length (edges), None if unreachable."""
    children: dict[int, list[int]] = {}
    for a, b in edges:
        children.setdefault(a, []).append(b)
    frontier, seen, d = [source], {source}, 0
    while frontier:
        if target in frontier:
            return d
        nxt = []
        for u in frontier:
            for c in children.get(u, ()):
                if c not in seen:
                    seen.add(c)
                    nxt.append(c)
        frontier, d = nxt, d + 1
    return None


def generate_problem(*, seed: int, split: str, index: int, spec: DeepRDSpec = DeepRDSpec()) -> DeepRDProblem:
    """The problem at (seed, split, index); a pure function of its arguments."""
    rng = random.Random(f"deeprd/{seed}/{split}/{index}")
    lookahead = rng.randint(*spec.lookahead)
    branches = rng.randint(*spec.branches)
    edges: list[tuple[int, int]] = []
    count = [1]  # vertex 0 is the start

    def new_vertex() -> int:
        count[0] += 1
        return count[0] - 1

    prev = 0
    for _k in range(lookahead):
        node = new_vertex()
        edges.append((prev, node))
        prev = node
    goal = prev
    for _ in range(branches - 1):
        prev = 0
        for _k in range(lookahead + rng.randint(0, 1)):
            node = new_vertex()
            edges.append((prev, node))
            prev = node
    # Extra vertices, as in Saparov et al.'s lookahead graphs: first a chain of ancestors feeding the start (never
    # derived: the start is the only axiom), then vertices wired to random children and to random parents that are
    # not their descendants (so the graph stays acyclic). Parents exclude the start (out-degree stays B); a vertex
    # whose edges would shorten the goal's depth below L is redrawn (after 20 failed draws it stays unconnected).
    # These edges can let a distractor branch rejoin the main path further down. (With unary rules over one entity
    # the relaxed graph of the dependency heuristic is the whole graph, but every successor of a derived vertex is
    # derived, so no relaxed path from a derived vertex leaves M: the heuristic is exact here, and A* with it pops
    # and pushes exactly what A* with the true cost-to-go does.)
    n_extra = rng.randint(0, int(round(spec.extra_ratio * branches * lookahead)))
    n_prefix = rng.randint(0, min(n_extra, lookahead))
    prev = 0
    for _ in range(n_prefix):
        node = new_vertex()
        edges.append((node, prev))
        prev = node
    for _ in range(n_extra - n_prefix):
        node = new_vertex()
        for _try in range(20):
            existing = list(range(node))
            n_children = rng.randint(0, spec.max_degree - 1)
            n_parents = rng.randint(0 if n_children else 1, spec.max_degree - 1)
            children = rng.sample(existing, min(n_children, len(existing)))
            blocked = _descendants(edges + [(node, c) for c in children], node) | {0}
            candidates = [v for v in existing if v not in blocked]
            parents = rng.sample(candidates, min(n_parents, len(candidates)))
            trial = edges + [(node, c) for c in children] + [(p, node) for p in parents]
            if _distance(trial, 0, goal) == lookahead:
                edges = trial
                break
    names = _words(rng, count[0])
    edges_shuffled = list(edges)
    rng.shuffle(edges_shuffled)
    return DeepRDProblem(id=f"deeprd-{split}-{seed}-{index}", lookahead=lookahead, branches=branches,
                         entity=rng.choice(_ENTITIES), vertices=tuple(names), edges=tuple(edges_shuffled),
                         start=0, goal=goal)


def check_problem(problem: DeepRDProblem) -> list[str]:
    """Host A* check of the spec; returns the violations (empty when the problem is valid)."""
    from search.astar import shortest_depth

    problems = []
    out_degree = sum(1 for a, _ in problem.edges if a == problem.start)
    if out_degree != problem.branches:
        problems.append(f"start out-degree {out_degree} != B={problem.branches}")
    depth = shortest_depth(problem.program, problem.goal_atom)
    if depth != problem.lookahead:
        problems.append(f"shortest proof depth {depth} != L={problem.lookahead}")
    return problems


def generate_split(*, seed: int, split: str, size: int, spec: DeepRDSpec = DeepRDSpec()):
    """Yield the split's problems in index order."""
    for index in range(size):
        yield generate_problem(seed=seed, split=split, index=index, spec=spec)


def problem_record(problem: DeepRDProblem, *, cost: str = "max") -> dict:
    """The dataset record of a problem (see `records`; pushes/pops of A* under `cost`), after the host A* check;
    raises ValueError naming the problem if it violates the spec."""
    from reasoner.data.records import make_record
    from search.hypergraph import compile_program

    violations = check_problem(problem)
    if violations:
        raise ValueError(f"DeepRD problem {problem.id} violates the spec: {'; '.join(violations)}")
    return make_record(qid=problem.id, context=problem.context, question=problem.question,
                       hg=compile_program(problem.program), goal=problem.goal_atom, depth=problem.lookahead,
                       source={"lookahead": problem.lookahead, "branches": problem.branches,
                               "vertices": len(problem.vertices), "edges": len(problem.edges)},
                       rule_texts=problem.rule_sentences, cost=cost)
