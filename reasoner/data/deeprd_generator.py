"""The DeepRD authors' own problems (their `graph_generator.py`, logic mode) as logic programs.

Input: the generator's JSON list (see /work/shared/data/deeprd/README.md), each record with `edges` ([u, v] directed
edges between integer node ids), `query` ([start, goal]), `lookahead_size`, `max_branches`, `logic_predicates`
("Given the following list of predicates:" then one rule sentence per line, in several templates: "If someone is X,
they are Y.", "Everyone that is X is Y.", "If NAME is X then NAME is Y." ...), `logical_question` ("Given that NAME
is A, and we want to prove NAME is Z. ..."), `next_adjective` and `node_mapping` (node id string -> {name,
adjective}; one name per record).

A record becomes one entity with the start's adjective as the only axiom
and one unary rule `u(?x) |- v(?x)` per edge, in the file's edge order; the goal is `<goal adjective>(NAME)`. The entity constant is the
first word of the mapping's name ("James" for "James Taylor"; every bundled name has two words, and our English
parser, reward and prompts take one-word names as ProofWriter's): `context` and `question` then parse back into the
same program and goal; the full name is kept in `full_name` and in the record's `source`. The
rules are built from `edges` + `node_mapping` and cross-checked against the sentences of `logic_predicates` (the
same (premise, conclusion) adjective pairs, as a multiset); a mismatch rejects the record with its index.

The depth the generator states is `lookahead_size`: the shortest start -> goal path in the generator's graph has
exactly `lookahead_size` edges in every one of the 275 bundled records, and host A* proves every goal at that depth
(tests/data/test_deeprd_generator.py).

Finding (issue 20, paper Fig. 6): on the authors' problems the dependency heuristic is STILL exactly the true
cost-to-go: A* with it pushes and pops exactly what A* with the true heuristic does, on every record (mean pushes
by lookahead in `push_table`, printed by `reasoner data build deeprd --source FILE`). Why: every rule is unary over
one entity, so the relaxed graph (V', E') of §3.2 is the generator's graph itself, and every successor of a derived
vertex is derived (a unary rule fires as soon as its premise holds). A relaxed path from a derived vertex therefore
never leaves the minimal model M, so the relaxed distance from v in M to the goal IS the true remaining proof
depth. Rules whose premise is never derived (ancestors of the start, vertices only reachable from outside M) can
only add relaxed edges that leave non-derived vertices, which no path from M uses. This holds for any unary
single-entity program, under our reading (relaxation over the whole Herbrand base) and equally under a reading
restricted to M, so the paper's "dependency close to Dijkstra on DeepRD" cannot come from the relaxation reading;
it needs a heuristic that does not know the goal's ancestors exactly (e.g. a learned or an approximate relaxed
distance), or problems whose rules have several premises or several entities.
Evidence (the 275 bundled records, host A*, cost "max"): mean pushes zero / dependency / true by lookahead
L=2: 14.68 / 7.48 / 7.48, L=5: 34.28 / 10.80 / 10.80, L=10: 66.84 / 15.96 / 15.96, L=16: 111.16 / 23.92 / 23.92,
L=32: 221.60 / 42.16 / 42.16 (dependency == true in pushes and pops on all 275); of the 18287 derived vertices only
2825 (= sum of L + 1: exactly the shortest path's vertices) reach the goal at all, and exactly one of the 1705 start
successors does, so the generator's distractor branches never rejoin the goal and both heuristics are h = L - k on
the path and inf (pruned) everywhere else.
"""

from __future__ import annotations

import dataclasses
import json
import re

from reasoner.data.deeprd import WordGraphProblem

__all__ = ["GeneratorProblem", "GeneratorFormatError", "parse_record", "load_generator_file", "problem_record",
           "rule_pairs", "push_table"]

_HEADER = "Given the following list of predicates:"
# premise adjective: the word after the first " is "; conclusion: the sentence's last word.
_SENTENCE = re.compile(r"\bis (\w+)\b.*\b(?:is|are) (\w+)\.$")


class GeneratorFormatError(ValueError):
    """A record that is not in the DeepRD generator's logic-mode format (the message names the record)."""


@dataclasses.dataclass(frozen=True)
class GeneratorProblem(WordGraphProblem):
    """One generator record. `index` is its 0-based position in the file; `rule_texts` are the file's sentences
    (their order, which is not the edge order), `edges` the file's (u, v) node ids in file order."""

    index: int
    lookahead: int
    branches: int
    entity: str
    full_name: str
    adjectives: dict[int, str]
    edges: tuple[tuple[int, int], ...]
    start: int
    goal: int
    rule_texts: tuple[str, ...]
    next_adjectives: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"deeprd-gen-{self.index}"

    @property
    def words(self) -> dict[int, str]:
        return self.adjectives


def rule_pairs(logic_predicates: str) -> list[tuple[str, str]]:
    """(premise adjective, conclusion adjective) of every sentence of `logic_predicates`; ValueError on a line
    that matches no template."""
    lines = [ln.strip() for ln in logic_predicates.splitlines() if ln.strip()]
    if lines and lines[0] == _HEADER:
        lines = lines[1:]
    out = []
    for ln in lines:
        m = _SENTENCE.search(ln)
        if not m:
            raise ValueError(f"rule sentence {ln!r}: expected 'If ... is X, ... is/are Y.' or 'Everyone that is X is Y.'")
        out.append((m.group(1), m.group(2)))
    return out


def parse_record(rec: dict, *, index: int) -> GeneratorProblem:
    """One generator record -> GeneratorProblem; GeneratorFormatError naming the record on bad input."""
    where = f"DeepRD generator record {index}"
    try:
        mapping = {int(k): v["adjective"] for k, v in rec["node_mapping"].items()}
        names = {v["name"] for v in rec["node_mapping"].values()}
        edges = tuple((int(u), int(v)) for u, v in rec["edges"])
        start, goal = (int(x) for x in rec["query"])
        lookahead, branches = int(rec["lookahead_size"]), int(rec["max_branches"])
        pairs = rule_pairs(rec["logic_predicates"])
        next_adj = tuple(rec.get("next_adjective") or ())
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise GeneratorFormatError(f"{where}: {err!r}; expected edges, query, lookahead_size, max_branches, "
                                   "logic_predicates and node_mapping {id: {name, adjective}}") from err
    if len(names) != 1:
        raise GeneratorFormatError(f"{where}: node_mapping has names {sorted(names)}; expected one entity")
    missing = sorted({n for e in edges for n in e} - mapping.keys() | {start, goal} - mapping.keys())
    if missing:
        raise GeneratorFormatError(f"{where}: nodes {missing} have no node_mapping entry")
    if len(set(mapping.values())) != len(mapping):
        raise GeneratorFormatError(f"{where}: two nodes share an adjective; expected one adjective per node")
    if sorted(pairs) != sorted((mapping[u], mapping[v]) for u, v in edges):
        raise GeneratorFormatError(f"{where}: logic_predicates do not state the same rules as edges/node_mapping")
    text_lines = [ln.strip() for ln in rec["logic_predicates"].splitlines() if ln.strip() and ln.strip() != _HEADER]
    full_name = names.pop()
    if not full_name.split() or not full_name.split()[0].isalpha():
        raise GeneratorFormatError(f"{where}: entity name {full_name!r}; expected a name starting with a word")
    return GeneratorProblem(index=index, lookahead=lookahead, branches=branches, entity=full_name.split()[0],
                            full_name=full_name,
                            adjectives=mapping, edges=edges, start=start, goal=goal, rule_texts=tuple(text_lines),
                            next_adjectives=next_adj)


def load_generator_file(path: str) -> tuple[list[GeneratorProblem], list[tuple[str, str]]]:
    """(problems, skipped) of a generator JSON list; skipped is [(record id, reason)]. Raises
    GeneratorFormatError if the file is unreadable or not a JSON list."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GeneratorFormatError(f"DeepRD generator file {path}: {err}") from err
    if not isinstance(data, list):
        raise GeneratorFormatError(f"DeepRD generator file {path}: top level is {type(data).__name__}; "
                                   "expected a JSON list of records")
    problems, skipped = [], []
    for i, rec in enumerate(data):
        try:
            problems.append(parse_record(rec, index=i))
        except GeneratorFormatError as err:
            skipped.append((str(i), str(err)))
    return problems, skipped


def problem_record(problem: GeneratorProblem, *, cost: str = "max") -> dict:
    """The dataset record (see `records.make_record`; pushes/pops of A* under `cost`) after the host A* check: ValueError naming the record when
    the goal is not provable at depth `lookahead` (cost "max")."""
    from reasoner.data.records import make_record
    from search.astar import shortest_depth
    from search.hypergraph import compile_program

    hg = compile_program(problem.program)
    depth = shortest_depth(hg, problem.goal_atom)
    if depth != problem.lookahead:
        raise ValueError(f"DeepRD generator record {problem.index}: shortest proof depth {depth}, "
                         f"expected lookahead_size={problem.lookahead}")
    a = problem.adjectives
    return make_record(qid=problem.id, context=problem.context, question=problem.question, hg=hg,
                       goal=problem.goal_atom, depth=depth,
                       source={"lookahead": problem.lookahead, "branches": problem.branches,
                               "vertices": len(a), "edges": len(problem.edges), "index": problem.index, "name": problem.full_name,
                               "generator": "DeepRD graph_generator.py (logic)"},
                       rule_texts=[f"If someone is {a[u]}, they are {a[v]}." for u, v in problem.edges], cost=cost)


def push_table(problems, *, cost: str = "max") -> dict[int, dict[str, float]]:
    """{lookahead: {heuristic: mean pushes of host A*}} over `problems` (the paper's Fig. 6 figure by lookahead),
    with "count" the number of problems of that lookahead."""
    from search.astar import solve
    from search.heuristics import HEURISTICS
    from search.hypergraph import compile_program

    sums: dict[int, dict[str, float]] = {}
    for p in problems:
        hg = compile_program(p.program)
        row = sums.setdefault(p.lookahead, {"count": 0, **{h: 0.0 for h in HEURISTICS}})
        row["count"] += 1
        for h in HEURISTICS:
            row[h] += solve(hg, p.goal_atom, heuristic=h, cost=cost).pushes
    return {L: {k: (v if k == "count" else v / row["count"]) for k, v in row.items()}
            for L, row in sorted(sums.items())}
