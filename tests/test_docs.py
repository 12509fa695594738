"""Every code block of README.md and docs/*.md runs as written.

``python`` blocks of a page run in order in one namespace (a page reads like a notebook), in a
fresh working directory; ``pycon`` blocks run as doctests; ``bash`` blocks are parsed: each
``hyperx ...`` command must be accepted by the ``hyperx`` argument parser, each ``make X``
must name a Makefile target and each ``python FILE`` must name a file. ``text`` blocks are
prose (interface sketches). docs/llm/ has its own tests (tests/llm), docs/atari.md the Atari
tests.
"""

from __future__ import annotations

import doctest
import pathlib
import re
import shlex

import pytest

from hyperx.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md")
                                     if p.name != "atari.md")]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
LANGUAGES = ("python", "pycon", "bash", "text")


def _blocks(page: pathlib.Path) -> list[tuple[str, str]]:
    return BLOCK.findall(page.read_text())


def _commands(code: str) -> list[list[str]]:
    lines = code.replace("\\\n", " ").splitlines()
    return [shlex.split(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]


def test_every_block_names_its_language():
    for page in PAGES:
        for lang, code in _blocks(page):
            assert lang in LANGUAGES, f"{page.name}: a block without a known language: {code[:60]}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_code_runs(page, tmp_path, monkeypatch):
    from hyperx.bandits import registry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry, "LEARNERS", dict(registry.LEARNERS))
    namespace: dict = {"__name__": "docs"}
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    for number, (lang, code) in enumerate(_blocks(page)):
        where = f"{page.name} block {number}"
        if lang == "python":
            exec(compile(code, where, "exec"), namespace)
        elif lang == "pycon":
            test = doctest.DocTestParser().get_doctest(code, {}, where, str(page), 0)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
            runner.run(test)
            assert runner.failures == 0, where
        elif lang == "bash":
            for command in _commands(code):
                if command[0] == "hyperx":
                    try:
                        build_parser().parse_args(command[1:])
                    except SystemExit as done:  # --help, --list-agents print and exit 0
                        assert done.code == 0, f"{where}: {command}"
                elif command[0] == "make":
                    assert command[1] in targets, f"{where}: no make target {command[1]}"
                elif command[0] == "python":
                    assert (ROOT / command[1]).exists(), f"{where}: no file {command[1]}"
