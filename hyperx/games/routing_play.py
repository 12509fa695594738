"""Repeated routing: a population of no-regret players in a congestion game, one ``lax.scan``.

The GP-MW authors' traffic experiment (Sessa et al., NeurIPS 2019, section 5.2): a subset of the
players of :func:`~hyperx.games.routing.sioux_falls` (the ``controlled`` ones) learns, the others
always take their shortest path. Round t: every controlled player draws a route from its
strategy; each sees its own travel time plus ``N(0, sigma_i^2)`` noise and the total edge
occupancy (bandit feedback plus what GP-MW observes); Hedge sees instead the noise-free travel
time of each of its routes against the others' routes (full information). Payoffs are minus
travel times, rescaled with the known range ``[-L_i, 0]``, ``L_i`` the largest travel time of
player i seen in random play (:func:`setting`; the authors use 10000 random joint actions and
``sigma_i = 0.001 L_i``).

A :class:`Population` holds one learner for all controlled players, its state batched over them
(routes padded to ``K`` with probability zero). The learners:

* ``hedge``: Hedge on the full-information losses, ``eta_i = sqrt(8 ln K_i / T)``;
* ``exp3``: Exp3.P (:func:`~hyperx.games.learners.exp3p_step`), per-player rates from ``K_i``;
  the authors' routing code uses ``beta = sqrt(ln K / (T K))``, i.e. ``delta = 1``;
* ``gp_mw``: GP-MW with the authors' kernel on ``z = (x_i, o)`` restricted to the edges player i
  can use (own route, total occupancy): ``k(z, z') = v (s_1 <x, x'> + b_1)(s_2 <o, o'> +
  b_2)^degree``, hyperparameters by maximum marginal likelihood on random play
  (:func:`fit_poly_kernel`, the authors' GPy fit), the exact GP posterior on the history, and
  Hedge on ``min(ucb, 0)`` with ``ucb(k) = mu(x^k, o - x^{a_t} + x^k) + beta sigma(...)`` from
  the posterior before the round's observation (the paper's Algorithm 1, the authors' code);
* ``ensemble_mw``: the same optimism from linear Ensemble++
  (:func:`hyperx.linear.ensemble_pp_posterior`) on the separable features
  ``phi(z) = (x_e o_e^j)_{e, j <= degree}`` (edge costs that depend on their own load only,
  the congestion-game assumption): ``O(K D M)`` per round instead of the
  GP's ``O(t^3)``.

Inputs are normalised per player (own route by its demand; payoffs by ``L_i``; the occupancy
by one number per player for the GP, the largest occupancy of its edges in random play, which the
kernel's fitted scale absorbs, and per edge for Ensemble++, whose per-feature weights absorb
it). The GP runs in float64 (``sigma_i = 0.001 L_i`` makes its kernel matrix too ill-conditioned
for float32), under ``jax.enable_x64``.

Measures per round: each controlled player's realised regret ``R_i(t) = sum_s l_i(a^s) - min_k
sum_s l_i(k, a_{-i}^s)`` (noise-free), the authors' relative delay and the total travel time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from hyperx._validation import check_choice, check_int, check_key, check_positive
from hyperx.games.learners import (
    Exp3PState,
    WeightsState,
    _hedge_step,
    exp3p_rates,
    exp3p_step,
)
from hyperx.games.play import _draw
from hyperx.games.routing import (
    RoutingGame,
    deviation_travel_times,
    occupancy,
    relative_delay,
    travel_times,
)
from hyperx.linear import ensemble_pp_posterior

Array = jax.Array
State = Any
ROUTING_LEARNERS = ("hedge", "exp3", "gp_mw", "ensemble_mw")


class RoutingFeedback(NamedTuple):
    """What the controlled players observe after a round (leading axis: controlled players)."""

    actions: Array           # (M,) their routes
    losses: Array            # (M,) travel time plus N(0, sigma_i^2) noise
    route_losses: Array      # (M, K) noise-free travel time of each route, others fixed
    occupancy: Array         # (E,) total edge occupancy


class Population(NamedTuple):
    """One learner for every controlled player: ``init(key) -> state``, ``strategy(state) ->
    (M, K)``, ``update(state, key, feedback) -> state``."""

    init: Callable[[Array], State]
    strategy: Callable[[State], Array]
    update: Callable[[State, Array, RoutingFeedback], State]
    float64: bool = False   # play under jax.enable_x64 (GP-MW)


class Setting(NamedTuple):
    """What the controlled players know: who they are, the horizon, the loss scales ``L_i``
    and noise ``sigma_i`` (M,), and each occupancy's scale (E,) for the model-based learners."""

    controlled: np.ndarray   # (M,) int player ids
    horizon: int
    loss_scale: Array        # (M,)
    noise_std: Array         # (M,)
    occupancy_scale: Array   # (E,)


def random_play(game: RoutingGame, controlled: np.ndarray, key: Array,
                samples: int) -> tuple[Array, Array, Array]:
    """``samples`` joint actions with the controlled players uniform over their routes and the
    others on route 0: ``(actions (S, N), travel times (S, N), occupancies (S, E))``."""
    check_int("samples", samples)
    n, k = game.routes.shape[:2]
    ids = jnp.asarray(controlled)
    u = jax.random.uniform(key, (samples, len(controlled)))
    draws = jnp.floor(u * game.num_routes[ids]).astype(jnp.int32)
    actions = jnp.zeros((samples, n), jnp.int32).at[:, ids].set(draws)
    return (actions, jax.vmap(lambda a: travel_times(game, a))(actions),
            jax.vmap(lambda a: occupancy(game, a))(actions))


def setting(game: RoutingGame, controlled, horizon: int, key: Array, *, samples: int = 10000,
            noise_fraction: float = 0.001) -> Setting:
    """The authors' set-up: ``L_i`` the largest travel time of player i in ``samples`` random
    joint actions, ``sigma_i = noise_fraction L_i``; occupancy scales from the same draws."""
    controlled = np.asarray(controlled)
    n = game.num_players
    if controlled.ndim != 1 or len(controlled) == 0 or len(np.unique(controlled)) != len(
            controlled) or controlled.min() < 0 or controlled.max() >= n:
        raise ValueError(f"controlled: expected distinct player ids in [0, {n - 1}], got "
                         f"{controlled.tolist()}")
    check_int("horizon", horizon)
    check_key("key", key)
    check_positive("noise_fraction", noise_fraction)
    _, times, occ = random_play(game, controlled, key, samples)
    scale = times.max(0)[controlled]
    return Setting(controlled, horizon, scale, noise_fraction * scale,
                   jnp.maximum(occ.max(0), 1e-6))


def _valid(game: RoutingGame, ids: np.ndarray) -> Array:
    return jnp.arange(game.routes.shape[1]) < game.num_routes[ids][:, None]


def _ranges(s: Setting) -> Array:
    return jnp.stack([-s.loss_scale, jnp.zeros_like(s.loss_scale)], -1)


def _weights_init(valid: Array, ranges: Array) -> WeightsState:
    log_w = jnp.where(valid, -jnp.log(valid.sum(1, keepdims=True)), -jnp.inf)
    return WeightsState(log_w, ranges)


def hedge(game: RoutingGame, s: Setting) -> Population:
    """Hedge on the noise-free losses of every route, ``eta_i = sqrt(8 ln K_i / T)``."""
    valid = _valid(game, s.controlled)
    eta = jnp.sqrt(8 * jnp.log(valid.sum(1)) / s.horizon)

    def update(state: WeightsState, key: Array, fb: RoutingFeedback) -> WeightsState:
        return jax.vmap(_hedge_step)(state, -fb.route_losses, eta)

    return Population(lambda key: _weights_init(valid, _ranges(s)),
                      lambda state: jnp.exp(state.log_weights), update)


def exp3(game: RoutingGame, s: Setting, *, delta: float = 1.0) -> Population:
    """Exp3.P per player with ``K_i``-dependent rates (``delta = 1``: the authors' routing
    code)."""
    valid = _valid(game, s.controlled)
    k = np.asarray(game.num_routes)[s.controlled]
    beta, gamma, eta = (jnp.asarray(r, jnp.float32) for r in exp3p_rates(k, s.horizon, delta))
    if np.any(np.asarray(gamma) >= 1):
        raise ValueError(f"horizon: Exp3.P with up to {k.max()} routes needs T > 1.1025 K ln K, "
                         f"got T = {s.horizon}")

    def init(key: Array) -> Exp3PState:
        probs = valid / valid.sum(1, keepdims=True)
        return Exp3PState(jnp.zeros(valid.shape, jnp.float32), probs, _ranges(s))

    def update(state: Exp3PState, key: Array, fb: RoutingFeedback) -> Exp3PState:
        reward = jnp.clip(1.0 - fb.losses / s.loss_scale, 0.0, 1.0)
        return jax.vmap(exp3p_step)(state, fb.actions, reward, beta, gamma, eta, valid)

    return Population(init, lambda state: state.probs, update)


class PlayerInputs(NamedTuple):
    """The edges each controlled player can use, padded: ``edges (M, D)`` ids, ``mask (M, D)``."""

    edges: Array
    mask: Array


def player_inputs(game: RoutingGame, controlled: np.ndarray) -> PlayerInputs:
    """The union of each controlled player's route edges, padded to the largest union."""
    used = np.asarray(game.routes)[controlled].sum(1) > 0              # (M, E)
    width = max(int(used.sum(1).max()), 1)
    edges = np.zeros((len(controlled), width), np.int32)
    mask = np.zeros((len(controlled), width), bool)
    for m, row in enumerate(used):
        ids = np.flatnonzero(row)
        edges[m, :len(ids)], mask[m, :len(ids)] = ids, True
    return PlayerInputs(jnp.asarray(edges), jnp.asarray(mask))


def _route_inputs(game: RoutingGame, s: Setting, inputs: PlayerInputs, actions: Array,
                  occ: Array, *, per_edge: bool) -> tuple[Array, Array]:
    """Normalised ``(x^k, o - x^{a} + x^k)`` on each player's edges for every route k:
    ``(M, K, D)`` twice; ``actions (M,)`` the routes played, ``occ (E,)`` the occupancy.

    The own route is divided by the player's demand; the occupancy by each edge's scale
    (``per_edge``: a linear model's per-feature weights absorb it) or by the largest scale over
    the player's edges (one number, which a kernel's fitted ``s_2`` absorbs exactly: the GP
    keeps the authors' kernel on raw occupancies, where busy edges weigh more)."""
    ids = jnp.asarray(s.controlled)
    routes = jnp.take_along_axis(game.routes[ids], inputs.edges[:, None, :], axis=2)  # (M,K,D)
    own = routes / game.demand[ids][:, None, None]
    played = jnp.take_along_axis(routes, actions[:, None, None], axis=1)             # (M,1,D)
    scale = jnp.where(inputs.mask, s.occupancy_scale[inputs.edges], 0.0)[:, None, :]
    if not per_edge:
        scale = jnp.max(scale, axis=-1, keepdims=True)
    scale = jnp.maximum(scale, 1e-6)
    others = (occ[inputs.edges][:, None, :] - played + routes) / scale
    mask = inputs.mask[:, None, :]
    return jnp.where(mask, own, 0.0), jnp.where(mask, others, 0.0)


class PolyKernel(NamedTuple):
    """``k(z, z') = v (s_1 <x, x'> + b_1)(s_2 <o, o'> + b_2)^degree`` (GPy's ``Poly`` product,
    the authors' routing kernel); log-parameters, one row per player."""

    log_params: Array   # (M, 5): log v, s_1, b_1, s_2, b_2
    degree: int


def _poly(log_params: Array, degree: int, x: Array, o: Array, x2: Array, o2: Array) -> Array:
    v, s1, b1, s2, b2 = jnp.exp(log_params)
    return v * (s1 * x @ x2.T + b1) * (s2 * o @ o2.T + b2) ** degree


def _gp_posterior(log_params: Array, degree: int, hist_x: Array, hist_o: Array, hist_y: Array,
                  count: Array, noise_var: Array, x: Array, o: Array) -> tuple[Array, Array]:
    """GP posterior mean and variance at ``(x, o) (K, D)`` given the first ``count`` rows of the
    history (the rest masked out exactly)."""
    live = jnp.arange(hist_y.shape[0]) < count
    gram = _poly(log_params, degree, hist_x, hist_o, hist_x, hist_o)
    gram = jnp.where(live[:, None] & live[None, :], gram, 0.0)
    gram = gram + jnp.diag(jnp.where(live, noise_var, 1.0))
    cross = jnp.where(live[:, None], _poly(log_params, degree, hist_x, hist_o, x, o), 0.0)
    chol = jnp.linalg.cholesky(gram)
    alpha = jax.scipy.linalg.cho_solve((chol, True), jnp.where(live, hist_y, 0.0))
    solved = jax.scipy.linalg.solve_triangular(chol, cross, lower=True)
    prior = jnp.diagonal(_poly(log_params, degree, x, o, x, o))
    return cross.T @ alpha, prior - jnp.sum(solved * solved, axis=0)


def _neg_log_marginal(log_params: Array, degree: int, x: Array, o: Array, y: Array,
                      noise_var: Array) -> Array:
    gram = _poly(log_params, degree, x, o, x, o) + noise_var * jnp.eye(y.shape[0])
    chol = jnp.linalg.cholesky(gram)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y)
    return 0.5 * y @ alpha + jnp.sum(jnp.log(jnp.diagonal(chol)))


def fit_poly_kernel(game: RoutingGame, s: Setting, key: Array, *, degree: int = 6,
                    points: int = 100, steps: int = 100,
                    learning_rate: float = 0.1) -> PolyKernel:
    """Maximum-marginal-likelihood hyperparameters of each controlled player's kernel from
    ``points`` random joint actions with noisy payoffs, every parameter bounded to ``[1e-6,
    1e6]`` (the authors' bounds): ``steps`` Adam steps on the log-parameters from 1, float64.

    The authors fit GPy's model on 199 points with L-BFGS (up to 500 evaluations); the default
    here is 100 points and 100 steps, since the cost grows as ``points^3`` per step and player
    (about 0.3 s per step for 20 players at 100 points on 2 CPU cores)."""
    check_int("degree", degree)
    check_int("points", points)
    check_int("steps", steps)
    check_positive("learning_rate", learning_rate)
    inputs = player_inputs(game, s.controlled)
    k_play, k_noise = jax.random.split(key)
    with jax.enable_x64(True):
        actions, times, occ = random_play(game, s.controlled, k_play, points)
        ids = jnp.asarray(s.controlled)

        def sample(a, t, o):
            x, oo = _route_inputs(game, s, inputs, a[ids], o, per_edge=False)
            own = jnp.take_along_axis(x, a[ids][:, None, None], axis=1)[:, 0]
            occs = jnp.take_along_axis(oo, a[ids][:, None, None], axis=1)[:, 0]
            return own, occs, t[ids]

        x, o, t = jax.vmap(sample)(actions, times, occ)            # (P, M, D), (P, M)
        x, o = jnp.moveaxis(x, 0, 1).astype(jnp.float64), jnp.moveaxis(o, 0, 1).astype(
            jnp.float64)
        noise = jax.random.normal(k_noise, t.shape, jnp.float64)
        y = (-(t.astype(jnp.float64) + noise * s.noise_std) / s.loss_scale).T   # (M, P)
        noise_var = (s.noise_std / s.loss_scale).astype(jnp.float64) ** 2
        bound = np.log(1e6)
        opt = optax.adam(learning_rate)

        def fit(x, o, y, nv):
            loss = jax.value_and_grad(lambda p: _neg_log_marginal(p, degree, x, o, y, nv))

            def step(carry, _):
                params, state = carry
                value, grad = loss(params)
                updates, state = opt.update(grad, state)
                params = jnp.clip(optax.apply_updates(params, updates), -bound, bound)
                return (params, state), value

            params = jnp.zeros(5, jnp.float64)
            (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), None, steps)
            return params

        log_params = jax.jit(jax.vmap(fit))(x, o, y, noise_var)
    return PolyKernel(log_params, degree)


class GPState(NamedTuple):
    weights: WeightsState
    hist_x: Array   # (M, T, D)
    hist_o: Array   # (M, T, D)
    hist_y: Array   # (M, T)
    count: Array    # ()
    log_params: Array  # (M, 5) the kernels' (a traced input, not a compiled-in constant)


def gp_mw(game: RoutingGame, s: Setting, kernel: PolyKernel, *, beta: float = 2.0) -> Population:
    """GP-MW with the exact GP posterior of each player's payoff (float64; the history has
    ``s.horizon`` rows, masked up to the rounds played)."""
    check_positive("beta", beta, allow_zero=True)
    valid = _valid(game, s.controlled)
    inputs = player_inputs(game, s.controlled)
    eta = jnp.sqrt(8 * jnp.log(valid.sum(1)) / s.horizon)
    m, width = inputs.edges.shape
    noise_var = (s.noise_std / s.loss_scale) ** 2

    def init(key: Array) -> GPState:
        zeros = jnp.zeros((m, s.horizon, width), jnp.float64)
        return GPState(_weights_init(valid, _ranges(s)), zeros, zeros,
                       jnp.zeros((m, s.horizon), jnp.float64), jnp.asarray(0, jnp.int32),
                       jnp.asarray(kernel.log_params, jnp.float64))

    def update(state: GPState, key: Array, fb: RoutingFeedback) -> GPState:
        x, o = _route_inputs(game, s, inputs, fb.actions, fb.occupancy,
                            per_edge=False)
        x, o = x.astype(jnp.float64), o.astype(jnp.float64)
        mean, var = jax.vmap(_gp_posterior, in_axes=(0, None, 0, 0, 0, None, 0, 0, 0))(
            state.log_params, kernel.degree, state.hist_x, state.hist_o, state.hist_y,
            state.count, noise_var, x, o)
        ucb = (mean + beta * jnp.sqrt(jnp.maximum(var, 1e-12))) * s.loss_scale[:, None]
        weights = jax.vmap(_hedge_step)(state.weights, jnp.where(valid, ucb, -jnp.inf), eta)
        own = jnp.take_along_axis(x, fb.actions[:, None, None], axis=1)[:, 0]
        occ = jnp.take_along_axis(o, fb.actions[:, None, None], axis=1)[:, 0]
        t = state.count
        return GPState(weights, state.hist_x.at[:, t].set(own), state.hist_o.at[:, t].set(occ),
                       state.hist_y.at[:, t].set(-fb.losses / s.loss_scale), t + 1,
                       state.log_params)

    return Population(init, lambda state: jnp.exp(state.weights.log_weights), update, True)


def separable_features(x: Array, o: Array, degree: int) -> Array:
    """``phi(x, o) = (x_e o_e^j)`` for ``j = 0 .. degree`` over the last axis (D) of ``x, o``:
    ``(..., D (degree + 1))``. A payoff ``-sum_e x_e c_e(o_e)`` with polynomial edge costs of
    degree <= ``degree`` is linear in it."""
    powers = o[..., None] ** jnp.arange(degree + 1)
    return (x[..., None] * powers).reshape(*x.shape[:-1], -1)


class EnsembleState(NamedTuple):
    weights: WeightsState
    model: Any      # EnsemblePPState batched over players


def ensemble_mw(game: RoutingGame, s: Setting, *, degree: int = 4, index_dim: int = 16,
                beta: float = 2.0, noise_std: float = 0.01,
                prior_var: float = 1.0) -> Population:
    """GP-MW's optimism from linear Ensemble++ on :func:`separable_features` (float32):
    ``ucb(k) = mu^T phi_k + beta ||phi_k^T A||``. ``noise_std`` is the model's noise on the
    normalised payoff (the true one is ``sigma_i / L_i = 0.001``; a float32 Kalman update with
    prior variance 1 needs the ratio well below 1 / float32 epsilon)."""
    check_positive("beta", beta, allow_zero=True)
    check_int("degree", degree)
    valid = _valid(game, s.controlled)
    inputs = player_inputs(game, s.controlled)
    eta = jnp.sqrt(8 * jnp.log(valid.sum(1)) / s.horizon)
    dim = inputs.edges.shape[1] * (degree + 1)
    model = ensemble_pp_posterior(dim, index_dim, noise_std=noise_std, prior_var=prior_var)
    m = len(s.controlled)

    def init(key: Array) -> EnsembleState:
        return EnsembleState(_weights_init(valid, _ranges(s)),
                             jax.vmap(model.init)(jax.random.split(key, m)))

    def update(state: EnsembleState, key: Array, fb: RoutingFeedback) -> EnsembleState:
        x, o = _route_inputs(game, s, inputs, fb.actions, fb.occupancy,
                            per_edge=True)
        phi = separable_features(x, o, degree)                                  # (M, K, F)
        mean = jnp.einsum("mkf,mf->mk", phi, state.model.mu)
        spread = jnp.einsum("mkf,mfj->mkj", phi, state.model.factor)
        ucb = (mean + beta * jnp.linalg.norm(spread, axis=-1)) * s.loss_scale[:, None]
        weights = jax.vmap(_hedge_step)(state.weights, jnp.where(valid, ucb, -jnp.inf), eta)
        played = jnp.take_along_axis(phi, fb.actions[:, None, None], axis=1)[:, 0]
        keys = jax.random.split(key, m)
        new = jax.vmap(model.update)(state.model, keys, played, -fb.losses / s.loss_scale)
        return EnsembleState(weights, new)

    return Population(init, lambda state: jnp.exp(state.weights.log_weights), update)


class RoutingRounds(NamedTuple):
    """Per-round records."""

    regret: Array            # (T, M) cumulative realised regret of each controlled player
    relative_delay: Array    # (T,) the authors' congestion measure
    total_travel_time: Array  # (T,)


def play_routing(game: RoutingGame, s: Setting, population: Population,
                 keys: Array) -> RoutingRounds:
    """``s.horizon`` rounds of the routing game with the controlled players learning (the rest on
    route 0), one compiled ``vmap`` over the seeds ``keys (S,)``; every leaf gains a leading
    seed axis. Round t uses ``fold_in(key, t)`` (split into action, noise and update keys), so a
    seed's run does not depend on how many seeds share a batch. A ``float64`` population
    (GP-MW) is traced and run under ``jax.enable_x64``. Returns NumPy float32 arrays."""
    check_key("keys", keys[0] if jnp.ndim(keys) == 1 else keys)
    if jnp.ndim(keys) != 1:
        raise ValueError(f"keys: expected a 1-d array of keys (one per seed), got shape "
                         f"{jnp.shape(keys)}")
    context = jax.enable_x64(True) if population.float64 else contextlib.nullcontext()
    with context:
        rounds = jax.jit(jax.vmap(lambda k: _play(game, s, population, k)))(keys)
        return jax.tree.map(lambda x: np.asarray(x, np.float32), rounds)


def _play(game: RoutingGame, s: Setting, population: Population, key: Array) -> RoutingRounds:
    ids = jnp.asarray(s.controlled)
    k_init, k_play = jax.random.split(key)

    def step(carry, t):
        state, cum_got, cum_routes = carry
        k_act, k_noise, k_update = jax.random.split(jax.random.fold_in(k_play, t), 3)
        probs = population.strategy(state)
        draws = jax.vmap(_draw)(jax.random.split(k_act, len(s.controlled)), probs)
        actions = jnp.zeros(game.num_players, jnp.int32).at[ids].set(draws)
        times = travel_times(game, actions)
        routes = deviation_travel_times(game, actions)[ids]
        occ = occupancy(game, actions)
        noisy = times[ids] + s.noise_std * jax.random.normal(k_noise, (len(s.controlled),))
        state = population.update(state, k_update, RoutingFeedback(draws, noisy, routes, occ))
        cum_got = cum_got + times[ids]
        cum_routes = cum_routes + jnp.where(jnp.isfinite(routes), routes, 0.0)
        valid = jnp.isfinite(routes)
        best = jnp.min(jnp.where(valid, cum_routes, jnp.inf), axis=1)
        return (state, cum_got, cum_routes), RoutingRounds(cum_got - best,
                                                           relative_delay(game, occ),
                                                           times.sum())

    m, k = len(s.controlled), game.routes.shape[1]
    carry = (population.init(k_init), jnp.zeros(m), jnp.zeros((m, k)))
    _, rounds = jax.lax.scan(step, carry, jnp.arange(s.horizon))
    return rounds


def make_population(name: str, game: RoutingGame, s: Setting, key: Array | None = None,
                    **kwargs) -> Population:
    """The routing learner ``name`` (one of :data:`ROUTING_LEARNERS`); ``gp_mw`` fits its
    kernel from random play with ``key`` (``degree`` and ``points`` go to
    :func:`fit_poly_kernel`, ``beta`` to :func:`gp_mw`)."""
    check_choice("name", name, ROUTING_LEARNERS)
    if name == "gp_mw":
        if key is None:
            raise ValueError("key: gp_mw fits its kernel from random play and needs a key")
        fit_args = {a: kwargs.pop(a) for a in ("degree", "points", "steps") if a in kwargs}
        return gp_mw(game, s, fit_poly_kernel(game, s, key, **fit_args), **kwargs)
    return {"hedge": hedge, "exp3": exp3, "ensemble_mw": ensemble_mw}[name](game, s, **kwargs)
