"""The DeepRD authors' generator output (../shared/data/deeprd/deeprd_logic.json): loading, host A* depths against
the file's own fields, the dependency-vs-true finding, and the CLI paths (`astar solve`, `data build --source`)."""

from __future__ import annotations

import collections
import json

import pytest

from reasoner.cli import main
from reasoner.data.deeprd_generator import (GeneratorFormatError, load_generator_file, parse_record,
                                            problem_record, push_table, rule_pairs)
from reasoner.data.proofwriter_english import parse_statement, parse_theory_text
from search.astar import solve
from search.hypergraph import compile_program


@pytest.fixture(scope="module")
def generator_file(shared_data):
    return shared_data / "deeprd" / "deeprd_logic.json"


@pytest.fixture(scope="module")
def raw_records(generator_file):
    return json.loads(generator_file.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def problems(generator_file):
    loaded, skipped = load_generator_file(str(generator_file))
    assert skipped == []
    return loaded


def _bfs_distance(edges, start, goal):
    """Shortest start -> goal path length (edges) in the generator's graph, independent of the logic program."""
    children = collections.defaultdict(list)
    for u, v in edges:
        children[u].append(v)
    frontier, seen, d = [start], {start}, 0
    while frontier:
        if goal in frontier:
            return d
        frontier = [c for u in frontier for c in children[u] if c not in seen and not seen.add(c)]
        d += 1
    return None


def test_all_275_records_load_with_the_stated_cells(problems, raw_records):
    assert len(problems) == 275
    assert [p.index for p in problems] == list(range(275))
    cells = collections.Counter((p.lookahead, p.branches) for p in problems)
    assert set(cells.values()) == {5}  # README: the first 5 records of each of the 55 cells
    assert {L for L, _ in cells} == {2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 32}
    assert {B for _, B in cells} == {1, 2, 4, 8, 16}


def test_context_and_question_parse_back_to_the_program(problems):
    for p in problems[::25]:
        program, failures = parse_theory_text(p.context, theory_id=p.id)
        assert failures == [] and program.axioms == p.program.axioms
        assert [(r.premises, r.conclusion) for r in program.rules] == [(r.premises, r.conclusion)
                                                                       for r in p.program.rules]
        assert parse_statement(p.question) == p.goal_atom
        assert p.full_name.split()[0] == p.entity


def test_lookahead_size_is_the_stated_depth(raw_records):
    # lookahead_size is the shortest path's edge count; possible_valid_paths holds that shortest path.
    for rec in raw_records:
        (start, goal), L = rec["query"], rec["lookahead_size"]
        assert _bfs_distance(rec["edges"], start, goal) == L
        assert min(len(p) for p in rec["possible_valid_paths"]) - 1 == L


def test_host_astar_proves_every_goal_at_the_stated_depth(problems, raw_records):
    for p, rec in zip(problems, raw_records):
        hg = compile_program(p.program)
        result = solve(hg, p.goal_atom, heuristic="zero")
        assert result.proved and result.depth == rec["lookahead_size"], p.index
        # the first proof step is the generator's next_adjective
        assert set(rec["next_adjective"]) == {rec["node_mapping"][str(path[1])]["adjective"]
                                              for path in rec["possible_valid_paths"]}
        sum_cost = solve(hg, p.goal_atom, heuristic="zero", cost="sum")
        assert sum_cost.depth == rec["lookahead_size"] + 1  # a unary chain of L rules: L + 1 vertices


def test_dependency_heuristic_equals_true_on_the_authors_problems(problems):
    # The finding in the loader's docstring: unary single-entity rules make the relaxation exact.
    for p in problems:
        hg = compile_program(p.program)
        dep, true = (solve(hg, p.goal_atom, heuristic=h) for h in ("dependency", "true"))
        assert (dep.pushes, dep.pops) == (true.pushes, true.pops), p.index
    table = push_table(problems[:25] + problems[-25:])  # lookahead 2 and 32
    assert set(table) == {2, 32}
    for row in table.values():
        assert row["count"] == 25 and row["zero"] > row["dependency"] == row["true"]


def test_rule_sentences_templates():
    text = ("Given the following list of predicates:\nIf a person is usfee, they are fehoi.\n"
            "If James Taylor is qkigo, then James Taylor is rajsug.\nEveryone that is saosa is lumo.\n"
            "If James Taylor is rajsug then they are yvoyca.")
    assert rule_pairs(text) == [("usfee", "fehoi"), ("qkigo", "rajsug"), ("saosa", "lumo"), ("rajsug", "yvoyca")]
    with pytest.raises(ValueError, match="rule sentence"):
        rule_pairs("Given the following list of predicates:\nnot a rule")


def test_bad_records_are_named(raw_records, tmp_path):
    rec = dict(raw_records[0])
    rec["edges"] = rec["edges"][:-1]  # predicates now state one rule more than the edges
    with pytest.raises(GeneratorFormatError, match="record 7: logic_predicates do not state the same rules"):
        parse_record(rec, index=7)
    with pytest.raises(GeneratorFormatError, match="record 3: KeyError"):
        parse_record({"edges": []}, index=3)
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps([raw_records[0], {"edges": []}]), encoding="utf-8")
    loaded, skipped = load_generator_file(str(path))
    assert [p.index for p in loaded] == [0] and [s[0] for s in skipped] == ["1"]
    path.write_text("{}", encoding="utf-8")
    with pytest.raises(GeneratorFormatError, match="expected a JSON list"):
        load_generator_file(str(path))


def test_astar_solve_deeprd_generator_json(generator_file, raw_records, capsys):
    assert main(["astar", "solve", "--input", str(generator_file), "--format", "deeprd-generator", "--json",
                 "--heuristic", "dependency"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in rows] == [str(i) for i in range(275)]
    assert all(r["proved"] for r in rows)
    assert [r["proved_depth"] for r in rows] == [rec["lookahead_size"] for rec in raw_records]


def test_astar_solve_cost_sum(generator_file, raw_records, capsys):
    assert main(["astar", "solve", "--input", str(generator_file), "--format", "deeprd-generator", "--json",
                 "--cost", "sum"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["proved_depth"] for r in rows] == [rec["lookahead_size"] + 1 for rec in raw_records]


def test_data_build_deeprd_from_the_generator_file(generator_file, raw_records, tmp_path, capsys):
    assert main(["data", "build", "deeprd", "--source", str(generator_file), "--data-dir", str(tmp_path),
                 "--jsonl", str(tmp_path / "x")]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["splits"]["test"]["size"] == 275 and list(report["splits"]) == ["test"]
    by_l = report["pushes_by_lookahead"]
    assert sum(row["count"] for row in by_l.values()) == 275
    exported = [json.loads(line) for line in (tmp_path / "x.test.jsonl").read_text().splitlines()]
    assert sorted(r["depth"] for r in exported) == sorted(rec["lookahead_size"] for rec in raw_records)
    # the exported lines solve again through the `deeprd` format (program field), at the same depths
    assert main(["astar", "solve", "--input", str(tmp_path / "x.test.jsonl"), "--format", "deeprd", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["proved_depth"] for r in rows] == [r["depth"] for r in exported]


def test_data_build_deeprd_bad_source(tmp_path, capsys):
    assert main(["data", "build", "deeprd", "--source", str(tmp_path / "nope.json"),
                 "--data-dir", str(tmp_path)]) == 2
    assert "--source" in capsys.readouterr().err


def test_data_build_cost_sum_stores_sum_cost_pushes(tmp_path, capsys):
    # our generator, 3 tiny problems: the stored pushes are those of host A* under cost "sum"
    from reasoner.data.deeprd import DeepRDSpec, generate_problem

    args = ["data", "build", "deeprd", "--data-dir", str(tmp_path), "--train", "3", "--validation", "0",
            "--test", "0", "--lookahead", "3", "4", "--branches", "2", "3", "--jsonl", str(tmp_path / "s")]
    assert main(args + ["--cost", "sum"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    rows = [json.loads(line) for line in (tmp_path / "s.train.jsonl").read_text().splitlines()]
    spec = DeepRDSpec(lookahead=(3, 4), branches=(2, 3))
    assert len(rows) == 3
    for row in rows:  # TFDS shuffles: the index is the id's last field
        p = generate_problem(seed=0, split="train", index=int(row["id"].rsplit("-", 1)[1]), spec=spec)
        hg = compile_program(p.program)
        assert row["pushes"] == [solve(hg, p.goal_atom, heuristic=h, cost="sum").pushes
                                 for h in ("zero", "dependency", "true")]
        assert row["source"]["cost"] == "sum" and row["depth"] == p.lookahead
    assert report["params"]["cost"] == "sum"
    assert main(args[:-2]) == 0  # the max-cost build gets its own config name, not the sum one
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["config"] != report["config"]


def test_grpo_config_cost_reaches_the_astar_reward():
    # configs/grpo_astar.py:cost_sum -> reward options -> the registry's astar reward scores under cost "sum".
    # On DeepRD (unary chains) sum = max + 1 and every score coincides, so the program has a two-premise rule:
    # kind(Bob) costs max 3 / sum 6 via rough(round, young) and max 4 / sum 5 via big, cold, nice.
    from configs import astar_demo, grpo_astar
    from reasoner.data.program_json import atom_to_json, program_to_json
    from reasoner.rewards.astar import astar_reward
    from reasoner.tasks.astar import problem_from_record, sft_completion
    from search.logic import Atom, Program, Rule

    assert grpo_astar.get_config().rewards[0]["options"]["cost"] == "max"
    assert astar_demo.get_config().grpo.rewards[0]["options"]["cost"] == "max"
    options = dict(grpo_astar.get_config("cost_sum").rewards[0]["options"], device=False, dataset="proofwriter")
    assert options["cost"] == "sum" and options["reward"] == "astar_dependency"
    fn_sum, fn_max = astar_reward(**options), astar_reward(**{**options, "cost": "max"})

    def rule(premises, head, i):
        return Rule(tuple(Atom(p, ("?x",)) for p in premises), Atom(head, ("?x",)), f"r{i}")

    chain = [rule(["red"], "big", 1), rule(["big"], "cold", 2), rule(["cold"], "nice", 3), rule(["nice"], "kind", 4)]
    join = [rule(["red"], "round", 5), rule(["red"], "young", 6), rule(["round", "young"], "rough", 7),
            rule(["rough"], "kind", 8)]
    program = Program((Atom("red", ("Bob",)),), tuple(chain + join))
    task = problem_from_record({"id": "two-costs", "program": program_to_json(program),
                                "goal": atom_to_json(Atom("kind", ("Bob",)))}, dataset="proofwriter")
    trace = {c: sft_completion(task, heuristic="dependency", cost=c) for c in ("max", "sum")}
    assert trace["max"] != trace["sum"]
    # Eq. 7 is 1 for the trace of A* under the reward's own cost; the sum-cost trace is not A*-optimal under max
    assert fn_sum([trace["sum"]], examples=[task.record]) == [1.0]
    assert fn_max([trace["max"]], examples=[task.record]) == [1.0]
    assert fn_max([trace["sum"]], examples=[task.record])[0] < 1.0
