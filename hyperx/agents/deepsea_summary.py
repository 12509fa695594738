"""The summary of a DeepSea run: both "learned" criteria per seed, named, and the sizes at
which a uniformly random policy meets bsuite's criterion by chance (:func:`uniform_chance`).

``hyperx deepsea`` (:mod:`hyperx.commands.deepsea`) writes it as ``summary.json``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
