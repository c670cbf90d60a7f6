"""Dataset records feed `search.verbalize` / `search.parse`: with the stored rule sentences as `rule_texts`, every
A* trace of a record verbalizes and parses back to itself (ProofWriter English and raw, DeepRD)."""

import pytest

from reasoner.data.deeprd import DeepRDSpec, generate_problem, problem_record
from reasoner.data.program_json import atom_from_json, program_from_json
from reasoner.data.proofwriter_english import load_logic_llm
from reasoner.data.proofwriter_examples import logic_llm_records, raw_records
from reasoner.data.proofwriter_raw import load_raw
from reasoner.data.records import decode_record
from search.astar import solve
from search.parse import parse_trace
from search.verbalize import Verbalizer


def _round_trip(rec, dataset):
    rec = decode_record(rec)
    program, goal = program_from_json(rec["program"]), atom_from_json(rec["goal"])
    assert len(rec["rule_texts"]) == len(program.rules)
    verbalizer = Verbalizer(program, dataset=dataset, rule_texts=rec["rule_texts"])
    for heuristic in ("zero", "true"):
        trace = solve(program, goal, heuristic=heuristic).trace
        parsed = parse_trace(verbalizer.trace(trace), verbalizer)
        assert parsed.skipped_blocks == 0, rec["id"]
        assert [(s.rule, s.premises, s.conclusion) for s in parsed.steps] == \
            [(s.rule, s.premises, s.conclusion) for s in trace], rec["id"]
    return rec


def test_logic_llm_records_round_trip(shared_data):
    questions, _ = load_logic_llm(shared_data / "proofwriter" / "logic_llm_owa_d5_dev.json")
    records = list(logic_llm_records(questions[::5], min_depth=1))
    assert len(records) >= 50
    for rec in records:
        out = _round_trip(rec, "proofwriter")
        assert all(t.startswith(("If ", "All ")) or " things are " in t or " people are " in t
                   for t in out["rule_texts"])


def test_raw_records_round_trip(shared_data):
    theories = load_raw(shared_data / "proofwriter" / "raw_cwa_mini.jsonl")
    records = list(raw_records(theories, min_depth=1))
    assert len(records) == 7
    for rec in records:
        out = _round_trip(rec, "proofwriter")
        assert out["source"]["world"] == "CWA"


@pytest.mark.parametrize("index", range(4))
def test_deeprd_records_round_trip(index):
    spec = DeepRDSpec(lookahead=(4, 6), branches=(3, 4))
    rec = _round_trip(problem_record(generate_problem(seed=2, split="train", index=index, spec=spec)), "deeprd")
    assert rec["rule_texts"][0].startswith("If someone is ") and rec["depth"] == rec["source"]["lookahead"]
