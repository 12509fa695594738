"""Every python block of docs/cores.md runs as written (each block on its own); the python blocks
of the docs/llm pages run in order, one namespace per page (docs/llm/index.md, a complete
program, runs in tests/llm/test_worked_example.py); every row of the verl mapping tables in
docs/llm/verl.md is executed."""

from __future__ import annotations

import math
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cores.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCKS = FENCE.findall(DOC.read_text())
LLM_PAGES = ("corrections", "objectives", "baselines", "schedule", "verl")
VERL = ROOT / "docs" / "llm" / "verl.md"


def test_cores_page_has_code():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_cores_page_block_runs(number):
    exec(compile(BLOCKS[number], f"{DOC}:block{number}", "exec"), {"__name__": "docs"})


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
