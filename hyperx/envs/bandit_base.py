"""What every contextual-bandit environment is: :class:`BanditEnv` and its :class:`Round`, and
the two reward draws the games share. The games themselves are in :mod:`hyperx.envs.bandits`
(synthetic and data-set games) and :mod:`hyperx.envs.text_bandit` (the text game)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import (
    check_finite,
    check_index,
    check_integer,
    check_positive,
    check_rank,
    check_values_in,
)

__all__ = ["ENCODINGS", "BanditEnv", "Round", "arm_features", "bernoulli_reward", "check_arm",
           "gaussian_reward", "no_state", "standardize_columns"]

Array = jax.Array
EnvState = Any
ENCODINGS = ("disjoint", "concat")


class Round(NamedTuple):
    """One round: ``contexts`` (K, d) arm features and ``expected_rewards`` (K,) arm means."""

    contexts: Array
    expected_rewards: Array


class BanditEnv(NamedTuple):
    """A contextual bandit as pure functions.

    Attributes:
      name: the game's name.
      num_arms: K, arms offered each round.
      context_dim: d, the arm-feature dimension.
      fixed_arms: True when every round offers the same K feature vectors (lets learners such as
        LinUCB cache per-arm quantities).
      init: ``init(key) -> env_state``, the per-seed problem instance.
      observe: ``observe(env_state, key, t) -> Round`` for round ``t`` (int32 scalar, 0-based).
      reward: ``reward(env_state, key, round, arm) -> ()`` float32 reward of ``arm``.
    """

    name: str
    num_arms: int
    context_dim: int
    fixed_arms: bool
    init: Callable[[Array], EnvState]
    observe: Callable[[EnvState, Array, Array], Round]
    reward: Callable[[EnvState, Array, Round, Array], Array]


def check_arm(round_: Round, arm) -> None:
    """Raise naming ``arm`` unless it is an integer scalar, and (where concrete) one of the
    round's ``K`` arms, ``[0, K)``: an index outside would be clamped silently by JAX."""
    check_rank("arm", arm, 0)
    check_integer("arm", arm)
    check_index("arm", arm, np.shape(round_.expected_rewards)[0])


def gaussian_reward(noise_std: float) -> Callable[[EnvState, Array, Round, Array], Array]:
    """The reward ``mu_arm + noise_std * N(0, 1)`` of the pulled arm."""
    check_positive("noise_std", noise_std, allow_zero=True)

    def reward(env_state: EnvState, key: Array, round_: Round, arm: Array) -> Array:
        del env_state
        check_arm(round_, arm)
        check_finite("round.expected_rewards", round_.expected_rewards)
        return round_.expected_rewards[arm] + noise_std * jax.random.normal(key, ())

    return reward


def bernoulli_reward(env_state: EnvState, key: Array, round_: Round, arm: Array) -> Array:
    """A Bernoulli(``mu_arm``) reward of the pulled arm, float32; means outside [0, 1] (not
    probabilities) given from the host raise ``ValueError`` naming them."""
    del env_state
    check_arm(round_, arm)
    check_values_in("round.expected_rewards", round_.expected_rewards, 0.0, 1.0)
    return jax.random.bernoulli(key, round_.expected_rewards[arm]).astype(jnp.float32)


def standardize_columns(x: np.ndarray) -> np.ndarray:
    """Each column of ``x`` (N, p) to mean 0 and standard deviation 1 (a constant column is
    only centred)."""
    std = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)


def arm_features(x: Array, num_arms: int, encoding: str) -> Array:
    """The K arm features of one example ``x`` (p,) when arm k is "answer k": ``disjoint``
    e_k kron x, (K, K p); ``concat`` [x, e_k], (K, p + K)."""
    eye = jnp.eye(num_arms, dtype=x.dtype)
    if encoding == "disjoint":
        return jnp.kron(eye, x[None, :])
    return jnp.concatenate([jnp.broadcast_to(x, (num_arms, x.shape[0])), eye], axis=1)


def no_state(key: Array) -> Array:
    """``init`` of a game whose instance is its data set: no per-seed draw."""
    del key
    return jnp.zeros((), jnp.float32)
