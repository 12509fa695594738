"""The three floors of docs/architecture.md, read from the package's source.

- cores (every top-level module of ``hyperx`` that is not below): import no algorithm package
  and not the commands;
- algorithms (``agents``, ``bandits``, ``envs``, ``games``, ``llm``, ``demos``): import the
  cores, and only the environments among themselves (the agents and bandit learners train on
  them), never each other, the commands or argparse, and write no file except through the
  loop's hooks and the named outputs in :data:`WRITES`;
- commands (``hyperx.commands``): import anything below them.
"""

import ast
import pathlib
import sys

import hyperx

ROOT = pathlib.Path(hyperx.__file__).parent
ALGORITHMS = {"agents", "bandits", "envs", "games", "llm", "demos"}
COMMANDS = {"commands", "__main__"}
ALLOWED = {  # an algorithm package -> the algorithm packages it may import
    "agents": {"envs"}, "bandits": {"envs"}, "envs": set(), "games": set(), "llm": set(),
    "demos": set(),
}
WRITE_CALLS = {"write_atomic", "savez", "savefig", "write_text", "write_bytes", "dump"}
WRITES = {  # the file writes an algorithm package may make, and why
    ("agents/atari.py", "write_atomic"): "the finished games beside a checkpoint, in the "
                                         "loop's save hook",
    ("agents/atari_eval.py", "open"): "the MP4 of evaluation games evaluate_saved is asked for",
    ("envs/text_bandit.py", "savez"): "the cache of encoded text features (a pure function of "
                                      "the data and the encoder)",
}


def _modules(root: pathlib.Path):
    for path in sorted(root.rglob("*.py")):
        yield path, path.relative_to(root).parts[0].removesuffix(".py"), ast.parse(
            path.read_text())


def _imports(root: pathlib.Path | None = None) -> dict[str, set[str]]:
    """Each top-level unit of the package (a module or subpackage) -> the hyperx units and the
    outside modules (``argparse``) it imports."""
    found: dict[str, set[str]] = {}
    for _, unit, tree in _modules(root or ROOT):
        for node in ast.walk(tree):
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
                elif parts[0] == "argparse":
                    found.setdefault(unit, set()).add("argparse")
    return found


def _writes(root: pathlib.Path | None = None) -> set[tuple[str, str]]:
    """(file, call) of every file write in the algorithm packages: a call of one of
    :data:`WRITE_CALLS`, or ``open`` with a mode that writes."""
    root = root or ROOT
    found = set()
    for path, unit, tree in _modules(root):
        if unit not in ALGORITHMS:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            modes = [a.value for a in [*node.args[1:2], *(k.value for k in node.keywords
                                                          if k.arg == "mode")]
                     if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if name in WRITE_CALLS or (name == "open" and any(set(m) & set("wax+")
                                                                for m in modes)):
                found.add((path.relative_to(root).as_posix(), name))
    return found


def test_cores_import_no_algorithm_package_and_no_command():
    bad = {unit: targets & (ALGORITHMS | COMMANDS) for unit, targets in _imports().items()
           if unit not in ALGORITHMS | COMMANDS and targets & (ALGORITHMS | COMMANDS)}
    assert bad == {}


def test_algorithms_import_the_cores_and_the_environments_only():
    bad = {unit: (targets & (ALGORITHMS | COMMANDS | {"argparse"})) - ALLOWED[unit]
           for unit, targets in _imports().items()
           if unit in ALGORITHMS and (targets & (ALGORITHMS | COMMANDS | {"argparse"}))
           - ALLOWED[unit]}
    assert bad == {}


def test_algorithms_write_only_the_named_files():
    assert _writes() == set(WRITES)


def test_the_rules_see_a_forbidden_import_and_a_write(tmp_path, monkeypatch):
    """The readers are not vacuous: an llm module importing the agents, argparse and the
    commands, and writing a CSV, is reported."""
    fake = tmp_path / "hyperx"
    (fake / "llm").mkdir(parents=True)
    (fake / "llm" / "x.py").write_text(
        "import argparse\nfrom hyperx.agents.core import make_agent\n"
        "from hyperx.commands import main\nopen('a.csv', 'w')\nopen('b.csv')\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake)
    assert _imports() == {"llm": {"agents", "argparse", "commands"}}
    assert _writes() == {("llm/x.py", "open")}
