"""Every code block of README.md and docs/*.md runs as written; so do the python blocks of the
docs/llm pages, and every row of the verl mapping tables in docs/llm/verl.md.

``python`` blocks of a page run in order in one namespace (a page reads like a notebook), in a
fresh working directory; ``pycon`` blocks run as doctests; ``bash`` blocks are parsed: each
``hyperx ...`` command must be accepted by the ``hyperx`` argument parser, each ``make X``
must name a Makefile target, each ``python FILE`` must name a file and each ``python -c CODE``
must compile. ``text`` blocks are prose (interface sketches, a command's output).
docs/llm/index.md, a complete program, runs in tests/llm/test_worked_example.py; docs/atari.md
in the Atari tests. Every local link of README.md and docs/ must reach its page and heading.
"""

from __future__ import annotations

import doctest
import math
import pathlib
import re
import shlex

import pytest

from hyperx.commands import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md")
                                     if p.name != "atari.md")]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
LANGUAGES = ("python", "pycon", "bash", "text")
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
LLM_PAGES = ("corrections", "objectives", "baselines", "schedule", "verl", "moe")
VERL = ROOT / "docs" / "llm" / "verl.md"


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
                elif command[0] == "python" and command[1] == "-c":
                    compile(command[2], f"{where}: python -c", "exec")
                elif command[0] == "python":
                    assert (ROOT / command[1]).exists(), f"{where}: no file {command[1]}"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(page: pathlib.Path) -> str:
    return re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)


def _anchors(page: pathlib.Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to -."""
    headings = [line.lstrip("#") for line in _prose(page).splitlines()
                if re.match(r"#{1,6} ", line)]
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_local_link_reaches_its_page_and_heading():
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in LINK.findall(_prose(page)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", LLM_PAGES)
def test_llm_page_blocks_run_in_order(page):
    path = ROOT / "docs" / "llm" / f"{page}.md"
    blocks = FENCE.findall(path.read_text())
    assert blocks, f"{path} has no python block"
    namespace: dict = {"__name__": "docs"}
    for number, block in enumerate(blocks):
        exec(compile(block, f"{path}:block{number}", "exec"), namespace)


def _table_rows(text: str, first_header: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def _code(cell: str) -> str:
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1]


MAPPING = _table_rows(VERL.read_text(), "verl setting")
METRICS = _table_rows(VERL.read_text(), "hyperx")


def test_verl_tables_are_there():
    assert len(MAPPING) >= 25 and len(METRICS) >= 10


@pytest.mark.parametrize("row", MAPPING, ids=[r[0] for r in MAPPING])
def test_verl_mapping_row(row):
    import hyperx.llm as llm
    from hyperx.llm import CorrectionConfig, ObjectiveConfig

    namespace = {**{name: getattr(llm, name) for name in llm.__all__}, "math": math}
    port = eval(_code(row[1]), namespace)
    expected = eval(_code(row[2]), namespace)
    assert isinstance(port, llm.VerlPort)
    if isinstance(expected, CorrectionConfig):
        assert port.correction == expected
    else:
        assert isinstance(expected, ObjectiveConfig)
        assert port.objective == expected


@pytest.mark.parametrize("row", METRICS, ids=[r[0] for r in METRICS])
def test_verl_metric_row(row):
    from hyperx.llm import VERL_METRIC_NAMES

    ours, theirs, same = _code(row[0]), _code(row[1]), row[2]
    if same == "yes":
        assert VERL_METRIC_NAMES[ours] == theirs
    else:
        assert same.startswith("no: ") and ours not in VERL_METRIC_NAMES
