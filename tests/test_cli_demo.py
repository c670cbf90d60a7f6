"""`reasoner demo METHOD`: each method's default config, its flags (`--teacher-endpoint`, `--judge-endpoint`,
`--data-dir`) reaching the config its pipeline gets, and the exit codes (0 done or preempted, 1 nothing produced,
2 bad input) -- with each pipeline's `run` replaced by a recorder, so no model is loaded."""

import importlib

import pytest

from reasoner.cli import main
from reasoner.cli.demo import METHODS

FLAGS = ["--teacher-endpoint", "http://teacher/v1", "--judge-endpoint", "http://judge/v1", "--data-dir", "/staged"]


def _record(monkeypatch, method: str, report: dict | Exception) -> list:
    calls = []

    def run(config, *, workdir, progress):
        calls.append((config, workdir, progress))
        if isinstance(report, Exception):
            raise report
        return report

    monkeypatch.setattr(importlib.import_module(METHODS[method].pipeline), "run", run)
    return calls


@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_method_runs_its_pipeline_with_its_flags(method, monkeypatch, tmp_path):
    calls = _record(monkeypatch, method, {METHODS[method].done_key: ["a model's report"]})
    assert main(["demo", method, "--workdir", str(tmp_path), "--no-progress"] + FLAGS) == 0  # the default config
    ((config, workdir, progress),) = calls
    assert workdir == str(tmp_path) and progress is False
    endpoints = {"smt": ("teacher", "http://teacher/v1"), "cedar": ("judge", "http://judge/v1")}
    if method in endpoints:  # only the method's own endpoint flag is read; the other is not its section
        section, url = endpoints[method]
        assert config[section].endpoint == url
    data_keys = {"smt": "data_root", "cedar": "data_dir"}
    if method in data_keys:
        assert config.data[data_keys[method]] == "/staged"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_nothing_produced_exits_1_and_preempted_exits_0(method, monkeypatch, tmp_path):
    argv = ["demo", method, "--workdir", str(tmp_path), "--no-progress"]
    _record(monkeypatch, method, {METHODS[method].done_key: []})
    assert main(argv) == 1
    _record(monkeypatch, method, {"preempted": "sft", METHODS[method].done_key: []})
    assert main(argv) == 0


@pytest.mark.parametrize("method,error", [("smt", FileNotFoundError("no data under /staged")),
                                          ("cedar", ValueError("the mixture has 0 training rows"))])
def test_bad_input_is_one_line_and_exit_2(method, error, monkeypatch, tmp_path, capsys):
    _record(monkeypatch, method, error)
    assert main(["demo", method, "--workdir", str(tmp_path), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == f"reasoner demo {method}: {error}"
