"""`reasoner report astar`: several runs' reports combined into one figure, table and JSON (Figs. 2-6)."""

import json

import numpy as np

from reasoner.cli import main
from reasoner.data.astar_traces import deeprd_records
from reasoner.data.deeprd import DeepRDSpec
from reasoner.data.jsonl import write_jsonl
from reasoner.metrics.pareto import summarise_model

SPEC = DeepRDSpec(min_lookahead=3, max_lookahead=5, min_branches=2, max_branches=4, extra_ratio=0.5, max_degree=3)
N = 20


def _model(label, n_correct, eff):
    correct = [i < n_correct for i in range(N)]
    effs = {k: [eff[k]] * N for k in ("pushes", "pops")}
    return summarise_model(label, correct=correct, efficiency=effs, n_resamples=200)[1]


def _run(tmp_path, name, dataset, models, *, records=None):
    run = tmp_path / name
    doc = {"models": models, "config": {"data": {"dataset": dataset}},
           "reference_efficiency": {"pushes": {"Dijkstra": 0.4}, "pops": {"Dijkstra": 0.3}}}
    (run / "report").mkdir(parents=True)
    (run / "report" / "astar.json").write_text(json.dumps(doc))
    if records is not None:
        write_jsonl(run / "data" / "records" / "train.jsonl", records)
    return run


def _dominated(a, b, key):  # b dominates a
    ea, eb = a[f"efficiency_{key}"]["estimate"], b[f"efficiency_{key}"]["estimate"]
    aa, ab = a["accuracy"]["estimate"], b["accuracy"]["estimate"]
    return eb >= ea and ab >= aa and (eb > ea or ab > aa)


def test_runs_of_two_datasets_make_one_figure_table_and_fronts(tmp_path, capsys):
    records = deeprd_records(seed=3, split="train", size=6, spec=SPEC)
    base = _model("base", 4, {"pushes": 0.2, "pops": 0.1})
    a = _run(tmp_path, "sft_dependency", "deeprd", [base, _model("SFT", 15, {"pushes": 0.6, "pops": 0.5})],
             records=records)
    b = _run(tmp_path, "sft_dijkstra", "deeprd", [base, _model("SFT", 17, {"pushes": 0.3, "pops": 0.7})])
    c = _run(tmp_path, "pw", "proofwriter", [_model("base", 9, {"pushes": 0.5, "pops": 0.5})])
    out = tmp_path / "out"
    assert main(["report", "astar", str(a), str(b), str(c / "report" / "astar.json"), "--out", str(out),
                 "--json"]) == 0
    paths = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    doc = json.loads((out / "astar_combined.json").read_text())
    # the shared base is drawn once; every other model of every run is there, labelled by its run
    labels = [m["label"] for m in doc["models"]["deeprd"]]
    assert labels == ["sft_dependency: base", "sft_dependency: SFT", "sft_dijkstra: SFT"]
    assert [m["label"] for m in doc["models"]["proofwriter"]] == ["pw: base"]  # <run>/report/astar.json: <run>
    # each dataset's front, against a brute-force dominance check
    for dataset, models in doc["models"].items():
        for key in ("pushes", "pops"):
            want = [m["label"] for m in models if not any(_dominated(m, o, key) for o in models if o is not m)]
            assert doc["pareto_front"][dataset][key] == want, (dataset, key)
    assert doc["pareto_front"]["deeprd"]["pushes"] == ["sft_dependency: SFT", "sft_dijkstra: SFT"]
    assert doc["pareto_front"]["deeprd"]["pops"] == ["sft_dijkstra: SFT"]
    # Figs. 5/6: one count per provable training problem and search order; the true cost-to-go never needs more
    # proof steps than Dijkstra on a problem (A* with an exact heuristic expands a subset of what Dijkstra does)
    steps = doc["proof_steps"]["deeprd"]
    assert all(len(v) == 6 for v in steps.values())
    assert all(t <= z for t, z in zip(steps["A* true cost-to-go"], steps["Dijkstra"]))
    assert np.mean(steps["A* true cost-to-go"]) < np.mean(steps["Dijkstra"])
    for key in ("png", "proof_steps"):
        assert open(paths[key], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    table = (out / "astar_combined.md").read_text()
    assert "## deeprd" in table and "sft_dijkstra: SFT" in table and "0.850" in table  # 17 / 20


def test_a_missing_or_malformed_run_is_named(tmp_path, capsys):
    assert main(["report", "astar", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "nope: no report/astar.json" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    for text, message in (("{", "not valid JSON"), ('{"models": []}', "non-empty 'models' list"),
                          ('{"models": [{"label": 1}]}', "models[0] has no 'label'")):
        bad.write_text(text)
        assert main(["report", "astar", str(bad), "--out", str(tmp_path / "o")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


