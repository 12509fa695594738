"""The repeated-game loop: convergence to equilibrium, batching over seeds, bad inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.games import (
    PlayerSpec,
    cce_gap,
    hedge,
    make_learner,
    nash_conv,
    play,
    play_seeds,
    random_gp_game,
    rock_paper_scissors,
)


def test_two_hedge_players_approach_the_uniform_nash_of_rock_paper_scissors():
    # In a zero-sum game the average strategies of no-regret players are an eps-Nash with eps
    # of order (R_1 + R_2) / T ~ 2 sqrt(ln 3 / (2T)) x the payoff range 2: 0.06 at T = 5000
    # (measured on key 0: NashConv 0.019, strategies within 0.01 of 1/3).
    horizon = 5000
    players = [hedge(PlayerSpec(i, (3, 3), horizon)) for i in range(2)]
    result = play(rock_paper_scissors(), players, jax.random.key(0), horizon)
    assert float(nash_conv(rock_paper_scissors(), result.mean_strategies)) < 0.06
    for x in result.mean_strategies:
        np.testing.assert_allclose(x, 1 / 3, atol=0.03)
    early = play(rock_paper_scissors(), players, jax.random.key(0), 50)
    assert float(nash_conv(rock_paper_scissors(), early.mean_strategies)) > 0.06


def test_hedge_players_approach_a_coarse_correlated_equilibrium_of_a_general_sum_game():
    # Three players, 4 actions each, independent smooth payoffs. The CCE gap of the averaged
    # product distribution is at most max_i expected regret_i / T (plus the noise of the
    # others' sampled actions, ~1/sqrt(T)); measured 0.006-0.008 of the payoff range at
    # T = 3000 and 0.06-0.23 at T = 30 on 8 games.
    horizon, games = 3000, 8
    payoffs = jnp.stack([random_gp_game(k, (4, 4, 4), zero_sum=False, lengthscale=1.0)
                         for k in jax.random.split(jax.random.key(1), games)])
    players = [hedge(PlayerSpec(i, (4, 4, 4), horizon)) for i in range(3)]
    result = play_seeds(payoffs, players, jax.random.split(jax.random.key(2), games), horizon)
    gaps = jax.vmap(cce_gap)(payoffs, result.mean_joint)
    spread = payoffs.max(axis=(1, 2, 3, 4)) - payoffs.min(axis=(1, 2, 3, 4))
    assert float(jnp.max(gaps / spread)) < 0.05, gaps / spread
    first = play_seeds(payoffs, players, jax.random.split(jax.random.key(2), games), 30)
    assert float(jnp.mean(jax.vmap(cce_gap)(payoffs, first.mean_joint) / spread)) > 0.05


@pytest.mark.parametrize("pair", [("gp_mw", "exp3"), ("ensemble_mw", "random")])
def test_a_batch_of_seeds_equals_each_seed_run_alone(pair):
    num_actions, horizon = (6, 6), 40
    players = [make_learner(name, PlayerSpec(i, num_actions, horizon))
               for i, name in enumerate(pair)]
    keys = jax.random.split(jax.random.key(0), 3)
    games = jnp.stack([random_gp_game(k, num_actions) for k in keys])
    batch = play_seeds(games, players, keys, horizon)
    alone = play(games[1], players, keys[1], horizon)
    np.testing.assert_array_equal(batch.rounds.actions[1], alone.rounds.actions)
    np.testing.assert_allclose(batch.rounds.regret[1], alone.rounds.regret, atol=1e-4)
    # Seeds are independent: different keys give different play on the same game.
    other = play(games[1], players, keys[2], horizon)
    assert not np.array_equal(other.rounds.actions, alone.rounds.actions)


def test_regret_is_recorded_as_the_authors_define_it():
    # One player against a fixed opponent, by hand: cumulative best fixed action minus obtained.
    payoffs = jnp.stack([jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.zeros((2, 2))])
    players = [make_learner("random", PlayerSpec(i, (2, 2), 20)) for i in range(2)]
    result = play(payoffs, players, jax.random.key(3), 20)
    actions = np.asarray(result.rounds.actions)
    vectors = np.asarray(payoffs[0])[:, actions[:, 1]].T  # (T, 2)
    got = np.asarray(payoffs[0])[actions[:, 0], actions[:, 1]]
    want = np.max(np.cumsum(vectors, 0), axis=1) - np.cumsum(got)
    np.testing.assert_allclose(result.rounds.regret[:, 0], want, rtol=1e-6)
    expected = np.max(np.cumsum(vectors, 0), axis=1) - np.cumsum(vectors @ [0.5, 0.5])
    np.testing.assert_allclose(result.rounds.expected_regret[:, 0], expected, rtol=1e-6)


def test_bad_play_arguments_are_named():
    rps = rock_paper_scissors()
    players = [hedge(PlayerSpec(i, (3, 3), 10)) for i in range(2)]
    with pytest.raises(ValueError, match="learners: expected one per player"):
        play(rps, players[:1], jax.random.key(0), 10)
    with pytest.raises(ValueError, match=r"learners\[1\]"):
        play(rps, [players[0], hedge(PlayerSpec(1, (3, 4), 10))], jax.random.key(0), 10)
    with pytest.raises(ValueError, match="horizon"):
        play(rps, players, jax.random.key(0), 0)
    with pytest.raises(ValueError, match="noise_std"):
        play(rps, players, jax.random.key(0), 10, noise_std=float("nan"))
    with pytest.raises(ValueError, match="payoffs: expected one game per seed"):
        play_seeds(rps, players, jax.random.split(jax.random.key(0), 2), 10)
    with pytest.raises(ValueError, match="keys: expected one key per game"):
        play_seeds(jnp.stack([rps, rps]), players, jax.random.split(jax.random.key(0), 3), 10)


def test_the_batched_path_refuses_non_finite_and_mis_shaped_payoffs():
    """play_seeds compiles play under vmap, where play's own value checks cannot run: a NaN
    payoff of one seed's game spread through its regret without a word."""
    rps = rock_paper_scissors()
    players = [hedge(PlayerSpec(i, (3, 3), 10)) for i in range(2)]
    keys = jax.random.split(jax.random.key(0), 2)
    with pytest.raises(ValueError, match=r"payoffs: expected finite values, got NaN or inf at "
                                         r"index \[1, 0, 2, 2\]"):
        play_seeds(jnp.stack([rps, rps.at[0, 2, 2].set(jnp.nan)]), players, keys, 10)
    with pytest.raises(ValueError, match="payoffs: expected shape"):  # 3 players' axes, N = 2
        play_seeds(jnp.zeros((2, 2, 3, 3, 3)), players, keys, 10)
