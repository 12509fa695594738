"""Every ``hyperx ...`` command written in README.md and docs/ (bash blocks, every page) passes
``--dry-run``: all its options are checked as a real run checks them (choices, sizes, memory,
the output folder's rules) without computing, so no documented command can drift from the CLI.

Some commands depend on what an earlier command of their page wrote or registered, so only
their options are parsed here: ``plot DIR`` (DIR is the earlier run's folder), ``--resume`` and
``--eval-only`` (continue or evaluate that run), and a learner the page registers in its own
Python block (the page's blocks run in tests/test_docs.py); ``--list-agents`` prints and exits,
computing nothing.
"""

from __future__ import annotations

import pathlib
import re
import shlex

import pytest

from hyperx.commands import build_parser, main

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BASH = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
REGISTERED_BY_THEIR_PAGE = ("inflated_ts",)


def documented_commands() -> list[tuple[str, list[str]]]:
    """(page, arguments after ``hyperx``) for every ``hyperx`` command in a bash block."""
    found = []
    for page in PAGES:
        for code in BASH.findall(page.read_text()):
            for line in code.replace("\\\n", " ").splitlines():
                words = shlex.split(line.split("#")[0])
                if "hyperx" in words:
                    found.append((str(page.relative_to(ROOT)),
                                  words[words.index("hyperx") + 1:]))
    return found


COMMANDS = documented_commands()


def _depends_on_an_earlier_command(argv: list[str]) -> bool:
    return (argv[0] == "plot" or "--resume" in argv or "--eval-only" in argv
            or "--list-agents" in argv
            or any(name in word for word in argv for name in REGISTERED_BY_THEIR_PAGE))


def test_the_docs_hold_a_command_of_every_kind():
    kinds = {argv[0] for _, argv in COMMANDS}
    assert kinds >= {"demo", "bandit", "deepsea", "atari", "games", "llm", "plot"}, kinds


@pytest.mark.parametrize("page, argv", COMMANDS,
                         ids=[f"{page}:{' '.join(argv)[:60]}" for page, argv in COMMANDS])
def test_documented_command_passes_dry_run(page, argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if _depends_on_an_earlier_command(argv):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:  # --list-agents prints and exits 0 while parsing
            assert exc.code == 0, capsys.readouterr().err
        return
    assert main([*argv, "--dry-run"]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "--dry-run: every option is valid" in printed, printed
    assert not any(tmp_path.iterdir()), f"{page}: the dry run wrote {list(tmp_path.iterdir())}"


def test_a_dry_run_refuses_what_the_run_refuses(tmp_path, monkeypatch, capsys):
    """The dry run makes the run's checks: a bad option, a folder holding another run."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["atari", "--game", "Pongg", "--out", "run", "--dry-run"])
    assert exc.value.code == 2 and "did you mean Pong?" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as exc:
        main(["deepsea", "--size", "4", "--out", "run", "--dry-run"])
    assert exc.value.code == 2 and "not empty and holds no hyperx run" in capsys.readouterr().err
    assert main(["deepsea", "--size", "4", "--episodes", "10", "--out", "fresh",
                 "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "200 env steps" in printed and "would write to fresh/" in printed, printed
    assert "memory: DeepSea(4)" in printed and not (tmp_path / "fresh").exists()
