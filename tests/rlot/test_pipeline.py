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
