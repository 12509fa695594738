"""Congestion games: the network data, Yen's paths, BPR costs by hand, best-response
equilibria, and the population learners of the routing experiment."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.games import routing_play as rp
from hyperx.games.routing import (
    Network,
    best_response_equilibrium,
    deviation_travel_times,
    k_shortest_paths,
    nash_gaps,
    occupancy,
    relative_delay,
    routing_game,
    sioux_falls,
    sioux_falls_network,
    travel_times,
)


def tiny_network(power: float = 1.0) -> Network:
    """0 -> 1 -> 2 (free flow 1 + 1) and 0 -> 2 (free flow 3); capacity 1, b 0.15; demand 2 from
    0 to 2 and 1 from 0 to 1."""
    od = np.zeros((3, 3))
    od[0, 2], od[0, 1] = 2.0, 1.0
    ones = np.ones(3)
    return Network(3, np.array([[0, 1], [1, 2], [0, 2]]), ones, np.array([1.0, 1.0, 3.0]),
                   np.array([1.0, 1.0, 3.0]), 0.15 * ones, power * ones, od)


def test_tiny_game_by_hand():
    game = routing_game(tiny_network())
    # players row-major over (origin, destination): (0, 1) then (0, 2)
    np.testing.assert_array_equal(np.asarray(game.od), [[0, 1], [0, 2]])
    np.testing.assert_array_equal(np.asarray(game.num_routes), [1, 2])
    actions = jnp.array([0, 0])
    # occupancy e0 = 1 + 2, e1 = 2, e2 = 0; c = a + 0.15 a o
    np.testing.assert_allclose(occupancy(game, actions), [3.0, 2.0, 0.0])
    np.testing.assert_allclose(travel_times(game, actions), [1.45, 2 * (1.45 + 1.3)], rtol=1e-6)
    dev = np.asarray(deviation_travel_times(game, actions))
    np.testing.assert_allclose(dev[1, :2], [5.5, 2 * (3 + 0.45 * 2)], rtol=1e-6)
    assert dev[0, 0] == pytest.approx(1.45) and np.all(np.isinf(dev[0, 1:]))
    assert np.all(np.isinf(dev[1, 2:]))
    assert float(relative_delay(game, occupancy(game, actions))) == pytest.approx(0.25)
    eq = best_response_equilibrium(game, actions=jnp.array([0, 1]))
    assert bool(eq.converged)
    np.testing.assert_array_equal(np.asarray(eq.actions), [0, 0])
    np.testing.assert_allclose(nash_gaps(game, eq.actions), 0.0, atol=1e-6)
    assert float(eq.total_travel_time) == pytest.approx(1.45 + 5.5, rel=1e-6)


def test_yen_paths_are_the_k_shortest():
    nx = pytest.importorskip("networkx")
    import itertools

    net = sioux_falls_network()
    graph = nx.DiGraph()
    for e, (u, v) in enumerate(net.edges):
        graph.add_edge(int(u), int(v), weight=net.length[e])
    for o, d in [(0, 23), (9, 2), (14, 20), (23, 0), (5, 17)]:
        ours = k_shortest_paths(net.edges, net.length, o, d, 6)
        theirs = list(itertools.islice(nx.shortest_simple_paths(graph, o, d, weight="weight"), 6))
        assert [net.length[p].sum() for p in ours] == [
            sum(graph[a][b]["weight"] for a, b in zip(p[:-1], p[1:], strict=False))
            for p in theirs]
        for p in ours:   # simple and connected from o to d
            nodes = [o] + [int(net.edges[e, 1]) for e in p]
            assert [int(net.edges[e, 0]) for e in p] == nodes[:-1]
            assert nodes[-1] == d and len(set(nodes)) == len(nodes)


def test_sioux_falls_game():
    game = sioux_falls()
    assert game.routes.shape == (528, 5, 76)
    counts = np.asarray(game.num_routes)
    assert counts.min() >= 1 and counts.max() == 5
    free = np.asarray(game.routes / game.demand[:, None, None]) @ np.asarray(game.free_flow)
    for i in range(0, 528, 37):   # every kept route is within the authors' 3x detour rule
        assert np.all(free[i, :counts[i]] < 3 * free[i, 0] + 1e-4)
        assert np.all(free[i, counts[i]:] == 0)
    eq = best_response_equilibrium(game)
    assert bool(eq.converged)
    assert float(nash_gaps(game, eq.actions).max()) <= 1e-5 * float(
        travel_times(game, eq.actions).max())
    assert float(eq.total_travel_time) < float(travel_times(game, jnp.zeros(528, jnp.int32)).sum())


def test_bad_inputs():
    game = routing_game(tiny_network())
    with pytest.raises(ValueError, match="controlled"):
        rp.setting(game, [0, 0], 10, jax.random.key(0))
    with pytest.raises(ValueError, match="controlled"):
        rp.setting(game, [2], 10, jax.random.key(0))
    with pytest.raises(ValueError, match="players\\[0\\]"):
        routing_game(tiny_network(), players=[(2, 0)])
    with pytest.raises(ValueError, match="name"):
        rp.make_population("ucb", game, rp.setting(game, [1], 10, jax.random.key(0)))
    with pytest.raises(ValueError, match="key"):
        rp.make_population("gp_mw", game, rp.setting(game, [1], 10, jax.random.key(0)))
    with pytest.raises(ValueError, match="movable"):
        best_response_equilibrium(game, movable=jnp.ones(3, bool))


def test_separable_features_represent_bpr_payoffs():
    """-sum_e x_e (a_e + coef_e o_e^4) is linear in (x_e o_e^j)_{j <= 4}: least squares on random
    inputs fits it to rounding."""
    rng = np.random.default_rng(0)
    a, coef = rng.uniform(1, 5, 6), rng.uniform(0, 1, 6)
    x, o = rng.integers(0, 2, (200, 6)).astype(np.float64), rng.uniform(0, 1, (200, 6))
    y = -np.sum(x * (a + coef * o**4), axis=1)
    phi = np.asarray(rp.separable_features(jnp.asarray(x), jnp.asarray(o), 4), np.float64)
    w, *_ = np.linalg.lstsq(phi, y, rcond=None)
    np.testing.assert_allclose(phi @ w, y, atol=1e-4)


def test_gp_posterior_masks_the_unplayed_rounds():
    """The masked posterior on a padded history equals the plain GP posterior on its live rows."""
    rng = np.random.default_rng(1)
    # float64 log-parameters, as gp_mw passes them: float32 ones would be exponentiated in
    # float32 (XLA's float32 exp differs between jax releases by about 1e-8 relative).
    params = np.log([0.5, 1.0, 0.3, 0.7, 0.2])
    hx, ho, hy = rng.uniform(size=(8, 3)), rng.uniform(size=(8, 3)), rng.normal(size=8)
    x, o = rng.uniform(size=(4, 3)), rng.uniform(size=(4, 3))
    with jax.enable_x64(True):
        mean, var = rp._gp_posterior(jnp.asarray(params), 2, jnp.asarray(hx), jnp.asarray(ho),
                                     jnp.asarray(hy), jnp.asarray(5), 1e-2, jnp.asarray(x),
                                     jnp.asarray(o))

    def k(x1, o1, x2, o2):
        v, s1, b1, s2, b2 = np.exp(params)
        return v * (s1 * x1 @ x2.T + b1) * (s2 * o1 @ o2.T + b2) ** 2

    gram = k(hx[:5], ho[:5], hx[:5], ho[:5]) + 1e-2 * np.eye(5)
    cross = k(hx[:5], ho[:5], x, o)
    np.testing.assert_allclose(mean, cross.T @ np.linalg.solve(gram, hy[:5]), rtol=1e-8)
    np.testing.assert_allclose(
        var, np.diag(k(x, o, x, o)) - np.sum(cross * np.linalg.solve(gram, cross), 0),
        rtol=1e-6)


@pytest.fixture(scope="module")
def small_routing():
    game = sioux_falls()
    controlled = np.array([3, 77, 150, 300, 444])
    return game, rp.setting(game, controlled, 40, jax.random.key(0), samples=2000)


@pytest.mark.slow
def test_population_learners_play(small_routing):
    """Every learner plays finite regrets; a seed's run does not depend on the batch; Hedge (full
    information) ends with less regret than Exp3.P (bandit), 8 seeds."""
    game, s = small_routing
    keys = jax.random.split(jax.random.key(1), 8)
    final = {}
    for name in rp.ROUTING_LEARNERS:
        kwargs = {"points": 30, "steps": 5} if name == "gp_mw" else {}
        pop = rp.make_population(name, game, s, jax.random.key(2), **kwargs)
        rounds = rp.play_routing(game, s, pop, keys)
        assert rounds.regret.shape == (8, 40, 5)
        assert np.all(np.isfinite(np.asarray(rounds.regret)))
        assert np.all(np.asarray(rounds.regret) >= -1e-3 * np.asarray(s.loss_scale) * 40)
        final[name] = float(np.mean(rounds.regret[:, -1]))
        if name in ("exp3", "gp_mw"):
            single = rp.play_routing(game, s, pop, keys[3:4])
            np.testing.assert_allclose(single.regret[0], rounds.regret[3], rtol=1e-5,
                                       atol=1e-3)
    assert jnp.ones(1).dtype == jnp.float32   # GP-MW's float64 stays inside its run
    assert final["hedge"] < final["exp3"]
