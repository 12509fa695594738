"""Scalars of a run for TensorBoard and, with ``--track``, for Weights & Biases.

Every training command logs its scalars through one :class:`Tracker`: TensorBoard event files
in ``OUT/tb`` (``tensorboard --logdir OUT/tb``), always, and with ``--track`` the same scalars
to a Weights & Biases run (CleanRL's ``--track``), whose config holds the command's settings and
the :func:`hyperx._host.environment`. W&B is the optional ``track`` extra
(``pip install "hyperx-rl[track]"``); ``WANDB_MODE=offline`` keeps the run in ``OUT/wandb`` for
a later ``wandb sync`` on machines without network, and ``WANDB_PROJECT`` names the project
(default ``hyperx``).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperx.commands._args import fail

PROJECT = "hyperx"
"""The W&B project when ``WANDB_PROJECT`` is not set."""


def add_tracking_option(parser: argparse.ArgumentParser) -> None:
    """``--track`` for a command that trains (its scalars always go to ``OUT/tb``)."""
    parser.add_argument("--track", action="store_true",
                        help="also log the run's scalars to Weights & Biases (the track extra; "
                             "WANDB_MODE=offline keeps them in OUT/wandb)")


def check_tracking(track: bool) -> None:
    """Fail in one line, before any work, when ``--track`` is asked for without wandb."""
    if track:
        try:
            import wandb  # noqa: F401
        except ImportError:
            fail("--track: needs Weights & Biases: pip install 'hyperx-rl[track]'")


def log_curves(tracker: Tracker, name: str, steps: Any,
               curves: Mapping[str, Any]) -> None:
    """Log curves that share their x-axis ``steps`` (a sweep's log-spaced rounds t), one
    scalar ``name/LABEL`` per curve at each step, then close ``tracker``."""
    try:
        for i, step in enumerate(steps):
            tracker.log({f"{name}/{label}": float(curve[i]) for label, curve in curves.items()},
                        int(step))
    finally:
        tracker.close()


class Tracker:
    """One run's scalar log: TensorBoard in ``out/tb`` and, with ``track``, a W&B run.

    Args:
      out: the run's folder.
      command: the command (``"deepsea"``), the W&B run's group.
      settings: the run's settings (``run.json``), the W&B config.
      track: also log to Weights & Biases.
    """

    def __init__(self, out: Path, command: str, settings: Mapping[str, Any], *,
                 track: bool = False) -> None:
        from tensorboardX import SummaryWriter

        from hyperx._host import environment

        self._tb = SummaryWriter(str(Path(out) / "tb"))
        self._wandb = None
        if track:
            import wandb

            self._wandb = wandb.init(
                project=os.environ.get("WANDB_PROJECT", PROJECT), group=command,
                name=Path(out).resolve().name, dir=str(out), reinit=True,
                config={"command": command, **settings, "environment": environment()})

    def log(self, scalars: Mapping[str, float | None], step: int) -> None:
        """Log every finite scalar of ``scalars`` at ``step`` (``None`` and NaN are skipped)."""
        finite = {k: float(v) for k, v in scalars.items()
                  if v is not None and v != "" and math.isfinite(float(v))}
        for key, value in finite.items():
            self._tb.add_scalar(key, value, step)
        if self._wandb is not None and finite:
            self._wandb.log(finite, step=step)

    def flush(self) -> None:
        """Write what was logged so far to disk."""
        self._tb.flush()

    def close(self) -> None:
        """Flush and close TensorBoard and the W&B run."""
        self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
