"""No-regret learners for repeated games, one player each, as pure functions.

A :class:`GameLearner` is a NamedTuple of pure functions (as :class:`hyperx.bandits.Learner`)::

    state = learner.init(key, payoff_range)    # payoff_range (2,): the player's [min, max]
    x     = learner.strategy(state)            # (K_i,) mixed strategy of this round
    state = learner.update(state, key, feedback)

Each round every player draws its action from its strategy; then it sees a :class:`Feedback`:
the joint action played, its own payoff plus N(0, sigma^2) noise (bandit feedback) and the
noise-free payoffs of all its actions against the others' actions (full information, used by
Hedge only). Payoffs are rescaled to ``[0, 1]`` with the known range (as the authors' code does)
and losses are ``1 - scaled payoff``. Regret bounds (T rounds, K actions, losses in [0, 1]):

* :func:`hedge` (Freund and Schapire 1997), full information, ``eta = sqrt(8 ln K / T)``:
  ``sum_t <x_t, l_t> - min_a sum_t l_t(a) <= sqrt(T ln K / 2)`` for every loss sequence
  (Cesa-Bianchi and Lugosi 2006, Theorem 2.2).
* :func:`exp3p` (Exp3.P, Auer et al. 2002, with the parameters of Bubeck and Cesa-Bianchi 2012,
  Theorem 3.3, as in the GP-MW authors' code; their "EXP3"): ``beta = sqrt(ln(K / delta) /
  (T K))``, ``gamma = 1.05 sqrt(K ln K / T)``, ``eta = 0.95 sqrt(ln K / (T K))``; with
  probability at least ``1 - delta``: regret ``<= 5.15 sqrt(T K ln(K / delta))``.
* :func:`exp3_ix` (Neu 2015, implicit exploration), ``eta = sqrt(2 ln K / (K T))``,
  ``gamma = eta / 2``: with probability at least ``1 - delta``: regret ``<= 2 sqrt(2 K T ln K)
  + (sqrt(2 K T / ln K) + 1) ln(2 / delta)`` (Neu 2015, Theorem 1).
* :func:`gp_mw` (Sessa, Bogunovic, Kamgarpour and Krause, NeurIPS 2019, Algorithm 1): a GP
  posterior of its payoff over joint actions, updated with its noisy payoff and the joint action;
  the optimistic payoffs ``ucb_t(a) = mu_t(a, a_{-i}^t) + beta_t sigma_t(a, a_{-i}^t)`` of every
  own action against the others' actions of the round feed Hedge (``eta = sqrt(8 ln K / T)``).
  With ``beta_t`` from Chowdhury and Gopalan (2017), regret ``O(sqrt(T ln K) + B sqrt(T gamma_T)
  + gamma_T sqrt(T))`` with high probability (Sessa et al., Theorem 1); the authors' experiments
  use ``beta_t = 2``, our default.
* :func:`ensemble_mw`: GP-MW with the GP replaced by linear Ensemble++ on the same payoff
  features (:func:`hyperx.linear.ensemble_pp_posterior`): ``sigma_t(a)`` is the spread
  ``||phi(a)^T A_t||`` of the ensemble's samples ``mu_t + A_t zeta`` (``E[A_t A_t^T] =
  Sigma_t``), ``O(K D M)`` per round for K actions instead of ``O(K D^2)``.
* :func:`uniform`: the random opponent of the authors' experiments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import (
    check_choice,
    check_finite,
    check_int,
    check_integer,
    check_positive,
    check_range,
    check_shape,
    is_concrete,
)
from hyperx.games.kernels import RBF, Features, check_num_actions, eigen_features
from hyperx.linear import ensemble_pp_posterior, gaussian_update

Array = jax.Array
State = Any


class PlayerSpec(NamedTuple):
    """What a player knows before the game: its index, every player's action count, the
    horizon T, and the feedback noise std sigma (the model-based learners' noise model)."""

    player: int
    num_actions: tuple[int, ...]
    horizon: int
    noise_std: float = 1.0

    @property
    def own_actions(self) -> int:
        """K_i, this player's number of actions."""
        return self.num_actions[self.player]


class Feedback(NamedTuple):
    """What one player observes after a round."""

    actions: Array         # (N,) int32, the joint action played
    payoff: Array          # () its own payoff plus N(0, sigma^2) noise (bandit feedback)
    payoff_vector: Array   # (K_i,) u_i(., a_{-i}), noise-free (full-information feedback)


class GameLearnerInitFn(Protocol):
    """``init(key, payoff_range) -> state``: the player's state before the first round, from its
    known payoff range (2,) ``[min, max]`` (payoffs are rescaled to [0, 1] with it)."""

    def __call__(self, key: Array, payoff_range: Array) -> State: ...


class GameLearnerStrategyFn(Protocol):
    """``strategy(state) -> x``: the (K_i,) mixed strategy of this round (``x >= 0``,
    ``sum x = 1``), from which the player's action is drawn."""

    def __call__(self, state: State) -> Array: ...


class GameLearnerUpdateFn(Protocol):
    """``update(state, key, feedback) -> state``: learn from the round's :class:`Feedback`."""

    def __call__(self, state: State, key: Array, feedback: Feedback) -> State: ...


class GameLearner(NamedTuple):
    """A player as pure functions (see the module docstring; each field's Protocol gives its
    signature)."""

    init: GameLearnerInitFn
    strategy: GameLearnerStrategyFn
    update: GameLearnerUpdateFn


class WeightsState(NamedTuple):
    """Hedge and GP-MW's exponential weights: log-weights and the known payoff range."""

    log_weights: Array  # (K,)
    payoff_range: Array  # (2,) [min, max]


class Exp3PState(NamedTuple):
    estimates: Array     # (K,) cumulative (biased-up) reward estimates
    probs: Array         # (K,) this round's mixed strategy
    payoff_range: Array


class Exp3IXState(NamedTuple):
    loss_estimates: Array  # (K,) cumulative implicit-exploration loss estimates
    payoff_range: Array


class UCBState(NamedTuple):
    """GP-MW / Ensemble++-MW: the weights, the payoff model and the feature parameters."""

    weights: WeightsState
    model: Any            # (mu, Sigma) for gp_mw; EnsemblePPState for ensemble_mw
    features: Any


def _check_spec(spec: PlayerSpec) -> None:
    if not isinstance(spec, PlayerSpec):
        raise TypeError(f"spec: expected a PlayerSpec, got {type(spec).__name__}")
    check_num_actions(spec.num_actions, "spec.num_actions")
    check_int("spec.horizon", spec.horizon)
    check_positive("spec.noise_std", spec.noise_std)
    check_int("spec.player", spec.player, low=0, high=len(spec.num_actions) - 1)


def _check_payoff_range(payoff_range: Array) -> None:
    check_shape("payoff_range", payoff_range, (2,), "[min, max]")
    check_finite("payoff_range", payoff_range)
    if is_concrete(payoff_range):
        low, high = np.asarray(payoff_range, np.float64)
        if not low <= high:
            raise ValueError(f"payoff_range: expected [min, max] with min <= max, got "
                             f"[{low:g}, {high:g}]")


def _check_feedback(spec: PlayerSpec, feedback: Feedback) -> None:
    if not isinstance(feedback, Feedback):
        raise TypeError(f"feedback: expected a Feedback, got {type(feedback).__name__}")
    n = len(spec.num_actions)
    check_shape("feedback.actions", feedback.actions, (n,), "(N,) one action per player")
    check_integer("feedback.actions", feedback.actions)
    if is_concrete(feedback.actions):
        for i, (a, k) in enumerate(zip(np.asarray(feedback.actions), spec.num_actions,
                                       strict=True)):
            check_int(f"feedback.actions[{i}]", int(a), low=0, high=k - 1)
    check_shape("feedback.payoff", feedback.payoff, (), "()")
    check_finite("feedback.payoff", feedback.payoff)
    check_shape("feedback.payoff_vector", feedback.payoff_vector, (spec.own_actions,), "(K_i,)")
    check_finite("feedback.payoff_vector", feedback.payoff_vector)


def _at_boundary(spec: PlayerSpec, learner: GameLearner) -> GameLearner:
    """``learner`` with its inputs checked: the payoff range at ``init`` and the feedback at
    ``update`` (shapes and dtypes statically; values where concrete, i.e. from the host)."""

    def init(key: Array, payoff_range: Array) -> State:
        _check_payoff_range(payoff_range)
        return learner.init(key, payoff_range)

    def update(state: State, key: Array, feedback: Feedback) -> State:
        _check_feedback(spec, feedback)
        return learner.update(state, key, feedback)

    return GameLearner(init, learner.strategy, update)


def _scaled(payoffs: Array, payoff_range: Array) -> Array:
    lo, hi = payoff_range[0], payoff_range[1]
    return jnp.clip((payoffs - lo) / jnp.maximum(hi - lo, 1e-12), 0.0, 1.0)


def _hedge_step(state: WeightsState, payoffs: Array, eta: float) -> WeightsState:
    log_w = state.log_weights - eta * (1.0 - _scaled(payoffs, state.payoff_range))
    return WeightsState(log_w - jax.nn.logsumexp(log_w), state.payoff_range)


def _uniform_log_weights(k: int) -> Array:
    return jnp.full((k,), -math.log(k), jnp.float32)


def _rate(name: str, value: float | None, default: float) -> float:
    if value is None:
        return default
    check_positive(name, value)
    return float(value)


def hedge(spec: PlayerSpec, *, learning_rate: float | None = None) -> GameLearner:
    """Hedge / multiplicative weights on the full-information payoff vector.

    ``x_{t+1}(a) ∝ x_t(a) exp(-eta l_t(a))``, ``eta = sqrt(8 ln K / T)`` by default.
    """
    _check_spec(spec)
    k = spec.own_actions
    eta = _rate("learning_rate", learning_rate, math.sqrt(8 * math.log(max(k, 2)) / spec.horizon))

    def init(key: Array, payoff_range: Array) -> WeightsState:
        return WeightsState(_uniform_log_weights(k), jnp.asarray(payoff_range, jnp.float32))

    def update(state: WeightsState, key: Array, feedback: Feedback) -> WeightsState:
        return _hedge_step(state, feedback.payoff_vector, eta)

    return _at_boundary(spec, GameLearner(init, lambda state: jnp.exp(state.log_weights),
                                          update))


def exp3p_rates(num_actions, horizon: int, delta: float):
    """Exp3.P's ``(beta, gamma, eta)`` for ``num_actions`` K (an int or an array of them):
    ``beta = sqrt(ln(K / delta) / (T K))``, ``gamma = 1.05 sqrt(K ln K / T)``,
    ``eta = 0.95 sqrt(ln K / (T K))`` (Bubeck and Cesa-Bianchi 2012, Theorem 3.3)."""
    k = np.asarray(num_actions, np.float64)
    log_k = np.log(np.maximum(k, 2.0))
    beta = np.sqrt(np.log(k / delta) / (horizon * k))
    gamma = 1.05 * np.sqrt(log_k * k / horizon)
    eta = 0.95 * np.sqrt(log_k / (horizon * k))
    return beta, gamma, eta


def exp3p_step(state: Exp3PState, action: Array, reward: Array, beta, gamma, eta,
               valid: Array) -> Exp3PState:
    """One Exp3.P update on the actions ``valid (K,)`` (the rest keep probability 0): reward
    estimates ``g(a) += beta / x(a) + 1[a = a_t] r_t / x(a_t)`` with ``r_t`` the scaled reward,
    then ``x = (1 - gamma) softmax(eta g) + gamma / K``."""
    bonus = jnp.where(valid, beta / jnp.where(valid, state.probs, 1.0), 0.0)
    g = (state.estimates + bonus).at[action].add(reward / state.probs[action])
    soft = jax.nn.softmax(jnp.where(valid, eta * g, -jnp.inf))
    probs = jnp.where(valid, (1.0 - gamma) * soft + gamma / valid.sum(), 0.0)
    return Exp3PState(g, probs, state.payoff_range)


def exp3p(spec: PlayerSpec, *, delta: float = 0.01) -> GameLearner:
    """Exp3.P with the parameters of Bubeck and Cesa-Bianchi (2012, Theorem 3.3)
    (:func:`exp3p_rates`, :func:`exp3p_step`). Needs ``gamma < 1``, i.e.
    ``T > 1.1025 K ln K``. ``delta = 1`` gives ``beta = sqrt(ln K / (T K))``, the GP-MW
    authors' routing code."""
    _check_spec(spec)
    check_range("delta", delta, 0.0, 1.0, open_low=True)
    k, t = spec.own_actions, spec.horizon
    beta, gamma, eta = (float(r) for r in exp3p_rates(k, t, delta))
    if not (0 < beta < 1 and 0 < gamma < 1):
        raise ValueError(f"spec.horizon: Exp3.P with K = {k} actions needs T > 1.1025 K ln K "
                         f"(gamma = {gamma:.3g} < 1, beta = {beta:.3g} < 1), got T = {t}")
    valid = jnp.ones(k, bool)

    def init(key: Array, payoff_range: Array) -> Exp3PState:
        return Exp3PState(jnp.zeros(k, jnp.float32), jnp.full((k,), 1.0 / k, jnp.float32),
                          jnp.asarray(payoff_range, jnp.float32))

    def update(state: Exp3PState, key: Array, feedback: Feedback) -> Exp3PState:
        return exp3p_step(state, feedback.actions[spec.player],
                          _scaled(feedback.payoff, state.payoff_range), beta, gamma, eta, valid)

    return _at_boundary(spec, GameLearner(init, lambda state: state.probs, update))


def exp3_ix(spec: PlayerSpec, *, learning_rate: float | None = None,
            implicit_exploration: float | None = None) -> GameLearner:
    """Exp3-IX (Neu 2015): loss estimates ``L(a) += 1[a = a_t] l_t / (x_t(a) + gamma)``,
    strategy ``softmax(-eta L)``; ``eta = sqrt(2 ln K / (K T))``, ``gamma = eta / 2``."""
    _check_spec(spec)
    k, t = spec.own_actions, spec.horizon
    eta = _rate("learning_rate", learning_rate, math.sqrt(2 * math.log(max(k, 2)) / (k * t)))
    gamma = _rate("implicit_exploration", implicit_exploration, eta / 2)

    def strategy(state: Exp3IXState) -> Array:
        return jax.nn.softmax(-eta * state.loss_estimates)

    def init(key: Array, payoff_range: Array) -> Exp3IXState:
        return Exp3IXState(jnp.zeros(k, jnp.float32), jnp.asarray(payoff_range, jnp.float32))

    def update(state: Exp3IXState, key: Array, feedback: Feedback) -> Exp3IXState:
        a = feedback.actions[spec.player]
        loss = 1.0 - _scaled(feedback.payoff, state.payoff_range)
        est = state.loss_estimates.at[a].add(loss / (strategy(state)[a] + gamma))
        return Exp3IXState(est, state.payoff_range)

    return _at_boundary(spec, GameLearner(init, strategy, update))


def uniform(spec: PlayerSpec) -> GameLearner:
    """The uniformly random player (the authors' "random" opponent)."""
    _check_spec(spec)
    k = spec.own_actions
    return _at_boundary(spec, GameLearner(lambda key, payoff_range: (),
                                          lambda state: jnp.full((k,), 1.0 / k, jnp.float32),
                                          lambda state, key, feedback: state))


def default_kernel(spec: PlayerSpec) -> RBF:
    """The authors' kernel: squared exponential, variance 1, lengthscale ``max(K_i) / 5``."""
    return RBF(max(spec.num_actions) / 5, 1.0)


def _own_rows(spec: PlayerSpec, actions: Array) -> Array:
    """The joint actions ``(K_i, N)`` with player i's action replaced by each of its own."""
    rows = jnp.broadcast_to(actions, (spec.own_actions, len(spec.num_actions)))
    return rows.at[:, spec.player].set(jnp.arange(spec.own_actions, dtype=rows.dtype))


def _ucb_mw(spec: PlayerSpec, features: Features, beta: Callable[[Any], Array], eta: float,
            model_init: Callable[[Array], Any],
            model_update: Callable[[Any, Array, Array, Array], Any],
            model_stats: Callable[[Any, Array], tuple[Array, Array]]) -> GameLearner:
    k = spec.own_actions

    def init(key: Array, payoff_range: Array) -> UCBState:
        k_model, k_features = jax.random.split(key)
        weights = WeightsState(_uniform_log_weights(k), jnp.asarray(payoff_range, jnp.float32))
        return UCBState(weights, model_init(k_model), features.init(k_features))

    def update(state: UCBState, key: Array, feedback: Feedback) -> UCBState:
        x = features.apply(state.features, feedback.actions)
        model = model_update(state.model, key, x, feedback.payoff)
        mean, var = model_stats(model, features.apply(state.features,
                                                      _own_rows(spec, feedback.actions)))
        ucb = mean + beta(model) * jnp.sqrt(jnp.maximum(var, 0.0))
        return UCBState(_hedge_step(state.weights, ucb, eta), model, state.features)

    return _at_boundary(spec, GameLearner(
        init, lambda state: jnp.exp(state.weights.log_weights), update))


def _features_and_rates(spec: PlayerSpec, kernel: RBF | None, features: Features | None,
                        beta: float, learning_rate: float | None) -> tuple[Features, float]:
    _check_spec(spec)
    check_positive("beta", beta, allow_zero=True)
    if features is None:
        features = eigen_features(spec.num_actions, default_kernel(spec) if kernel is None
                                  else kernel)
    elif kernel is not None:
        raise ValueError("kernel: give a kernel or features, not both")
    elif not isinstance(features, Features):
        raise TypeError(f"features: expected hyperx.games.Features (eigen_features or "
                        f"fourier_features), got {type(features).__name__}")
    check_int("features.dim", features.dim)
    if features.num_actions is not None and tuple(features.num_actions) != spec.num_actions:
        raise ValueError(f"features: built for a game of {tuple(features.num_actions)} actions, "
                         f"but this player's game has {spec.num_actions}")
    k = spec.own_actions
    return features, _rate("learning_rate", learning_rate,
                           math.sqrt(8 * math.log(max(k, 2)) / spec.horizon))


def gp_mw(spec: PlayerSpec, *, kernel: RBF | None = None, features: Features | None = None,
          beta: float | str = 2.0, rkhs_bound: float | None = None, delta: float = 0.01,
          learning_rate: float | None = None) -> GameLearner:
    """GP-MW (Sessa et al. 2019, Algorithm 1) with the exact GP posterior.

    The posterior over the feature weights (prior ``N(0, I)``, noise ``spec.noise_std``) is
    updated by one Kalman step per round (:func:`hyperx.linear.gaussian_update`, cost ``O(D^2)``),
    which is the authors' recursive GP update in weight space. ``features`` default to
    :func:`~hyperx.games.kernels.eigen_features` of ``kernel`` (default: the authors' RBF).

    ``beta``: a constant (the authors' experiments: 2), or ``"theory"``, the rule of Sessa et
    al.'s Theorem 1 (from Chowdhury and Gopalan 2017), ``beta_t = B + sqrt(2 (gamma_{t-1} +
    ln(2 / delta)))`` with ``B = rkhs_bound`` (a bound on the payoff's RKHS norm) and
    ``gamma_{t-1}`` the information gain of the observations so far, ``1/2 log det(I +
    sigma^-2 K_{t-1}) = sum_s 1/2 log(1 + sigma_{s-1}^2(x_s) / sigma^2)`` (accumulated by the
    matrix determinant lemma at each update). The theorem uses the maximum information gain over
    all sequences, of which this is a lower bound, as practical GP-UCB implementations do.
    """
    theory = isinstance(beta, str)
    if theory and beta != "theory":
        raise ValueError(f"beta: expected a number >= 0 or 'theory', got {beta!r}")
    if theory:
        if rkhs_bound is None:
            raise ValueError("rkhs_bound: beta='theory' needs the payoff's RKHS-norm bound B")
        check_positive("rkhs_bound", rkhs_bound, allow_zero=True)
        check_range("delta", delta, 0.0, 1.0, open_low=True, open_high=True)
    elif rkhs_bound is not None:
        raise ValueError("rkhs_bound: only used with beta='theory'")
    features, eta = _features_and_rates(spec, kernel, features, 0.0 if theory else beta,
                                        learning_rate)
    dim, noise_std = features.dim, spec.noise_std

    def model_init(key: Array):
        return (jnp.zeros(dim, jnp.float32), jnp.eye(dim, dtype=jnp.float32),
                jnp.zeros((), jnp.float32))

    def model_update(model, key: Array, x: Array, y: Array):
        mu, sigma, gain = model
        var = x @ sigma @ x
        return (*gaussian_update(mu, sigma, x, y, noise_std=noise_std),
                gain + 0.5 * jnp.log1p(var / noise_std**2))

    def model_stats(model, rows: Array) -> tuple[Array, Array]:
        mu, sigma, _ = model
        return rows @ mu, jnp.einsum("kd,de,ke->k", rows, sigma, rows)

    def beta_t(model) -> Array:
        if not theory:
            return jnp.asarray(beta, jnp.float32)
        # the weights for round t + 1 use the posterior after round t, so gamma_t
        return rkhs_bound + jnp.sqrt(2.0 * (model[2] + math.log(2.0 / delta)))

    return _ucb_mw(spec, features, beta_t, eta, model_init, model_update, model_stats)


def ensemble_mw(spec: PlayerSpec, *, index_dim: int = 16, kernel: RBF | None = None,
                features: Features | None = None, beta: float = 2.0,
                learning_rate: float | None = None) -> GameLearner:
    """GP-MW with linear Ensemble++ (arXiv:2407.13195) as the payoff model.

    The ensemble factor ``A_t (D, M)`` follows the incremental Ensemble++ update
    (:func:`hyperx.linear.ensemble_pp_posterior`, ``M = index_dim``); the optimistic payoff is
    ``mu_t(a) + beta ||phi(a)^T A_t||``, the spread of the ensemble's samples, since
    ``E[A_t A_t^T] = Sigma_t``.
    """
    features, eta = _features_and_rates(spec, kernel, features, beta, learning_rate)
    check_int("index_dim", index_dim)
    model = ensemble_pp_posterior(features.dim, index_dim, noise_std=spec.noise_std)

    def model_stats(state, rows: Array) -> tuple[Array, Array]:
        spread = rows @ state.factor
        return rows @ state.mu, jnp.sum(spread * spread, axis=-1)

    return _ucb_mw(spec, features, lambda state: jnp.asarray(beta, jnp.float32), eta, model.init,
                   model.update, model_stats)


LEARNERS: dict[str, Callable[..., GameLearner]] = {
    "hedge": hedge,
    "exp3": exp3p,
    "exp3_ix": exp3_ix,
    "gp_mw": gp_mw,
    "ensemble_mw": ensemble_mw,
    "random": uniform,
}


def make_learner(name: str, spec: PlayerSpec, **kwargs) -> GameLearner:
    """The learner called ``name`` (a key of :data:`LEARNERS`) for the player ``spec``."""
    check_choice("name", name, tuple(LEARNERS))
    return LEARNERS[name](spec, **kwargs)
