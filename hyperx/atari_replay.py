"""Atari replay: every 84 x 84 frame stored once, stacks rebuilt by index, one stream per env.

A transition's observation is a stack of the last 4 frames, but consecutive stacks share 3 of
them, so the buffer stores only each observation's newest frame (uint8) with the action,
reward, flags and the per-transition perturbation z, and rebuilds stacks at sample time
(the design of Dopamine's circular replay, Castro et al. 2018). 100,000 transitions of
84 x 84 frames take 100,000 x (7,056 + 11 + 4 M) bytes, about 0.71 GB; a 1M buffer (7.1 GB)
fits on one GPU.

Layout: ``E`` streams (one per environment), each a ring of ``capacity / E`` slots; slot ``j``
of a stream holds the observation acted on at one step and what followed it. Flags: ``first``
(the observation is a game's first: no stack reaches before it), ``terminal`` (no bootstrap:
game over, or a lost life in training) and ``truncated`` (the frame cap: the episode ends
but its final observation is never stored, because the next slot is the next game's first).

Stacks: the stack of slot ``j`` is the frames of slots ``j-3 .. j``, where frames before the
latest ``first`` among slots ``j-2 .. j`` are padding: the game's first frame repeated
(``pad="repeat"``, envpool's reset stack) or zeros (``pad="zero"``, ale-py's). So a rebuilt
stack equals the observation the environment returned, and never spans a game start.

Sampling draws a start slot ``t`` uniformly over all streams' sampleable slots (the newest
``n`` slots of a stream wait until ``n`` more are stored; when a stream's ring has wrapped,
its 3 oldest slots are skipped, since their stacks would read overwritten frames) and
returns the n-step pieces of the value loss (Li et al., HyperAgent, ICML 2024):

    included i (0 <= i < n): no terminal among steps t .. t+i-1 and no truncation at t .. t+i
    k = number of included steps,  R = sum_{i<k} gamma^i r_{t+i}
    discount = gamma^k (1 - terminal_{t+k-1}),  bootstrap_obs = stack(t + k)

A truncated step itself is never a start (k = 0; its row is returned with ``valid=False``, a
rare event at the 27,000-step cap); a window reaching it stops before it and bootstraps from
the stored observation of the truncated step, which belongs to the same game.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import check_choice, check_positive
from hyperx.replay import ReplaySample, n_step_target

Array = jax.Array
PyTree = Any
STACK = 4
PADS = ("repeat", "zero")


class FrameReplayState(NamedTuple):
    """Buffer contents, leaves shaped (E, C, ...) with E streams of C slots.

    frames: uint8 (E, C, H, W) newest frame of each stored observation; action: int32;
    reward: float32; terminal, truncated, first: bool (see the module docstring); extras:
    a pytree of other per-transition leaves (z); write_index, stream_added: (E,) int32;
    num_added: int32 scalar, transitions stored over all streams (|D| of the loss).
    """

    frames: Array
    action: Array
    reward: Array
    terminal: Array
    truncated: Array
    first: Array
    extras: PyTree
    write_index: Array
    stream_added: Array
    num_added: Array


class FrameReplay(NamedTuple):
    """Pure functions of the buffer; see :func:`make_frame_replay`."""

    init: Callable[[int, PyTree], FrameReplayState]
    add: Callable[[FrameReplayState, PyTree, Array], FrameReplayState]
    sample: Callable[[FrameReplayState, Array, int], ReplaySample]
    can_sample: Callable[[FrameReplayState, int], Array]
    num_sampleable: Callable[[FrameReplayState], Array]
    stack: Callable[[FrameReplayState, Array, Array], Array]


def replay_bytes(state: FrameReplayState) -> int:
    """Bytes held by the buffer's arrays."""
    return int(sum(np.dtype(x.dtype).itemsize * int(np.prod(x.shape))
                   for x in jax.tree.leaves(state)))


def make_frame_replay(num_streams: int, n_step: int = 1, gamma: float = 0.99, *,
                      pad: str = "repeat") -> FrameReplay:
    """A frame-deduplicating n-step replay for ``num_streams`` environments.

    Returns ``FrameReplay(init, add, sample, can_sample, num_sampleable, stack)``:

    - ``init(capacity, example)``: ``example`` is ONE transition: ``obs`` (4, H, W) uint8,
      ``action``, ``reward``, ``terminal``, ``truncated``, ``first`` and any extra leaves
      (e.g. ``z``); ``capacity`` is split evenly over the streams (rounded up).
    - ``add(state, transitions, valid)``: one transition per stream (leaves (E, ...)); a
      stream with ``valid = False`` (an autoreset step) stores nothing.
    - ``sample(state, key, batch_size)`` -> :class:`hyperx.replay.ReplaySample` whose
      ``transition`` holds ``obs`` (B, 4, H, W), ``action`` and the extras.
    - ``stack(state, stream, slot)``: the rebuilt observation of a slot (for tests).
    """
    check_positive("num_streams", num_streams)
    if not isinstance(n_step, int) or n_step < 1:
        raise ValueError(f"n_step: expected an integer >= 1, got {n_step!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma: expected a value in [0, 1], got {gamma}")
    check_choice("pad", pad, PADS)
    core = ("obs", "action", "reward", "terminal", "truncated", "first")

    def split(transition: dict) -> tuple[dict, dict]:
        missing = [name for name in core if name not in transition]
        if missing:
            raise ValueError(f"transition: expected the fields {core}, missing {missing}")
        return ({name: transition[name] for name in core},
                {name: v for name, v in transition.items() if name not in core})

    def init(capacity: int, example: dict) -> FrameReplayState:
        check_positive("capacity", capacity)
        base, extras = split(example)
        obs = np.shape(base["obs"])
        if len(obs) != 3 or obs[0] != STACK:
            raise ValueError(f"example['obs']: expected shape ({STACK}, H, W), got {obs}")
        per_stream = -(-int(capacity) // num_streams)
        if per_stream < n_step + STACK:
            raise ValueError(f"capacity: expected at least {(n_step + STACK) * num_streams} "
                             f"({n_step + STACK} per stream), got {capacity}")
        shape = (num_streams, per_stream)
        zeros = lambda dtype, tail=(): jnp.zeros(shape + tuple(tail), dtype)
        return FrameReplayState(
            frames=zeros(jnp.uint8, obs[1:]), action=zeros(jnp.int32),
            reward=zeros(jnp.float32), terminal=zeros(bool), truncated=zeros(bool),
            first=zeros(bool),
            extras=jax.tree.map(lambda x: zeros(jnp.result_type(x), np.shape(x)), extras),
            write_index=jnp.zeros((num_streams,), jnp.int32),
            stream_added=jnp.zeros((num_streams,), jnp.int32),
            num_added=jnp.zeros((), jnp.int32))

    def add(state: FrameReplayState, transitions: dict, valid: Array) -> FrameReplayState:
        base, extras = split(transitions)
        obs = base["obs"]
        if np.shape(obs)[:2] != (num_streams, STACK):
            raise ValueError(f"transitions['obs']: expected shape ({num_streams}, {STACK}, H, "
                             f"W), got {np.shape(obs)}")
        streams = jnp.arange(num_streams)
        slot = state.write_index
        valid = jnp.asarray(valid, bool)

        def put(buf: Array, x: Array) -> Array:
            x = jnp.asarray(x, buf.dtype)
            keep = valid.reshape((-1,) + (1,) * (x.ndim - 1))
            return buf.at[streams, slot].set(jnp.where(keep, x, buf[streams, slot]))

        capacity = state.action.shape[1]
        return FrameReplayState(
            frames=put(state.frames, obs[:, -1]), action=put(state.action, base["action"]),
            reward=put(state.reward, base["reward"]),
            terminal=put(state.terminal, base["terminal"]),
            truncated=put(state.truncated, base["truncated"]),
            first=put(state.first, base["first"]),
            extras=jax.tree.map(put, state.extras, extras),
            write_index=jnp.where(valid, (slot + 1) % capacity, slot).astype(jnp.int32),
            stream_added=state.stream_added + valid.astype(jnp.int32),
            num_added=state.num_added + jnp.sum(valid, dtype=jnp.int32))

    def ranges(state: FrameReplayState) -> tuple[Array, Array, Array]:
        """Per stream: slot of the oldest sampleable start, and how many starts there are."""
        capacity = state.action.shape[1]
        stored = jnp.minimum(state.stream_added, capacity)
        wrapped = state.stream_added > capacity
        skip = jnp.where(wrapped, STACK - 1, 0)
        oldest = jnp.where(wrapped, state.write_index, 0)
        count = jnp.maximum(stored - skip - n_step, 0)
        return (oldest + skip) % capacity, count, stored

    def num_sampleable(state: FrameReplayState) -> Array:
        return jnp.sum(ranges(state)[1])

    def can_sample(state: FrameReplayState, batch_size: int) -> Array:
        check_positive("batch_size", batch_size)
        return num_sampleable(state) >= batch_size

    def stack(state: FrameReplayState, stream: Array, slot: Array) -> Array:
        """(..., 4, H, W) stacks of the given (stream, slot) pairs (same shapes)."""
        capacity = state.action.shape[1]
        slots = (slot[..., None] + jnp.arange(-(STACK - 1), 1)) % capacity
        streams = jnp.broadcast_to(stream[..., None], slots.shape)
        frames = state.frames[streams, slots]
        first = state.first[streams, slots]
        # The latest game start among positions 1..3 (position 0 cannot cut the stack).
        positions = jnp.arange(STACK)
        start = jnp.max(jnp.where(first & (positions > 0), positions, 0), axis=-1)
        before = positions < start[..., None]
        if pad == "repeat":
            fill = jnp.take_along_axis(frames, start[..., None, None, None], axis=-3)
        else:
            fill = jnp.zeros_like(frames)
        return jnp.where(before[..., None, None], fill, frames)

    def sample(state: FrameReplayState, key: Array, batch_size: int) -> ReplaySample:
        check_positive("batch_size", batch_size)
        capacity = state.action.shape[1]
        start_slot, count, _ = ranges(state)
        total = jnp.sum(count)
        u = jax.random.randint(key, (batch_size,), 0, jnp.maximum(total, 1))
        ends = jnp.cumsum(count)
        stream = jnp.clip(jnp.searchsorted(ends, u, side="right"), 0, num_streams - 1)
        age = u - (ends[stream] - count[stream])
        t = (start_slot[stream] + age) % capacity
        window = (t[:, None] + jnp.arange(n_step)) % capacity
        s = stream[:, None]
        target = n_step_target(state.reward[s, window], state.terminal[s, window], gamma=gamma,
                               cuts=state.truncated[s, window],
                               valid=jnp.broadcast_to(total > 0, (batch_size,)))
        k = target.n_steps
        valid = k > 0
        zero_rows = lambda x: jnp.where(valid.reshape((-1,) + (1,) * (x.ndim - 1)), x,
                                        jnp.zeros_like(x))
        transition = {"obs": zero_rows(stack(state, stream, t)),
                      "action": zero_rows(state.action[stream, t]),
                      **jax.tree.map(lambda x: zero_rows(x[stream, t]), state.extras)}
        bootstrap = zero_rows(stack(state, stream, (t + k) % capacity))
        return ReplaySample(transition=transition, n_step_return=target.n_step_return,
                            discount=target.discount, bootstrap_obs=bootstrap, n_steps=k,
                            indices=(stream * capacity + t).astype(jnp.int32), valid=valid)

    return FrameReplay(init, add, sample, can_sample, num_sampleable, stack)
