"""Human-normalised scores and rliable aggregates on a small synthetic table."""

import numpy as np
import pytest

from hyperx.agents.atari_scores import aggregate, human_normalised, iqm, reference_scores
from hyperx.envs.atari import ATARI_26


def test_reference_table_covers_the_26_games_and_normalises_by_hand():
    table = reference_scores()
    assert set(table) == set(ATARI_26)
    # Breakout: random 1.7, human 30.5 (the DQN Nature table).
    assert human_normalised(30.5, "Breakout") == pytest.approx(1.0)
    assert human_normalised(1.7, "Breakout") == pytest.approx(0.0)
    assert human_normalised(16.1, "Breakout") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="game"):
        human_normalised(1.0, "Tetris")


def test_iqm_by_hand_and_against_rliable():
    from rliable import metrics

    scores = np.array([[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]])  # 2 runs x 4 games
    # The middle 50% of the 8 values: 2, 3, 4, 5.
    assert iqm(scores) == pytest.approx(3.5)
    assert metrics.aggregate_iqm(scores) == pytest.approx(3.5)
    out = aggregate({"agent": scores}, reps=2000)
    assert out["agent"]["iqm"]["value"] == pytest.approx(3.5)
    assert out["agent"]["mean"]["value"] == pytest.approx(3.5)
    # Median over games of the per-game mean over runs: game means 2, 3, 4, 5.
    assert out["agent"]["median"]["value"] == pytest.approx(3.5)
    for metric in ("iqm", "median", "mean"):
        row = out["agent"][metric]
        assert row["low"] <= row["value"] <= row["high"]


def test_aggregate_rejects_a_bad_matrix():
    with pytest.raises(ValueError, match="scores"):
        aggregate({"agent": np.zeros(5)}, reps=10)
