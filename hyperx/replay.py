"""One replay core: uniform n-step replay as pure module-level functions over a pytree state.

The design is flashbax's: :func:`init`, :func:`add`, :func:`sample`, :func:`can_sample` and
:func:`num_sampleable` are pure functions of a static :class:`ReplaySpec` and a
:class:`ReplayState`; :func:`make_replay_buffer` binds the spec and returns them as a
:class:`ReplayBuffer` of ``functools.partial`` objects. Every loop in hyperx (the DeepSea and
Atari agents, the neural bandit learners) uses this one core.

**Streams.** The state holds ``E = num_streams >= 1`` streams (one per environment), each a
ring of ``C = ceil(capacity / E)`` slots. :func:`add` writes ONE transition per stream (leaves
shaped ``(E, ...)``); a stream whose ``valid`` flag is False (an autoreset step) stores nothing.
Sampling is uniform over the sampleable slots of all streams together, so a stream that stored
more is drawn more.

**Layouts** (``layout=``, the storage of the observations):

- ``"transitions"``: each slot stores the whole transition pytree as given: a scalar reward, a
  scalar terminal flag, the observation to bootstrap from (``next_obs``), optionally a
  truncation flag, and any other leaves (obs, action, the perturbation z of the hyper agents,
  compact DeepSea positions, bandit contexts), so nothing assumes image observations.
- ``"frames"``: Atari's 4-frame stacks, each 84 x 84 frame stored once (the design of
  Dopamine's circular replay, Castro et al. 2018). A slot stores only the newest frame of the
  observation acted on (uint8) with ``action``, ``reward``, ``terminal`` (no bootstrap),
  ``truncated`` (the frame cap: the episode ends but its last observation is never stored,
  since the next slot is the next game's first), ``first`` (the observation is a game's first)
  and any extra leaves (z). The stack of slot ``j`` is the frames of slots ``j-3 .. j``, where
  frames before the latest ``first`` among slots ``j-2 .. j`` are padding: the game's first
  frame repeated (``pad="repeat"``, envpool's reset stack) or zeros (``pad="zero"``, ale-py's),
  so a rebuilt stack equals the observation the environment returned and never spans a game
  start. 100,000 transitions of 84 x 84 frames take about 0.71 GB.

**Targets.** A sample draws start slots ``t`` uniformly and returns the n-step pieces of the
double-DQN loss of HyperAgent (Li et al., ICML 2024) and HyperFQI, all computed by ONE rule,
:func:`n_step_target`::

    k = number of included steps (at most n),   R = sum_{i<k} gamma^i r_{t+i}
    discount = gamma^k (1 - terminal_{t+k-1})

so returns never run across an episode end. The layouts differ only in where the bootstrap
observation lives and hence which windows are complete:

- transitions: step ``i`` is included iff no step before it ended the episode (a terminal or a
  truncation); the bootstrap observation is ``next_obs_{t+k-1}``, so a truncation stops the sum
  but still bootstraps. A start is sampleable once its n steps are written or an episode end
  among them closes the window earlier: the stored slots minus the newest
  ``min(n - 1, steps since the last episode end)``.
- frames: step ``i`` is included iff no terminal among steps ``t .. t+i-1`` and no truncation at
  ``t .. t+i``; the bootstrap observation is the stack of slot ``t + k``, so the newest ``n``
  slots of a stream wait until ``n`` more are stored, and once a ring has wrapped its 3 oldest
  slots are skipped (their stacks would read overwritten frames). A truncated step itself is
  never a start (``k = 0``, returned with ``valid=False``, a rare event at the 27,000-step cap).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import check_choice, check_positive

Array = jax.Array
PyTree = Any
LAYOUTS = ("transitions", "frames")
PADS = ("repeat", "zero")
STACK = 4
"""Frames per observation in the ``"frames"`` layout."""
FRAME_FIELDS = ("obs", "action", "reward", "terminal", "truncated", "first")
"""The fields every ``"frames"`` transition carries (other leaves are stored as given)."""
_FRAME_DTYPES = {"obs": jnp.uint8, "action": jnp.int32, "reward": jnp.float32,
                 "terminal": jnp.bool_, "truncated": jnp.bool_, "first": jnp.bool_}


class ReplaySpec(NamedTuple):
    """The static description of a buffer (hashable; see :func:`make_replay_buffer`).

    n_step: the most rewards summed per target; gamma: the discount; num_streams: E;
    layout: ``"transitions"`` or ``"frames"``; pad: the frames layout's stack padding;
    reward, terminal, next_obs, truncated: the transitions layout's field names
    (``truncated=None``: no truncation field).
    """

    n_step: int = 1
    gamma: float = 0.99
    num_streams: int = 1
    layout: str = "transitions"
    pad: str = "repeat"
    reward: str = "reward"
    terminal: str = "terminal"
    next_obs: str = "next_obs"
    truncated: str | None = "truncated"


class ReplayState(NamedTuple):
    """Buffer contents and counters.

    data: the stored pytree, leaves shaped ``(E, C, ...)`` (unwritten slots are zeros); in the
        frames layout ``data["obs"]`` holds each slot's newest frame, ``(E, C, H, W)`` uint8.
    write_index: (E,) slot the next transition of each stream goes to.
    stream_added: (E,) transitions each stream stored (not capped by ``C``).
    num_added: ``|D|``, transitions stored over all streams (the ``|D|`` of the losses).
    steps_since_end: (E,) transitions each stream stored since its last episode end (capped
        at n); the transitions layout's completeness rule.
    """

    data: PyTree
    write_index: Array
    stream_added: Array
    num_added: Array
    steps_since_end: Array


class ReplaySample(NamedTuple):
    """A batch of B windows.

    transition: the stored pytree at each window start, leaves shaped (B, ...) (the frames
        layout: ``obs`` the rebuilt (B, 4, H, W) stack, ``action`` and the extra leaves).
    n_step_return: (B,) ``sum_{i<k} gamma^i r_{t+i}``.
    discount: (B,) ``gamma^k (1 - terminal)`` of the last included step.
    bootstrap_obs: the observation to bootstrap from, leaves shaped (B, ...).
    n_steps: (B,) k, the number of steps summed (``1 <= k <= n``; the frames layout's 0 marks
        a truncated start).
    indices: (B,) ``stream * C + slot`` of each start.
    valid: (B,) False where the row holds nothing (an empty buffer, a truncated start); those
        rows hold zeros (return 0, discount 0) so a mask or weight over ``valid`` removes them.
    """

    transition: PyTree
    n_step_return: Array
    discount: Array
    bootstrap_obs: PyTree
    n_steps: Array
    indices: Array
    valid: Array


class NStepTarget(NamedTuple):
    """The n-step pieces of a batch of windows: ``n_step_return`` (B,), ``discount`` (B,)
    and ``n_steps`` (B,), the number k of steps summed (0 on rows with nothing included)."""

    n_step_return: Array
    discount: Array
    n_steps: Array


class ReplayInitFn(Protocol):
    """``init(capacity, example) -> ReplayState``: an empty buffer (:func:`init`)."""

    def __call__(self, capacity: int, example: PyTree) -> ReplayState: ...


class ReplayAddFn(Protocol):
    """``add(state, transitions, valid=None) -> ReplayState``: one transition per stream
    (:func:`add`)."""

    def __call__(self, state: ReplayState, transitions: PyTree,
                 valid: Array | None = None) -> ReplayState: ...


class ReplaySampleFn(Protocol):
    """``sample(state, key, batch_size) -> ReplaySample``, ``batch_size`` static
    (:func:`sample`)."""

    def __call__(self, state: ReplayState, key: Array, batch_size: int) -> ReplaySample: ...


class ReplayCanSampleFn(Protocol):
    """``can_sample(state, batch_size) -> bool array`` (:func:`can_sample`)."""

    def __call__(self, state: ReplayState, batch_size: int) -> Array: ...


class ReplayNumSampleableFn(Protocol):
    """``num_sampleable(state) -> int32 array`` (:func:`num_sampleable`)."""

    def __call__(self, state: ReplayState) -> Array: ...


class ReplayBuffer(NamedTuple):
    """The core's functions with a :class:`ReplaySpec` bound (:func:`make_replay_buffer`);
    each field's Protocol gives its signature.

    init(capacity, example) -> ReplayState; add(state, transitions, valid=None) -> ReplayState;
    sample(state, key, batch_size) -> ReplaySample (``batch_size`` static);
    can_sample(state, batch_size) -> bool array; num_sampleable(state) -> int32 array.
    """

    init: ReplayInitFn
    add: ReplayAddFn
    sample: ReplaySampleFn
    can_sample: ReplayCanSampleFn
    num_sampleable: ReplayNumSampleableFn
    spec: ReplaySpec


def n_step_target(rewards: Array, terminal: Array, *, gamma: float,
                  ends: Array | None = None, cuts: Array | None = None,
                  valid: Array | None = None) -> NStepTarget:
    """The n-step return and discount of ``B`` windows of ``n`` stored steps: the one rule
    both layouts use.

    Step ``i`` of a window is included iff no step before it ends the episode (``ends``,
    default ``terminal``) and no step up to it is cut (``cuts``: a step that is not stored
    with what followed it, the frames layout's truncation), and the row is ``valid``::

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


def replay_capacity(capacity: int, step_budget: int) -> int:
    """Buffer size ``min(capacity, step_budget)``: more slots than steps are never used."""
    check_positive("capacity", capacity)
    check_positive("step_budget", step_budget)
    return int(min(capacity, step_budget))


def replay_bytes(state: ReplayState) -> int:
    """Bytes held by the buffer's arrays (works on ``jax.eval_shape`` output too)."""
    return int(sum(np.dtype(x.dtype).itemsize * int(np.prod(x.shape))
                   for x in jax.tree.leaves(state)))


def _has_field(tree: PyTree, name: str | None) -> bool:
    if name is None:
        return False
    if isinstance(tree, Mapping):
        return name in tree
    return hasattr(tree, name)


def _field(tree: PyTree, name: str, argname: str):
    try:
        if isinstance(tree, Mapping):
            return tree[name]
        return getattr(tree, name)
    except (KeyError, AttributeError):
        raise ValueError(f"{argname}: expected a field {name!r} (a Mapping key or attribute), "
                         f"got {type(tree).__name__}") from None


def _scalar_fields(spec: ReplaySpec, tree: PyTree, argname: str) -> tuple[str, ...]:
    """The flag and reward fields the spec reads, checked present in ``tree``."""
    if spec.layout == "frames":
        if not isinstance(tree, Mapping):
            raise ValueError(f"{argname}: expected a dict with the fields {FRAME_FIELDS}, got "
                             f"{type(tree).__name__}")
        missing = [name for name in FRAME_FIELDS if name not in tree]
        if missing:
            raise ValueError(f"{argname}: expected the fields {FRAME_FIELDS}, missing {missing}")
        return ("reward", "terminal", "truncated", "first")
    names = (spec.reward, spec.terminal) + (
        (spec.truncated,) if _has_field(tree, spec.truncated) else ())
    for name in names:
        _field(tree, name, argname)
    _field(tree, spec.next_obs, argname)
    return names


def _per_stream(spec: ReplaySpec, capacity: int) -> int:
    return -(-int(capacity) // spec.num_streams)


def init(spec: ReplaySpec, capacity: int, example: PyTree) -> ReplayState:
    """An empty buffer of ``capacity`` slots (split evenly over the streams, rounded up), shaped
    like ``example``: ONE transition, unbatched (the frames layout: ``obs`` (4, H, W))."""
    if not isinstance(capacity, int | np.integer) or capacity < 1:
        raise ValueError(f"capacity: expected a positive integer, got {capacity!r}")
    per_stream = _per_stream(spec, capacity)
    for name in _scalar_fields(spec, example, "example_transition"):
        shape = np.shape(_field(example, name, "example_transition"))
        if shape != ():
            raise ValueError(f"example_transition.{name}: expected shape (), got {shape}")
    shape = (spec.num_streams, per_stream)
    if spec.layout == "frames":
        obs = np.shape(example["obs"])
        if len(obs) != 3 or obs[0] != STACK:
            raise ValueError(f"example['obs']: expected shape ({STACK}, H, W), got {obs}")
        if per_stream < spec.n_step + STACK:
            least = (spec.n_step + STACK) * spec.num_streams
            raise ValueError(f"capacity: expected at least {least} ({spec.n_step + STACK} per "
                             f"stream), got {capacity}")
        data = {name: jnp.zeros(shape + (obs[1:] if name == "obs" else ()), dtype)
                for name, dtype in _FRAME_DTYPES.items()}
        data.update({name: jnp.zeros(shape + np.shape(x), jnp.result_type(x))
                     for name, x in example.items() if name not in _FRAME_DTYPES})
    else:
        if per_stream < spec.n_step:
            raise ValueError(f"capacity: expected an integer >= n_step = {spec.n_step} per "
                             f"stream, got {capacity!r} for {spec.num_streams} stream(s)")
        data = jax.tree.map(lambda x: jnp.zeros(shape + np.shape(x), jnp.result_type(x)),
                            example)
    streams = jnp.zeros((spec.num_streams,), jnp.int32)
    return ReplayState(data, streams, streams, jnp.zeros((), jnp.int32), streams)


def _check_batch(spec: ReplaySpec, state: ReplayState, transitions: PyTree) -> PyTree:
    """The stored form of ``transitions`` (leaves ``(E, ...)``), checked against the state."""
    _scalar_fields(spec, transitions, "transitions")
    e = spec.num_streams
    if spec.layout == "frames":
        obs = np.shape(transitions["obs"])
        if obs[:2] != (e, STACK):
            raise ValueError(f"transitions['obs']: expected shape ({e}, {STACK}, H, W), got "
                             f"{obs}")
        transitions = {**transitions, "obs": jnp.asarray(transitions["obs"])[:, -1]}
    want = jax.tree.structure(state.data)
    if jax.tree.structure(transitions) != want:
        raise ValueError(f"transitions: expected the pytree structure {want}, got "
                         f"{jax.tree.structure(transitions)}")
    for (path, slot), x in zip(jax.tree_util.tree_leaves_with_path(state.data),
                               jax.tree.leaves(transitions), strict=True):
        expected = (e,) + slot.shape[2:]
        if np.shape(x) != expected:
            raise ValueError(f"transitions{jax.tree_util.keystr(path)}: expected shape "
                             f"{expected} (one transition per stream), got {np.shape(x)}")
    return transitions


def _episode_ends(spec: ReplaySpec, data: PyTree) -> Array:
    end = jnp.asarray(_field(data, spec.terminal, "transitions")).astype(bool)
    if _has_field(data, spec.truncated):
        end = end | jnp.asarray(_field(data, spec.truncated, "transitions")).astype(bool)
    return end


def add(spec: ReplaySpec, state: ReplayState, transitions: PyTree,
        valid: Array | None = None) -> ReplayState:
    """Write one transition per stream at its head (overwriting its oldest when full).

    ``transitions``: the example's pytree with a leading ``(E,)`` axis on every leaf (the frames
    layout: ``obs`` (E, 4, H, W), of which the newest frame is stored); ``valid`` (E,) bool,
    default all True: a stream with ``valid = False`` stores nothing.
    """
    transitions = _check_batch(spec, state, transitions)
    e = spec.num_streams
    valid = jnp.ones((e,), bool) if valid is None else jnp.asarray(valid, bool)
    if valid.shape != (e,):
        raise ValueError(f"valid: expected shape ({e},), got {valid.shape}")
    streams = jnp.arange(e)
    slot = state.write_index
    capacity = jax.tree.leaves(state.data)[0].shape[1]

    def put(buf: Array, x: Array) -> Array:
        x = jnp.asarray(x, buf.dtype)
        keep = valid.reshape((-1,) + (1,) * (x.ndim - 1))
        return buf.at[streams, slot].set(jnp.where(keep, x, buf[streams, slot]))

    ended = _episode_ends(spec, transitions) if spec.layout == "transitions" else (
        jnp.asarray(transitions["terminal"], bool) | jnp.asarray(transitions["truncated"], bool))
    since_end = jnp.where(ended, 0, jnp.minimum(state.steps_since_end + 1, spec.n_step))
    return ReplayState(
        data=jax.tree.map(put, state.data, transitions),
        write_index=jnp.where(valid, (slot + 1) % capacity, slot).astype(jnp.int32),
        stream_added=state.stream_added + valid.astype(jnp.int32),
        num_added=state.num_added + jnp.sum(valid, dtype=jnp.int32),
        steps_since_end=jnp.where(valid, since_end, state.steps_since_end).astype(jnp.int32))


def _ranges(spec: ReplaySpec, state: ReplayState) -> tuple[Array, Array]:
    """Per stream: the slot of the oldest sampleable start, and how many starts there are."""
    capacity = jax.tree.leaves(state.data)[0].shape[1]
    stored = jnp.minimum(state.stream_added, capacity)
    wrapped = state.stream_added > capacity
    oldest = jnp.where(wrapped, state.write_index, 0)
    if spec.layout == "frames":
        skip = jnp.where(wrapped, STACK - 1, 0)
        return (oldest + skip) % capacity, jnp.maximum(stored - skip - spec.n_step, 0)
    return oldest, stored - jnp.minimum(spec.n_step - 1, state.steps_since_end)


def num_sampleable(spec: ReplaySpec, state: ReplayState) -> Array:
    """Number of start slots (over all streams) whose n-step window is complete."""
    return jnp.sum(_ranges(spec, state)[1])


def can_sample(spec: ReplaySpec, state: ReplayState, batch_size: int) -> Array:
    """True when at least ``batch_size`` (> 0) complete windows are stored."""
    check_positive("batch_size", batch_size)
    return num_sampleable(spec, state) >= batch_size


def frame_stack(spec: ReplaySpec, state: ReplayState, stream: Array, slot: Array) -> Array:
    """(..., 4, H, W) rebuilt observations of the (stream, slot) pairs (same shapes), frames
    layout only (see the module docstring for the padding rule)."""
    capacity = state.data["obs"].shape[1]
    slots = (slot[..., None] + jnp.arange(-(STACK - 1), 1)) % capacity
    streams = jnp.broadcast_to(stream[..., None], slots.shape)
    frames = state.data["obs"][streams, slots]
    first = state.data["first"][streams, slots]
    # The latest game start among positions 1..3 (position 0 cannot cut the stack).
    positions = jnp.arange(STACK)
    start = jnp.max(jnp.where(first & (positions > 0), positions, 0), axis=-1)
    before = positions < start[..., None]
    if spec.pad == "repeat":
        fill = jnp.take_along_axis(frames, start[..., None, None, None], axis=-3)
    else:
        fill = jnp.zeros_like(frames)
    return jnp.where(before[..., None, None], fill, frames)


def _zero_invalid(valid: Array, tree: PyTree) -> PyTree:
    return jax.tree.map(lambda x: jnp.where(valid.reshape((-1,) + (1,) * (x.ndim - 1)), x,
                                            jnp.zeros_like(x)), tree)


def sample(spec: ReplaySpec, state: ReplayState, key: Array, batch_size: int) -> ReplaySample:
    """Draw ``batch_size`` complete windows uniformly with replacement, over all streams.

    On a buffer with nothing sampleable every row has ``valid = False``, a zero return and a
    zero discount (never an unwritten window with garbage): check :func:`can_sample` first or
    weight the loss by ``valid``.
    """
    check_positive("batch_size", batch_size)
    data = state.data
    capacity = jax.tree.leaves(data)[0].shape[1]
    start_slot, count = _ranges(spec, state)
    total = jnp.sum(count)
    u = jax.random.randint(key, (batch_size,), 0, jnp.maximum(total, 1))
    ends = jnp.cumsum(count)
    stream = jnp.clip(jnp.searchsorted(ends, u, side="right"), 0, spec.num_streams - 1)
    t = (start_slot[stream] + u - (ends[stream] - count[stream])) % capacity
    window = (t[:, None] + jnp.arange(spec.n_step)) % capacity
    s = stream[:, None]
    anything = jnp.broadcast_to(total > 0, (batch_size,))
    indices = (stream * capacity + t).astype(jnp.int32)
    if spec.layout == "frames":
        target = n_step_target(data["reward"][s, window], data["terminal"][s, window],
                               gamma=spec.gamma, cuts=data["truncated"][s, window],
                               valid=anything)
        k = target.n_steps
        valid = k > 0
        transition = {"obs": frame_stack(spec, state, stream, t),
                      **{name: x[stream, t] for name, x in data.items()
                         if name not in FRAME_FIELDS or name == "action"}}
        bootstrap = frame_stack(spec, state, stream, (t + k) % capacity)
        return ReplaySample(_zero_invalid(valid, transition), target.n_step_return,
                            target.discount, _zero_invalid(valid, bootstrap), k, indices, valid)
    target = n_step_target(
        _field(data, spec.reward, "state.data")[s, window].astype(jnp.float32),
        _field(data, spec.terminal, "state.data")[s, window].astype(bool), gamma=spec.gamma,
        ends=_episode_ends(spec, data)[s, window], valid=anything)
    k = jnp.maximum(target.n_steps, 1)
    last = jnp.take_along_axis(window, (k - 1)[:, None], axis=1)[:, 0]
    gather = lambda tree, idx: _zero_invalid(anything, jax.tree.map(lambda x: x[stream, idx],
                                                                    tree))
    return ReplaySample(
        transition=gather(data, t), n_step_return=target.n_step_return,
        discount=target.discount,
        bootstrap_obs=gather(_field(data, spec.next_obs, "state.data"), last),
        n_steps=k.astype(jnp.int32), indices=indices, valid=anything)


def make_replay_buffer(n_step: int = 1, gamma: float = 0.99, *, num_streams: int = 1,
                       layout: str = "transitions", pad: str = "repeat",
                       reward: str = "reward", terminal: str = "terminal",
                       next_obs: str = "next_obs", truncated: str | None = "truncated"
                       ) -> ReplayBuffer:
    """Build a uniform n-step replay buffer (the core's functions with the spec bound).

    Args:
      n_step: maximum number of rewards summed per target (n >= 1).
      gamma: discount in [0, 1].
      num_streams: E >= 1 environments writing one transition each per :func:`add`.
      layout: ``"transitions"`` (whole transitions) or ``"frames"`` (Atari stacks, each frame
        stored once); see the module docstring.
      pad: the frames layout's padding of stacks at a game start, ``"repeat"`` or ``"zero"``.
      reward, terminal, next_obs: (transitions layout) names of the fields holding the scalar
        reward, the scalar terminal flag (no bootstrap) and the observation pytree to
        bootstrap from.
      truncated: (transitions layout) name of a scalar truncation flag (episode ends,
        bootstrap kept); used when the transition has such a field, ignored when it has none
        (or ``truncated=None``).

    Returns:
      :class:`ReplayBuffer`: ``init(capacity, example)``, ``add(state, transitions,
      valid=None)``, ``sample(state, key, batch_size)`` (``batch_size`` static),
      ``can_sample(state, batch_size)``, ``num_sampleable(state)`` and ``spec``.
    """
    if not isinstance(n_step, int) or n_step < 1:
        raise ValueError(f"n_step: expected an integer >= 1, got {n_step!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma: expected a value in [0, 1], got {gamma}")
    if not isinstance(num_streams, int | np.integer) or num_streams < 1:
        raise ValueError(f"num_streams: expected an integer >= 1, got {num_streams!r}")
    check_choice("layout", layout, LAYOUTS)
    check_choice("pad", pad, PADS)
    spec = ReplaySpec(n_step, float(gamma), int(num_streams), layout, pad, reward, terminal,
                      next_obs, truncated)
    bind = lambda fn: functools.partial(fn, spec)
    return ReplayBuffer(bind(init), bind(add), bind(sample), bind(can_sample),
                        bind(num_sampleable), spec)
