"""Save and resume a training carry with orbax (checkpoints between compiled chunks).

The carry (parameters, target parameters, optimiser state, replay, environment state, keys,
metrics, step counter) is one pytree; :class:`CheckpointManager` writes it after each chunk
under ``directory/<step>/`` next to a JSON description of the run, and restores the latest one
into the structure of a freshly built carry. Restoring is exact (raw array bytes), so a
resumed run equals an uninterrupted one bit for bit on the same device and versions.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


class CheckpointManager:
    """Latest-two checkpoints of a carry in ``directory``, tagged with ``metadata`` (a dict of
    JSON values describing the run). Resuming from a directory written by a different run
    (other metadata) raises ``ValueError`` instead of silently mixing runs."""

    def __init__(self, directory: str, metadata: dict[str, Any]):
        self.metadata = metadata
        self._manager = ocp.CheckpointManager(
            os.path.abspath(directory),
            options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True))

    def save(self, step: int, carry: Any) -> None:
        """Write ``carry`` as checkpoint ``step`` (blocks until it is on disk)."""
        self._manager.save(step, args=ocp.args.Composite(
            carry=ocp.args.StandardSave(carry), meta=ocp.args.JsonSave(self.metadata)))
        self._manager.wait_until_finished()

    def restore_latest(self, like: Any) -> Any:
        """The latest saved carry in the structure of ``like``, or ``like`` when none exists."""
        step = self._manager.latest_step()
        if step is None:
            return like
        meta = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        if dict(meta["meta"]) != self.metadata:
            raise ValueError(f"checkpoint_dir: holds a different run {dict(meta['meta'])}, "
                             f"expected {self.metadata}")
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), like)
        restored = self._manager.restore(step, args=ocp.args.Composite(
            carry=ocp.args.StandardRestore(abstract)))
        return restored["carry"]

    def close(self) -> None:
        """Flush and release the manager."""
        self._manager.close()
