"""The commands' plots: one figure helper, and a mean curve with its 95% band per learner."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


@contextlib.contextmanager
def figure(path: str | Path, *, dpi: int, **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """``fig, axes = plt.subplots(**subplots)`` on matplotlib's file backend (Agg); after the
    block, laid out and written to ``path`` at ``dpi``, and always closed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)


def plot_bands(t: np.ndarray, curves: dict[str, np.ndarray], path: Path, *, ylabel: str,
               title: str = "") -> None:
    """Each (seeds, len(t)) array of ``curves`` as its mean over seeds against round ``t``,
    with a 95% band (mean +- 1.96 sd / sqrt(seeds); none for one seed), written to ``path``."""
    with figure(path, dpi=120, figsize=(6, 4)) as (_, ax):
        for label, values in curves.items():
            mean = values.mean(axis=0)
            half = (1.96 * values.std(axis=0, ddof=1) / math.sqrt(values.shape[0])
                    if values.shape[0] > 1 else np.zeros_like(mean))
            ax.plot(t, mean, label=label)
            ax.fill_between(t, mean - half, mean + half, alpha=0.25)
        ax.set(xlabel="round t", ylabel=ylabel, title=title)
        ax.legend(fontsize="small")
