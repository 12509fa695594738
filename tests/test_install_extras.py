"""The accelerator extras of pyproject.toml (``gpu``, ``gpu-cuda13``, ``tpu``) name extras that
the installed jax really provides, and docs/getting_started.md tells users how to install each.

jax ignores an extra it does not define with only a warning (``jax 0.4.21 does not provide the
extra 'cuda111'``) and installs the CPU build, so a misspelt extra would fail silently on the
user's GPU machine; the installed jax's metadata (``Provides-Extra``) is the reference here.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ACCELERATORS = {"gpu": "cuda12", "gpu-cuda13": "cuda13", "tpu": "tpu"}


def _extras() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def _jax_extras(requirements: list[str]) -> set[str]:
    """{"cuda12"} from ["jax[cuda12]"]; every requirement must be a jax extra."""
    found = set()
    for requirement in requirements:
        match = re.fullmatch(r"jax\[([\w,-]+)\]\s*([<>=!~].*)?", requirement)
        assert match, f"expected jax[EXTRA] (optionally with a version), got {requirement!r}"
        found |= set(match.group(1).split(","))
    return found


@pytest.mark.parametrize("extra", ACCELERATORS)
def test_the_accelerator_extra_names_jax_s_extra(extra):
    extras = _extras()
    assert extra in extras, f"pyproject.toml has no [{extra}] extra"
    assert _jax_extras(extras[extra]) == {ACCELERATORS[extra]}, (extra, extras[extra])


def test_jax_provides_those_extras():
    provided = set(importlib.metadata.metadata("jax").get_all("Provides-Extra") or [])
    version = importlib.metadata.version("jax")
    for extra, requirements in _extras().items():
        if extra in ACCELERATORS:
            missing = _jax_extras(requirements) - provided
            assert not missing, (f"[{extra}]: jax {version} provides no extra {sorted(missing)} "
                                 f"(it provides {sorted(provided)})")


def test_the_getting_started_page_installs_each_extra():
    page = (ROOT / "docs" / "getting_started.md").read_text()
    for extra, jax_extra in ACCELERATORS.items():
        assert f'pip install -e ".[all,{extra}]"' in page, extra
        assert f"jax[{jax_extra}]" in page, jax_extra
