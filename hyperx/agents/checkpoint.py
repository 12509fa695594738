"""Deprecated: the checkpoint manager moved to :mod:`hyperx.checkpoint` (every trainer uses
it, not only the agents'). Importing a name from here still works for one release and warns
with its new home."""

from __future__ import annotations

from hyperx._deprecation import moved

__getattr__ = moved("hyperx.agents.checkpoint",
                    dict.fromkeys(("CheckpointManager", "checksum", "DIGESTS"),
                                  "hyperx.checkpoint"))
