"""The plot of a run over many seeds: a mean curve with its 95% band per learner."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def plot_bands(t: np.ndarray, curves: dict[str, np.ndarray], path: Path, *, ylabel: str,
               title: str = "") -> None:
    """Each (seeds, len(t)) array of ``curves`` as its mean over seeds against round ``t``,
    with a 95% band (mean +- 1.96 sd / sqrt(seeds); none for one seed), written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, values in curves.items():
        mean = values.mean(axis=0)
        half = (1.96 * values.std(axis=0, ddof=1) / math.sqrt(values.shape[0])
                if values.shape[0] > 1 else np.zeros_like(mean))
        ax.plot(t, mean, label=label)
        ax.fill_between(t, mean - half, mean + half, alpha=0.25)
    ax.set_xlabel("round t")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
