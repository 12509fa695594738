"""Files of a DeepSea run: ``returns.csv``, ``summary.json`` and ``deepsea.png``.

``returns.csv`` can be written as the run goes (:class:`ReturnsWriter`, one append per chunk,
rows in episode order); the summary names both "learned" criteria and flags the sizes at which
a uniformly random policy meets bsuite's criterion by chance (:func:`uniform_chance`).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np

from hyperx._rundir import read_summary, write_summary_json
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
    write_summary_json(Path(out), summary)
    plot_returns(result.returns, os.path.join(out, "deepsea.png"), f"{agent} on DeepSea({size})")
    return summary


def read_returns(path: str | Path) -> np.ndarray:
    """The (S, E) returns of a ``returns.csv`` (rows in any order).

    Raises ``ValueError`` naming the file when it is not such a table: a missing or wrong
    header, a row that is not three numbers, no rows, or seed and episode ids that do not fit
    the rows (an id far beyond the row count would allocate a table of that size).
    """
    path = Path(path)
    lines = path.read_text().splitlines()
    header = lines[0].strip().split(",") if lines else []
    if header[:3] != ["seed", "episode", "return"]:
        raise ValueError(f"{path}: expected the header seed,episode,return, got {header}")
    rows = [line for line in lines[1:] if line.strip()]
    if not rows:
        raise ValueError(f"{path}: expected rows of seed, episode, return; found none")
    try:
        table = np.loadtxt(rows, delimiter=",", ndmin=2)
    except ValueError as err:
        raise ValueError(f"{path}: a row is not numbers ({err})") from None
    if table.shape[1] < 3:
        raise ValueError(f"{path}: expected rows of seed, episode, return; found none")
    seeds, episodes = table[:, 0], table[:, 1]
    if (np.any(seeds < 0) or np.any(episodes < 1) or np.any(seeds % 1) or np.any(episodes % 1)
            or not np.all(np.isfinite(table[:, :2]))):
        raise ValueError(f"{path}: seeds must be integers >= 0 and episodes integers >= 1")
    cells = (seeds.max() + 1) * episodes.max()
    if cells > 4 * len(table) + 1000:
        raise ValueError(f"{path}: {len(table)} rows name seeds up to {int(seeds.max())} and "
                         f"episodes up to {int(episodes.max())}: not one run's table")
    returns = np.full((int(seeds.max()) + 1, int(episodes.max())), np.nan)
    returns[seeds.astype(int), episodes.astype(int) - 1] = table[:, 2]
    return returns


def plot_returns_csv(directory: str | Path) -> Path:
    """Redraw ``deepsea.png`` in ``directory`` from its ``returns.csv``; returns the path."""
    directory = Path(directory)
    summary = directory / "summary.json"
    title = "DeepSea"
    if summary.exists():
        meta = read_summary(summary)
        title = f"{meta.get('agent', '?')} on DeepSea({meta.get('size', '?')})"
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
