"""What every contextual-bandit environment is: :class:`BanditEnv` and its :class:`Round`, and
the two reward draws the games share. The games themselves are in :mod:`hyperx.envs.bandits`
(synthetic and data-set games) and :mod:`hyperx.envs.text_bandit` (the text game)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from hyperx._validation import check_rank

__all__ = ["BanditEnv", "Round", "bernoulli_reward", "gaussian_reward"]

Array = jax.Array
EnvState = Any


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


def gaussian_reward(noise_std: float) -> Callable[[EnvState, Array, Round, Array], Array]:
    """The reward ``mu_arm + noise_std * N(0, 1)`` of the pulled arm."""

    def reward(env_state: EnvState, key: Array, round_: Round, arm: Array) -> Array:
        del env_state
        check_rank("arm", arm, 0)
        return round_.expected_rewards[arm] + noise_std * jax.random.normal(key, ())

    return reward


def bernoulli_reward(env_state: EnvState, key: Array, round_: Round, arm: Array) -> Array:
    """A Bernoulli(``mu_arm``) reward of the pulled arm, float32."""
    del env_state
    check_rank("arm", arm, 0)
    return jax.random.bernoulli(key, round_.expected_rewards[arm]).astype(jnp.float32)
