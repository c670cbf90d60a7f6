"""search.parse: a commentary block that quotes something (the question, a fact) is skipped as commentary, as the
format says, instead of being read as a step citing no rule, which failed the whole proof; a quoted rule the
program lacks, in a block that reads as a step, is still a step with rule -1 that the verifier rejects."""

import json

import pytest

from search.astar import solve
from search.ground import in_herbrand_base
from search.hypergraph import compile_program
from search.parse import parse_trace
from search.verbalize import Verbalizer, normalize_text
from search.verify import verify_steps
from tests.search.search_corpora import fig1_program


def _key(steps):
    return [(s.rule, tuple(s.premises), s.conclusion) for s in steps]


def _interleave(blocks: list[str], comments: list[str]) -> str:
    out = []
    for i, block in enumerate(blocks):
        out += [comments[i % len(comments)], block]
    return "\n\n".join(out + [comments[-1]])


def test_quoted_commentary_is_skipped_on_a_constructed_proof():
    prog, goal = fig1_program()
    hg = compile_program(prog)
    verb = Verbalizer(prog, dataset="logic")
    res = solve(hg, goal, heuristic="true")
    assert res.proved and len(res.trace) >= 2
    comments = ['The task says: "prove the goal from the facts".', "Next I use \u201cthe rule about parents\u201d.",
                'Recall the definition of "ancestor" here.', 'So the answer is "True".']
    parsed = parse_trace(_interleave(verb.trace(res.trace).split("\n\n"), comments), verb)
    assert _key(parsed.steps) == _key(res.trace) and parsed.skipped_blocks == len(res.trace) + 1
    assert verify_steps(hg, hg.goal_id(goal), parsed.steps).correct


def test_a_quoted_rule_the_program_lacks_is_still_a_rejected_step():
    prog, goal = fig1_program()
    hg = compile_program(prog)
    verb = Verbalizer(prog, dataset="logic")
    res = solve(hg, goal, heuristic="true")
    blocks = verb.trace(res.trace).split("\n\n")
    step = res.trace[0]
    blocks[0] = blocks[0].replace(verb.rule(step.rule), "If something is purple then it is a dragon")
    parsed = parse_trace("\n\n".join(blocks), verb)
    assert parsed.steps[0].rule == -1 and parsed.steps[0].conclusion == step.conclusion
    assert not verify_steps(hg, hg.goal_id(goal), parsed.steps).correct


def test_real_proofwriter_proofs_with_quoting_commentary(shared_data):
    """Real Logic-LLM ProofWriter theories: each proof, with commentary blocks between its steps that quote the
    question and the theory's own sentences, parses to the same steps and still verifies."""
    english = pytest.importorskip("reasoner.data.proofwriter_english")
    path = shared_data / "proofwriter" / "logic_llm_owa_d5_dev.json"
    raw = {r["id"]: r for r in json.loads(path.read_text())}
    questions, failures = english.load_logic_llm(path)
    assert failures == []
    checked = 0
    for q in questions:
        if not in_herbrand_base(q.program, q.statement):
            continue
        hg = compile_program(q.program)
        res = solve(hg, q.statement, heuristic="dependency")
        if not res.proved or not res.trace:
            continue
        verb = Verbalizer(q.program, dataset="proofwriter", rule_texts=q.rule_texts)
        record = raw[q.id]
        sentences = [s.strip() + "." for s in record["context"].split(".") if s.strip()]
        sentences = [s for s in sentences if normalize_text(s) not in verb.rule_index]  # facts: a quoted rule is a step
        comments = [f'The question asks: "{record["question"]}"', f'The context says "{sentences[0]}"',
                    f"I keep in mind \u201c{sentences[-1]}\u201d.", f'Answer: "{record["answer"]}"']
        text = _interleave(verb.trace(res.trace).split("\n\n"), comments)
        parsed = parse_trace(text, verb)
        assert _key(parsed.steps) == _key(res.trace), (q.id, text)
        assert verify_steps(hg, hg.goal_id(q.statement), parsed.steps).correct, q.id
        checked += 1
    assert checked >= 150, checked
