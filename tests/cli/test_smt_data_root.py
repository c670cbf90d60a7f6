"""`reasoner smt rollout --data-root`: the default is ../shared/data beside the checkout (as `reasoner demo`,
`reasoner cedar` and the configs), whatever the current directory; a missing directory is an error naming it."""

import json
import pathlib

from reasoner.cli import main
from reasoner.cli.smt import default_data_root


def test_the_default_is_the_shared_data_beside_the_checkout_from_any_directory(shared_data, tmp_path, monkeypatch,
                                                                               capsys):
    assert pathlib.Path(default_data_root()).resolve() == shared_data.resolve()  # ../shared may be a link
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # ../shared/data from here does not exist: the old default found nothing
    assert main(["smt", "rollout", "--dataset", "proofwriter", "--model", "symbolic", "--limit", "1",
                 "--timeout", "10", "--out", "rows.jsonl"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == 1


def test_a_given_relative_path_is_taken_from_the_current_directory(shared_data, tmp_path, monkeypatch, capsys):
    (tmp_path / "data").symlink_to(shared_data.resolve(), target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    assert main(["smt", "rollout", "--dataset", "proofwriter", "--data-root", "data", "--model", "symbolic",
                 "--limit", "1", "--timeout", "10", "--out", "rows.jsonl"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == 1


def test_a_missing_data_root_is_an_error_naming_it(tmp_path, capsys):
    missing = tmp_path / "no-data"
    assert main(["smt", "rollout", "--dataset", "proofwriter", "--data-root", str(missing), "--model", "symbolic",
                 "--out", str(tmp_path / "rows.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"--data-root {missing}: no such directory; expected the staged Logic-LLM data" in err
    assert not (tmp_path / "rows.jsonl").exists() and not (tmp_path / "rows.jsonl.settings.json").exists()
