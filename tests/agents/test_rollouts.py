"""Scripted SMT-scratchpad rollouts on real FOLIO and ProntoQA items: correct, wrong, trivial,
ungrounded and malformed SMT get the right entailment statuses, curation labels, DPO pairs and metrics.
Expected numbers are counted by hand from the scripts below (see the comments)."""

import json
import math

import numpy as np
import pytest

from reasoner.agents.policies import ScriptedPolicy
from reasoner.agents.scratchpad import run_scratchpad
from reasoner.metrics.smt import smt_metrics
from reasoner.tasks.logic_llm import check_correct, load_problems, render_messages, render_prompt
from reasoner.verifiers import smtlib
from reasoner.verifiers.curation import curate, dpo_pairs, grounding, problem_entities
from reasoner.verifiers.entailment import classify
from reasoner.verifiers.z3_runner import Z3Runner
from tests.verifiers.test_smtlib import numpy_jsd  # the float64 reference, one copy

# ProntoQA_1: Max is a yumpus; yumpus -> dumpus -> wumpus -> impus -> tumpus; tumpuses are not sour.
MAX_CONTEXT = """(declare-sort Thing 0)
(declare-const max Thing)
(declare-fun yumpus (Thing) Bool)
(declare-fun dumpus (Thing) Bool)
(declare-fun wumpus (Thing) Bool)
(declare-fun impus (Thing) Bool)
(declare-fun tumpus (Thing) Bool)
(declare-fun sour (Thing) Bool)
(assert (forall ((x Thing)) (=> (yumpus x) (dumpus x))))
(assert (forall ((x Thing)) (=> (dumpus x) (wumpus x))))
(assert (forall ((x Thing)) (=> (wumpus x) (impus x))))
(assert (forall ((x Thing)) (=> (impus x) (tumpus x))))
(assert (forall ((x Thing)) (=> (tumpus x) (not (sour x)))))
(assert (yumpus max))"""
MAX_REFUTES_SOUR = MAX_CONTEXT + "\n(assert (sour max))\n(check-sat)"  # unsat: "Max is sour" is False
TRIVIAL = "(assert true)\n(check-sat)"
UNGROUNDED = "(declare-const p Bool)(declare-const q Bool)(assert (=> p q))(assert p)(assert (not q))(check-sat)"
MALFORMED = "(declare-fun yumpus (Thing) Bool)\n(assert (yumpus max))\n(check-sat)"  # unknown sort Thing

# FOLIO_dev_163: "A hawk never lands. Some birds are hawks." Claim "All birds land" is False.
HAWK_CONTEXT = """; a hawk never lands
(declare-sort Animal 0)
(declare-fun hawk (Animal) Bool)
(declare-fun bird (Animal) Bool)
(declare-fun lands (Animal) Bool)
(assert (forall ((x Animal)) (=> (hawk x) (not (lands x)))))
(assert (exists ((x Animal)) (and (bird x) (hawk x))))"""
ALL_BIRDS_LAND = "(forall ((x Animal)) (=> (bird x) (lands x)))"


def z3_call(code: str, timeout: int = 10) -> str:
    return "<tool_call>" + json.dumps({"name": "z3_solve", "arguments": {"smt_code": code, "timeout": timeout}}) + "</tool_call>"


def finish(answer: str) -> str:
    return f'I am done.\n<tool_call>{{"name": "finish", "arguments": {{"answer": "{answer}"}}}}</tool_call>'


@pytest.fixture(scope="module")
def runner():
    with Z3Runner(timeout_s=10, workers=2) as r:
        yield r


@pytest.fixture(scope="module")
def prontoqa(shared_data):
    problem = load_problems(shared_data, "prontoqa", limit=1)[0]
    assert problem.id == "ProntoQA_1" and problem.answer == "B"
    return problem


@pytest.fixture(scope="module")
def hawk(shared_data):
    problem = next(p for p in load_problems(shared_data, "folio") if p.id == "FOLIO_dev_163")
    assert problem.answer == "B"
    return problem


def test_entailment_statuses_on_real_items(shared_data, runner):
    assert classify(MAX_CONTEXT, "(sour max)", runner=runner).status == "contradicted"
    assert classify(MAX_CONTEXT, "(tumpus max)", runner=runner).status == "entailed"
    assert classify(MAX_CONTEXT, "(exists ((y Thing)) (sour y))", runner=runner).status == "possible"
    assert classify(MAX_CONTEXT + "(assert (sour max))", "(tumpus max)", runner=runner).status == "inconsistent"
    assert classify(HAWK_CONTEXT, ALL_BIRDS_LAND, runner=runner).status == "contradicted"
    greeks = next(p for p in load_problems(shared_data, "folio") if p.id == "FOLIO_dev_156")
    assert greeks.answer == "C"  # "Some Greeks are mortal": Uncertain, since Greeks may not exist
    context = ("(declare-sort T 0)(declare-fun human (T) Bool)(declare-fun mortal (T) Bool)(declare-fun greek (T) Bool)"
               "(assert (forall ((x T)) (=> (human x) (mortal x))))(assert (forall ((x T)) (=> (greek x) (human x))))")
    assert classify(context, "(exists ((x T)) (and (greek x) (mortal x)))", runner=runner).status == "possible"
    assert classify(MAX_CONTEXT, "(undeclared max)", runner=runner).status == "unresolved"


def test_entities_and_grounding(prontoqa, hawk):
    entities = problem_entities(prontoqa.context, prontoqa.question)
    assert entities == {"jompus", "shy", "yumpus", "aggressive", "dumpus", "wooden", "wumpus", "red", "impus",
                        "opaque", "tumpus", "numpus", "sour", "vumpus", "earthy", "zumpus", "small", "rompus", "max"}
    # yumpus dumpus wumpus impus tumpus sour max
    assert grounding(MAX_REFUTES_SOUR, entities) == pytest.approx(7 / 19)
    assert grounding(UNGROUNDED, entities) == 0.0 and grounding(MALFORMED, entities) == pytest.approx(2 / 19)
    hawk_entities = problem_entities(hawk.context, hawk.question)
    assert hawk_entities == {"hawk", "never", "land", "bird"}
    assert grounding(HAWK_CONTEXT, hawk_entities) == 1.0  # "never" only in the comment
    assert grounding(HAWK_CONTEXT, hawk_entities, without_comments=True) == 0.75


def prontoqa_episodes():
    """Seven attempts on ProntoQA_1 (gold answer B = False)."""
    lenient = ('<tool_call>\n{"name": "z3_solve", "arguments": {"smt_code": "' + MAX_REFUTES_SOUR + '",}}\n</tool_call>')
    return [
        [lenient, finish("B")],                                        # 0 correct, malformed JSON repaired -> gold
        [z3_call(MAX_REFUTES_SOUR), finish("A")],                      # 1 wrong answer -> rejected
        [z3_call(TRIVIAL), finish("B")],                               # 2 trivial SMT -> silver
        [z3_call(UNGROUNDED), finish("B")],                            # 3 ungrounded SMT -> silver
        [z3_call(MALFORMED), finish("B")],                             # 4 only a failing script -> rejected
        [z3_call(MALFORMED), z3_call(MAX_REFUTES_SOUR), finish("B")],  # 5 recovers after an error -> gold
        [z3_call(MAX_REFUTES_SOUR)] * 3,                               # 6 never finishes (t_max 3) -> rejected
    ]


@pytest.fixture(scope="module")
def prontoqa_rollouts(prontoqa, runner):
    policy = ScriptedPolicy({render_prompt(prontoqa): prontoqa_episodes()})
    trajectories = run_scratchpad(policy, [(prontoqa.id, render_messages(prontoqa))] * 7, runner=runner, t_max=3)
    for traj in trajectories:
        traj.correct = check_correct(traj.answer, prontoqa)
    return trajectories


def test_prontoqa_trajectories_and_curation(prontoqa, prontoqa_rollouts):
    trajs = prontoqa_rollouts
    assert [t.termination for t in trajs] == ["finish"] * 6 + ["max_turns"]
    assert [t.verified for t in trajs] == [True] * 6 + [False]
    assert [t.correct for t in trajs] == [True, False, True, True, True, True, False]
    # A failing script still reports the verdict Z3 printed after its errors (see z3_runner's rule).
    assert [t.metadata["verdicts"] for t in trajs] == [["unsat"], ["unsat"], ["sat"], ["unsat"], ["sat"],
                                                       ["sat", "unsat"], ["unsat"] * 3]
    assert [o["success"] for o in trajs[5].observations] == [False, True]
    assert trajs[0].calls[0]["parse_mode"] == "lenient"
    assert "unknown sort 'Thing'" in trajs[4].observations[0]["error"]
    assert [m["role"] for m in trajs[5].messages] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                                      "assistant"]
    entities = problem_entities(prontoqa.context, prontoqa.question)
    curated = [curate(t, entities) for t in trajs]
    assert [(c.label, c.reasons) for c in curated] == [
        ("gold", ()), ("rejected", ("wrong_answer",)), ("silver", ("trivial_smt", "ungrounded_smt")),
        ("silver", ("ungrounded_smt",)), ("rejected", ("no_executable_smt",)), ("gold", ()),
        ("rejected", ("wrong_answer", "unfinished"))]
    pairs = dpo_pairs(trajs, curated)
    assert len(pairs) == 2 * 5  # two gold traces x (2 silver + 3 rejected)
    assert [p["hard_negative"] for p in pairs[:4]] == [True] * 4 and not any(p["hard_negative"] for p in pairs[4:])
    assert pairs[0]["prompt"] == trajs[0].messages[:2] and pairs[0]["chosen"] == trajs[0].messages[2:]
    assert pairs[0]["rejected"] == trajs[2].messages[2:]
    assert len(dpo_pairs(trajs, curated, max_pairs_per_problem=3)) == 3


def test_prontoqa_metrics(prontoqa, prontoqa_rollouts):
    entities = {prontoqa.id: problem_entities(prontoqa.context, prontoqa.question)}
    m = smt_metrics(prontoqa_rollouts, entities)
    expected = {
        "attempts": 7, "accuracy": 5 / 7,
        "any_nontrivial": 6 / 7,      # all but the trivial attempt (the malformed script is not trivial)
        "any_grounded": 4 / 7,        # attempts 0, 1, 5, 6
        "any_real_verdict": 6 / 7,    # all but attempt 4
        "vcr": 4 / 7, "vcr_unsat": 3 / 7,
        "first_pass_validity": 5 / 7, "solver_calls": 10, "error_rate": 0.2, "no_verdict_rate": 0.2,
        "soundness": 5 / 6, "recovery": 1.0, "tool_efficiency": 0.5, "turn_efficiency": 5 / 16,
        "wasted_turns": 4 / 7,        # 4 and 5 waste their failing turn, 6 repeats itself twice
        "unique_skeletons": 5 / 7,
    }
    for key, value in expected.items():
        assert m[key] == pytest.approx(value), key
    assert m["verdict_distribution"] == pytest.approx({"sat": 0.1, "unsat": 0.7, "unknown": 0.0, "error": 0.2, "none": 0.0})
    finals = [smtlib.production_counts(code) for code in
              [MAX_REFUTES_SOUR, MAX_REFUTES_SOUR, TRIVIAL, UNGROUNDED, MALFORMED, MAX_REFUTES_SOUR, MAX_REFUTES_SOUR]]
    across = []
    for j, own in enumerate(finals):
        peers = {}
        for i, other in enumerate(finals):
            if i != j:
                for k, v in other.items():
                    peers[k] = peers.get(k, 0) + v
        across.append(numpy_jsd(own, peers))
    drift = numpy_jsd(smtlib.production_counts(MALFORMED), smtlib.production_counts(MAX_REFUTES_SOUR))
    sd = m["structural_divergence"]
    assert sd["across"] == pytest.approx(np.mean(across)) and sd["across_tasks"] == 1
    assert sd["within_trajectories"] == 2 and drift > 0.1
    assert sd["within_first_last"] == pytest.approx(drift / 2) and sd["within_adjacent"] == pytest.approx(drift / 2)


def test_folio_rollouts(hawk, runner):
    contra = f"{HAWK_CONTEXT}\n(assert {ALL_BIRDS_LAND})\n(check-sat)"
    negated = f"{HAWK_CONTEXT}\n(assert (not {ALL_BIRDS_LAND}))\n(check-sat)"
    prompt = render_prompt(hawk)
    episodes = [
        [z3_call(contra) + "\n" + z3_call(negated), finish("B")],   # both directions: unsat / sat -> gold
        [z3_call(contra), finish("C")],                              # wrong: Uncertain
        [z3_call(UNGROUNDED), finish("B")],                          # decorative -> silver
        ["All birds land is false because hawks never land. The answer is False."],  # no tool call
        ['z3_solve(smt_code="(assert (> x 0)) (check-sat)")', finish("B")],  # plain-text call, broken SMT
    ]
    trajs = run_scratchpad(ScriptedPolicy({prompt: episodes}), [(hawk.id, render_messages(hawk))] * 5,
                           runner=runner)
    for traj in trajs:
        traj.correct = check_correct(traj.answer, hawk)
    assert [t.metadata["verdicts"] for t in trajs] == [["unsat", "sat"], ["unsat"], ["unsat"], [], ["sat"]]
    assert [t.termination for t in trajs] == ["finish", "finish", "finish", "no_tool_call", "finish"]
    assert [t.correct for t in trajs] == [True, False, True, True, True]
    assert trajs[4].calls[0]["parse_mode"] == "text"
    entities = problem_entities(hawk.context, hawk.question)
    curated = [curate(t, entities) for t in trajs]
    assert [(c.label, c.reasons) for c in curated] == [
        ("gold", ()), ("rejected", ("wrong_answer",)), ("silver", ("ungrounded_smt",)),
        ("rejected", ("unfinished", "no_smt_call")), ("rejected", ("no_executable_smt",))]
    assert curated[0].calls[0].grounding == 1.0 and curated[0].calls[0].grounding_no_comments == 0.75
    m = smt_metrics(trajs, {hawk.id: entities})
    assert m["vcr"] == pytest.approx(2 / 5) and m["vcr_unsat"] == pytest.approx(2 / 5)
    assert m["first_pass_validity"] == pytest.approx(3 / 4) and m["error_rate"] == pytest.approx(1 / 5)
    assert m["soundness"] == pytest.approx(4 / 5) and m["recovery"] == pytest.approx(1.0)
    assert m["verdict_distribution"] == pytest.approx({"sat": 0.2, "unsat": 0.6, "unknown": 0.0, "error": 0.2, "none": 0.0})
    assert m["structural_divergence"]["across_tasks"] == 1 and math.isfinite(m["structural_divergence"]["across"])
