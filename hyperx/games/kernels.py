"""Kernels over joint actions and the feature maps that turn a GP into a linear model.

GP-MW models player i's payoff ``u_i(a)`` as a function of the joint action ``a`` (its own
action and the others'), with a kernel on the action indices; the authors use the
squared-exponential kernel ``k(a, b) = v exp(-||a - b||^2 / (2 l^2))`` with ``v = 1`` and
``l = K / 5`` (Sessa et al., NeurIPS 2019, section 5).

A GP with kernel ``k(a, b) = phi(a)^T phi(b)`` is Bayesian linear regression on the features
``phi`` with prior ``theta ~ N(0, I)`` (the weight-space view, Rasmussen and Williams 2006,
section 2.1), so GP-MW's posterior runs on the linear cores of :mod:`hyperx.linear`:

* :func:`eigen_features`: ``phi(a) = V_a diag(sqrt(l))`` from the eigendecomposition of the
  kernel matrix over all ``prod(K_i)`` joint actions, keeping eigenvalues above
  ``rel_tol * max(l)``. Exact up to the dropped eigenvalues (the kernel matrix it reproduces is
  off by at most ``rel_tol * max(l)`` in the spectral norm); builds the full kernel matrix once.
* :func:`fourier_features`: random Fourier features of the squared-exponential kernel (Rahimi and
  Recht 2007), ``phi(a) = sqrt(2 v / D) cos(W a + b)``, ``W ~ N(0, I / l^2)``,
  ``b ~ U[0, 2 pi)``: ``E[phi(a)^T phi(b)] = k(a, b)``, cost independent of the number of joint
  actions (for games too large for the kernel matrix).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import (
    check_int,
    check_memory,
    check_positive,
    check_range,
    host_memory_bytes,
)


class RBF(NamedTuple):
    """Squared-exponential kernel ``variance * exp(-||a - b||^2 / (2 lengthscale^2))``."""

    lengthscale: float
    variance: float = 1.0


def joint_actions(num_actions: tuple[int, ...]) -> np.ndarray:
    """All joint actions ``(prod(K_i), N)`` in C order (the last player's action fastest), so
    row ``r`` is ``np.unravel_index(r, num_actions)``."""
    grids = np.meshgrid(*[np.arange(k) for k in num_actions], indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1)


def kernel_matrix(kernel: RBF, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``k(a_r, b_s)`` for rows of ``a (n, N)`` and ``b (m, N)``, float64 on the host."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    sq = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    return kernel.variance * np.exp(-0.5 * sq / kernel.lengthscale**2)


class Features(NamedTuple):
    """A feature map of joint actions: ``params = init(key)``; ``apply(params, a (..., N))``
    returns ``(..., dim)`` float32 features with ``phi(a)^T phi(b) ~= k(a, b)``.
    ``num_actions`` is the game it was built for (``None``: any game; the learners refuse a
    map built for another game)."""

    dim: int
    init: Callable[[jax.Array], Any]
    apply: Callable[[Any, jax.Array], jax.Array]
    num_actions: tuple[int, ...] | None = None


def check_kernel(kernel: RBF) -> None:
    """Raise naming ``kernel`` unless it is an :class:`RBF` with a positive lengthscale and
    variance."""
    if not isinstance(kernel, RBF):
        raise TypeError(f"kernel: expected hyperx.games.RBF(lengthscale, variance), got "
                        f"{type(kernel).__name__} {kernel!r}")
    check_positive("kernel.lengthscale", kernel.lengthscale)
    check_positive("kernel.variance", kernel.variance)


def check_num_actions(num_actions: tuple[int, ...], name: str = "num_actions"
                      ) -> tuple[int, ...]:
    """``num_actions`` as a tuple, or ``ValueError`` naming ``name`` unless it is one action
    count >= 1 per player, for at least one player."""
    if not isinstance(num_actions, tuple | list) or not num_actions:
        raise ValueError(f"{name}: expected one action count per player, e.g. (3, 3), "
                         f"got {num_actions!r}")
    for i, k in enumerate(num_actions):
        check_int(f"{name}[{i}]", k)
    return tuple(int(k) for k in num_actions)


def eigen_features(num_actions: tuple[int, ...], kernel: RBF, *,
                   rel_tol: float = 1e-6) -> Features:
    """Exact kernel features from the eigendecomposition of the joint-action kernel matrix.

    ``phi(a) = V[r(a)] * sqrt(l)`` over the eigenpairs with ``l >= rel_tol * max(l)``, where
    ``r(a)`` is the C-order index of ``a``. The feature table is a constant of the learner
    (``init`` returns ``None``), shared by every seed of a vmapped run. ``rel_tol`` is in
    (0, 1], so at least the largest eigenpair is kept.
    """
    num_actions = check_num_actions(num_actions)
    check_kernel(kernel)
    check_range("rel_tol", rel_tol, 0.0, 1.0, open_low=True)
    outcomes = math.prod(num_actions)
    check_memory("num_actions", 24.0 * outcomes**2, host_memory_bytes(),
                 f"host memory for the {outcomes} x {outcomes} kernel matrix (use "
                 "fourier_features for games this large)")
    grid = joint_actions(num_actions)
    eig, vec = np.linalg.eigh(kernel_matrix(kernel, grid, grid))
    keep = eig >= rel_tol * eig.max()
    table = jnp.asarray(vec[:, keep] * np.sqrt(eig[keep]), jnp.float32)
    strides = jnp.asarray(np.array([math.prod(num_actions[j + 1:])
                                    for j in range(len(num_actions))]), jnp.int32)

    def apply(params, actions: jax.Array) -> jax.Array:
        del params
        return table[jnp.sum(actions * strides, axis=-1)]

    return Features(int(keep.sum()), lambda key: None, apply, num_actions)


def fourier_features(num_actions: tuple[int, ...], kernel: RBF, dim: int) -> Features:
    """Random Fourier features of the squared-exponential kernel (Rahimi and Recht 2007).

    ``init(key)`` draws ``W (N, dim) ~ N(0, 1 / l^2)`` and ``b (dim,) ~ U[0, 2 pi)`` (per seed);
    ``phi(a) = sqrt(2 v / dim) cos(a W + b)``.
    """
    num_actions = check_num_actions(num_actions)
    check_kernel(kernel)
    check_int("dim", dim)
    n = len(num_actions)
    scale = math.sqrt(2.0 * kernel.variance / dim)

    def init(key: jax.Array):
        kw, kb = jax.random.split(key)
        w = jax.random.normal(kw, (n, dim), jnp.float32) / kernel.lengthscale
        b = jax.random.uniform(kb, (dim,), jnp.float32, 0.0, 2.0 * math.pi)
        return w, b

    def apply(params, actions: jax.Array) -> jax.Array:
        w, b = params
        return scale * jnp.cos(actions.astype(jnp.float32) @ w + b)

    return Features(dim, init, apply, num_actions)
