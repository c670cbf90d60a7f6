"""TFDS builders (array_record, read back without TensorFlow) and the `astar solve` / `data build` commands."""

import json

import grain
import pytest
import tensorflow_datasets as tfds

from reasoner.cli import main
from reasoner.data.deeprd import generate_problem, problem_record
from reasoner.data.records import decode_record
from reasoner.data.tfds_builders import Deeprd, DeeprdConfig, ProofwriterAstar, ProofwriterConfig, read_splits
from tests.data.test_proofwriter_raw import _owa_theory

FIELDS = ["id", "statement", "proved", "proved_depth", "negation_proved", "negation_depth", "pushes", "pops"]


def test_deeprd_builder_round_trip(tmp_path):
    config = DeeprdConfig(name="t3", seed=5, train=3, validation=1, test=2)
    builder = Deeprd(config=config, data_dir=tmp_path, file_format="array_record")
    builder.download_and_prepare()
    source = tfds.data_source("deeprd/t3", data_dir=tmp_path)  # by name, as grain would open it
    assert {k: len(v) for k, v in source.items()} == {"train": 3, "validation": 1, "test": 2}
    decoded = grain.MapDataset.source(source["train"]).map(decode_record)  # what a grain pipeline sees
    assert sorted(r["id"] for r in decoded) == [f"deeprd-train-5-{i}" for i in range(3)]
    assert all(len(r["rule_texts"]) == len(json.loads(r["program"])["rules"]) for r in decoded)
    stored = {r["id"].decode(): r for r in read_splits(builder)["train"]}
    for i in range(3):
        fresh = problem_record(generate_problem(seed=5, split="train", index=i))
        rec = stored[fresh["id"]]
        assert rec["program"].decode() == fresh["program"] and rec["goal"].decode() == fresh["goal"]
        assert int(rec["depth"]) == fresh["depth"] and rec["pushes"].tolist() == fresh["pushes"]


def test_proofwriter_builder_from_a_manual_release_dir(tmp_path):
    release = tmp_path / "proofwriter-dataset-V2020.12.3" / "OWA" / "depth-5"
    release.mkdir(parents=True)
    for stem in ("train", "dev", "test"):
        (release / f"meta-{stem}.jsonl").write_text(json.dumps(_owa_theory(f"RelNeg-OWA-D3-{stem}")) + "\n")
    builder = ProofwriterAstar(config=ProofwriterConfig(name="owa_t"), data_dir=tmp_path / "tfds",
                               file_format="array_record")
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=tmp_path))
    splits = read_splits(builder)
    # Q1 (depth 3) survives the paper filter; Q2 (depth 1) is too shallow; Q3 is Unknown.
    assert {k: [r["id"].decode() for r in v] for k, v in splits.items()} == {
        "train": ["RelNeg-OWA-D3-train_Q1"], "validation": ["RelNeg-OWA-D3-dev_Q1"], "test": ["RelNeg-OWA-D3-test_Q1"]}
    assert builder.filter_report.counts == {"kept": 3, "too_shallow": 3, "unknown_answer": 3}


def test_proofwriter_builder_without_files_names_the_manual_dir(tmp_path):
    builder = ProofwriterAstar(config=ProofwriterConfig(name="owa_missing"), data_dir=tmp_path / "tfds",
                               file_format="array_record")
    with pytest.raises(FileNotFoundError, match="no raw ProofWriter split files under"):
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=tmp_path))


def _json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_astar_solve_raw_json_lines(shared_data, capsys):
    code = main(["astar", "solve", "--input", str(shared_data / "proofwriter" / "raw_cwa_mini.jsonl"),
                 "--format", "raw", "--heuristic", "dependency", "--json"])
    out, err = capsys.readouterr()
    rows = _json_lines(out)
    assert code == 0 and len(rows) == 23 and all(list(r) == FIELDS for r in rows)
    q6 = next(r for r in rows if r["id"] == "AttNoneg-CWA-D2-1286_Q6")
    # Dependency h: nice(Harry)=1, smart(Harry)=1, green(Harry)=0, other axioms inf: pops nice, smart, green.
    assert q6 == {"id": "AttNoneg-CWA-D2-1286_Q6", "statement": "Harry is not green.", "proved": False,
                  "proved_depth": None, "negation_proved": True, "negation_depth": 2, "pushes": 2, "pops": 3}
    assert '"id": "RelNeg-CWA-D2-1420_Q4"' in err  # the NAF question is reported, not answered


def test_astar_solve_logic_llm_reports_bad_items_and_goes_on(tmp_path, capsys):
    records = [{"id": "bad", "context": "Bob is big. Gibberish here.", "question": "? Bob is big.", "answer": "A"},
               {"id": "good", "context": "Bob is big. If someone is big then they are red.",
                "question": "Is it true? Bob is not red.", "options": [], "answer": "B"}]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(records))
    code = main(["astar", "solve", "--input", str(path), "--format", "logic-llm", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    assert _json_lines(out) == [{"id": "good", "statement": "Bob is not red.", "proved": False,
                                 "proved_depth": None, "negation_proved": True, "negation_depth": 1,
                                 "pushes": 1, "pops": 2}]
    assert json.loads(err.splitlines()[0])["id"] == "bad" and "Gibberish here" in err


def test_astar_solve_unreadable_input(tmp_path, capsys):
    assert main(["astar", "solve", "--input", str(tmp_path / "nope.jsonl"), "--format", "deeprd", "--json"]) == 2
    assert "unreadable file" in capsys.readouterr().err


def test_data_build_deeprd_then_solve_its_export(tmp_path, capsys):
    code = main(["data", "build", "deeprd", "--data-dir", str(tmp_path), "--train", "3", "--validation", "1",
                 "--test", "1", "--lookahead", "3", "4", "--branches", "2", "3", "--jsonl", str(tmp_path / "x")])
    out, _ = capsys.readouterr()
    figs = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and {k: v["size"] for k, v in figs["splits"].items()} == {"train": 3, "validation": 1, "test": 1}
    train = figs["splits"]["train"]
    assert set(train["mean_pushes"]) == {"zero", "dependency", "true"}
    assert train["mean_pushes"]["zero"] >= train["mean_pushes"]["dependency"] >= train["mean_depth"]
    assert main(["astar", "solve", "--input", str(tmp_path / "x.train.jsonl"), "--format", "deeprd", "--json"]) == 0
    rows = _json_lines(capsys.readouterr().out)
    assert len(rows) == 3 and all(r["proved"] and 3 <= r["proved_depth"] <= 4 for r in rows)


def test_data_build_proofwriter_logic_llm(shared_data, tmp_path, capsys):
    code = main(["data", "build", "proofwriter", "--data-dir", str(tmp_path), "--source", "logic-llm",
                 "--file", f"validation={shared_data / 'proofwriter' / 'logic_llm_owa_d5_dev.json'}"])
    figs = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    assert figs["filter"] == {"kept": 200, "too_shallow": 200, "unknown_answer": 200}
    assert figs["splits"]["validation"]["size"] == 200
    assert figs["splits"]["validation"]["mean_depth"] >= 3


def test_data_build_proofwriter_bad_file_flag(capsys):
    assert main(["data", "build", "proofwriter", "--file", "no-equals-sign"]) == 2
    assert "expected SPLIT=PATH" in capsys.readouterr().err


def test_proofwriter_builder_with_an_empty_manual_dir(tmp_path):
    (tmp_path / "empty").mkdir()
    builder = ProofwriterAstar(config=ProofwriterConfig(name="owa_empty"), data_dir=tmp_path / "tfds",
                               file_format="array_record")
    with pytest.raises(FileNotFoundError, match="does not exist or is empty"):
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=tmp_path / "empty"))


def test_data_build_proofwriter_raw_sample_where_the_filter_empties_a_split(shared_data, tmp_path, capsys):
    raw = shared_data / "proofwriter" / "raw_cwa_mini.jsonl"
    args = ["data", "build", "proofwriter", "--data-dir", str(tmp_path), "--world", "CWA"]
    # Depth >= 3 (the paper's filter) leaves nothing of this depth-2 sample: reported, exit code 1.
    assert main(args + ["--file", f"train={raw}"]) == 1
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["splits"] == {} and summary["filter"] == {"too_shallow": 11, "not_provable": 12}
    assert summary["load"]["naf_questions_skipped"] == 1 and "no ProofWriter question survives" in err
    # With depth >= 2 the train split keeps 4 questions; a split the filter empties is listed, not written.
    assert main(args + ["--min-depth", "2", "--file", f"train={raw}", "--file", f"test={raw}"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {k: v["size"] for k, v in summary["splits"].items()} == {"train": 4, "test": 4}
    assert summary["splits"]["train"]["mean_depth"] == 2


def test_a_split_emptied_by_the_filter_is_listed_not_written(shared_data, tmp_path):
    shallow = _owa_theory("Shallow-OWA-1")
    del shallow["questions"]["Q1"]  # left: a depth-1 question and an Unknown one
    path = tmp_path / "meta-test.jsonl"
    path.write_text(json.dumps(shallow) + "\n")
    config = ProofwriterConfig(name="mixed", world="CWA", min_depth=2,
                               files={"train": [str(shared_data / "proofwriter" / "raw_cwa_mini.jsonl")],
                                      "test": [str(path)]})
    builder = ProofwriterAstar(config=config, data_dir=tmp_path / "tfds", file_format="array_record")
    builder.download_and_prepare()
    assert builder.empty_splits == ["test"]
    assert {k: len(v) for k, v in read_splits(builder).items()} == {"train": 4}


def test_empty_and_cyclic_programs_are_reported_by_id(tmp_path, capsys):
    records = [{"id": "empty", "context": "If someone is big then they are red.", "question": "? Bob is red.",
                "answer": "C"},
               {"id": "cyclic", "context": "Bob is big. If something is red then it is red.",
                "question": "? Bob is red.", "answer": "C"},
               {"id": "fine", "context": "Bob is big.", "question": "? Bob is red.", "answer": "C"}]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(records))
    assert main(["astar", "solve", "--input", str(path), "--format", "logic-llm", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [r["id"] for r in _json_lines(out)] == ["fine"]
    reports = {r["id"]: r["skipped"] for r in _json_lines(err)}
    assert "empty program" in reports["empty"] and "cyclic" in reports["cyclic"]
