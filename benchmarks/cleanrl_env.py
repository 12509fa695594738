"""CleanRL's environment for the peer benchmarks: a checkout of vwxyzjn/cleanrl and a venv.

``ensure(source, root)`` clones CleanRL from ``source`` (a URL, or a local clone or bare
mirror) at :data:`COMMIT` into ``root/cleanrl`` and builds ``root/venv`` with pip, both once.
CleanRL's ``cleanrl`` 1.2.0 is not on every PyPI mirror (this machine's has 0.4.8, which
predates ``dqn_atari_jax.py``), so the code comes from the repository, run unchanged.

Versions against CleanRL's own pins (pyproject.toml at :data:`COMMIT`), and why:
gymnasium 0.29.1 and torch (2.13.0 here, the CPU build; CleanRL pins 2.4.1, which has no
build for this Python) as pinned where possible; ale-py 0.9.0 instead of 0.8.1 (0.9.0 ships
the ROMs, 0.8.1 downloads them with AutoROM); jax, jaxlib, flax, optax and numpy at the
versions of OUR environment instead of CleanRL's jax 0.4.8 / flax 0.6.8 (no wheels for this
Python and numpy, and the same XLA on both sides makes the comparison one of design, not of
compiler); tyro, tensorboard, opencv-python unpinned, as CleanRL leaves them. Python 3.11
where CleanRL asks for < 3.11 (the only one here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

COMMIT = "fe8d8a03"
URL = "https://github.com/vwxyzjn/cleanrl"
ROOT = os.path.join(os.path.expanduser("~"), ".cache", "hyperx", "cleanrl")
PINNED = ("torch==2.13.0", "gymnasium==0.29.1", "ale-py==0.9.0", "tyro", "tensorboard",
          "opencv-python", "psutil")
OURS = ("jax", "jaxlib", "flax", "optax", "numpy")


def requirements() -> list[str]:
    """The pip requirements of the CleanRL venv (:data:`PINNED` plus our versions of
    :data:`OURS`)."""
    return [*PINNED, *(f"{name}=={metadata.version(name)}" for name in OURS)]


def environ() -> dict[str, str]:
    """The environment for CleanRL's processes: ours without ``PYTHONPATH`` (so that nothing
    of hyperx is importable there)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def ensure(source: str = URL, root: str = ROOT) -> tuple[str, str]:
    """(python, checkout): the CleanRL venv's interpreter and the checkout at :data:`COMMIT`,
    made under ``root`` when missing."""
    checkout, venv = os.path.join(root, "cleanrl"), os.path.join(root, "venv")
    python = os.path.join(venv, "bin", "python")
    os.makedirs(root, exist_ok=True)
    if not os.path.isdir(os.path.join(checkout, ".git")):
        subprocess.run(["git", "clone", "-q", source, checkout], check=True)
    subprocess.run(["git", "-C", checkout, "checkout", "-q", COMMIT], check=True)
    if not os.path.exists(os.path.join(venv, ".installed")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *requirements()], check=True,
                       env=environ())
        open(os.path.join(venv, ".installed"), "w").close()
    return python, checkout


def versions(python: str) -> dict[str, str]:
    """The installed versions of the CleanRL venv's packages that matter here."""
    names = ["torch", "gymnasium", "ale-py", *OURS]
    code = ("import json; from importlib import metadata; "
            f"print(json.dumps({{n: metadata.version(n) for n in {names!r}}}))")
    out = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True,
                         env=environ())
    return json.loads(out.stdout)
