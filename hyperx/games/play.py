"""A repeated game as one ``lax.scan`` over rounds, ``vmap``-able over seeds and games.

Round t: every player i draws ``a_i^t ~ x_i^t`` from its learner's strategy; each sees the joint
action, its own payoff ``u_i(a^t)`` plus independent ``N(0, sigma^2)`` noise, and the noise-free
vector ``u_i(., a_{-i}^t)`` (:class:`~hyperx.games.learners.Feedback`); then every learner
updates. Recorded per round, for each player (the GP-MW authors' measure):

* realised regret ``R_i(t) = max_a sum_{s <= t} u_i(a, a_{-i}^s) - sum_{s <= t} u_i(a^s)``
  (expected payoffs, noise-free, against the others' realised actions; the authors plot
  ``R_i(t) / t``);
* expected regret, the same with ``<x_i^s, u_i(., a_{-i}^s)>`` for the obtained payoff (the
  quantity of Hedge's bound).

At the end, the time-averaged mixed strategies ``(1/T) sum_t x_i^t`` (their
:func:`~hyperx.games.normal_form.nash_conv` measures convergence to Nash in two-player zero-sum
games) and the time-averaged product distribution ``(1/T) sum_t x_1^t (x) ... (x) x_N^t``
(its :func:`~hyperx.games.normal_form.cce_gap` measures convergence to coarse-correlated
equilibria in general-sum games).

Keys: round t uses ``fold_in(key, t)``, split once into the players' action keys, one noise key
and the players' update keys; a seed's run does not depend on how many seeds share a vmapped
batch (tested).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from hyperx._validation import check_finite, check_int, check_key, check_positive
from hyperx.games.learners import Feedback, GameLearner
from hyperx.games.normal_form import check_game, payoff, payoff_vector

Array = jax.Array
MAX_JOINT = 2**22


class Rounds(NamedTuple):
    """Per-round records, leaves ``(T, N)``."""

    actions: Array          # int32, the joint action played
    payoffs: Array          # expected (noise-free) payoffs of the joint action
    regret: Array           # cumulative realised regret after the round
    expected_regret: Array  # cumulative regret of the mixed strategies


class PlayResult(NamedTuple):
    """A whole game: the rounds, the time-averaged strategies and product distribution."""

    rounds: Rounds
    mean_strategies: tuple[Array, ...]   # one (K_i,) per player
    mean_joint: Array                    # (K_1, ..., K_N)


def _product(strategies: Sequence[Array]) -> Array:
    return functools.reduce(lambda acc, x: acc[..., None] * x, strategies)


def _draw(key: Array, probs: Array) -> Array:
    """One action from ``probs (K,)`` by inverting the CDF with a single uniform draw (cost
    O(K), one random number per player instead of K Gumbel draws)."""
    cdf = jnp.cumsum(probs)
    u = jax.random.uniform(key, (), cdf.dtype) * cdf[-1]
    return jnp.minimum(jnp.sum(cdf <= u), probs.shape[0] - 1).astype(jnp.int32)


def play(payoffs: Array, learners: Sequence[GameLearner], key: Array, horizon: int, *,
         noise_std: float = 1.0) -> PlayResult:
    """Play the game ``payoffs (N, K_1, ..., K_N)`` for ``horizon`` rounds.

    ``learners[i]`` plays player i (built with :class:`~hyperx.games.learners.PlayerSpec`
    ``(i, (K_1, ..., K_N), horizon, noise_std)``); each learner's payoff range is that player's
    ``[min, max]`` payoff in the game (the knowledge the authors' learners are given).
    Jit-able with ``learners``, ``horizon`` and ``noise_std`` static; vmap over ``payoffs`` and
    ``key`` for many games and seeds (:func:`play_seeds`).
    """
    num_actions = check_game(payoffs)
    n = len(num_actions)
    if len(learners) != n:
        raise ValueError(f"learners: expected one per player ({n}), got {len(learners)}")
    check_key("key", key)
    check_int("horizon", horizon)
    check_positive("noise_std", noise_std, allow_zero=True)
    if math.prod(num_actions) > MAX_JOINT:
        raise ValueError(f"payoffs: {math.prod(num_actions)} joint actions exceed the "
                         f"{MAX_JOINT} this run tracks a joint distribution over")
    k_init, k_play = jax.random.split(key)
    init_keys = jax.random.split(k_init, n)
    ranges = [jnp.stack([payoffs[i].min(), payoffs[i].max()]) for i in range(n)]
    states = tuple(learner.init(init_keys[i], ranges[i]) for i, learner in enumerate(learners))
    for i, (learner, state) in enumerate(zip(learners, states, strict=True)):
        shape = jax.eval_shape(learner.strategy, state).shape
        if shape != (num_actions[i],):
            raise ValueError(f"learners[{i}]: its strategy has shape {shape}, but player {i} "
                             f"has {num_actions[i]} actions (build it with that player's spec)")

    def step(carry, t):
        states, cum_vectors, cum_got, cum_expected, sum_strategies, sum_joint = carry
        keys = jax.random.split(jax.random.fold_in(k_play, t), 2 * n + 1)
        strategies = [learner.strategy(s) for learner, s in zip(learners, states, strict=True)]
        actions = jnp.stack([_draw(keys[i], x) for i, x in enumerate(strategies)])
        got = payoff(payoffs, actions)
        noisy = got + noise_std * jax.random.normal(keys[n], (n,), got.dtype)
        vectors = [payoff_vector(payoffs, i, actions) for i in range(n)]
        states = tuple(
            learner.update(s, keys[n + 1 + i], Feedback(actions, noisy[i], vectors[i]))
            for i, (learner, s) in enumerate(zip(learners, states, strict=True)))
        cum_vectors = tuple(c + v for c, v in zip(cum_vectors, vectors, strict=True))
        cum_got = cum_got + got
        cum_expected = cum_expected + jnp.stack(
            [x @ v for x, v in zip(strategies, vectors, strict=True)])
        best = jnp.stack([jnp.max(c) for c in cum_vectors])
        sum_strategies = tuple(s + x for s, x in zip(sum_strategies, strategies, strict=True))
        carry = (states, cum_vectors, cum_got, cum_expected, sum_strategies,
                 sum_joint + _product(strategies))
        return carry, Rounds(actions, got, best - cum_got, best - cum_expected)

    zeros = tuple(jnp.zeros(k, jnp.float32) for k in num_actions)
    carry = (states, zeros, jnp.zeros(n, jnp.float32), jnp.zeros(n, jnp.float32), zeros,
             jnp.zeros(num_actions, jnp.float32))
    carry, rounds = jax.lax.scan(step, carry, jnp.arange(horizon))
    return PlayResult(rounds, tuple(s / horizon for s in carry[4]), carry[5] / horizon)


def play_seeds(payoffs: Array, learners: Sequence[GameLearner], keys: Array, horizon: int, *,
               noise_std: float = 1.0) -> PlayResult:
    """:func:`play` vmapped over seeds: ``payoffs (S, N, K_1, ..., K_N)`` (one game per seed)
    and ``keys (S,)``; every leaf of the result gains a leading seed axis."""
    if jnp.ndim(payoffs) < 4:
        raise ValueError("payoffs: expected one game per seed, shape (S, N, K_1, ..., K_N), "
                         f"got {jnp.shape(payoffs)}")
    check_game(payoffs[0])  # the shape of each seed's game
    check_finite("payoffs", payoffs)  # the compiled play checks nothing inside jit
    if jnp.shape(keys)[:1] != jnp.shape(payoffs)[:1]:
        raise ValueError(f"keys: expected one key per game ({jnp.shape(payoffs)[0]}), got "
                         f"shape {jnp.shape(keys)}")
    return make_play_seeds(learners, horizon, noise_std=noise_std)(payoffs, keys)


def make_play_seeds(learners: Sequence[GameLearner], horizon: int, *,
                    noise_std: float = 1.0) -> Callable[[Array, Array], PlayResult]:
    """The compiled program behind :func:`play_seeds`: ``fn(payoffs (S, ...), keys (S,))``.
    Hold it to play more batches of the same shapes without compiling again."""
    check_int("horizon", horizon)
    return jax.jit(jax.vmap(lambda p, k: play(p, learners, k, horizon, noise_std=noise_std)))
