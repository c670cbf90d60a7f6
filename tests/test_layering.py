"""The layering of DESIGN.md, read from every module's imports (top-level and function-level, via the AST):
`search` imports nothing from `reasoner`; the library layers below the trainers never import `trainers`; only
`reasoner.{cli,pipelines,benchmarks,serve}` (and `trainers` itself) may."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIBRARY = ("models", "sampling", "data", "tasks", "verifiers", "agents", "judges", "rewards", "metrics")
ABOVE_TRAINERS = ("cli", "pipelines", "benchmarks", "serve")


def imported_modules(path: pathlib.Path, root: pathlib.Path = ROOT) -> set[str]:
    """Absolute module names `path` imports anywhere (relative imports resolved against its package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base]) if base else ".".join(parts)
            out.add(base)
    return out


def _violations(files, forbidden: str) -> list[str]:
    return [f"{p.relative_to(ROOT)} imports {m}" for p in files for m in sorted(imported_modules(p))
            if m == forbidden or m.startswith(forbidden + ".")]


def test_search_never_imports_reasoner():
    files = sorted((ROOT / "search").rglob("*.py"))
    assert files and _violations(files, "reasoner") == []


def test_library_layers_never_import_trainers():
    files = [p for layer in LIBRARY for p in sorted((ROOT / "reasoner" / layer).rglob("*.py"))]
    files += [p for p in sorted((ROOT / "reasoner").glob("*.py"))]  # top-level library modules
    assert files and _violations(files, "trainers") == []


def test_only_cli_pipelines_benchmarks_and_serve_import_trainers():
    importers = {p.relative_to(ROOT / "reasoner").parts[0] for p in sorted((ROOT / "reasoner").rglob("*.py"))
                 if _violations([p], "trainers")}
    assert importers <= set(ABOVE_TRAINERS), importers


def test_the_check_sees_function_level_and_relative_imports(tmp_path):
    (tmp_path / "reasoner" / "agents").mkdir(parents=True)
    probe = tmp_path / "reasoner" / "agents" / "probe.py"
    probe.write_text("import json\n\ndef f():\n    from trainers import sft\n    from ..rewards import astar\n")
    assert imported_modules(probe, tmp_path) == {"json", "trainers", "reasoner.rewards"}
