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


OWN_FLAGS = {"astar": [], "rlot": ["--data-dir"], "smt": ["--teacher-endpoint", "--data-dir"],
             "cedar": ["--judge-endpoint", "--data-dir"]}


def _flags(names):
    return [x for flag, value in zip(FLAGS[::2], FLAGS[1::2]) if flag in names for x in (flag, value)]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_method_runs_its_pipeline_with_its_flags(method, monkeypatch, tmp_path, capsys):
    calls = _record(monkeypatch, method, {METHODS[method].done_key: ["a model's report"]})
    argv = ["demo", method, "--workdir", str(tmp_path), "--no-progress"]
    assert main(argv + _flags(OWN_FLAGS[method])) == 0  # the default config
    ((config, workdir, progress),) = calls
    assert workdir == str(tmp_path) and progress is False
    endpoints = {"smt": ("teacher", "http://teacher/v1"), "cedar": ("judge", "http://judge/v1")}
    if method in endpoints:
        section, url = endpoints[method]
        assert config[section].endpoint == url
    data_keys = {"rlot": ("demo", "data_root"), "smt": ("data", "data_root"), "cedar": ("data", "data_dir")}
    if method in data_keys:
        section, key = data_keys[method]
        assert config[section][key] == "/staged"
    # a flag the method does not read is refused (it was silently ignored: rlot ran on ../shared/data)
    for flag in sorted(set(FLAGS[::2]) - set(OWN_FLAGS[method])):
        assert main(argv + _flags([flag])) == 2
        assert f"{flag} is not used by this demo" in capsys.readouterr().err
    assert len(calls) == 1


def test_the_config_names_its_demo():
    import pathlib

    configs = pathlib.Path(__file__).resolve().parents[1] / "configs"
    for method in METHODS:
        spec = str(configs / METHODS[method].config)
        assert main(["demo", "astar" if method != "astar" else "smt", "--workdir", "/tmp/unused", "--config",
                     spec]) == 2  # a config of another demo: refused, naming both
    import importlib as il

    calls = []
    pipeline = il.import_module(METHODS["smt"].pipeline)
    original = pipeline.run
    try:
        pipeline.run = lambda config, **kw: calls.append(config) or {"reports": ["r"]}
        assert main(["demo", "--workdir", "/tmp/unused", "--config", str(configs / "smt_demo.py") + ":tiny"]) == 0
    finally:
        pipeline.run = original
    assert len(calls) == 1  # without a method, the config's own pipeline ran


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
