"""Deprecated: the generic loop moved to :mod:`hyperx.loop`, the bandit runner to
:mod:`hyperx.bandits.runner`. Importing a name from here still works for one release and warns
with its new home."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_MOVED = {**{name: "hyperx.loop" for name in ("ScanResult", "log_grid", "run_scan",
                                               "shard_leading_axis", "to_host")},
          **{name: "hyperx.bandits.runner" for name in ("BanditResult", "CACHE_BYTES",
                                                         "check_run_memory", "run_bandit")}}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module 'hyperx.experiment' has no attribute {name!r}")
    warnings.warn(f"hyperx.experiment.{name} moved to {_MOVED[name]}.{name}; "
                  "hyperx.experiment goes in the next release", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_MOVED[name]), name)
