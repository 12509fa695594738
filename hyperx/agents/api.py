"""Deprecated: the key schedule moved to :mod:`hyperx.agents.keys`, the DeepSea step budgets
to :mod:`hyperx.agents.deepsea`. Importing a name from here still works for one release and
warns with its new home."""

from __future__ import annotations

from hyperx._deprecation import moved

__getattr__ = moved("hyperx.agents.api", {
    **dict.fromkeys(("KeySchedule", "run_key", "split_run_key", "step_keys"),
                    "hyperx.agents.keys"),
    **dict.fromkeys(("DEEPSEA_STEP_BUDGETS", "deepsea_step_budget"), "hyperx.agents.deepsea")})
