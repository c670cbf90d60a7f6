"""Judged coverage / directionality rewards in the registry and the CEDAR composite R with per-component values."""

import json

import numpy as np
import pytest

from reasoner.rewards import CompositeReward, build_reward
from tests.chat_stub import ChatStub, serve
from tests.tolerances import formula_atol

COVERAGE = {"overall_analysis": "a", "observation_details": [
    {"detail": "a", "addressed": True, "evidence": "x"}, {"detail": "b", "addressed": True, "evidence": "y"},
    {"detail": "c", "addressed": False, "evidence": ""}, {"detail": "d", "addressed": False, "evidence": ""}]}


class _Judge(ChatStub):
    """Coverage prompts get 2/4 addressed; directionality prompts get 1.0 for FORWARD traces, 0.0 otherwise;
    a trace containing FAIL500 gets HTTP 500, one containing GARBAGE a reply with no JSON."""

    def reply(self, body):
        user = body["messages"][-1]["content"]
        if "FAIL500" in user:
            return 500, b"boom"
        if "GARBAGE" in user:
            reply = "I cannot decide."
        elif "observation_details" in body["messages"][0]["content"]:
            reply = "Details listed.\n" + json.dumps(COVERAGE)
        else:
            reply = json.dumps({"directionality_score": 1.0 if "FORWARD" in user else 0.0, "explanation": "e"})
        return 200, {"choices": [{"message": {"content": reply}}]}


@pytest.fixture
def judge_url():
    with serve(_Judge) as url:
        yield url, _Judge


def _specs(url, cache, l_cor, l_cov, l_dir):
    judge = {"endpoint": url, "model": "judge", "timeout_s": 5.0, "retries": 0}
    specs = [{"name": "exact_match", "as": "correctness", "weight": l_cor,
              "options": {"answer_key": "answer", "normalize": "lower_ws"}}]
    if l_cov:
        specs.append({"name": "judged_coverage", "as": "coverage", "weight": l_cov,
                      "options": {"judge": judge, "cache": cache}})
    if l_dir:
        specs.append({"name": "judged_directionality", "as": "directionality", "weight": l_dir,
                      "options": {"judge": judge, "cache": cache}})
    return specs


EXAMPLES = [{"prompt": [{"role": "user", "content": "Context: the cat is red. Query: ?"}], "answer": "the cat is red",
             "source": "abductionrules"}] * 4
COMPLETIONS = ["<think>FORWARD from the facts</think><answer>The cat is red</answer>",
               "<think>assume it and check</think><answer>the dog</answer>",
               "<think>FAIL500</think><answer>the cat is red</answer>",
               "<think>GARBAGE FORWARD</think><answer>the cat is red</answer>"]


def test_composite_is_the_weighted_sum_with_each_component_logged(judge_url, tmp_path):
    url, srv = judge_url
    reward = CompositeReward.from_config(_specs(url, str(tmp_path / "c.jsonl"), 1 / 3, 1 / 3, 1 / 3))
    try:
        batch = reward(COMPLETIONS, examples=EXAMPLES)
    finally:
        reward.close()
    cor = [1.0, 0.0, 1.0, 1.0]
    # FAIL500 fails both judges; GARBAGE is an invalid coverage and an invalid directionality reply.
    cov = [0.5, 0.5, 0.0, 0.0]
    direc = [1.0, 0.0, 0.0, 0.0]
    np.testing.assert_array_equal(batch.per_function_BxF, np.array([cor, cov, direc]).T)
    expected = (np.array(cor) + np.array(cov) + np.array(direc)) / 3
    # total = sum_f w_f x_f with the weights 1/3 rounded to float32 (one rounding each), summed in float64 (3
    # terms, counted at the float32 rate: an over-estimate) and cast to float32 (one rounding): `formula_atol`.
    tol = formula_atol(np.abs(np.array([cor, cov, direc])).sum(0) / 3, ops=2, terms=3)
    assert (np.abs(batch.total_B - expected) <= tol).all(), np.abs(batch.total_B - expected).max()
    assert batch.names == ("correctness", "coverage", "directionality")
    assert batch.means()["coverage"] == pytest.approx(0.25)
    fn = reward.rewards[1].fn
    assert (fn.counters.failed, fn.counters.invalid, fn.counters.valid) == (2, 2, 4)
    assert "Dataset: AbductionRules" in srv.bodies[0]["messages"][1]["content"]


def test_judge_and_cache_are_shared_and_a_second_step_costs_no_calls(judge_url, tmp_path):
    url, srv = judge_url
    cache = str(tmp_path / "shared.jsonl")
    cov = build_reward("judged_coverage", judge={"endpoint": url, "model": "m2", "retries": 0}, cache=cache)
    direc = build_reward("judged_directionality", judge={"endpoint": url, "model": "m2", "retries": 0}, cache=cache)
    assert cov.judge is direc.judge
    first = cov(COMPLETIONS[:2], examples=EXAMPLES[:2])
    calls = len(srv.bodies)
    assert cov(COMPLETIONS[:2], examples=EXAMPLES[:2]) == first == [0.5, 0.5]
    assert len(srv.bodies) == calls


def test_think_span_is_judged_and_missing_think_sends_everything(judge_url):
    url, srv = judge_url
    direc = build_reward("judged_directionality", judge={"endpoint": url, "model": "m3", "retries": 0},
                         source="crypto")
    assert direc(["no think tags, FORWARD"], examples=[{"prompt": "pairs"}]) == [1.0]
    assert "<reasoning_chain>no think tags, FORWARD</reasoning_chain>" in srv.bodies[-1]["messages"][1]["content"]
    direc(["<think>inner</think><answer>FORWARD</answer>"], examples=[{"prompt": "pairs"}])
    assert "<reasoning_chain>inner</reasoning_chain>" in srv.bodies[-1]["messages"][1]["content"]
    # an R1-style template opened <think> in the prompt: the span is what precedes the lone close, not the answer
    direc(["opened by the template</think><answer>FORWARD</answer>"], examples=[{"prompt": "pairs"}])
    assert "<reasoning_chain>opened by the template</reasoning_chain>" in srv.bodies[-1]["messages"][1]["content"]


def test_bad_judge_spec_is_a_clear_error():
    with pytest.raises(ValueError, match="expected an 'endpoint'"):
        build_reward("judged_coverage", judge={"url": "x"})
    # a misspelt fixed source is refused when the reward is built, not scored 0 on every completion
    with pytest.raises(ValueError, match=r"judged_directionality source='abductionrule': expected one of \["):
        build_reward("judged_directionality", judge={"endpoint": "http://127.0.0.1:9/v1", "model": "m"},
                     source="abductionrule")


@pytest.mark.parametrize("variant,weights", [
    ("cor", {"correctness": 1.0}), ("cor_cov", {"correctness": 0.5, "coverage": 0.5}),
    ("cor_dir", {"correctness": 0.5, "directionality": 0.5}),
    ("cor_cov_dir", {"correctness": 1 / 3, "coverage": 1 / 3, "directionality": 1 / 3})])
def test_ablation_variants_weight_the_terms_equally(variant, weights):
    import pathlib

    from reasoner.config import load_config

    config = load_config(str(pathlib.Path(__file__).parents[2] / "configs" / "grpo_cedar.py") + f":{variant}")
    rewards = [dict(r) for r in config.rewards]
    assert {r["as"]: r["weight"] for r in rewards} == weights
    names = {r["as"]: r["name"] for r in rewards}
    assert names["correctness"] == "cedar_correctness"
    assert names.get("coverage", "judged_coverage") == "judged_coverage"
    assert names.get("directionality", "judged_directionality") == "judged_directionality"
    assert config.train.num_steps == load_config(str(pathlib.Path(__file__).parents[2] / "configs" /
                                                     "grpo_cedar.py")).train.num_steps


def test_cedar_correctness_routes_by_source(tmp_path):
    from reasoner.tasks.cedar_verify import CedarRecord, example_of

    examples = [example_of(CedarRecord(0, "uniadilr", frozenset({5, 13}))),
                example_of(CedarRecord(1, "balanced_copa", 2)),
                example_of(CedarRecord(2, "climate_fever", "NOT ENOUGH INFO")),
                example_of(CedarRecord(3, "abductionrules", "The cat is red.")),
                example_of(CedarRecord(4, "crypto", tests=(("ab", "ba"),)))]
    fn = build_reward("cedar_correctness")
    right = ["<answer>13 & 5</answer>", "<answer>2</answer>", "<answer>not enough info</answer>",
             "<answer>the cat  is red.</answer>", "<answer>def transform(s):\n    return s[::-1]\n</answer>"]
    wrong = ["<answer>sent5, sent13</answer>", "<answer>1</answer>", "<answer>SUPPORTS</answer>",
             "<answer>The cat is blue.</answer>", "<answer>def transform(s):\n    return s\n</answer>"]
    assert fn(right, examples=examples) == [1.0] * 5
    assert fn(wrong, examples=examples) == [0.0] * 5
    with pytest.raises(ValueError, match="example source 'gsm8k'"):
        fn(["x"], examples=[{"source": "gsm8k", "answer": "1"}])
