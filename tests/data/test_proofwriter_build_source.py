"""`reasoner data build proofwriter` and its manual dir: the paper's selection is always `owa_depth5` (the name
configs/astar_paper.py reads), so a build from another manual dir into the same data dir must not quietly reuse the
first build's data (TFDS does not read the files again); a hashed name depends on the dir, not on how it is typed."""

import json
import shutil

import tensorflow_datasets as tfds

from reasoner.cli import main
from tests.data.test_proofwriter_raw import _owa_theory


def _release(root, tag):
    """A manual dir in the raw release's layout whose theories are named after `tag`."""
    folder = root / tag / "OWA" / "depth-5"
    folder.mkdir(parents=True)
    for stem in ("train", "dev", "test"):
        (folder / f"meta-{stem}.jsonl").write_text(json.dumps(_owa_theory(f"{tag}-OWA-D3-{stem}")) + "\n")
    return root / tag


def _build(capsys, *args):
    code = main(["data", "build", "proofwriter", *map(str, args)])
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return code, (json.loads(lines[-1]) if lines else None), err


def _train_ids(data_dir, name="owa_depth5"):
    """The train split's ids as a reader finds them by name (the configs' `data.tfds_name`)."""
    source = tfds.data_source(f"proofwriter_astar/{name}", data_dir=str(data_dir))
    return [source["train"][i]["id"].decode() for i in range(len(source["train"]))]


def test_a_build_from_another_manual_dir_does_not_reuse_the_first(tmp_path, capsys, monkeypatch):
    first, second, data = _release(tmp_path, "alpha"), _release(tmp_path, "beta"), tmp_path / "tfds"
    code, summary, _ = _build(capsys, "--data-dir", data, "--manual-dir", first)
    assert code == 0 and summary["config"] == "owa_depth5" and not summary.get("reused")
    assert _train_ids(data) == ["alpha-OWA-D3-train_Q1"]
    # before: exit 0, the figures of alpha printed as beta's, and alpha's data left under the name
    code, summary, err = _build(capsys, "--data-dir", data, "--manual-dir", second)
    assert code == 2 and summary is None
    assert f"was built from {first}, not from {second}" in err and "--data-dir" in err
    assert _train_ids(data) == ["alpha-OWA-D3-train_Q1"]
    # the same dir, typed relative: the prepared data is reused, and says so
    monkeypatch.chdir(tmp_path)
    code, summary, _ = _build(capsys, "--data-dir", data, "--manual-dir", "alpha")
    assert code == 0 and summary["reused"] and summary["params"]["manual_dir"] == str(first)
    # once the old build is deleted, the other dir builds under the paper's name
    shutil.rmtree(data / "proofwriter_astar" / "owa_depth5")
    code, summary, _ = _build(capsys, "--data-dir", data, "--manual-dir", second)
    assert code == 0 and summary["config"] == "owa_depth5" and _train_ids(data) == ["beta-OWA-D3-train_Q1"]


def test_hashed_names_follow_the_dir_not_its_spelling(tmp_path, capsys, monkeypatch):
    first, second, data = _release(tmp_path, "alpha"), _release(tmp_path, "beta"), tmp_path / "tfds"
    monkeypatch.chdir(tmp_path)
    names = {}
    for label, where in (("absolute", first), ("relative", "alpha"), ("dotted", "./beta/../alpha"), ("other", second)):
        code, summary, _ = _build(capsys, "--data-dir", data, "--manual-dir", where, "--min-depth", 2)
        assert code == 0, label
        names[label] = summary["config"]
    assert names["absolute"] == names["relative"] == names["dotted"] != names["other"]
    assert names["other"].startswith("proofwriter_") and _train_ids(data, names["other"])[0].startswith("beta-")
