"""Batched A* evaluation: metrics against hand formulas (Wilson, unbiased pass@k, efficiency proportions), the
JSON + PNG report, bad settings, and batched generation with a tiny random model (batching does not change rows)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from reasoner.data.astar_traces import deeprd_records
from reasoner.data.deeprd import DeepRDSpec
from reasoner.evaluation import (EvalSettings, evaluate_completions, generate_completions, reference_efficiency,
                                 write_report)
from reasoner.tasks.astar import problem_from_record, sft_completion

SPEC = DeepRDSpec(lookahead=(2, 4), branches=(2, 3), extra_ratio=0.3, max_degree=3)
Z95 = 1.959963984540054


@pytest.fixture(scope="module")
def problems():
    return [problem_from_record(r) for r in deeprd_records(seed=11, split="test", size=6, spec=SPEC)]


def _wilson(c, n):
    p = c / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return centre - half, centre + half


def _steps(text):
    return text.count("\n\n") + 1


def _pops(text):
    return len({block.split(",")[0] for block in text.split("\n\n")})  # "Since X is a" names the premise


def test_greedy_metrics_equal_hand_formulas(problems):
    # problem i: Dijkstra trace, dependency trace or garbage, in a fixed pattern
    kinds = ["zero", "dependency", "garbage", "zero", "garbage", "dependency"]
    texts = [["no proof here"] if k == "garbage" else [sft_completion(p, heuristic=k)] for p, k in zip(problems, kinds)]
    result = evaluate_completions(problems, texts, label="m", n_resamples=2000)
    rep = result.report
    correct = [k != "garbage" for k in kinds]
    c, n = sum(correct), len(correct)
    assert rep["accuracy"]["estimate"] == pytest.approx(c / n)
    low, high = _wilson(c, n)
    assert (rep["accuracy"]["low"], rep["accuracy"]["high"]) == (pytest.approx(low), pytest.approx(high))
    lookahead = [p.scorer.alpha["step_count"] for p in problems]  # = L: DeepRD's shortest proof has L steps
    push_eff = [min(1.0, L / _steps(t[0])) for t, L, ok in zip(texts, lookahead, correct) if ok]
    pop_eff = [min(1.0, L / _pops(t[0])) for t, L, ok in zip(texts, lookahead, correct) if ok]
    assert rep["efficiency_pushes"]["estimate"] == pytest.approx(np.mean(push_eff))
    assert rep["efficiency_pops"]["estimate"] == pytest.approx(np.mean(pop_eff))
    assert rep["efficiency_pushes"]["low"] <= rep["efficiency_pushes"]["estimate"] <= rep["efficiency_pushes"]["high"]
    assert rep["reliability"]["avg@N"] == pytest.approx(c / n)
    assert rep["mean_rewards"]["correctness"] == pytest.approx(c / n)


def test_k_samples_reliability_equals_unbiased_estimators(problems):
    rng = np.random.default_rng(0)
    K = 4
    correct = rng.random((len(problems), K)) < 0.5
    correct[0] = False  # a never-solved problem
    texts = [[sft_completion(p) if ok else "wrong" for ok in row] for p, row in zip(problems, correct)]
    rep = evaluate_completions(problems, texts, label="k", ks=(1, 2, 4), n_resamples=1000).report
    c = correct.sum(1)
    for k in (1, 2, 4):
        at = np.mean([1 - math.comb(K - ci, k) / math.comb(K, k) for ci in c])
        hat = np.mean([math.comb(ci, k) / math.comb(K, k) for ci in c])
        assert rep["reliability"][f"pass@{k}"] == pytest.approx(at)
        assert rep["reliability"][f"pass^{k}"] == pytest.approx(hat)
        assert rep["reliability"][f"stability@{k}"] == pytest.approx(hat / at)
    assert rep["accuracy"]["estimate"] == pytest.approx(correct.mean())
    assert rep["accuracy"]["n"] == len(problems) * K
    # intervals over problems, not over the P*K correlated attempts (tests/metrics/test_pareto.py checks the numbers)
    assert rep["accuracy"]["method"] == "wilson-design-effect" and rep["accuracy"]["clusters"] == len(problems)
    for key in ("efficiency_pushes", "efficiency_pops"):
        assert rep[key]["method"] == "cluster-bootstrap-percentile" and rep[key]["clusters"] == len(problems)
        assert rep[key]["n"] == correct.sum()


def test_report_json_png_and_pareto_front(problems, tmp_path):
    good = evaluate_completions(problems, [[sft_completion(p, heuristic="true")] for p in problems], label="good",
                                n_resamples=500)
    slow = evaluate_completions(problems, [[sft_completion(p, heuristic="zero")] for p in problems], label="slow",
                                n_resamples=500)
    bad = evaluate_completions(problems, [["x"] for _ in problems], label="bad", n_resamples=500)
    ref = reference_efficiency(problems)
    paths = write_report([good, slow, bad], tmp_path / "r", name="astar", reference=ref, extra={"note": 1})
    doc = json.loads(open(paths["json"]).read())
    assert [m["label"] for m in doc["models"]] == ["good", "slow", "bad"] and doc["note"] == 1
    assert doc["pareto_front"]["pops"] == ["good"]  # same accuracy, highest efficiency dominates the others
    assert doc["reference_efficiency"]["pops"]["A* true cost-to-go"] == pytest.approx(
        good.report["efficiency_pops"]["estimate"])
    assert open(paths["png"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    lines = open(paths["completions"]).read().splitlines()
    assert len(lines) == 3 * len(problems) and json.loads(lines[0])["correct"] is True


def test_malformed_completions_score_wrong_and_the_report_is_written(problems, tmp_path):
    # an endpoint's JSON may carry a lone surrogate ("\ud83d" cut mid-emoji): the completions file raised
    # UnicodeEncodeError after the whole run; braces, NUL bytes and unclosed boxes score wrong, never raise
    texts = [["ok \ud83d"], ["{" * 100_000], ["\x00" * 100_000], ["\\boxed{" * 10_000], ["a\ud83d\ude00b"],
             [sft_completion(problems[5])]]
    result = evaluate_completions(problems, texts, label="odd", n_resamples=200, scoring="host")
    assert [s.correct for row in result.scores for s in row] == [False] * 5 + [True]
    paths = write_report([result], tmp_path, name="odd")
    rows = [json.loads(line) for line in open(paths["completions"], encoding="utf-8")]
    assert [r["text"] for r in rows[:2]] == ["ok \ufffd", "{" * 100_000] and rows[4]["text"] == "a\U0001F600b"
    assert json.loads(open(paths["json"]).read())["models"][0]["accuracy"]["estimate"] == pytest.approx(1 / 6)


def test_bad_settings_and_inputs(problems):
    with pytest.raises(ValueError, match="num_samples=4 with temperature 0"):
        EvalSettings(num_samples=4)
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        EvalSettings(max_new_tokens=0)
    with pytest.raises(ValueError, match=r"ks=\(1, 8\)"):
        EvalSettings(num_samples=4, temperature=1.0, ks=(1, 8))
    with pytest.raises(ValueError, match="2 completion lists for 6 problems"):
        evaluate_completions(problems, [["a"], ["b"]], label="x")
    with pytest.raises(ValueError, match=r"completions per problem \[1, 2\]"):
        evaluate_completions(problems[:2], [["a"], ["b", "c"]], label="x")
    with pytest.raises(ValueError, match="problems is empty"):
        generate_completions(None, None, [], EvalSettings())


@pytest.fixture(scope="module")
def tiny_model():
    from configs.astar_demo import get_config
    from reasoner.sharding import make_mesh
    from trainers import run as common

    cfg = get_config("tiny")
    return common.build_model(cfg.model, mesh=make_mesh("fsdp=-1")), common.load_tokenizer_for(cfg.model)


def test_batched_generation_rows_do_not_depend_on_batching(problems, tiny_model):
    model, tokenizer = tiny_model
    probs = problems[:4]
    a, stats = generate_completions(model, tokenizer, probs, EvalSettings(max_new_tokens=6, batch_size=4),
                                    progress=False)
    b, _ = generate_completions(model, tokenizer, probs, EvalSettings(max_new_tokens=6, batch_size=2),
                                progress=False)
    assert a == b and len(a) == 4 and all(len(row) == 1 for row in a)
    assert sum(stats["finish_reasons"].values()) == 4
    s, _ = generate_completions(model, tokenizer, probs[:2],
                                EvalSettings(num_samples=2, temperature=1.0, max_new_tokens=6, batch_size=2, seed=3),
                                progress=False)
    assert [len(row) for row in s] == [2, 2]
