"""The CEDAR-GRPO mixture (App. A.1) on the real staged files: per-source counts as configured, App. B prompts,
and every row's carried gold scoring 1 through the Table 8 verifier against gold read independently from the raw
files; the unshippable sources from fixtures in their published formats; missing data named."""

import json
import re

import pytest

from reasoner.cli import main
from reasoner.data.cedar_mixture import PAPER_TRAIN, PAPER_VALIDATION, MixtureSpec, build_mixture
from reasoner.tasks.cedar_prompts import SYSTEM
from reasoner.tasks.cedar_verify import record_of, score

STAGED = ("abductionrules", "uniadilr", "list_functions", "crypto")
CAESAR = ("def transform(s):\n    return ''.join(chr((ord(c) - b + {k}) % 26 + b) if c.isalpha() else c for c in s "
          "for b in [65 if c.isupper() else 97])\n")
ATBASH = ("def transform(s):\n    return ''.join(chr(25 - (ord(c) - b) + b) if c.isalpha() else c for c in s "
          "for b in [65 if c.isupper() else 97])\n")


def _answer(text):
    return f"<think>from the evidence</think><answer>{text}</answer>"


def _raw(shared_data, row) -> dict:
    """The row's raw code record (ListFunction by `id`, Crypto by line = `index`)."""
    if row["source"] == "list_functions":
        return next(r for r in map(json.loads, (shared_data / "list_functions/list_functions.jsonl").open())
                    if r["id"] == row["id"])
    raw = json.loads((shared_data / f"crypto/{row['group']}.jsonl").read_text().splitlines()[row["id"]])
    assert raw["index"] == row["id"]
    return raw


def _raw_gold(shared_data, row):
    """The gold completion of a row, from the raw staged file (not from the row's carried gold fields)."""
    source, group, rid = row["source"], row["group"], row["id"]
    if source == "abductionrules":
        for line in (shared_data / f"abductionrules/{group}/dev.jsonl").open():
            for q in json.loads(line)["questions"]:
                if q["id"] == rid:
                    return _answer(q["label"])
    if source == "uniadilr":
        raw = json.loads((shared_data / "uniadilr/abduction.jsonl").read_text().splitlines()[rid])
        ids = re.findall(r"sent(\d+)", raw["proof"].split("->")[0])
        return _answer(", ".join(ids))
    if source == "list_functions":
        return _answer(f"{_raw(shared_data, row)['function']}\ntransform = {rid}\n")
    if source == "crypto":
        raw = _raw(shared_data, row)
        if group == "atbash":
            return _answer(ATBASH)
        demo = raw["train"]["normal"][0]
        return _answer(CAESAR.format(k=(ord(demo["output"][0].lower()) - ord(demo["input"][0].lower())) % 26))
    raise AssertionError(f"no raw gold for {row['uid']}")


def test_staged_mixture_counts_prompts_and_gold(shared_data, tmp_path, capsys):
    # The command writes what the trainer reads; scale 0.025: 8 / 2 rows of the 320 / 80 sources, 4 / 1 of the rest.
    code = main(["cedar", "data", "--data-dir", str(shared_data), "--out", str(tmp_path), "--scale", "0.025",
                 "--sources", ",".join(STAGED), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    rows = {split: [json.loads(x) for x in (tmp_path / f"{split}.jsonl").read_text().splitlines()]
            for split in ("train", "validation")}
    spec = MixtureSpec(scale=0.025, sources=STAGED)
    for source in STAGED:
        for split, paper in (("train", PAPER_TRAIN), ("validation", PAPER_VALIDATION)):
            expected = int(paper[source] * 0.025 + 0.5)
            assert spec.count(source, split) == expected
            assert sum(r["source"] == source for r in rows[split]) == expected == summary["counts"][source][split]
    # AbductionRules' four variants and Crypto's two ciphers share a source's count evenly.
    train_groups = [r["group"] for r in rows["train"]]
    assert all(train_groups.count(f"Abduction-{v}") == 2 for v in ("Animal", "Animal-Simple", "Person",
                                                                   "Person-Simple"))
    assert train_groups.count("caesar") == train_groups.count("atbash") == 2
    assert not {r["uid"] for r in rows["train"]} & {r["uid"] for r in rows["validation"]}
    first = {r["source"]: r for r in reversed(rows["train"])}
    for row in rows["train"] + rows["validation"]:
        system, user = row["prompt"]
        assert system == {"role": "system", "content": SYSTEM[row["source"]]} and user["role"] == "user"
        record = record_of(row)
        if row["source"] in ("list_functions", "crypto"):
            # Code rows carry every stored test pair; one per source also runs in the sandbox (seconds each).
            raw_tests = _raw(shared_data, row)["test"]
            assert [list(t) for t in record.tests] == [[t["input"], t["output"]] for t in raw_tests]
            if row is not first[row["source"]]:
                continue
        assert score(record, _raw_gold(shared_data, row)) == 1.0, row["uid"]
    # A perturbed answer scores 0 (the carried gold is not vacuous).
    assert score(record_of(first["abductionrules"]), _answer("The unicorn is green.")) == 0.0
    assert score(record_of(first["uniadilr"]), _answer("9999")) == 0.0
    # The rendered prompt carries the record: the UniADILR hypothesis, the crypto demonstrations.
    uni = first["uniadilr"]
    raw = json.loads((shared_data / "uniadilr/abduction.jsonl").read_text().splitlines()[uni["id"]])
    assert raw["hypothesis"] in uni["prompt"][1]["content"] and "sent1: " in uni["prompt"][1]["content"]
    assert "Input: " in first["crypto"]["prompt"][1]["content"]


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_unshippable_sources_from_a_user_directory(tmp_path):
    user = tmp_path / "user"
    _write(user / "balanced_copa/train.jsonl", [
        {"id": i, "premise": f"p{i}", "choice1": "a", "choice2": "b", "question": q, "label": i % 2,
         "mirrored": False} for i, q in enumerate(["cause", "effect"] * 10)])
    _write(user / "climate_fever/climate-fever.jsonl", [
        {"claim_id": str(i), "claim": f"claim {i}", "claim_label": ["SUPPORTS", "REFUTES"][i % 2],
         "evidences": [{"evidence": f"ev {i}"}]} for i in range(20)])
    for level in (1, 2):
        _write(user / f"causelogics/level{level}.jsonl", [
            {"id": f"L{level}-{i}", "Premises": ["p1", "p2"], "Rules": "r", "Phenomenon": "x", "Possible Cause": "c",
             "Label": "True" if i % 2 else "False"} for i in range(10)])
    spec = MixtureSpec(scale=0.0125, sources=("balanced_copa", "climate_fever", "causelogics"))  # 4 / 1 each
    m = build_mixture(spec, data_dir=tmp_path / "empty", user_dir=user)
    assert m.counts == {s: {"train": 4, "validation": 1} for s in spec.sources} and not m.notes
    copa = [r for r in m.train + m.validation if r["source"] == "balanced_copa"]
    assert all(r["id"] % 2 == 0 for r in copa)  # only question == "cause" rows (the even ids)
    levels = [r["group"] for r in m.train if r["source"] == "causelogics"]
    assert levels.count("level1") == levels.count("level2") == 2
    for row in m.train + m.validation:
        # Gold from the fixture's own construction (label = id % 2, choices numbered 1 and 2; ...).
        gold = {"balanced_copa": lambda: str(row["id"] % 2 + 1),
                "climate_fever": lambda: ["supports", "refutes"][int(row["id"]) % 2],
                "causelogics": lambda: "true" if int(row["id"].split("-")[1]) % 2 else "false"}[row["source"]]()
        assert score(record_of(row), _answer(gold)) == 1.0
    fever = next(r for r in m.train if r["source"] == "climate_fever")
    assert "- ev " in fever["prompt"][1]["content"]
    logic = next(r for r in m.train if r["source"] == "causelogics")
    assert "Premises:\np1\np2\n" in logic["prompt"][1]["content"]


def test_a_row_whose_prompt_cannot_be_rendered_is_named_by_line(tmp_path, capsys):
    user = tmp_path / "user"
    _write(user / "climate_fever/climate-fever.jsonl", [
        {"claim_id": "0", "claim": "c", "claim_label": 0, "evidences": [{"evidence": "e"}]},
        {"claim_id": "1", "claim": "c", "claim_label": 1, "evidences": [{"text": "e"}]}])
    spec = MixtureSpec(scale=0.0125, sources=("climate_fever",))
    with pytest.raises(ValueError, match=r"climate-fever.jsonl:2: climate_fever row: missing field 'evidence'"):
        build_mixture(spec, data_dir=tmp_path, user_dir=user)
    _write(user / "climate_fever/climate-fever.jsonl", [
        {"claim_id": "0", "claim": "c", "claim_label": 0, "evidences": "e"}])
    assert main(["cedar", "data", "--data-dir", str(tmp_path), "--user-data-dir", str(user), "--sources",
                 "climate_fever", "--out", str(tmp_path / "o")]) == 2
    assert "climate-fever.jsonl:1: climate_fever row '0': evidences is str, expected a list" in capsys.readouterr().err


def test_missing_data_is_named_with_what_to_download(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match=r"uniadilr/abduction.jsonl.*github.com/YuSheng-00/UniADILR"):
        build_mixture(MixtureSpec(sources=("uniadilr",)), data_dir=tmp_path)
    m = build_mixture(MixtureSpec(sources=("balanced_copa",)), data_dir=tmp_path)
    assert m.train == [] and "pkavumba/balanced-copa" in m.notes[0] and "--user-data-dir" in m.notes[0]
    assert main(["cedar", "data", "--data-dir", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "Strong-AI-Lab/AbductionRules" in capsys.readouterr().err
    with pytest.raises(ValueError, match="mixture sources \\['copa'\\]"):
        MixtureSpec(sources=("copa",))
