"""Deprecated: the generic loop moved to :mod:`hyperx.loop`, the bandit runner to
:mod:`hyperx.bandits.runner`. Importing a name from here still works for one release and warns
with its new home."""

from __future__ import annotations

from hyperx._deprecation import moved

__getattr__ = moved("hyperx.experiment", {
    **dict.fromkeys(("ScanResult", "log_grid", "run_scan", "shard_leading_axis", "to_host"),
                    "hyperx.loop"),
    **dict.fromkeys(("BanditResult", "CACHE_BYTES", "check_run_memory", "run_bandit"),
                    "hyperx.bandits.runner")})
