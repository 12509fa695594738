"""Atari's frame replay: the replay core of :mod:`hyperx.replay` with each frame stored once.

Built on the core as flashbax builds its flat buffer on its trajectory buffer:
:func:`make_frame_replay` makes a core buffer whose successors are not stored
(``next_obs=None``: the successor of a slot is the observation of the stream's next slot) and
which reads ``STACK - 1 = 3`` slots of history, then wraps its ``init``, ``add`` and
``sample`` with the frame storage; ``can_sample`` and ``num_sampleable`` are the core's. The
n-step rule, the streams and the sampling are the core's (:func:`hyperx.replay.n_step_target`).

The design is Dopamine's circular replay (Castro et al. 2018): a slot stores only the newest
84 x 84 frame (uint8) of the 4-frame stack acted on, with ``action``, ``reward``, ``terminal``
(no bootstrap), ``truncated`` (the frame cap: the episode ends but its last observation is never
stored, since the next slot is the next game's first), ``first`` (the observation is a game's
first) and any extra leaves (z). The stack of slot ``j`` is the frames of slots ``j-3 .. j``,
where frames before the latest ``first`` among slots ``j-2 .. j`` are padding: the game's first
frame repeated (``pad="repeat"``, envpool's reset stack) or zeros (``pad="zero"``, ale-py's),
so a rebuilt stack equals the observation the environment returned and never spans a game
start. 100,000 transitions of 84 x 84 frames take about 0.71 GB.

A sample's ``transition`` holds the rebuilt (B, 4, H, W) stack as ``obs``, ``action`` and the
extra leaves; ``bootstrap_obs`` is the stack of slot ``t + k``. A truncated step is never a
start (``n_steps = 0``, ``valid = False``, a rare event at the 27,000-step cap).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from hyperx import replay as core
from hyperx._validation import check_choice
from hyperx.replay import PyTree, ReplayBuffer, ReplaySample, ReplaySpec, ReplayState

Array = jax.Array
STACK = 4
"""Frames per observation."""
PADS = ("repeat", "zero")
"""How a stack is filled before a game's first frame (see the module docstring)."""
FRAME_FIELDS = ("obs", "action", "reward", "terminal", "truncated", "first")
"""The fields every transition carries (other leaves are stored as given)."""
_FRAME_DTYPES = {"obs": jnp.uint8, "action": jnp.int32, "reward": jnp.float32,
                 "terminal": jnp.bool_, "truncated": jnp.bool_, "first": jnp.bool_}


def _check_fields(tree: PyTree, argname: str) -> None:
    if not isinstance(tree, Mapping):
        raise ValueError(f"{argname}: expected a dict with the fields {FRAME_FIELDS}, got "
                         f"{type(tree).__name__}")
    missing = [name for name in FRAME_FIELDS if name not in tree]
    if missing:
        raise ValueError(f"{argname}: expected the fields {FRAME_FIELDS}, missing {missing}")


def init(spec: ReplaySpec, capacity: int, example: PyTree) -> ReplayState:
    """An empty buffer (:func:`hyperx.replay.init`) for transitions like ``example``, one
    unbatched transition with ``obs`` a (4, H, W) stack, of which a slot stores one frame."""
    _check_fields(example, "example_transition")
    obs = np.shape(example["obs"])
    if len(obs) != 3 or obs[0] != STACK:
        raise ValueError(f"example['obs']: expected shape ({STACK}, H, W), got {obs}")
    if np.shape(example["first"]) != ():
        raise ValueError(f"example_transition.first: expected shape (), got "
                         f"{np.shape(example['first'])}")
    stored = {name: jnp.zeros(obs[1:] if name == "obs" else np.shape(example[name]), dtype)
              for name, dtype in _FRAME_DTYPES.items()}
    stored.update({name: jnp.zeros(np.shape(x), jnp.result_type(x))
                   for name, x in example.items() if name not in _FRAME_DTYPES})
    return core.init(spec, capacity, stored)


def add(spec: ReplaySpec, state: ReplayState, transitions: PyTree,
        valid: Array | None = None) -> ReplayState:
    """:func:`hyperx.replay.add` of the newest frame of each stream's ``obs`` (E, 4, H, W)."""
    _check_fields(transitions, "transitions")
    obs = np.shape(transitions["obs"])
    if obs[:2] != (spec.num_streams, STACK):
        raise ValueError(f"transitions['obs']: expected shape ({spec.num_streams}, {STACK}, "
                         f"H, W), got {obs}")
    return core.add(spec, state, {**transitions, "obs": jnp.asarray(transitions["obs"])[:, -1]},
                    valid)


def frame_stack(state: ReplayState, stream: Array, slot: Array, pad: str = "repeat") -> Array:
    """(..., 4, H, W) rebuilt observations of the (stream, slot) pairs (same shapes); see the
    module docstring for the padding rule ``pad``."""
    capacity = state.data["obs"].shape[1]
    slots = (slot[..., None] + jnp.arange(-(STACK - 1), 1)) % capacity
    streams = jnp.broadcast_to(stream[..., None], slots.shape)
    frames = state.data["obs"][streams, slots]
    first = state.data["first"][streams, slots]
    # The latest game start among positions 1..3 (position 0 cannot cut the stack).
    positions = jnp.arange(STACK)
    start = jnp.max(jnp.where(first & (positions > 0), positions, 0), axis=-1)
    before = positions < start[..., None]
    if pad == "repeat":
        fill = jnp.take_along_axis(frames, start[..., None, None, None], axis=-3)
    else:
        fill = jnp.zeros_like(frames)
    return jnp.where(before[..., None, None], fill, frames)


def sample(spec: ReplaySpec, pad: str, state: ReplayState, key: Array,
           batch_size: int) -> ReplaySample:
    """:func:`hyperx.replay.sample` with the stacks of each start and successor rebuilt."""
    batch = core.sample(spec, state, key, batch_size)
    stream, t = jnp.divmod(batch.indices, state.data["obs"].shape[1])
    stack = lambda slot: core.keep_valid(batch.valid, frame_stack(state, stream, slot, pad))
    transition = {"obs": stack(t), **{name: x for name, x in batch.transition.items()
                                      if name not in FRAME_FIELDS or name == "action"}}
    return batch._replace(transition=transition, bootstrap_obs=stack(
        (t + batch.n_steps) % state.data["obs"].shape[1]))


def make_frame_replay(n_step: int = 1, gamma: float = 0.99, *, num_streams: int = 1,
                      pad: str = "repeat") -> ReplayBuffer:
    """Build Atari's frame replay (the core's buffer with each frame stored once).

    Args:
      n_step, gamma, num_streams: as :func:`hyperx.replay.make_replay_buffer`.
      pad: how a stack is filled before a game's first frame, ``"repeat"`` (envpool) or
        ``"zero"`` (ale-py).

    Returns:
      :class:`hyperx.replay.ReplayBuffer` whose ``init`` takes an example with the
      :data:`FRAME_FIELDS` (``obs`` (4, H, W)), whose ``add`` takes them with a leading
      ``(E,)`` axis, and whose ``sample`` returns rebuilt stacks; ``spec`` is the core's.
    """
    check_choice("pad", pad, PADS)
    buffer = core.make_replay_buffer(n_step, gamma, num_streams=num_streams, next_obs=None,
                                     history=STACK - 1)
    return buffer._replace(init=functools.partial(init, buffer.spec),
                           add=functools.partial(add, buffer.spec),
                           sample=functools.partial(sample, buffer.spec, pad))
