"""CI cannot pass by skipping (issue 14 item 2): with `CI=true` and no `../shared/data`, the run stops at once.

Two checks, both cheap and neither able to skip: `ci_missing()` with the conftest's shared-data path pointed at an
absent and at a present folder (the rule itself), and one pytest run in a subprocess, under `CI=true`, on a copy of
the checkout's test layout (pyproject.toml, tests/__init__.py, tests/conftest.py and one trivial test file) in a temp
folder with no `shared/` beside it: the run must end with the strictness exit code 3 before any test runs, naming
`../shared/data`. The copy's conftest finds the shared data where the real one does, `parents[2] / "shared/data"`
of its own file, so the layout is what a fresh clone without `../shared` sees; the library still comes from this
checkout (PYTHONPATH), which `ci_missing` needs for the sandbox's isolation report.
"""

import os
import pathlib
import shutil
import subprocess
import sys

from tests import conftest

REPO = pathlib.Path(__file__).resolve().parents[1]
STRICT_EXIT = 3  # tests/conftest.py pytest_configure: pytest.exit(..., returncode=3)


def test_ci_missing_names_shared_data_only_when_it_is_absent(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path / "shared" / "data")
    absent = [line for line in conftest.ci_missing() if line.startswith("../shared/data")]
    assert len(absent) == 1 and str(tmp_path / "shared" / "data") in absent[0], conftest.ci_missing()
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert not [line for line in conftest.ci_missing() if "shared/data" in line]


def test_ci_run_without_shared_data_fails_at_once_naming_it(tmp_path):
    checkout = tmp_path / "checkout"  # tmp_path / "shared" does not exist: the checkout has no ../shared
    (checkout / "tests").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", checkout / "pyproject.toml")
    for name in ("__init__.py", "conftest.py"):
        shutil.copy(REPO / "tests" / name, checkout / "tests" / name)
    (checkout / "tests" / "test_trivial.py").write_text("def test_trivial():\n    assert True\n")
    # Not the parent run's own settings: its compilation cache (the child would remove it on exit), xdist's and
    # pytest's variables; CI=true is the point.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "REASONER_TESTS_", "JAX_COMPILATION_CACHE")) and k != "CI"}
    env.update(CI="true", PYTHONPATH=str(REPO), HYPOTHESIS_PROFILE="ci")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_trivial.py"],
                         cwd=checkout, env=env, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == STRICT_EXIT, out
    assert "CI=true and the suite cannot run complete" in out and "../shared/data" in out, out
    assert str(tmp_path / "shared" / "data") in out, out  # the path it looked for, beside the copy
    assert "passed" not in out, out  # stopped before any test ran
