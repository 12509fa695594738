"""Helpers of the games tests: a player that follows a fixed sequence of actions, and a game
that replays a fixed sequence of loss vectors."""

import jax
import jax.numpy as jnp
import numpy as np

from hyperx.games import GameLearner


def sequence_player(actions: np.ndarray, num_actions: int) -> GameLearner:
    """Plays ``actions[t]`` at round t whatever happens (an oblivious adversary)."""
    seq = jnp.asarray(actions, jnp.int32)
    return GameLearner(lambda key, payoff_range: jnp.int32(0),
                       lambda t: jax.nn.one_hot(seq[t], num_actions, dtype=jnp.float32),
                       lambda t, key, feedback: t + 1)


def loss_sequence_game(losses: np.ndarray) -> jnp.ndarray:
    """A game whose row player meets the loss vectors ``losses (K, T)`` in [0, 1] in order when
    the column player (T actions) plays 0, 1, ..., T - 1: payoff ``1 - loss``."""
    row = 1.0 - jnp.asarray(losses, jnp.float32)
    return jnp.stack([row, jnp.zeros_like(row)])
