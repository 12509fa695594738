"""The allowed imports of docs/architecture.md, read from the package's source: the cores
import no application package, and the application packages import only the cores (and envs
where they train on them), so no trainer depends on another's code."""

import ast
import pathlib
import sys

import hyperx

ROOT = pathlib.Path(hyperx.__file__).parent
APPS = {"agents", "bandits", "envs", "games", "llm", "demos", "cli"}
ALLOWED = {  # an application package -> the application packages it may import
    "agents": {"envs"}, "bandits": {"envs"}, "envs": set(), "games": set(), "llm": set(),
    "demos": set(),
    "cli": {"agents", "bandits", "demos", "envs", "games", "llm"},
}


def _imports() -> dict[str, set[str]]:
    """Each top-level unit of the package (a module or subpackage) -> the units it imports."""
    found: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        unit = path.relative_to(ROOT).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "hyperx" and len(parts) > 1 and parts[1] != unit:
                    found.setdefault(unit, set()).add(parts[1])
    return found


def test_cores_import_no_application_package():
    bad = {unit: targets & APPS for unit, targets in _imports().items()
           if unit not in APPS and targets & APPS}
    assert bad == {}


def test_application_packages_import_only_what_docs_architecture_allows():
    bad = {unit: (targets & APPS) - ALLOWED[unit] for unit, targets in _imports().items()
           if unit in APPS and (targets & APPS) - ALLOWED[unit]}
    assert bad == {}


def test_the_rule_sees_a_forbidden_import(tmp_path, monkeypatch):
    """The reader is not vacuous: a module of llm importing the agents is reported."""
    fake = tmp_path / "hyperx"
    (fake / "llm").mkdir(parents=True)
    (fake / "llm" / "x.py").write_text("from hyperx.agents.core import make_agent\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake)
    assert _imports() == {"llm": {"agents"}}
