"""Normal-form games: payoff tensors, the random games of GP-MW's experiments, and equilibrium gaps.

An N-player game with action sets of sizes ``K_1, ..., K_N`` is a payoff tensor ``payoffs`` of
shape ``(N, K_1, ..., K_N)``: ``payoffs[i][a_1, ..., a_N]`` is player i's payoff when the joint
action ``a = (a_1, ..., a_N)`` is played (OpenSpiel's ``utilities`` of a matrix game, one tensor).
Two-player zero-sum games hold ``payoffs[1] = -payoffs[0]``.

Random games follow Sessa, Bogunovic, Kamgarpour and Krause, *No-Regret Learning in Unknown Games
with Correlated Payoffs* (NeurIPS 2019, section 5, and their code sessap/noregretgames,
``Repeated_MatrixGames``): a sample f ~ GP(0, k) on the grid of joint actions (squared-exponential
kernel on the action indices, variance 1, lengthscale K/5), smoothed into the posterior mean
``k(K + sigma^2 I)^{-1} f`` so that the payoff function has a bounded RKHS norm.

Equilibrium gaps (OpenSpiel's conventions):

* :func:`nash_conv` of mixed strategies ``x = (x_1, ..., x_N)``:
  ``sum_i [max_a u_i(a, x_{-i}) - u_i(x)]``, zero exactly at a Nash equilibrium; in a two-player
  zero-sum game it is the duality gap ``max_a (A y)_a - min_b (x^T A)_b``.
* :func:`cce_gap` of a joint distribution ``sigma`` over joint actions: the smallest
  ``eps >= 0`` with ``E_sigma[u_i(a', a_{-i})] <= E_sigma[u_i(a)] + eps`` for every player i and
  deviation a', i.e. sigma is an eps-coarse-correlated equilibrium. The empirical distribution of
  T rounds of play is an eps-CCE with eps = max_i (regret_i / T), which is why no-regret players
  converge to the set of CCE (Hart and Mas-Colell 2000).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import (
    check_finite,
    check_floating,
    check_key,
    check_memory,
    check_positive,
    check_shape,
    host_memory_bytes,
    is_concrete,
)
from hyperx.games.kernels import RBF, check_num_actions, joint_actions, kernel_matrix


def check_game(payoffs) -> tuple[int, ...]:
    """Validate a payoff tensor ``(N, K_1, ..., K_N)`` and return ``(K_1, ..., K_N)``."""
    shape = tuple(np.shape(payoffs))
    if len(shape) < 3 or shape[0] != len(shape) - 1:
        raise ValueError("payoffs: expected shape (N, K_1, ..., K_N) with N >= 2 players "
                         f"(one K per player), got {shape}")
    if min(shape[1:]) < 1:
        raise ValueError(f"payoffs: every player needs at least one action, got {shape}")
    check_floating("payoffs", payoffs)
    check_finite("payoffs", payoffs)
    return shape[1:]


def zero_sum(matrix) -> jax.Array:
    """The two-player zero-sum game of the row player's payoff ``matrix (K_1, K_2)``."""
    matrix = jnp.asarray(matrix)
    if matrix.ndim != 2:
        raise ValueError(f"matrix: expected a (K_1, K_2) payoff matrix, got shape {matrix.shape}")
    return jnp.stack([matrix, -matrix])


def rock_paper_scissors() -> jax.Array:
    """Rock-paper-scissors, payoffs in {-1, 0, 1}; its only Nash equilibrium is uniform play."""
    return zero_sum(jnp.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]]))


def random_gp_game(key: jax.Array, num_actions: tuple[int, ...], *, zero_sum: bool = True,
                   lengthscale: float | None = None, variance: float = 1.0,
                   smoothing_std: float = 1.0) -> jax.Array:
    """A random game with smooth payoffs, as in GP-MW's experiments (Sessa et al. 2019, §5).

    Each player's payoff function is ``m = K (K + s^2 I)^{-1} f`` with ``f ~ N(0, K)`` on the
    ``prod(K_i)`` joint actions and ``K`` the squared-exponential kernel matrix of the joint
    action indices (``variance``, ``lengthscale``; default ``max(K_i) / 5``, the authors' K/5)
    and ``s = smoothing_std`` (the authors' sigma = 1). With the eigendecomposition
    ``K = V diag(l) V^T`` this is ``m = V diag(l^{3/2} / (l + s^2)) z``, ``z ~ N(0, I)``.
    ``zero_sum`` (two players only) returns ``(m, -m)``; otherwise the N players' payoff
    functions are independent draws (a general-sum game).
    """
    check_key("key", key)
    num_actions = check_num_actions(num_actions)
    n = len(num_actions)
    if n < 2:
        raise ValueError(f"num_actions: expected at least 2 players, got {num_actions}")
    if zero_sum and n != 2:
        raise ValueError(f"zero_sum: a zero-sum random game needs 2 players, got {n}")
    check_positive("variance", variance)
    check_positive("smoothing_std", smoothing_std)
    if lengthscale is None:
        lengthscale = max(num_actions) / 5
    check_positive("lengthscale", lengthscale)
    outcomes = math.prod(num_actions)
    check_memory("num_actions", 16.0 * outcomes**2, host_memory_bytes(),
                 f"host memory for the {outcomes} x {outcomes} kernel matrix")
    grid = joint_actions(num_actions)
    eig, vec = np.linalg.eigh(kernel_matrix(RBF(lengthscale, variance), grid, grid))
    eig = np.clip(eig, 0.0, None)
    scale = jnp.asarray(eig**1.5 / (eig + smoothing_std**2), jnp.float32)
    vec = jnp.asarray(vec, jnp.float32)
    z = jax.random.normal(key, (1 if zero_sum else n, outcomes), jnp.float32)
    means = (z * scale) @ vec.T
    if zero_sum:
        means = jnp.concatenate([means, -means])
    return means.reshape((n, *num_actions))


def payoff(payoffs: jax.Array, actions: jax.Array) -> jax.Array:
    """Every player's payoff ``(N,)`` at the joint action ``actions (N,)``."""
    return payoffs[(slice(None), *(actions[j] for j in range(payoffs.shape[0])))]


def payoff_vector(payoffs: jax.Array, player: int, actions: jax.Array) -> jax.Array:
    """Player i's payoffs ``(K_i,)`` of each of its actions against the others' ``actions``:
    ``u_i(., a_{-i})`` (the full-information feedback of Hedge)."""
    n = payoffs.shape[0]
    u = jnp.moveaxis(payoffs[player], player, -1)
    return u[tuple(actions[j] for j in range(n) if j != player)]


def _against(payoffs: jax.Array, player: int, strategies) -> jax.Array:
    """u_i(., x_{-i}) ``(K_i,)``: player i's payoff of each action against the others' mixed
    strategies (contract the others' axes, highest first so the lower axes keep their place)."""
    u = payoffs[player]
    for j in reversed(range(payoffs.shape[0])):
        if j != player:
            u = jnp.tensordot(u, strategies[j], axes=([j], [0]))
    return u


def nash_conv(payoffs: jax.Array, strategies) -> jax.Array:
    """``sum_i [max_a u_i(a, x_{-i}) - u_i(x)]`` of the mixed strategies ``x`` (one ``(K_i,)``
    probability vector per player): OpenSpiel's NashConv, 0 exactly at a Nash equilibrium."""
    num_actions = check_game(payoffs)
    _check_strategies(strategies, num_actions)
    total = jnp.float32(0.0)
    for i in range(len(num_actions)):
        u = _against(payoffs, i, strategies)
        total = total + jnp.max(u) - u @ strategies[i]
    return total


def cce_gap(payoffs: jax.Array, joint: jax.Array) -> jax.Array:
    """The smallest eps >= 0 for which ``joint (K_1, ..., K_N)``, a distribution over joint
    actions, is an eps-coarse-correlated equilibrium: ``max_i max_a' E[u_i(a', a_{-i})] -
    E[u_i(a)]`` (clipped at 0)."""
    num_actions = check_game(payoffs)
    check_shape("joint", joint, num_actions, "one entry per joint action")
    _check_distribution("joint", joint)
    gap = jnp.float32(0.0)
    for i in range(len(num_actions)):
        others = joint.sum(axis=i)
        u = jnp.moveaxis(payoffs[i], i, 0)
        deviation = jnp.tensordot(u, others, axes=others.ndim)
        gap = jnp.maximum(gap, jnp.max(deviation) - jnp.sum(joint * payoffs[i]))
    return gap


def _check_strategies(strategies, num_actions: tuple[int, ...]) -> None:
    if len(strategies) != len(num_actions):
        raise ValueError(f"strategies: expected one per player ({len(num_actions)}), "
                         f"got {len(strategies)}")
    for i, (x, k) in enumerate(zip(strategies, num_actions, strict=True)):
        check_shape(f"strategies[{i}]", x, (k,))
        _check_distribution(f"strategies[{i}]", x)


DISTRIBUTION_TOLERANCE = 1e-4
"""How far a probability distribution's total may be from 1 (float32 sums)."""


def _check_distribution(name: str, p) -> None:
    """``ValueError`` naming ``name`` unless the concrete ``p`` is a probability distribution:
    finite, non-negative entries summing to 1 within :data:`DISTRIBUTION_TOLERANCE` (traced
    values are not checked)."""
    if not is_concrete(p):
        return
    values = np.asarray(p, np.float64)
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError(f"{name}: expected a probability distribution (finite entries >= 0), "
                         f"got min {values.min():.6g}")
    if abs(values.sum() - 1.0) > DISTRIBUTION_TOLERANCE:
        raise ValueError(f"{name}: expected a probability distribution summing to 1, got a sum "
                         f"of {values.sum():.6g}")

