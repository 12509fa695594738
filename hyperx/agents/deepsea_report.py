"""Files of a DeepSea run: ``returns.csv``, ``summary.json`` and ``deepsea.png``.

``returns.csv`` can be written as the run goes (:class:`ReturnsWriter`, one append per chunk,
rows in episode order); the summary names both "learned" criteria and flags the sizes at which
a uniformly random policy meets bsuite's criterion by chance (:func:`uniform_chance`).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from hyperx._rundir import write_atomic
from hyperx.agents.deepsea import DeepSeaResult

CHANCE_LEVEL = 0.05
"""A size is flagged when a uniform random policy meets bsuite's criterion with at least this
probability within the run's episodes."""
CHANCE_EPISODES = 2000
"""Episodes over which :func:`uniform_chance` is computed (crossings after that are rarer than
1e-6 at every N >= 4)."""

CRITERIA = {
    "learned_episode_bsuite": (
        "bsuite's criterion (Osband et al., ICLR 2020): first episode (1-based) at which "
        "#bad episodes / #episodes < 0.9, evaluated at EVERY episode (the exact crossing; "
        "bsuite itself checks only at log-spaced logged episodes); -1 if never"),
    "learned_episode_running_mean": (
        "stricter: first episode whose mean return over the last 100 episodes reaches "
        "0.9 x 0.99; -1 if never"),
    "bsuite_solved": "learned_episode_bsuite is reached before episode 2^N + 100 (bsuite score)",
}


def running_mean(x: np.ndarray, window: int = 100) -> np.ndarray:
    """Mean of the last ``min(window, e)`` values at each episode e, along the last axis."""
    c = np.cumsum(np.asarray(x, np.float64), axis=-1)
    e = np.arange(1, x.shape[-1] + 1)
    lagged = np.concatenate([np.zeros(c.shape[:-1] + (window,)), c], axis=-1)[..., :-window]
    return (c - lagged[..., : c.shape[-1]]) / np.minimum(e, window)


def uniform_chance(size: int, episodes: int, threshold: float = 0.9) -> float:
    """Probability that a uniformly random policy meets bsuite's criterion (#bad / #episodes
    < ``threshold`` at some episode e <= ``episodes``) on DeepSea(size).

    Under uniform actions an episode is good (never left on the diagonal) only if all N
    actions go right: probability p = 2^-N, independently per episode. With k good episodes
    among the first e, the criterion is (e - k) / e < threshold; the first-passage probability
    is computed exactly by dynamic programming over k (cost O(E^2), E capped at
    :data:`CHANCE_EPISODES`).
    """
    p = 0.5 ** size
    horizon = min(episodes, CHANCE_EPISODES)
    alive = np.zeros(horizon + 1)  # P(k good so far and not yet crossed)
    alive[0] = 1.0
    crossed = 0.0
    for e in range(1, horizon + 1):
        alive[1:e + 1] = alive[1:e + 1] * (1 - p) + alive[:e] * p
        alive[0] *= 1 - p
        hit = (e - np.arange(horizon + 1)) / e < threshold
        crossed += float(alive[hit].sum())
        alive[hit] = 0.0
    return crossed


def summarise(result: DeepSeaResult, *, agent: str, size: int) -> dict[str, Any]:
    """The JSON summary of a run (per seed and over seeds; criteria named and explained)."""
    bsuite = result.learned_bsuite.tolist()
    strict = result.learned_running_mean.tolist()
    solved = [b > 0 and b < 2 ** min(size, 60) + 100 for b in bsuite]
    episodes = int(result.returns.shape[1])
    chance = uniform_chance(size, episodes)
    return {
        "agent": agent, "size": size, "num_seeds": int(result.returns.shape[0]),
        "episodes": episodes, "env_steps_per_seed": result.steps_done,
        "criteria": CRITERIA,
        "learned_episode_bsuite": bsuite, "learned_episode_running_mean": strict,
        "bsuite_solved": solved,
        "uniform_policy_meets_bsuite_probability": chance,
        "bsuite_criterion_at_chance_level": chance >= CHANCE_LEVEL,
        "per_seed": [{"seed": s, "learned_episode_bsuite": b, "learned_episode_running_mean": r,
                      "bsuite_solved": ok}
                     for s, (b, r, ok) in enumerate(zip(bsuite, strict, solved, strict=True))],
        "wall_time_s": result.wall_time_s, "compile_time_s": result.compile_time_s,
        "env_steps_per_s": (result.env_steps_per_s if np.isfinite(result.env_steps_per_s)
                            else None),
        "env_steps_per_s_note": "summed over the vmapped seeds; acting + learning; after compile",
    }


def describe(summary: dict[str, Any]) -> str:
    """One line with both criteria, named, and the chance-level flag."""
    text = (f"learned by bsuite's criterion (#bad / #episodes < 0.9, exact crossing) at episode "
            f"{summary['learned_episode_bsuite']}; by the running mean (last-100 mean return "
            f">= 0.9 x 0.99) at {summary['learned_episode_running_mean']} (-1: never)")
    if summary["bsuite_criterion_at_chance_level"]:
        text += (f"; at N = {summary['size']} a uniformly random policy meets bsuite's criterion "
                 f"by chance with probability "
                 f"{summary['uniform_policy_meets_bsuite_probability']:.2f} within "
                 f"{summary['episodes']} episodes, so it says little here")
    return text


class ReturnsWriter:
    """Appends the episodes finished since the last call to ``returns.csv`` (seed, episode,
    return, bad; rows in episode order, seeds within an episode), so a run's returns are on
    disk chunk by chunk and never held as rows in memory.

    The first call rewrites the file from episode 1 (a resumed run's carry holds every episode
    so far); later calls append and flush.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.written = None

    def __call__(self, returns: Any, bad: Any, episodes: int) -> None:
        """Write episodes ``written+1 .. episodes`` of the (S, E) ``returns`` / ``bad``."""
        first = 0 if self.written is None else self.written
        if episodes <= first and self.written is not None:
            return
        block = np.asarray(returns[:, first:episodes])
        flags = np.asarray(bad[:, first:episodes])
        mode = "w" if self.written is None else "a"
        with open(self.path, mode, newline="") as f:
            writer = csv.writer(f)
            if mode == "w":
                writer.writerow(["seed", "episode", "return", "bad"])
            writer.writerows([s, first + e + 1, f"{block[s, e]:.6g}", int(flags[s, e])]
                             for e in range(block.shape[1]) for s in range(block.shape[0]))
            f.flush()
            os.fsync(f.fileno())
        self.written = episodes


def write_outputs(result: DeepSeaResult, out: str, *, agent: str, size: int,
                  returns: bool = True) -> dict[str, Any]:
    """Write ``returns.csv`` (unless ``returns=False``: already written by a
    :class:`ReturnsWriter`), ``summary.json`` and ``deepsea.png`` (running mean of the last
    100 returns per seed) to ``out``."""
    os.makedirs(out, exist_ok=True)
    if returns:
        ReturnsWriter(os.path.join(out, "returns.csv"))(result.returns, result.bad,
                                                        result.returns.shape[1])
    summary = summarise(result, agent=agent, size=size)
    write_atomic(Path(out) / "summary.json", json.dumps(summary, indent=2) + "\n")
    plot_returns(result.returns, os.path.join(out, "deepsea.png"), f"{agent} on DeepSea({size})")
    return summary


def read_returns(path: str | Path) -> np.ndarray:
    """The (S, E) returns of a ``returns.csv`` (rows in any order)."""
    table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    seeds, episodes = table[:, 0].astype(int), table[:, 1].astype(int)
    returns = np.full((seeds.max() + 1, episodes.max()), np.nan)
    returns[seeds, episodes - 1] = table[:, 2]
    return returns


def plot_returns_csv(directory: str | Path) -> Path:
    """Redraw ``deepsea.png`` in ``directory`` from its ``returns.csv``; returns the path."""
    directory = Path(directory)
    summary = directory / "summary.json"
    title = "DeepSea"
    if summary.exists():
        meta = json.loads(summary.read_text())
        title = f"{meta['agent']} on DeepSea({meta['size']})"
    path = directory / "deepsea.png"
    plot_returns(read_returns(directory / "returns.csv"), str(path), title)
    return path


def plot_returns(returns: np.ndarray, path: str, title: str) -> None:
    """Running mean of the last 100 returns per seed against the episode, with 0.9 x 0.99."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    episodes = np.arange(1, returns.shape[1] + 1)
    for s, curve in enumerate(running_mean(returns)):
        ax.plot(episodes, curve, lw=1, label=f"seed {s}")
    ax.axhline(0.9 * 0.99, color="k", ls=":", lw=1, label="0.9 x 0.99")
    ax.set(xlabel="episode", ylabel="mean return (last 100 episodes)", title=title)
    if returns.shape[0] <= 10:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
