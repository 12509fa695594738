"""Human-normalised Atari scores and their aggregates (IQM, median, mean) with intervals.

Human-normalised score (Mnih et al., Nature 2015): ``(score - random) / (human - random)``
per game, with the public human and random reference scores shipped in
``hyperx/data/atari_human_random.json`` (its ``source`` field says where they come from).
Aggregates over games and runs follow Agarwal et al., "Deep RL at the edge of the statistical
precipice" (NeurIPS 2021): the interquartile mean (the mean of the middle 50% of all run x
game scores), median and mean, with stratified-bootstrap 95% intervals computed by
``rliable`` (runs resampled within each game).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import numpy as np
from scipy import stats

from hyperx._validation import check_positive


def reference_scores() -> dict[str, dict[str, float]]:
    """``{game: {"random": r, "human": h}}`` for the Atari-26 games."""
    text = resources.files("hyperx").joinpath("data/atari_human_random.json").read_text()
    return json.loads(text)["games"]


def human_normalised(score: Any, game: str) -> np.ndarray:
    """``(score - random) / (human - random)`` of ``game`` (array or scalar)."""
    table = reference_scores()
    if game not in table:
        raise ValueError(f"game: expected one of the Atari-26 games {sorted(table)}, "
                         f"got {game!r}")
    ref = table[game]
    return (np.asarray(score, float) - ref["random"]) / (ref["human"] - ref["random"])


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of every entry of ``scores`` (runs x games): the 25%-trimmed mean."""
    return float(stats.trim_mean(np.asarray(scores, float).ravel(), proportiontocut=0.25))


def aggregate(scores: dict[str, np.ndarray], *, reps: int = 50_000, seed: int = 0
              ) -> dict[str, dict[str, dict[str, float]]]:
    """IQM, median and mean of each algorithm's (runs, games) normalised-score matrix, with
    stratified-bootstrap 95% intervals (``rliable.library.get_interval_estimates``).

    Returns ``{algorithm: {"iqm" | "median" | "mean": {"value", "low", "high"}}}``; the
    median is the median over games of each game's mean over runs, as rliable defines it.
    """
    from rliable import library as rly
    from rliable import metrics

    check_positive("reps", reps)
    for name, matrix in scores.items():
        if np.ndim(matrix) != 2 or min(np.shape(matrix)) < 1:
            raise ValueError(f"scores[{name!r}]: expected a (runs, games) matrix, got shape "
                             f"{np.shape(matrix)}")
    funcs = {"iqm": metrics.aggregate_iqm, "median": metrics.aggregate_median,
             "mean": metrics.aggregate_mean}

    def all_three(x: np.ndarray) -> np.ndarray:
        return np.array([f(x) for f in funcs.values()])

    points, intervals = rly.get_interval_estimates(
        {k: np.asarray(v, float) for k, v in scores.items()}, all_three, reps=reps,
        random_state=np.random.RandomState(seed))
    return {name: {metric: {"value": float(points[name][i]),
                            "low": float(intervals[name][0, i]),
                            "high": float(intervals[name][1, i])}
                   for i, metric in enumerate(funcs)}
            for name in scores}
