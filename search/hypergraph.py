"""Compile a logic program into the B-hypergraph of its minimal model, in ONE canonical order.

Canonical order (every implementation, host or jitted kernel, must use it so that traces agree token for token):

* Atom ids: the program's axioms first, in program order without duplicates (then conclusions of premise-free
  rules), ids 0..num_axioms-1; then derived atoms by the semi-naive round that first derived them, sorted by
  (predicate, args) within a round.
* Hyperedge ids: ground rule instantiations with all premises in M, sorted by (rule index, premise atom ids in the
  rule's premise order). Range restriction makes the conclusion a function of (rule, premises), so the key is unique.
  Instantiations whose conclusion is one of their premises are dropped (they can never push).
* When A* pops an atom, the hyperedges it completes are visited in ascending hyperedge id.

Arrays are plain tuples of ints (`premises_MxK` ragged: K varies per edge; duplicate premise atoms are kept in rule
order), ready to be padded into `premises[M, K_max]`, `head[M]` by the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from search.ground import axioms_of, check_goal, minimal_model
from search.logic import Atom, Program

__all__ = ["Hypergraph", "compile_program"]


@dataclass(frozen=True, eq=False)
class Hypergraph:
    """Vertices = atoms of the minimal model M; hyperedges = ground rule instantiations (canonical order above).

    atoms[N], num_axioms (ids < num_axioms are axioms), edge_rule[M], edge_premises[M][K_m], edge_head[M],
    edges_by_premise[N] (ascending ids of hyperedges that have the atom as a premise, each listed once),
    edge_num_distinct[M] (number of distinct premise atoms of each hyperedge).
    """

    program: Program
    atoms: tuple[Atom, ...]
    num_axioms: int
    edge_rule: tuple[int, ...]
    edge_premises: tuple[tuple[int, ...], ...]
    edge_head: tuple[int, ...]
    edges_by_premise: tuple[tuple[int, ...], ...]
    edge_num_distinct: tuple[int, ...]
    atom_ids: dict[Atom, int] = field(repr=False)
    # (rule, sorted premise ids, head) -> edge id: lets the verifier accept premises in any order.
    edge_index: dict[tuple[int, tuple[int, ...], int], int] = field(repr=False)

    @property
    def num_atoms(self) -> int:
        return len(self.atoms)

    @property
    def num_edges(self) -> int:
        return len(self.edge_head)

    def goal_id(self, goal: Atom) -> int:
        """Id of `goal` in M, or -1 when it is in the Herbrand base but not provable (raises if outside H)."""
        gid = self.atom_ids.get(goal)
        if gid is None:
            check_goal(self.program, goal)
            return -1
        return gid


def compile_program(program: Program) -> Hypergraph:
    """Program -> Hypergraph of its minimal model (raises search.logic.LogicError on a malformed program)."""
    atoms, insts = minimal_model(program)
    ids = {a: i for i, a in enumerate(atoms)}
    n_axioms = len(dict.fromkeys(axioms_of(program)))
    keyed = sorted((ri, tuple(ids[p] for p in prems), ids[c]) for ri, prems, c in insts)
    edge_rule = tuple(k[0] for k in keyed)
    edge_premises = tuple(k[1] for k in keyed)
    edge_head = tuple(k[2] for k in keyed)
    by_prem: list[list[int]] = [[] for _ in atoms]
    for e, prems in enumerate(edge_premises):
        for p in dict.fromkeys(prems):
            by_prem[p].append(e)
    index: dict[tuple[int, tuple[int, ...], int], int] = {}
    for e, (ri, prems, c) in enumerate(keyed):
        index.setdefault((ri, tuple(sorted(prems)), c), e)
    return Hypergraph(
        program=program,
        atoms=tuple(atoms),
        num_axioms=n_axioms,
        edge_rule=edge_rule,
        edge_premises=edge_premises,
        edge_head=edge_head,
        edges_by_premise=tuple(tuple(x) for x in by_prem),
        edge_num_distinct=tuple(len(set(p)) for p in edge_premises),
        atom_ids=ids,
        edge_index=index,
    )

