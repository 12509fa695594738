"""Save and resume a training carry with orbax (checkpoints between compiled chunks).

The carry (parameters, target parameters, optimiser state, replay, environment state, keys,
metrics, step counter) is one pytree; :class:`CheckpointManager` writes it after each chunk
under ``directory/<step>/`` next to a JSON description of the run and the SHA-256 of the
carry's bytes, and restores the latest one into the structure of a freshly built carry.
Restoring is exact (raw array bytes), so a resumed run equals an uninterrupted one bit for bit
on the same device and versions.

Integrity: the files of a step must have the sizes and SHA-256 digests recorded once the save
was on disk (``<step>/hyperx_files.json``), so a truncated or edited file is found
before orbax reads anything, and a restored carry must reproduce the checksum of its bytes
recorded when it was saved. A step that fails either is skipped with a one-line warning on
stderr, and the newest intact step is used; when none is intact,
``ValueError`` says so in one line. A Ctrl-C during a save is held until the save is complete,
so no half-written step is left; temporary directories of a killed process are removed when the
directory is opened again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from hyperx._host import first_difference, sigint_held, write_atomic

DIGESTS = "hyperx_files.json"
"""The record of a step's files (sizes and SHA-256), written into the step's folder."""


def checksum(tree: Any) -> str:
    """SHA-256 of every leaf's dtype, shape and bytes, in tree order."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(tree)):
        array = np.ascontiguousarray(leaf)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


class CheckpointManager:
    """Latest-two checkpoints of a carry in ``directory``, tagged with ``metadata`` (a dict of
    JSON values describing the run). Resuming from a directory written by a different run
    (other metadata) raises ``ValueError`` naming the first differing entry.

    ``read_only`` (to evaluate a saved run, perhaps while it still trains): restore only;
    nothing in ``directory`` is created, removed or written (a training run's temporary
    directories are left to it)."""

    def __init__(self, directory: str, metadata: dict[str, Any], *, read_only: bool = False):
        self.metadata = metadata
        self.read_only = read_only
        self.directory = os.path.abspath(directory)
        if read_only:
            absl = logging.getLogger("absl")
            level = absl.level
            absl.setLevel(logging.ERROR)  # orbax warns that the directory is read only
            try:
                self._manager = ocp.CheckpointManager(
                    self.directory, options=ocp.CheckpointManagerOptions(
                        read_only=True, save_interval_steps=0, max_to_keep=None, create=False,
                        cleanup_tmp_directories=False))
            finally:
                absl.setLevel(level)
        else:
            self._manager = ocp.CheckpointManager(
                self.directory, options=ocp.CheckpointManagerOptions(
                    max_to_keep=2, create=True, cleanup_tmp_directories=True))

    def save(self, step: int, carry: Any) -> None:
        """Write ``carry`` as checkpoint ``step`` with its checksum (blocks until on disk)."""
        with sigint_held():
            self._manager.save(step, args=ocp.args.Composite(
                carry=ocp.args.StandardSave(carry), meta=ocp.args.JsonSave(self.metadata),
                integrity=ocp.args.JsonSave({"sha256": checksum(carry)})))
            self._manager.wait_until_finished()
            self._write_digests(step)

    def _digests_path(self, step: int) -> str:
        return os.path.join(self.directory, str(step), DIGESTS)

    def _write_digests(self, step: int) -> None:
        """Record every file of ``step`` (size and SHA-256) in the step's folder."""
        path = self._digests_path(step)
        write_atomic(Path(path), json.dumps(_file_digests(os.path.dirname(path))))

    def _check_files(self, step: int) -> None:
        """Raise ``ValueError`` naming the first file of ``step`` that is missing or differs
        from its record (no record, as in checkpoints from before records: nothing to check)."""
        path = self._digests_path(step)
        if not os.path.exists(path):
            return
        with open(path) as f:
            want = json.load(f)
        folder = os.path.join(self.directory, str(step))
        for rel, (size, digest) in sorted(want.items()):
            file = os.path.join(folder, rel)
            if not os.path.isfile(file):
                raise ValueError(f"file {rel} is missing")
            if os.path.getsize(file) != size or _sha256(file) != digest:
                raise ValueError(f"file {rel} changed since the save")

    restored_step: int | None = None
    """The step :meth:`restore_latest` restored (after any fallback past damaged steps), or
    ``None`` before a restore or when there was nothing to restore."""

    def latest_step(self) -> int | None:
        """The newest saved step (intact or not), or ``None``."""
        return self._manager.latest_step()

    def _read_meta(self, step: int) -> dict[str, Any]:
        meta = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(meta["meta"])

    def _restore(self, step: int, abstract: Any) -> Any:
        """The carry of ``step``; an unreadable step or a checksum mismatch raises."""
        restored = self._manager.restore(step, args=ocp.args.Composite(
            carry=ocp.args.StandardRestore(abstract), integrity=ocp.args.JsonRestore()))
        if checksum(restored["carry"]) != restored["integrity"]["sha256"]:
            raise ValueError("checksum mismatch")
        return restored["carry"]

    def restore_latest(self, like: Any) -> Any:
        """The newest intact saved carry in the structure of ``like``, or ``like`` when the
        directory holds no checkpoint (module docstring: integrity and fallback). When it
        raises (another run's directory, no intact checkpoint), the manager is closed first, so
        orbax's threads do not outlive the error."""
        try:
            return self._restore_latest(like)
        except BaseException:
            self.close()
            raise

    def _restore_latest(self, like: Any) -> Any:
        steps = sorted(self._manager.all_steps(), reverse=True)
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), like)
        failures = []
        for step in steps:
            try:
                self._check_files(step)
                difference = first_difference(self._read_meta(step), self.metadata)
                carry = None if difference else self._restore(step, abstract)
            except Exception as err:  # any unreadable or corrupt step is skipped
                failures.append(f"step {step}: {_reason(err)}")
                continue
            if difference:
                advice = ("pass the run's own settings" if self.read_only else
                          "resume with the saved settings or use another directory")
                raise ValueError(f"checkpoint_dir: {self.directory} holds a different run, "
                                 f"{difference}; {advice}")
            if failures:
                sys.stderr.write(f"hyperx: warning: {self.directory}: checkpoint "
                                 f"{'; '.join(failures)}; "
                                 f"{'restoring' if self.read_only else 'resuming from'} "
                                 f"step {step}\n")
            self.restored_step = step
            return carry
        if failures:
            raise ValueError(f"checkpoint_dir: no intact checkpoint in {self.directory} "
                             f"({'; '.join(failures)})"
                             f"{'' if self.read_only else '; remove it to start again'}")
        return like

    def close(self) -> None:
        """Flush and release the manager."""
        self._manager.close()


def restore_saved(directory: str, metadata: dict[str, Any], like: Any, command: str) -> Any:
    """The newest intact carry of a finished or running run's ``directory``, read only (its
    files are not touched), in the structure of ``like`` (arrays or ``jax.ShapeDtypeStruct``).

    ``metadata`` must equal the run's (:class:`CheckpointManager`). Damaged steps are skipped
    with a warning; ``ValueError`` when none is intact, or when ``directory`` holds no
    checkpoint: the message names the folder and asks whether the run was made with
    ``hyperx {command} --checkpoint``."""
    if os.path.isdir(directory):
        manager = CheckpointManager(directory, metadata, read_only=True)
        try:
            if manager.latest_step() is not None:
                return manager.restore_latest(like)
        finally:
            manager.close()
    inner = os.path.join(directory, "checkpoints")
    hint = (f"; pass its checkpoints folder, {inner}" if os.path.isdir(inner) else
            f"; was the run made with --checkpoint (hyperx {command} --checkpoint writes "
            f"OUT/checkpoints, train_{command}(checkpoint_dir=...) that folder)?")
    raise ValueError(f"checkpoint_dir: expected the checkpoints folder of a saved {command} run, "
                     f"but {os.path.abspath(directory)} "
                     f"{'holds no checkpoint' if os.path.isdir(directory) else 'does not exist'}"
                     f"{hint}")


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _file_digests(folder: str) -> dict[str, list]:
    """``{path relative to folder: [size, sha256]}`` of every file under ``folder`` but the
    record itself."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if rel != DIGESTS:
                out[rel] = [os.path.getsize(path), _sha256(path)]
    return out


def _reason(err: Exception) -> str:
    """A short, one-line reason for an unreadable checkpoint."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:120]}" if text != "checksum mismatch" else text
