"""An OpenAI-compatible endpoint as a model of the A* evaluation: answers are scored exactly as a local model's,
a request that fails (after its retries, or refused at once) scores as wrong and is counted without ending the
run, K samples carry their own seeds and the endpoint's token budget, `reasoner eval --endpoint` writes one report
with a row per --few-shot K, and through `reasoner serve` the endpoint path returns the in-process sampler's
completions."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib

import pytest

from reasoner.data.astar_traces import deeprd_records
from reasoner.data.deeprd import DeepRDSpec
from reasoner.evaluation import EvalSettings, evaluate, evaluate_completions, generate_completions
from reasoner.evaluation_endpoint import EndpointModel
from reasoner.tasks.astar import problem_from_record, sft_completion
from tests.chat_stub import ChatStub, serve

SPEC = DeepRDSpec(lookahead=(2, 3), branches=(2, 3), extra_ratio=0.0, max_degree=3)
CONFIG = str(pathlib.Path(__file__).resolve().parents[1] / "configs" / "astar_demo.py")


def _completion(text: str, tokens: int = 7, finish: str = "stop") -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": tokens}}


class Solver(ChatStub):
    """Answers by the problem in the last user turn: `plan[i](body)` -> (status, payload) for problem i."""

    problems: dict = {}
    plan: dict = {}

    def reply(self, body):
        i = type(self).problems[body["messages"][-1]["content"]]
        return type(self).plan[i](body)


@pytest.fixture(scope="module")
def problems():
    return [problem_from_record(r) for r in deeprd_records(seed=2, split="test", size=4, spec=SPEC)]


def _by_context(problems) -> dict:
    return {p.verbalizer.context(p.goal): i for i, p in enumerate(problems)}


def test_samples_are_scored_like_any_model_and_failures_are_counted(problems):
    trace = sft_completion(problems[0])
    Solver.problems = _by_context(problems)
    Solver.plan = {  # problem 0: right on even seeds; 1: always right; 2: refused; 3: sample 1 a broken body
        0: lambda b: (200, _completion(trace if b["seed"] % 2 == 0 else "no idea")),
        1: lambda b: (200, _completion(sft_completion(problems[1], heuristic="zero"), tokens=11, finish="length")),
        2: lambda b: (400, {"error": {"message": "context too long"}}),
        3: lambda b: (200, {"choices": []} if b["seed"] == 11 else _completion("Since nothing, done.")),
    }
    sleeps = []
    settings = EvalSettings(num_samples=4, temperature=0.7, top_p=0.9, max_new_tokens=333, seed=10, ks=(1, 2, 4))
    with serve(Solver) as url:
        model = EndpointModel(url, "big", retries=2, sleep=sleeps.append, max_concurrency=4)
        result = evaluate(model, None, problems, settings, label="big")
    want = [[trace if s % 2 == 0 else "no idea" for s in range(10, 14)],
            [sft_completion(problems[1], heuristic="zero")] * 4, [""] * 4, ["Since nothing, done.", ""] + [
            "Since nothing, done."] * 2]
    assert result.completions == want
    reference = evaluate_completions(problems, want, label="big", ks=(1, 2, 4), seed=10).report
    for key in ("accuracy", "efficiency_pushes", "efficiency_pops", "reliability", "mean_rewards"):
        assert result.report[key] == reference[key]
    correct = [2, 4, 0, 0]  # unbiased pass@2 from the counts of correct samples per problem
    assert result.report["reliability"]["pass@2"] == pytest.approx(
        sum(1 - math.comb(4 - c, 2) / math.comb(4, 2) for c in correct) / 4)
    gen = result.report["generation"]
    assert gen["endpoint"] == {"url": f"{url}/chat/completions", "model": "big", "max_tokens": 333, "requests": 16,
                               "failed": 5, "failed_problems": 2, "last_error": gen["endpoint"]["last_error"]}
    assert gen["finish_reasons"] == {"stop": 7, "length": 4, "error": 5}
    assert gen["mean_completion_tokens"] == pytest.approx((7 * 7 + 11 * 4) / 11)
    assert sleeps == [1.0, 2.0]  # only the broken body is retried; the 400 is not
    bodies = [b for b in Solver.bodies if Solver.problems[b["messages"][-1]["content"]] == 0]
    assert sorted(b["seed"] for b in bodies) == [10, 11, 12, 13]
    assert {(b["model"], b["max_tokens"], b["temperature"], b["top_p"], "n" in b) for b in bodies} == {
        ("big", 333, 0.7, 0.9, False)}


def test_a_dead_endpoint_scores_zero_and_the_run_finishes(problems):
    model = EndpointModel("http://127.0.0.1:9/v1", "gone", retries=1, timeout_s=2.0, sleep=lambda s: None)
    texts, stats = generate_completions(model, None, problems, EvalSettings(max_new_tokens=8), progress=False)
    assert texts == [[""]] * len(problems)
    assert stats["endpoint"]["failed"] == len(problems) and stats["finish_reasons"] == {"error": len(problems)}
    assert stats["mean_completion_tokens"] is None and "127.0.0.1:9" in stats["endpoint"]["last_error"]
    with pytest.raises(ValueError, match="endpoint model name is empty"):
        EndpointModel("http://127.0.0.1:9/v1", "")


def test_cli_endpoint_rows_per_few_shot_k(tmp_path, capsys):
    from reasoner.cli import main
    from reasoner.config import load_config
    from reasoner.pipelines.astar import _split_records

    config = load_config(f"{CONFIG}:tiny")
    test = [problem_from_record(r) for r in _split_records(config.data, "test")]
    answers = [sft_completion(test[0]), sft_completion(test[1], heuristic="zero"), None, "I cannot prove it."]
    Solver.problems = _by_context(test)
    Solver.plan = {i: (lambda b, a=a: (500, b"down") if a is None else (200, _completion(a)))
                   for i, a in enumerate(answers)}
    with serve(Solver) as url:
        code = main(["eval", "--config", f"{CONFIG}:tiny", "--endpoint", url, "--endpoint-model", "api",
                     "--few-shot", "0", "2", "--retries", "0", "--output", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    doc = json.loads((tmp_path / "eval.json").read_text())
    assert [m["label"] for m in doc["models"]] == ["api", "api (2-shot)"]
    texts = [[a or ""] for a in answers]
    reference = evaluate_completions(test, texts, label="api").report
    for m in doc["models"]:
        assert m["accuracy"] == reference["accuracy"] and m["accuracy"]["estimate"] == 0.5
        assert m["efficiency_pushes"] == reference["efficiency_pushes"]
        assert m["generation"]["endpoint"]["failed"] == 1 and m["settings"]["max_new_tokens"] == 1024
    assert [m["generation"]["few_shot"]["k"] for m in doc["models"]] == [0, 2]
    turns = sorted(len(b["messages"]) for b in Solver.bodies)
    assert turns == [2] * 4 + [6] * 4 and {b["max_tokens"] for b in Solver.bodies} == {1024}
    assert "api (2-shot)" in out and (tmp_path / "eval.png").stat().st_size > 0
    assert main(["eval", "--config", f"{CONFIG}:tiny", "--checkpoint", "x", "--endpoint-model", "api"]) == 2
    assert "expected --endpoint URL" in capsys.readouterr().err
    assert main(["eval", "--config", f"{CONFIG}:tiny", "--endpoint", url]) == 2
    assert "--endpoint needs --endpoint-model" in capsys.readouterr().err


def test_through_reasoner_serve_the_endpoint_returns_the_samplers_completions(problems, tokenizer):
    from tests.models_shared import TINY, random_decoder
    from tests.serve.conftest import start_server

    model = random_decoder(dataclasses.replace(TINY, tie_embeddings=False), seed=0, scale=1.0)
    train = [problem_from_record(r) for r in deeprd_records(seed=2, split="train", size=6, spec=SPEC)]
    settings = EvalSettings(max_new_tokens=8, batch_size=4, few_shot=1)
    server = start_server(model, tokenizer, max_batch=4, batch_wait_ms=200, max_len=1024, default_max_tokens=8)
    try:
        served, stats = generate_completions(EndpointModel(server.url, "test-model"), None, problems, settings,
                                             examples=train, progress=False)
    finally:
        server.close()
    local, _ = generate_completions(model, tokenizer, problems, settings, examples=train, progress=False)
    assert stats["endpoint"]["failed"] == 0 and served == local and all(t[0] for t in local)
