"""Games: payoff lookups, random GP games, Nash and CCE gaps on hand-computed cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.games import (
    cce_gap,
    nash_conv,
    payoff,
    payoff_vector,
    random_gp_game,
    rock_paper_scissors,
    zero_sum,
)
from hyperx.games.kernels import RBF, joint_actions, kernel_matrix


def test_payoff_lookups_in_a_three_player_game():
    payoffs = jnp.arange(3 * 2 * 3 * 4, dtype=jnp.float32).reshape(3, 2, 3, 4)
    actions = jnp.array([1, 2, 3])
    np.testing.assert_array_equal(payoff(payoffs, actions), payoffs[:, 1, 2, 3])
    np.testing.assert_array_equal(payoff_vector(payoffs, 0, actions), payoffs[0, :, 2, 3])
    np.testing.assert_array_equal(payoff_vector(payoffs, 1, actions), payoffs[1, 1, :, 3])
    np.testing.assert_array_equal(payoff_vector(payoffs, 2, actions), payoffs[2, 1, 2, :])


def test_nash_conv_by_hand():
    rps = rock_paper_scissors()
    uniform = [jnp.full(3, 1 / 3), jnp.full(3, 1 / 3)]
    assert abs(float(nash_conv(rps, uniform))) < 1e-6
    # Row plays rock, column uniform: the row player loses nothing (value 0, best response 0);
    # the column player's best response (paper) wins 1 against a value of 0.
    rock = [jnp.array([1.0, 0.0, 0.0]), jnp.full(3, 1 / 3)]
    np.testing.assert_allclose(nash_conv(rps, rock), 1.0, rtol=1e-6)
    # Zero-sum: NashConv is the duality gap max_a (A y)_a - min_b (x^T A)_b.
    a = jnp.array([[3.0, -1.0], [0.0, 2.0]])
    x, y = jnp.array([0.25, 0.75]), jnp.array([0.5, 0.5])
    np.testing.assert_allclose(nash_conv(zero_sum(a), [x, y]),
                               jnp.max(a @ y) - jnp.min(x @ a), rtol=1e-6)


def test_cce_gap_by_hand():
    # Chicken: (dare, chicken). The correlated distribution 1/3 on (D, C), (C, D), (C, C) is a
    # correlated, hence coarse-correlated, equilibrium: gap 0.
    row = jnp.array([[0.0, 7.0], [2.0, 6.0]])
    chicken = jnp.stack([row, row.T])
    joint = jnp.array([[0.0, 1 / 3], [1 / 3, 1 / 3]])
    assert float(cce_gap(chicken, joint)) < 1e-6
    # All mass on (C, C): each player gains 7 - 6 = 1 by daring.
    np.testing.assert_allclose(cce_gap(chicken, jnp.array([[0.0, 0.0], [0.0, 1.0]])), 1.0)


def test_the_cce_gap_of_play_is_the_largest_average_regret():
    rng = np.random.default_rng(0)
    payoffs = jnp.asarray(rng.normal(size=(2, 3, 4)), jnp.float32)
    actions = np.stack([rng.integers(0, 3, 50), rng.integers(0, 4, 50)], axis=1)
    joint = np.zeros((3, 4))
    np.add.at(joint, (actions[:, 0], actions[:, 1]), 1 / 50)
    regrets = []
    for i in range(2):
        got = np.asarray(payoffs[i])[actions[:, 0], actions[:, 1]].sum()
        best = max(np.asarray(payoffs[i]).take(a, axis=i).take(
            actions[:, 1 - i], axis=0).sum() for a in range((3, 4)[i]))
        regrets.append((best - got) / 50)
    np.testing.assert_allclose(cce_gap(payoffs, jnp.asarray(joint)), max(max(regrets), 0.0),
                               rtol=1e-5)


def test_random_gp_games_are_smooth_reproducible_and_zero_sum():
    key = jax.random.key(4)
    game = random_gp_game(key, (30, 30))
    np.testing.assert_array_equal(game, random_gp_game(key, (30, 30)))
    np.testing.assert_array_equal(game[1], -game[0])
    assert not np.array_equal(game, random_gp_game(jax.random.key(5), (30, 30)))
    # Smooth: neighbouring joint actions differ far less than the payoffs' spread.
    assert float(jnp.abs(jnp.diff(game[0], axis=0)).mean()) < 0.2 * float(game[0].std())
    general = random_gp_game(key, (4, 3, 5), zero_sum=False)
    assert general.shape == (3, 4, 3, 5)


def test_random_gp_game_matches_the_authors_construction():
    # The authors draw f ~ N(0, K) and return K (K + s^2 I)^{-1} f; ours uses the
    # eigendecomposition. With the same z, both are one linear map of z: check the maps agree.
    num_actions, s = (5, 4), 1.0
    grid = joint_actions(num_actions)
    kmat = kernel_matrix(RBF(1.0), grid, grid)
    eig, vec = np.linalg.eigh(kmat)
    eig = np.clip(eig, 0, None)
    f_map = vec * np.sqrt(eig)  # f = f_map z
    authors = kmat @ np.linalg.solve(kmat + s**2 * np.eye(20), f_map)
    ours = vec * (eig**1.5 / (eig + s**2))
    np.testing.assert_allclose(ours, authors, atol=1e-8)
    game = random_gp_game(jax.random.key(0), num_actions, lengthscale=1.0)
    z = jax.random.normal(jax.random.key(0), (1, 20), jnp.float32)
    np.testing.assert_allclose(game[0].ravel(), (np.asarray(z) @ ours.T).ravel(), atol=1e-5)


def test_bad_games_are_named():
    with pytest.raises(ValueError, match="payoffs: expected shape"):
        nash_conv(jnp.zeros((3, 2, 2)), [jnp.ones(2) / 2] * 3)
    with pytest.raises(ValueError, match="payoffs: expected finite"):
        nash_conv(jnp.array([[[jnp.nan]], [[0.0]]]), [jnp.ones(1)] * 2)
    with pytest.raises(ValueError, match=r"strategies\[1\]"):
        nash_conv(rock_paper_scissors(), [jnp.ones(3) / 3, jnp.ones(2) / 2])
    with pytest.raises(ValueError, match="joint: expected shape"):
        cce_gap(rock_paper_scissors(), jnp.ones((3, 2)))


@pytest.mark.parametrize("bad, message", [
    (jnp.array([0.5, 0.6, 0.0]), "summing to 1, got a sum of 1.1"),
    (jnp.array([1.5, -0.5, 0.0]), r"finite entries >= 0\), got min -0.5"),
    (jnp.array([jnp.nan, 0.5, 0.5]), "finite entries >= 0"),
])
def test_strategies_and_joints_that_are_not_distributions_are_named(bad, message):
    """nash_conv and cce_gap of a vector that is not a distribution returned a number that
    measures nothing (a gap of an unnormalised mixture)."""
    rps = rock_paper_scissors()
    with pytest.raises(ValueError, match=r"strategies\[0\]: expected a probability "
                                         r"distribution.*" + message):
        nash_conv(rps, [bad, jnp.ones(3) / 3])
    with pytest.raises(ValueError, match="joint: expected a probability distribution"):
        cce_gap(rps, jnp.outer(bad, jnp.ones(3) / 3))
    assert float(nash_conv(rps, [jnp.ones(3) / 3] * 2)) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="zero_sum"):
        random_gp_game(jax.random.key(0), (2, 2, 2))
    with pytest.raises(ValueError, match="num_actions"):
        random_gp_game(jax.random.key(0), 5)
    with pytest.raises(ValueError, match="num_actions"):
        random_gp_game(jax.random.key(0), (100_000, 100_000))
    with pytest.raises(TypeError, match="key"):
        random_gp_game(0, (3, 3))
    with pytest.raises(ValueError, match="matrix"):
        zero_sum(jnp.ones(3))
