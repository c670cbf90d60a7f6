"""`reasoner demo rlot` end to end on a random tiny model (every stage, real GSM8K records, real tokenizer)."""

import json

import pytest


@pytest.mark.slow
def test_demo_tiny_writes_report_table_and_curve(tmp_path, shared_data):
    from reasoner.cli import main

    rc = main(["demo", "rlot", "--workdir", str(tmp_path), "--config", "configs/rlot.py:demo_tiny",
               f"--config.demo.data_root={shared_data}"])
    assert rc == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    names = [m["method"] for m in report["methods"]]
    assert names == ["navigator", "direct", "cot", "cot_sc@2", "navigator_sc@2"]
    for m in report["methods"]:
        assert m["n"] == 4 and m["ci95"][0] <= m["accuracy"] <= m["ci95"][1]
    by = {m["method"]: m for m in report["methods"]}
    assert by["direct"]["llm_calls_per_problem"] == 1 and by["cot_sc@2"]["llm_calls_per_problem"] == 2
    assert by["navigator_sc@2"]["llm_calls_per_problem"] > by["navigator"]["llm_calls_per_problem"] >= 3
    assert report["navigator_params"] == 2566 and report["episodes_trained"] == 8
    assert len(report["training_history"]) == 2 and report["patterns"]["2"]
    assert (tmp_path / "report" / "rlot_training.png").stat().st_size > 1000


def test_a_preempted_navigator_is_not_evaluated(tmp_path, shared_data, monkeypatch):
    # the DQN checkpointed on SIGTERM, then the pipeline evaluated the half-trained navigator, wrote a final report
    # and exited 0
    import types

    from reasoner.config import load_config
    from reasoner.pipelines import rlot

    def preempted_train(config, lm, pool, args, **kw):
        return types.SimpleNamespace(preempted=True), [], {"episodes_trained": 4}

    def no_evaluation(*args, **kw):
        raise AssertionError("a preempted run must not evaluate")

    monkeypatch.setattr(rlot, "_train", preempted_train)
    monkeypatch.setattr(rlot, "_evaluate", no_evaluation)
    config = load_config("configs/rlot.py:demo_tiny", [f"--config.demo.data_root={shared_data}"])
    assert rlot.run(config, workdir=tmp_path, progress=False) == {"preempted": "train", "episodes_trained": 4}
    assert not (tmp_path / "report" / "report.json").exists()


@pytest.mark.parametrize("override,message", [
    (["--config.env.max_depth=8", "--config.dqn.max_episode_steps=8"],  # 8 blocks, then the forced answer
     r"dqn\.max_episode_steps=8 is below env\.max_depth \+ 1 = 9"),
    (["--config.dqn.lr=0.0"], r"dqn\.lr=0\.0: expected a number > 0"),
    (["--config.dqn.batch_size=7"], r"dqn\.batch_size=7: expected at most dqn\.buffer_size=6")])
def test_a_config_the_training_cannot_run_fails_before_the_model_loads(tmp_path, monkeypatch, override, message):
    # `reasoner demo rlot` and `reasoner train` checked these only in train_dqn, after the model loaded and the
    # direct-answer pass ran (and the episode bound not at all: the first batch of episodes ran out of steps)
    from reasoner.agents.rlot import setup
    from reasoner.config import load_config
    from reasoner.pipelines import rlot
    from trainers import dqn

    def no_model(*args, **kw):
        raise AssertionError("the config check must come before the model loads")

    monkeypatch.setattr(rlot, "load_model_and_tokenizer", no_model)
    monkeypatch.setattr(setup, "load_model_and_tokenizer", no_model)
    config = load_config("configs/rlot.py:demo_tiny", override)
    with pytest.raises(ValueError, match=message):
        rlot.run(config, workdir=tmp_path, progress=False)
    with pytest.raises(ValueError, match=message):
        dqn.train(config, workdir=tmp_path / "train", progress=False)
