"""CEDAR-GRPO evaluation and pipeline: `reasoner cedar eval` on a tiny random model with a stub judge endpoint
(per-source counts and intervals against reasoner.metrics.intervals on counts recomputed from the written
completions), the pipeline's reward / config / table / plot pieces, and (full tier) `reasoner demo cedar` tiny."""

from __future__ import annotations

import json
import pathlib

import pytest

from reasoner.cli import main
from reasoner.config import load_config
from reasoner.metrics.intervals import wilson_interval
from reasoner.tasks.cedar_verify import record_of, score
from tests.chat_stub import ChatStub, serve

CONFIG = str(pathlib.Path(__file__).resolve().parents[2] / "configs" / "cedar_demo.py")
# 3 observation details, 2 addressed: r_cov = 2/3 (Eq. 6); 0.6 snaps to 0.5 (Eq. 7).
COVERAGE = {"overall_analysis": "ok", "observation_details": [
    {"detail": "a", "addressed": True, "evidence": "x"}, {"detail": "b", "addressed": True, "evidence": "y"},
    {"detail": "c", "addressed": False, "evidence": ""}]}


class _Judge(ChatStub):
    """Coverage: the verdict above in prose, except for Crypto traces (prose only: invalid, scores 0);
    directionality: 0.6 in a code fence."""

    def reply(self, body):
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        if "observation-coverage" in user:
            text = "No JSON here." if "Dataset: Crypto" in user else "I checked each detail.\n" + json.dumps(COVERAGE)
        else:
            assert "Directionality" in system
            text = "```json\n" + json.dumps({"directionality_score": 0.6, "explanation": "mixed"}) + "\n```"
        return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}


def test_cedar_eval_counts_intervals_and_judged_scores(shared_data, tokenizer, tmp_path, capsys):
    from reasoner.models.export import export_hf
    from tests.models_shared import TINY, random_decoder

    model_dir = export_hf(random_decoder(TINY, seed=1, scale=4.0), str(tmp_path / "tiny"), tokenizer=tokenizer)
    assert main(["cedar", "data", "--data-dir", str(shared_data), "--out", str(tmp_path / "mix"), "--scale", "0",
                 "--validation-scale", "0.0125", "--sources", "abductionrules,uniadilr,list_functions,crypto",
                 "--max-prompt-chars", "3000"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "mix/validation.jsonl").read_text().splitlines()]
    capsys.readouterr()
    with serve(_Judge) as url:
        code = main(["cedar", "eval", "--model", model_dir, "--input", str(tmp_path / "mix/validation.jsonl"),
                     "--judge-endpoint", url, "--max-new-tokens", "4", "--batch-size", "4",
                     "--completions-out", str(tmp_path / "c.jsonl"), "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    written = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert [w["uid"] for w in written] == [r["uid"] for r in rows]
    for source in {r["source"] for r in rows}:
        mine = [(r, w) for r, w in zip(rows, written) if r["source"] == source]
        got = report["sources"][source]
        # Correctness recomputed independently from the written completions through the verifier.
        correct = int(sum(score(record_of(r), w["completion"]) for r, w in mine))
        assert (got["n"], got["correct"]) == (len(mine), correct)
        ref = wilson_interval(correct, len(mine))
        assert (got["correctness"]["low"], got["correctness"]["high"]) == (ref.low, ref.high)
        cov = 0.0 if source == "crypto" else 2 / 3
        assert got["coverage"]["estimate"] == pytest.approx(cov, abs=1e-12)  # one division, exact to 1 ulp
        assert got["directionality"]["estimate"] == 0.5
        assert got["coverage_valid"] == (0 if source == "crypto" else len(mine))
    n_crypto = sum(r["source"] == "crypto" for r in rows)
    assert report["judge"]["coverage"]["invalid"] == n_crypto and report["judge"]["coverage"]["failed"] == 0
    assert report["overall"]["n"] == len(rows) and report["judge"]["directionality"]["valid"] == len(rows)
    assert main(["cedar", "eval", "--model", model_dir, "--input", str(tmp_path / "mix/validation.jsonl"),
                 "--max-new-tokens", "0"]) == 2
    assert "max_new_tokens=0: expected an int >= 1" in capsys.readouterr().err


def test_pipeline_pieces_reward_config_table_and_plot(tmp_path):
    from reasoner.metrics.cedar_process import count_markers
    from reasoner.pipelines.cedar import composite_reward, grpo_config, plot_rewards
    from trainers import grpo

    for variant in ("cpu", "tiny"):
        c = load_config(f"{CONFIG}:{variant}")
        g = grpo_config(c)
        grpo.check_config(g)
        assert g.data.task == "chat" and [r["as"] for r in g.rewards] == ["correctness", "coverage", "directionality"]
    assert c.model.name == "" and load_config(f"{CONFIG}:cpu").model.name == "smollm2-135m-instruct"
    c = load_config(f"{CONFIG}:tiny", ["--config.weights.coverage=0.0", "--config.weights.correctness=0.5",
                                       "--config.weights.directionality=0.5"])
    reward = composite_reward(c, judge=object())  # the Cor+Dir ablation: no coverage term, no coverage judge
    assert reward.names == ("correctness", "directionality") and list(reward.weights) == [0.5, 0.5]
    reward.close()
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "kind": "train", "reward": s / 4, "rewards/correctness": 0.0,
                                           "rewards/coverage": s / 8, "rewards/directionality": 0.5}) + "\n"
                               for s in (1, 2, 3)))
    png = plot_rewards(metrics, tmp_path / "r.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # App. E proxies: "most likely" is one marker (longest match), "may" another; "Wait" one backtrack.
    assert count_markers("It is most likely rain. It may be. Wait, that's wrong. Alternatively, snow.") == {
        "uncertainty_markers": 2, "backtracking": 2, "branchiness": 1}


def test_demo_cedar_tiny_end_to_end(tmp_path, capsys):
    """Full tier (minutes on 2 cores): its cheaper twin is test_pipeline_pieces_reward_config_table_and_plot, and
    test_cedar_eval_counts_intervals_and_judged_scores runs the evaluation stage."""
    code = main(["demo", "cedar", "--config", f"{CONFIG}:tiny", "--workdir", str(tmp_path), "--no-progress"])
    assert code == 0
    report = json.loads((tmp_path / "report/report.json").read_text())
    mixture = json.loads((tmp_path / "data/mixture.json").read_text())
    assert [m["label"] for m in report["models"]] == ["base", "CEDAR-GRPO"]
    for m in report["models"]:
        assert {s: v["n"] for s, v in m["sources"].items()} == {
            s: c["validation"] for s, c in mixture["counts"].items() if c["validation"]}
    steps = [json.loads(x) for x in (tmp_path / "grpo/metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if s["kind"] == "train"] == [1, 2]
    assert all(f"rewards/{k}" in steps[0] for k in ("correctness", "coverage", "directionality"))
    assert (tmp_path / "report/cedar_rewards.png").is_file() and (tmp_path / "report/cedar_table.md").is_file()
    assert set(report["seconds"]) >= {"data", "eval_base", "grpo", "eval_grpo", "total"}
    cache = report["judge_cache"]  # every judged trace of the run went through the cache: a hit or a miss
    assert cache["misses"] > 0 and cache["files"] == [str(tmp_path / "judge_cache.jsonl")]
    judged = sum(m["judge"][k]["requests"] for m in report["models"] for k in ("coverage", "directionality"))
    assert cache["hits"] + cache["misses"] >= judged


class _AfterData(Exception):
    """Stops the pipeline right after its data stage."""


@pytest.mark.parametrize("primary", [True, False], ids=["process-0", "process-1"])
def test_the_data_stage_writes_the_mixture_from_process_zero_only(tmp_path, monkeypatch, primary):
    """Every process builds the mixture; only process 0 writes `data/` (each process wrote `mixture.json` at once)."""
    from reasoner.pipelines import cedar
    from trainers import run as trainer_run

    def stop(*args, **kwargs):
        raise _AfterData

    monkeypatch.setattr(cedar, "is_primary", lambda: primary)
    monkeypatch.setattr(trainer_run, "load_tokenizer_for", stop)
    with pytest.raises(_AfterData):
        cedar.run(load_config(f"{CONFIG}:tiny"), workdir=tmp_path, progress=False)
    written = sorted(p.relative_to(tmp_path / "data").as_posix() for p in (tmp_path / "data").rglob("*") if p.is_file())
    assert ("mixture.json" in written) == primary and (written != []) == primary, written


def test_make_judge_counts_cache_hits_and_misses_into_the_run_and_each_reward(tmp_path):
    """make_judge built its CachedJudge without counters: the run's cache hits were counted nowhere."""
    from reasoner.judges import CachedJudge
    from reasoner.pipelines.cedar import composite_reward, judge_cache_report, make_judge

    cfg = load_config(CONFIG + ":tiny")
    with serve(_Judge) as url:
        cfg.judge.endpoint = url
        judge = make_judge(cfg, model_factory=None, tokenizer=None, cache_path=tmp_path / "judge_cache.jsonl")
        assert isinstance(judge, CachedJudge)
        reward = composite_reward(cfg, judge)
        try:
            examples = [{"prompt": "Premise: x", "source": "balanced_copa", "answer": "1"}] * 2
            for _ in range(2):
                reward(["<think>because x</think><answer>1</answer>"] * 2, examples=examples)
        finally:
            reward.close()
    judged = [r.fn.counters for r in reward.rewards if hasattr(r.fn, "counters")]
    assert judged and all((c.cache_misses, c.cache_hits) == (2, 2) for c in judged)
    report = judge_cache_report(judge)
    assert (report["hits"], report["misses"]) == (2 * len(judged), 2 * len(judged))
    assert (report["skipped_lines"], report["write_errors"]) == (0, 0)
    assert report["files"] == [str(tmp_path / "judge_cache.jsonl")]
