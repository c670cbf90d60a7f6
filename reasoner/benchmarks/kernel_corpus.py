"""Problem corpora for the A* kernel's agreement tests (tests/search) and `reasoner bench astar`: (name, compiled
Hypergraph, goal Atom) triples. (It lives here, not in `search`, because it builds DeepRD data with `reasoner.data`.)

* `deeprd_problems`: DeepRD problems from `reasoner.data.deeprd` (paper defaults L in 5..10, B in 4..8 unless a
  spec is given), one goal each.
* `proofwriter_problems`: the real ProofWriter theories of `../shared/data/proofwriter/` (Logic-LLM OWA depth-5 dev
  questions: the statement and its negation as goals, whichever are in the Herbrand base; the raw CWA sample's
  questions), compiled once per theory.
* `random_programs`: random range-restricted programs over unary and binary predicates and two or three constants,
  with rules of one to three premises (repeated premises and multi-premise hyperedges included), reproducible by seed.
* `scaling_program`: a layered DeepRD-like program with about `n_atoms` atoms, for the size-scaling benchmark.
"""

from __future__ import annotations

import pathlib
import random

from search.hypergraph import Hypergraph, compile_program
from search.logic import Atom, LogicError, Program, Rule

__all__ = ["deeprd_problems", "proofwriter_problems", "random_programs", "random_program", "scaling_program"]

Problem = tuple[str, Hypergraph, Atom]


def deeprd_problems(count: int, *, seed: int = 0, split: str = "train", spec=None) -> list[Problem]:
    from reasoner.data.deeprd import DeepRDSpec, generate_problem

    spec = spec or DeepRDSpec()
    out = []
    for i in range(count):
        p = generate_problem(seed=seed, split=split, index=i, spec=spec)
        out.append((p.id, compile_program(p.program), p.goal_atom))
    return out


def proofwriter_problems(data_dir: str | pathlib.Path) -> list[Problem]:
    """Goals from the Logic-LLM ProofWriter file and the raw CWA sample under `data_dir` (= ../shared/data)."""
    from reasoner.data.proofwriter_atoms import negate
    from reasoner.data.proofwriter_english import load_logic_llm
    from reasoner.data.proofwriter_raw import load_raw

    root = pathlib.Path(data_dir) / "proofwriter"
    out: list[Problem] = []
    compiled: dict[int, Hypergraph | None] = {}

    def add(qid: str, program: Program, goals: list[Atom]) -> None:
        key = id(program)
        if key not in compiled:
            try:
                compiled[key] = compile_program(program)
            except LogicError:
                compiled[key] = None
        hg = compiled[key]
        if hg is None:
            return
        for k, goal in enumerate(goals):
            try:
                hg.goal_id(goal)
            except LogicError:  # outside the Herbrand base: not a search problem
                continue
            out.append((f"{qid}/{k}", hg, goal))

    questions, _ = load_logic_llm(root / "logic_llm_owa_d5_dev.json")
    for q in questions:
        add(q.id, q.program, [q.statement, negate(q.statement)])
    for theory in load_raw(root / "raw_cwa_mini.jsonl"):
        for q in theory.questions:
            add(q.id, theory.program, [q.statement])
    return out


def random_program(rng: random.Random, *, n_preds: int = 6, n_consts: int = 2, n_rules: int = 10,
                   max_premises: int = 3) -> tuple[Program, Atom]:
    """One random range-restricted program and a goal in its Herbrand base."""
    consts = [f"c{i}" for i in range(n_consts)]
    arity = {f"p{i}": (2 if i % 4 == 3 else 1) for i in range(n_preds)}
    preds = list(arity)

    def atom(pred: str, pool: list[str]) -> Atom:
        return Atom(pred, tuple(rng.choice(pool) for _ in range(arity[pred])))

    axioms = list(dict.fromkeys(atom(rng.choice(preds), consts) for _ in range(rng.randint(1, 4))))
    rules = []
    for _ in range(n_rules):
        variables = ["?x", "?y"][: rng.randint(1, 2)]
        pool = variables + ([rng.choice(consts)] if rng.random() < 0.2 else [])
        prem = tuple(atom(rng.choice(preds), pool) for _ in range(rng.randint(1, max_premises)))
        bound = sorted({t for p in prem for t in p.args if t.startswith("?")} | set(consts))
        concl = atom(rng.choice(preds), bound)
        if concl not in prem:
            rules.append(Rule(prem, concl))
    program = Program(tuple(axioms), tuple(rules))
    used = sorted({a.predicate for a in axioms} | {x.predicate for r in rules for x in (*r.premises, r.conclusion)})
    goal = atom(rng.choice(used), consts)
    return program, goal


def random_programs(count: int, *, seed: int = 0, **kwargs) -> list[Problem]:
    rng = random.Random(f"kernel-random/{seed}")
    out = []
    while len(out) < count:
        program, goal = random_program(rng, **kwargs)
        try:
            hg = compile_program(program)
            hg.goal_id(goal)
        except LogicError:
            continue
        out.append((f"random-{seed}-{len(out)}", hg, goal))
    return out


def scaling_program(n_atoms: int, *, seed: int = 0, width: int = 8) -> tuple[Program, Atom]:
    """A layered program of about `n_atoms` propositional atoms: `width` atoms per layer, each with two rules from
    the previous layer (one unary, one binary), plus one goal at the end; the axioms are the first layer."""
    rng = random.Random(f"kernel-scaling/{seed}/{n_atoms}")
    layers = max(2, n_atoms // width)
    name = [[Atom(f"v{l}_{i}") for i in range(width)] for l in range(layers)]
    rules = []
    for l in range(1, layers):
        for i in range(width):
            a, b = rng.sample(range(width), 2)
            rules.append(Rule((name[l - 1][a],), name[l][i]))
            rules.append(Rule((name[l - 1][a], name[l - 1][b]), name[l][i]))
    goal = name[layers - 1][rng.randrange(width)]
    return Program(tuple(name[0]), tuple(rules)), goal
