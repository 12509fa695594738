"""Names that moved: a module's ``__getattr__`` that still serves them for one release."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def moved(module: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """``__getattr__`` for ``module`` whose old names moved: ``homes[old]`` is the new home,
    a module path (same name there) or ``"module.path:new_name"``. The old name still imports,
    with a ``DeprecationWarning`` naming its new home."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        home, _, new = homes[name].partition(":")
        new = new or name
        warnings.warn(f"{module}.{name} moved to {home}.{new}; {module}.{name} goes in the "
                      "next release", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), new)

    return __getattr__
