"""Every python block of docs/cores.md runs as written (each block on its own)."""

from __future__ import annotations

import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "cores.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.MULTILINE | re.DOTALL)


def test_cores_page_has_code():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_cores_page_block_runs(number):
    exec(compile(BLOCKS[number], f"{DOC}:block{number}", "exec"), {"__name__": "docs"})
