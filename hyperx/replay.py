"""Uniform replay with n-step returns, as pure functions over a pytree state.

The buffer (flashbax style) stores an arbitrary pytree per transition in a ring of
``capacity`` slots. It must carry a reward, a terminal flag, the observation to bootstrap
from (``next_obs``) and optionally a truncation flag; every other leaf (obs, action, the
perturbation vector z of the hyper agents, compact DeepSea positions, ...) is stored as
given, so nothing assumes image observations.

Sampling draws a start slot t uniformly and returns the n-step target pieces of the
double-DQN loss of HyperAgent (Li et al., ICML 2024) and HyperFQI:

    k = min(n, 1 + first j >= 0 with step t+j ending the episode)
    R = sum_{i<k} gamma^i r_{t+i}
    discount = gamma^k (1 - terminal_{t+k-1})
    bootstrap_obs = next_obs_{t+k-1}

so returns never run across an episode end: a terminal stops the sum and bootstrapping,
a truncation stops the sum but still bootstraps from its ``next_obs``.

Incomplete windows near the write head are NOT sampled: start t is sampleable only when
its n steps are written or an episode end among the written steps closes the window
earlier. The sampleable starts are the stored slots minus the newest
``min(n - 1, steps since the last episode end)``, a contiguous range in age order, so
sampling is uniform over exactly the complete windows and never reads past the write head.

Transitions must be added one at a time from one stream (one environment per buffer
state); use ``jax.vmap`` over buffer states for many seeds or environments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import check_positive

PyTree = Any


class ReplayState(NamedTuple):
    """Buffer contents and counters.

    data: the transition pytree with a leading ``capacity`` axis (unwritten slots are zeros).
    write_index: slot the next transition goes to.
    num_added: ``|D|``, transitions added so far (not capped by capacity).
    steps_since_end: transitions added since the last one that ended an episode (capped at n).
    """

    data: PyTree
    write_index: jax.Array
    num_added: jax.Array
    steps_since_end: jax.Array


class ReplaySample(NamedTuple):
    """A batch of B windows.

    transition: the stored pytree at each window start, leaves shaped (B, ...).
    n_step_return: (B,) ``sum_{i<k} gamma^i r_{t+i}``.
    discount: (B,) ``gamma^k (1 - terminal)`` of the last included step.
    bootstrap_obs: ``next_obs`` of the last included step, leaves shaped (B, ...).
    n_steps: (B,) k, the number of steps summed (1 <= k <= n).
    indices: (B,) start slots.
    valid: (B,) False only when the buffer had nothing to sample; those rows hold zeros
        (return 0, discount 0) so a mask or weight over ``valid`` removes them.
    """

    transition: PyTree
    n_step_return: jax.Array
    discount: jax.Array
    bootstrap_obs: PyTree
    n_steps: jax.Array
    indices: jax.Array
    valid: jax.Array


class NStepTarget(NamedTuple):
    """The n-step pieces of a batch of windows: ``n_step_return`` (B,), ``discount`` (B,)
    and ``n_steps`` (B,), the number k of steps summed (0 on rows with nothing included)."""

    n_step_return: jax.Array
    discount: jax.Array
    n_steps: jax.Array


def n_step_target(rewards: jax.Array, terminal: jax.Array, *, gamma: float,
                  ends: jax.Array | None = None, cuts: jax.Array | None = None,
                  valid: jax.Array | None = None) -> NStepTarget:
    """The n-step return and discount of ``B`` windows of ``n`` stored steps: the one rule
    both replay layouts use (:func:`make_replay_buffer` and
    :func:`hyperx.atari_replay.make_frame_replay`).

    Step ``i`` of a window is included iff no step before it ends the episode (``ends``,
    default ``terminal``) and no step up to it is cut (``cuts``: a step that is not stored
    with what followed it, the frame replay's truncation), and the row is ``valid``::

        k = #included,  R = sum_{i<k} gamma^i r_i,  discount = gamma^k (1 - terminal_{k-1})

    (``discount = 0`` where ``k = 0``). All window arrays are (B, n); ``valid`` is (B,).
    Hand-checked in tests/test_replay.py.
    """
    ends = terminal if ends is None else ends
    ended_before = jnp.cumsum(ends, axis=1) - ends
    included = ended_before == 0
    if cuts is not None:
        included = included & (jnp.cumsum(cuts, axis=1) == 0)
    if valid is not None:
        included = included & valid[:, None]
    n = rewards.shape[1]
    powers = jnp.float32(gamma) ** jnp.arange(n, dtype=jnp.float32)
    n_step_return = jnp.sum(jnp.where(included, powers * rewards, 0.0), axis=1)
    k = jnp.sum(included, axis=1)
    last_terminal = jnp.take_along_axis(terminal, jnp.maximum(k - 1, 0)[:, None], axis=1)[:, 0]
    discount = jnp.where((k > 0) & ~last_terminal,
                         jnp.float32(gamma) ** k.astype(jnp.float32), 0.0)
    return NStepTarget(n_step_return, discount.astype(jnp.float32), k.astype(jnp.int32))


class ReplayBuffer(NamedTuple):
    """Pure functions of a buffer; see :func:`make_replay_buffer`."""

    init: Callable[[int, PyTree], ReplayState]
    add: Callable[[ReplayState, PyTree], ReplayState]
    sample: Callable[[ReplayState, jax.Array, int], ReplaySample]
    can_sample: Callable[[ReplayState, int], jax.Array]
    num_sampleable: Callable[[ReplayState], jax.Array]


def replay_capacity(capacity: int, step_budget: int) -> int:
    """Buffer size ``min(capacity, step_budget)``: more slots than steps are never used."""
    check_positive("capacity", capacity)
    check_positive("step_budget", step_budget)
    return int(min(capacity, step_budget))


def _has_field(transition: PyTree, name: str | None) -> bool:
    if name is None:
        return False
    if isinstance(transition, Mapping):
        return name in transition
    return hasattr(transition, name)


def _field(transition: PyTree, name: str, argname: str):
    try:
        if isinstance(transition, Mapping):
            return transition[name]
        return getattr(transition, name)
    except (KeyError, AttributeError):
        raise ValueError(
            f"{argname}: expected a field {name!r} (a Mapping key or attribute), "
            f"got {type(transition).__name__}"
        ) from None


def make_replay_buffer(
    n_step: int = 1,
    gamma: float = 0.99,
    *,
    reward: str = "reward",
    terminal: str = "terminal",
    next_obs: str = "next_obs",
    truncated: str | None = "truncated",
) -> ReplayBuffer:
    """Build a uniform n-step replay buffer.

    Args:
      n_step: maximum number of rewards summed per target (n >= 1).
      gamma: discount in [0, 1].
      reward, terminal, next_obs: names of the transition fields holding the scalar reward,
        the scalar terminal flag (no bootstrap) and the observation pytree to bootstrap from.
      truncated: name of a scalar truncation flag (episode ends, bootstrap kept); used when
        the transition has such a field, ignored when it has none (or ``truncated=None``).

    Returns:
      ``ReplayBuffer(init, add, sample, can_sample, num_sampleable)``:
      ``init(capacity, example_transition)``, ``add(state, transition)``,
      ``sample(state, key, batch_size)`` (``batch_size`` static),
      ``can_sample(state, batch_size)`` and ``num_sampleable(state)``.
    """
    if not isinstance(n_step, int) or n_step < 1:
        raise ValueError(f"n_step: expected an integer >= 1, got {n_step!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma: expected a value in [0, 1], got {gamma}")

    def scalar_fields(transition, argname):
        names = (reward, terminal) + ((truncated,) if _has_field(transition, truncated) else ())
        for name in names:
            shape = np.shape(_field(transition, name, argname))
            if shape != ():
                raise ValueError(f"{argname}.{name}: expected shape (), got {shape}")
        _field(transition, next_obs, argname)

    def episode_ends(data) -> jax.Array:
        end = jnp.asarray(_field(data, terminal, "transition")).astype(bool)
        if _has_field(data, truncated):
            end = end | jnp.asarray(_field(data, truncated, "transition")).astype(bool)
        return end

    def init(capacity: int, example_transition: PyTree) -> ReplayState:
        """Empty buffer with ``capacity`` zero slots shaped like ``example_transition``."""
        if not isinstance(capacity, int | np.integer) or capacity < n_step:
            raise ValueError(f"capacity: expected an integer >= n_step = {n_step}, "
                             f"got {capacity!r}")
        scalar_fields(example_transition, "example_transition")
        data = jax.tree.map(
            lambda x: jnp.zeros((int(capacity),) + np.shape(x), jnp.result_type(x)),
            example_transition,
        )
        zero = jnp.zeros((), jnp.int32)
        return ReplayState(data, zero, zero, zero)

    def add(state: ReplayState, transition: PyTree) -> ReplayState:
        """Write one transition at the head (overwriting the oldest when full)."""
        scalar_fields(transition, "transition")
        want = jax.tree.structure(state.data)
        if jax.tree.structure(transition) != want:
            raise ValueError(f"transition: expected the pytree structure {want}, "
                             f"got {jax.tree.structure(transition)}")
        for (path, slot), x in zip(jax.tree_util.tree_leaves_with_path(state.data),
                                   jax.tree.leaves(transition), strict=True):
            if np.shape(x) != slot.shape[1:]:
                raise ValueError(f"transition{jax.tree_util.keystr(path)}: expected shape "
                                 f"{slot.shape[1:]}, got {np.shape(x)}")
        capacity = jax.tree.leaves(state.data)[0].shape[0]
        i = state.write_index
        data = jax.tree.map(lambda buf, x: buf.at[i].set(jnp.asarray(x, buf.dtype)),
                            state.data, transition)
        since_end = jnp.where(episode_ends(transition), 0,
                              jnp.minimum(state.steps_since_end + 1, n_step))
        return ReplayState(data, (i + 1) % capacity, state.num_added + 1,
                           since_end.astype(jnp.int32))

    def num_sampleable(state: ReplayState) -> jax.Array:
        """Number of start slots whose n-step window is complete."""
        capacity = jax.tree.leaves(state.data)[0].shape[0]
        stored = jnp.minimum(state.num_added, capacity)
        return stored - jnp.minimum(n_step - 1, state.steps_since_end)

    def can_sample(state: ReplayState, batch_size: int) -> jax.Array:
        """True when at least ``batch_size`` (> 0) complete windows are stored."""
        check_positive("batch_size", batch_size)
        return num_sampleable(state) >= batch_size

    def sample(state: ReplayState, key: jax.Array, batch_size: int) -> ReplaySample:
        """Draw ``batch_size`` complete windows uniformly with replacement.

        On a buffer with nothing sampleable every row has ``valid = False``, a zero return
        and a zero discount (never an unwritten window with garbage): check ``can_sample``
        first or weight the loss by ``valid``.
        """
        check_positive("batch_size", batch_size)
        capacity = jax.tree.leaves(state.data)[0].shape[0]
        count = num_sampleable(state)
        oldest = jnp.where(state.num_added > capacity, state.write_index, 0)
        offset = jax.random.randint(key, (batch_size,), 0, jnp.maximum(count, 1))
        start = (oldest + offset) % capacity
        slots = (start[:, None] + jnp.arange(n_step)) % capacity
        valid = jnp.broadcast_to(count > 0, (batch_size,))

        target = n_step_target(
            _field(state.data, reward, "state.data")[slots].astype(jnp.float32),
            _field(state.data, terminal, "state.data")[slots].astype(bool), gamma=gamma,
            ends=episode_ends(state.data)[slots], valid=valid)
        k = jnp.maximum(target.n_steps, 1)
        last = jnp.take_along_axis(slots, (k - 1)[:, None], axis=1)[:, 0]

        def gather(tree, idx):
            return jax.tree.map(lambda x: jnp.where(
                valid.reshape((-1,) + (1,) * (x.ndim - 1)), x[idx], jnp.zeros_like(x[idx])),
                tree)

        return ReplaySample(
            transition=gather(state.data, start),
            n_step_return=target.n_step_return,
            discount=target.discount,
            bootstrap_obs=gather(_field(state.data, next_obs, "state.data"), last),
            n_steps=k.astype(jnp.int32),
            indices=start.astype(jnp.int32),
            valid=valid,
        )

    return ReplayBuffer(init, add, sample, can_sample, num_sampleable)
