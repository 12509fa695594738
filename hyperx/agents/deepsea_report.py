"""Files of a DeepSea run: ``returns.csv``, ``summary.json`` and ``deepsea.png``."""

from __future__ import annotations

import csv
import json
import os
from typing import Any

import numpy as np

from hyperx.agents.deepsea import DeepSeaResult

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


def summarise(result: DeepSeaResult, *, agent: str, size: int) -> dict[str, Any]:
    """The JSON summary of a run (per seed and over seeds; criteria named and explained)."""
    bsuite = result.learned_bsuite.tolist()
    strict = result.learned_running_mean.tolist()
    solved = [b > 0 and b < 2 ** min(size, 60) + 100 for b in bsuite]
    return {
        "agent": agent, "size": size, "num_seeds": int(result.returns.shape[0]),
        "episodes": int(result.returns.shape[1]), "env_steps_per_seed": result.steps_done,
        "criteria": CRITERIA,
        "learned_episode_bsuite": bsuite, "learned_episode_running_mean": strict,
        "bsuite_solved": solved,
        "per_seed": [{"seed": s, "learned_episode_bsuite": b, "learned_episode_running_mean": r,
                      "bsuite_solved": ok}
                     for s, (b, r, ok) in enumerate(zip(bsuite, strict, solved, strict=True))],
        "wall_time_s": result.wall_time_s, "compile_time_s": result.compile_time_s,
        "env_steps_per_s": (result.env_steps_per_s if np.isfinite(result.env_steps_per_s)
                            else None),
        "env_steps_per_s_note": "summed over the vmapped seeds; acting + learning; after compile",
    }


def write_outputs(result: DeepSeaResult, out: str, *, agent: str, size: int) -> dict[str, Any]:
    """Write ``returns.csv`` (seed, episode, return, bad), ``summary.json`` and
    ``deepsea.png`` (running mean of the last 100 returns per seed) to ``out``."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "returns.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "episode", "return", "bad"])
        for s, e in np.ndindex(result.returns.shape):
            writer.writerow([s, e + 1, f"{result.returns[s, e]:.6g}", int(result.bad[s, e])])
    summary = summarise(result, agent=agent, size=size)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    _plot(result, os.path.join(out, "deepsea.png"), f"{agent} on DeepSea({size})")
    return summary


def _plot(result: DeepSeaResult, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    episodes = np.arange(1, result.returns.shape[1] + 1)
    for s, curve in enumerate(running_mean(result.returns)):
        ax.plot(episodes, curve, lw=1, label=f"seed {s}")
    ax.axhline(0.9 * 0.99, color="k", ls=":", lw=1, label="0.9 x 0.99")
    ax.set(xlabel="episode", ylabel="mean return (last 100 episodes)", title=title)
    if result.returns.shape[0] <= 10:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
