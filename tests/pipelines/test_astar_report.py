"""`reasoner report astar`: several runs' reports combined into one figure, table and JSON (Figs. 2-6)."""

import json

import numpy as np
import pytest

from reasoner.cli import main
from reasoner.data.astar_traces import deeprd_records
from reasoner.data.deeprd import DeepRDSpec
from reasoner.data.jsonl import write_jsonl
from reasoner.metrics.pareto import summarise_model

SPEC = DeepRDSpec(lookahead=(3, 5), branches=(2, 4), extra_ratio=0.5, max_degree=3)
N = 20


def _model(label, n_correct, eff):
    correct = [i < n_correct for i in range(N)]
    effs = {k: [eff[k]] * N for k in ("pushes", "pops")}
    return summarise_model(label, correct=correct, efficiency=effs, n_resamples=200)[1]


def _run(tmp_path, name, dataset, models, *, records=None, complete=True):
    run = tmp_path / name
    doc = {"models": models, "config": {"data": {"dataset": dataset}},
           "reference_efficiency": {"pushes": {"Dijkstra": 0.4}, "pops": {"Dijkstra": 0.3}}, "complete": complete}
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




def _preempted_run(tmp_path, name="grpo_run", *, stages=("data", "eval_base", "sft", "eval_sft")):
    """What the A* pipeline leaves when it stops after `stages` (e.g. preempted in GRPO): its `_announce` wrote the
    models so far with `complete: false`, the config and the finished stages' timings."""
    from reasoner.config import load_config
    from reasoner.evaluation import evaluate_completions, reference_efficiency
    from reasoner.pipelines import astar
    from reasoner.tasks.astar import problem_from_record, sft_completion

    problems = [problem_from_record(r) for r in deeprd_records(seed=11, split="test", size=4, spec=SPEC)]
    results = []
    for label, every in (("base", 4), ("SFT (dependency)", 2)):
        texts = [[sft_completion(p)] if i % every == 0 else ["x"] for i, p in enumerate(problems)]
        results.append(evaluate_completions(problems, texts, label=label, n_resamples=200, scoring="host"))
        results[-1].report["generation"] = {"finish_reasons": {"stop": len(problems)}}
    config = load_config("configs/astar_demo.py:tiny")  # sft and grpo enabled: base, SFT and SFT+GRPO evaluations
    run = tmp_path / name
    astar._announce(results[-1], results, workdir=run, reference=reference_efficiency(problems),
                    extra={"timings_s": {s: 1.0 for s in stages}, "config": config.to_dict()})
    return run


def test_a_preempted_run_is_shown_marked_partial_or_refused(tmp_path, capsys):
    """A run stopped part-way keeps its finished models: they are in the table, JSON and figure, but labelled as a
    partial run's, with the evaluations it is missing named; --require-complete refuses it."""
    partial = _preempted_run(tmp_path)
    whole = _run(tmp_path, "whole", "deeprd", [_model("SFT", 15, {"pushes": 0.6, "pops": 0.5})])
    out = tmp_path / "out"
    assert main(["report", "astar", str(partial), str(whole), "--out", str(out), "--json"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {partial} is a partial run" in err and "missing evaluations: eval_grpo" in err
    doc = json.loads((out / "astar_combined.json").read_text())
    assert [m["label"] for m in doc["models"]["deeprd"]] == [
        "grpo_run (partial run): base", "grpo_run (partial run): SFT (dependency)", "whole: SFT"]
    assert [m["run_complete"] for m in doc["models"]["deeprd"]] == [False, False, True]
    runs = {r["name"]: r for r in doc["runs"]}
    assert runs["grpo_run"]["complete"] is False and runs["grpo_run"]["missing_evaluations"] == ["eval_grpo"]
    assert runs["whole"]["complete"] is True and runs["whole"]["partial"] is None
    table = (out / "astar_combined.md").read_text()
    assert "| grpo_run (partial run): base" in table and "| whole: SFT" in table
    assert "- partial run grpo_run: its report says complete: false" in table and "eval_grpo" in table
    assert open(out / "astar_combined.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # refused on request, before anything is written
    refused = tmp_path / "refused"
    assert main(["report", "astar", str(whole), str(partial), "--out", str(refused), "--require-complete"]) == 2
    assert f"error: {partial} is a partial run" in capsys.readouterr().err and not refused.exists()
    # stopped before its first trained model's evaluation: every later one is named
    early = _preempted_run(tmp_path, "early", stages=("data", "eval_base", "eval_sft"))
    doc = json.loads(early.joinpath("report", "astar.json").read_text())
    doc["timings_s"] = {"data": 1.0, "eval_base": 2.0}
    doc["models"] = doc["models"][:1]
    early.joinpath("report", "astar.json").write_text(json.dumps(doc))
    assert main(["report", "astar", str(early), "--out", str(tmp_path / "o2"), "--json"]) == 0
    assert "missing evaluations: eval_sft, eval_grpo" in capsys.readouterr().err


def test_a_report_without_the_complete_flag_counts_as_partial(tmp_path, capsys):
    run = _run(tmp_path, "old", "deeprd", [_model("SFT", 15, {"pushes": 0.6, "pops": 0.5})])
    doc = json.loads((run / "report" / "astar.json").read_text())
    del doc["complete"], doc["config"]
    (run / "report" / "astar.json").write_text(json.dumps(doc))
    assert main(["report", "astar", str(run), "--out", str(tmp_path / "o"), "--json"]) == 0
    err = capsys.readouterr().err
    assert "no 'complete': true" in err and "which evaluations are missing is not recorded" in err
    doc = json.loads((tmp_path / "o" / "astar_combined.json").read_text())
    assert doc["models"]["unknown"][0]["label"] == "old (partial run): SFT"


@pytest.mark.parametrize("edit,message", [
    (lambda m: m.pop("efficiency_pops"), "no 'efficiency_pops'"),
    (lambda m: m["efficiency_pushes"].pop("low"), "'efficiency_pushes' has no 'low'"),
    (lambda m: m["accuracy"].pop("high"), "'accuracy' has no 'high'"),
    (lambda m: m.pop("examples"), "no 'examples' count"),
    (lambda m: m["efficiency_pushes"].update(estimate=float("nan")), "estimate=nan"),
    (lambda m: m["accuracy"].update(low=1.5), "low=1.5"),
    (lambda m: m.update(efficiency_pops=None), "'efficiency_pops' is null (no correct proof) but the accuracy is 0.75"),
])
def test_a_model_entry_missing_what_the_pipeline_writes_is_refused(tmp_path, capsys, edit, message):
    good = _model("base", 4, {"pushes": 0.2, "pops": 0.1})
    bad = _model("SFT", 15, {"pushes": 0.6, "pops": 0.5})
    edit(bad)
    run = _run(tmp_path, "r", "deeprd", [good, bad])
    assert main(["report", "astar", str(run), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'report' / 'astar.json'}: incomplete model entries" in err
    assert "models[1] ('SFT'): " in err and message in err and "models[0]" not in err
    assert not (tmp_path / "o").exists()


def test_no_correct_proof_is_not_a_missing_efficiency(tmp_path, capsys):
    """null efficiency with accuracy 0 is what the pipeline writes for a model that proved nothing: accepted, shown
    as n/a and plotted at efficiency 0."""
    nothing = _model("base", 0, {"pushes": 0.2, "pops": 0.1})
    assert nothing["efficiency_pushes"] is None
    run = _run(tmp_path, "r", "deeprd", [nothing, _model("SFT", 15, {"pushes": 0.6, "pops": 0.5})])
    assert main(["report", "astar", str(run), "--out", str(tmp_path / "o"), "--json"]) == 0
    assert "n/a (no correct proof)" in (tmp_path / "o" / "astar_combined.md").read_text()


def test_runs_named_alike_are_told_apart_and_one_run_twice_is_refused(tmp_path, capsys):
    models = [_model("SFT", 15, {"pushes": 0.6, "pops": 0.5})]
    a = _run(tmp_path / "seed0", "sft", "deeprd", models)
    b = _run(tmp_path / "seed1", "sft", "deeprd", [_model("SFT", 12, {"pushes": 0.6, "pops": 0.5})])
    out = tmp_path / "out"
    assert main(["report", "astar", str(a), str(b), "--out", str(out), "--json"]) == 0
    doc = json.loads((out / "astar_combined.json").read_text())
    assert [m["label"] for m in doc["models"]["deeprd"]] == ["seed0/sft: SFT", "seed1/sft: SFT"]
    assert main(["report", "astar", str(a), str(a / "report" / "astar.json"), "--out", str(tmp_path / "o")]) == 2
    assert "given twice" in capsys.readouterr().err


def test_runs_sharing_their_training_problems_count_each_once(tmp_path, capsys):
    records = deeprd_records(seed=3, split="train", size=4, spec=SPEC)
    models = [_model("SFT", 15, {"pushes": 0.6, "pops": 0.5})]
    a = _run(tmp_path, "a", "deeprd", models, records=records)
    b = _run(tmp_path, "b", "deeprd", models, records=records[:2] + deeprd_records(seed=4, split="train", size=1,
                                                                                   spec=SPEC))
    assert main(["report", "astar", str(a), str(b), "--out", str(tmp_path / "o"), "--json"]) == 0
    steps = json.loads((tmp_path / "o" / "astar_combined.json").read_text())["proof_steps"]["deeprd"]
    assert all(len(v) == 5 for v in steps.values())  # 4 + 1 distinct problems, not 4 + 3


def test_the_table_says_when_interval_methods_differ(tmp_path, capsys):
    """A report written before efficiency intervals resampled problems (attempt-level "bootstrap-percentile") beside
    a new one: the table names which rows use which method, so intervals of different kinds are not compared
    unawares."""
    old = _model("SFT", 15, {"pushes": 0.6, "pops": 0.5})
    for key in ("efficiency_pushes", "efficiency_pops"):
        old[key] = {k: v for k, v in old[key].items() if k not in ("clusters", "undefined_resamples")}
        old[key]["method"] = "bootstrap-percentile"
    a = _run(tmp_path, "old", "deeprd", [old])
    b = _run(tmp_path, "new", "deeprd", [_model("SFT", 12, {"pushes": 0.7, "pops": 0.5})])
    assert main(["report", "astar", str(a), str(b), "--out", str(tmp_path / "o"), "--json"]) == 0
    table = (tmp_path / "o" / "astar_combined.md").read_text()
    assert ("- efficiency_pushes intervals differ in method: bootstrap-percentile (old: SFT); "
            "cluster-bootstrap-percentile (new: SFT)") in table
    assert "accuracy intervals differ" not in table and "partial run" not in table
