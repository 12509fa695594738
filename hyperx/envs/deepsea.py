"""DeepSea in pure JAX, with bsuite's exact semantics (Osband et al., bsuite, ICLR 2020).

An N x N grid; the agent starts at (row 0, column 0) and every step moves down one row, so
an episode is exactly N steps. In cell (r, c) action a means "right" iff
``a == mapping[r, c]``, otherwise "left"; right is column + 1, left column - 1, both clipped
to the grid. Reward per step (bsuite's ``unscaled_move_cost`` = 0.01):

    r = 1[right and c == N - 1] - 1[right] * move_cost / N

so the optimal return is 1 - move_cost = 0.99. The observation is a float32 (N, N) one-hot
of (row, column), all zeros at the terminal row N. An episode is "bad" when the agent took
left while on the diagonal (row == column); bsuite's learned-size criterion counts them.

The action mapping is data (``EnvParams.action_mapping``), so ``jax.vmap`` runs many seeds
and many mappings at once. :func:`bsuite_mapping` rebuilds bsuite's mapping
(``np.random.RandomState(mapping_seed).binomial(1, 0.5, (N, N))``, a generator of its own,
drawn first, independent of the env seed); :func:`random_mapping` draws one from a JAX key.
Only the deterministic variant (bsuite's default ``deterministic=True``) is implemented.

``DeepSeaGymEnv`` (a gymnasium.Env, built on first access so gymnasium stays optional) is
registered as ``"hyperx/DeepSea-v0"`` when :mod:`hyperx.envs` is imported.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import (
    check_index,
    check_int,
    check_integer,
    check_positive,
    check_rank,
    check_shape,
)

BSUITE_MAPPING_SEED = 42
MAX_MAPPING_SEED = 2**32 - 1
BSUITE_MOVE_COST = 0.01


class EnvParams(NamedTuple):
    """DeepSea parameters as data: the (N, N) int32 action mapping and the unscaled move cost."""

    action_mapping: jax.Array
    move_cost: jax.Array

    @property
    def size(self) -> int:
        """N, read from the (static) shape of the mapping."""
        return self.action_mapping.shape[-1]


class EnvState(NamedTuple):
    """Position (row in [0, N], column in [0, N - 1]) and the episode's bad-episode flag."""

    row: jax.Array
    column: jax.Array
    bad_episode: jax.Array


class StepInfo(NamedTuple):
    """bad_episode: left taken on the diagonal so far this episode (final when done).
    optimal_return: the best achievable episode return, 1 - move_cost."""

    bad_episode: jax.Array
    optimal_return: jax.Array


class Step(NamedTuple):
    """The successor ``state`` (not reset), its observation, the reward and ``done``."""

    state: EnvState
    obs: jax.Array
    reward: jax.Array
    done: jax.Array
    info: StepInfo


def bsuite_mapping(size: int, seed: int = BSUITE_MAPPING_SEED) -> np.ndarray:
    """bsuite's action mapping for ``DeepSea(size, mapping_seed=seed)``, as int32 (N, N).

    ``seed`` is a NumPy ``RandomState`` seed, an int in [0, 2**32 - 1]."""
    check_int("size", size)
    check_int("mapping_seed", seed, low=0, high=MAX_MAPPING_SEED)
    return np.random.RandomState(seed).binomial(1, 0.5, (size, size)).astype(np.int32)


def random_mapping(key: jax.Array, size: int) -> jax.Array:
    """An (N, N) int32 mapping of independent fair bits drawn from ``key``."""
    check_int("size", size)
    return jax.random.bernoulli(key, 0.5, (size, size)).astype(jnp.int32)


def make_params(action_mapping, move_cost: float = BSUITE_MOVE_COST) -> EnvParams:
    """Params from an (N, N) 0/1 mapping (e.g. :func:`bsuite_mapping`) and the move cost."""
    check_rank("action_mapping", action_mapping, 2)
    n = np.shape(action_mapping)[0]
    check_shape("action_mapping", action_mapping, (n, n), "(N, N)")
    check_positive("move_cost", move_cost, allow_zero=True)
    return EnvParams(jnp.asarray(action_mapping, jnp.int32), jnp.float32(move_cost))


def optimal_return(params: EnvParams) -> jax.Array:
    """Return of the all-right episode: 1 - move_cost (0.99 in bsuite)."""
    return 1.0 - params.move_cost


def reset(params: EnvParams, key: jax.Array | None = None) -> tuple[EnvState, jax.Array]:
    """Start an episode at (0, 0). DeepSea's start is deterministic: ``key`` is unused."""
    del key
    state = EnvState(jnp.int32(0), jnp.int32(0), jnp.bool_(False))
    return state, observe(params, state)


def step(params: EnvParams, state: EnvState, action) -> Step:
    """One bsuite DeepSea step from a non-terminal ``state`` (see the module docstring).

    The returned state is the true successor; after ``done`` call :func:`auto_reset`.
    A concrete ``action`` outside {0, 1} raises ``ValueError`` (inside ``jit`` it is not
    checked, and any action other than the mapped one means "left").
    """
    check_shape("action", action, ())
    check_integer("action", action)
    check_index("action", action, 2)
    n = params.size
    row = jnp.minimum(state.row, n - 1)
    right = jnp.asarray(action, jnp.int32) == params.action_mapping[row, state.column]
    reward = (jnp.where(right & (state.column == n - 1), 1.0, 0.0)
              - jnp.where(right, params.move_cost / n, 0.0)).astype(jnp.float32)
    bad = state.bad_episode | (~right & (state.row == state.column))
    column = jnp.clip(state.column + jnp.where(right, 1, -1), 0, n - 1).astype(jnp.int32)
    new = EnvState(state.row + 1, column, bad)
    done = new.row >= n
    return Step(new, observe(params, new), reward, done,
                StepInfo(bad, optimal_return(params)))


def auto_reset(params: EnvParams, state: EnvState) -> EnvState:
    """``state`` unchanged, or the start state when its episode is over (row == N)."""
    start, _ = reset(params)
    done = state.row >= params.size
    return jax.tree.map(lambda a, b: jnp.where(done, a, b), start, state)


def position(state: EnvState) -> jax.Array:
    """Compact observation for replay: int32 (..., 2) = (row, column); row N is terminal."""
    return jnp.stack([state.row, state.column], axis=-1).astype(jnp.int32)


def one_hot_obs(pos: jax.Array, size: int) -> jax.Array:
    """float32 (..., N, N) one-hot of a compact (..., 2) position; all zeros when row >= N."""
    check_integer("pos", pos)
    check_shape("pos", pos, (*np.shape(pos)[:-1], 2), "(..., 2)")
    grid = jnp.arange(size)
    rows = pos[..., 0, None, None] == grid[:, None]
    cols = pos[..., 1, None, None] == grid[None, :]
    return (rows & cols).astype(jnp.float32)


def observe(params: EnvParams, state: EnvState) -> jax.Array:
    """bsuite's float32 (N, N) observation of ``state``."""
    return one_hot_obs(position(state), params.size)


def bsuite_learned_episode(bad_episodes, threshold: float = 0.9) -> jax.Array:
    """bsuite's "learned" episode: first e (1-based) with (#bad in 1..e) / e < threshold.

    Evaluated at every episode (bsuite itself only checks at its logged, log-spaced
    episodes, so this is the exact crossing and can be earlier). bsuite scores size N as
    solved if this is < 2^N + 100. Returns int32 -1 when never crossed (or no episodes).

    Args:
      bad_episodes: (E,) bool per episode, ``StepInfo.bad_episode`` at each episode end.
    """
    check_rank("bad_episodes", bad_episodes, 1)
    bad = jnp.asarray(bad_episodes, jnp.float32)
    episodes = jnp.arange(1, bad.shape[0] + 1, dtype=jnp.float32)
    return _first_true(jnp.cumsum(bad) / episodes < threshold)


def running_mean_learned_episode(returns, optimal: float = 1.0 - BSUITE_MOVE_COST,
                                 window: int = 100, fraction: float = 0.9) -> jax.Array:
    """First episode e (1-based, e >= window) whose last ``window`` returns average
    >= fraction * optimal (0.9 x 0.99 by default); int32 -1 if none.

    Args:
      returns: (E,) float episode returns.
    """
    check_rank("returns", returns, 1)
    check_positive("window", window)
    r = jnp.asarray(returns, jnp.float32)
    if r.shape[0] < window:
        return jnp.int32(-1)
    sums = jnp.convolve(r, jnp.ones(window, jnp.float32), mode="valid")
    first = _first_true(sums / window >= fraction * optimal)
    return jnp.where(first < 0, -1, first + window - 1).astype(jnp.int32)


def _first_true(flags: jax.Array) -> jax.Array:
    """1-based index of the first True, or -1."""
    if flags.shape[0] == 0:
        return jnp.int32(-1)
    return jnp.where(jnp.any(flags), jnp.argmax(flags) + 1, -1).astype(jnp.int32)


def _gym_env_class() -> type:
    import gymnasium
    from gymnasium import spaces

    class DeepSeaGymEnv(gymnasium.Env):
        """bsuite DeepSea through the gymnasium API (terminated after N steps, never
        truncated); ``info`` has ``bad_episode`` and ``optimal_return``."""

        metadata: dict[str, Any] = {"render_modes": []}

        def __init__(self, size: int = 10, mapping_seed: int = BSUITE_MAPPING_SEED,
                     move_cost: float = BSUITE_MOVE_COST):
            self.params = make_params(bsuite_mapping(size, mapping_seed), move_cost)
            self.observation_space = spaces.Box(0.0, 1.0, (size, size), np.float32)
            self.action_space = spaces.Discrete(2)
            self._step = jax.jit(step)
            self._state, _ = reset(self.params)

        def reset(self, *, seed: int | None = None, options: dict | None = None):
            super().reset(seed=seed)
            self._state, obs = reset(self.params)
            return np.asarray(obs), {}

        def step(self, action):
            out = self._step(self.params, self._state, jnp.int32(action))
            self._state = out.state
            info = {"bad_episode": bool(out.info.bad_episode),
                    "optimal_return": float(out.info.optimal_return)}
            return np.asarray(out.obs), float(out.reward), bool(out.done), False, info

    return DeepSeaGymEnv


def __getattr__(name: str):
    if name == "DeepSeaGymEnv":
        cls = _gym_env_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
