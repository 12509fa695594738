"""One replay core: uniform n-step replay as pure module-level functions over a pytree state.

The design is flashbax's: :func:`init`, :func:`add`, :func:`sample`, :func:`can_sample` and
:func:`num_sampleable` are pure functions of a static :class:`ReplaySpec` and a
:class:`ReplayState`; :func:`make_replay_buffer` binds the spec and returns them as a
:class:`ReplayBuffer` of ``functools.partial`` objects. Every loop in hyperx (the DeepSea and
Atari agents, the neural bandit learners) uses this one core. A storage layout is built on top
of it, as flashbax builds its flat buffer on its trajectory buffer: it wraps ``init``, ``add``
and ``sample`` and keeps the rest (:mod:`hyperx.replay_frames`, Atari's frames stored once).

**Streams.** The state holds ``E = num_streams >= 1`` streams (one per environment), each a
ring of ``C = ceil(capacity / E)`` slots. :func:`add` writes ONE transition per stream (leaves
shaped ``(E, ...)``); a stream whose ``valid`` flag is False (an autoreset step) stores nothing.
Sampling is uniform over the sampleable slots of all streams together, so a stream that stored
more is drawn more.

**Transitions.** A slot stores the transition pytree as given: a scalar reward, a scalar
terminal flag, optionally a truncation flag, and any other leaves (obs, action, the
perturbation z of the hyper agents, compact DeepSea positions, bandit contexts), so nothing
assumes image observations. The observation to bootstrap from (the successor) is stored in one
of two ways:

- ``next_obs="next_obs"`` (the default): in the transition's own ``next_obs`` field, so a
  truncation (the episode ends, the successor is stored) still bootstraps;
- ``next_obs=None``: not stored with the step; the successor of slot ``j`` is the ``obs`` of
  slot ``j + 1`` of its stream (each observation stored once, as in flashbax's trajectory
  buffer and Dopamine's circular replay). A truncated step's successor is then never stored
  (the next slot is the next episode's first), so the step cannot be used.

``history = h`` is for a layout that reads the ``h`` slots before a start (a frame stack):
once a stream's ring has wrapped, its ``h`` oldest slots are never starts (their history is
overwritten); before that, the layout must mask the unwritten slots before the stream's first.

**Targets.** A sample draws start slots ``t`` uniformly and returns the n-step pieces of the
double-DQN loss of HyperAgent (Li et al., ICML 2024) and HyperFQI, all computed by ONE rule,
:func:`n_step_target`::

    k = number of included steps (at most n),   R = sum_{i<k} gamma^i r_{t+i}
    discount = gamma^k (1 - terminal_{t+k-1})

so returns never run across an episode end. Which steps are included and which windows are
complete follow from where the successor is stored:

- ``next_obs`` stored: step ``i`` is included iff no step before it ended the episode (a
  terminal or a truncation); the bootstrap observation is ``next_obs_{t+k-1}``. A start is
  sampleable once its n steps are written or an episode end among them closes the window
  earlier: the stored slots minus the newest ``min(n - 1, steps since the last episode end)``.
- ``next_obs=None``: step ``i`` is included iff no terminal among steps ``t .. t+i-1`` and no
  truncation at ``t .. t+i``; the bootstrap observation is the ``obs`` of slot ``t + k``, so
  the newest ``n`` slots of a stream wait until ``n`` more are stored. A truncated step itself
  is never a start (``k = 0``, returned with ``valid=False``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import (
    check_int,
    check_memory,
    check_positive,
    check_range,
    device_memory_bytes,
    tree_bytes,
)

Array = jax.Array
PyTree = Any


class ReplaySpec(NamedTuple):
    """The static description of a buffer (hashable; see :func:`make_replay_buffer`).

    n_step: the most rewards summed per target; gamma: the discount; num_streams: E;
    reward, terminal, truncated: the field names of the scalar reward, terminal flag and
    truncation flag (``truncated=None``: no truncation field); next_obs: the field of the
    successor observation, or None when the successor is the next slot's ``obs`` field;
    history: the slots before a start a layout reads (see the module docstring).
    """

    n_step: int = 1
    gamma: float = 0.99
    num_streams: int = 1
    reward: str = "reward"
    terminal: str = "terminal"
    next_obs: str | None = "next_obs"
    truncated: str | None = "truncated"
    obs: str = "obs"
    history: int = 0


class ReplayState(NamedTuple):
    """Buffer contents and counters.

    data: the stored pytree, leaves shaped ``(E, C, ...)`` (unwritten slots are zeros).
    write_index: (E,) slot the next transition of each stream goes to.
    stream_added: (E,) transitions each stream stored (not capped by ``C``).
    num_added: ``|D|``, transitions stored over all streams (the ``|D|`` of the losses).
    steps_since_end: (E,) transitions each stream stored since its last episode end (capped
        at n); the completeness rule of windows whose successors are stored.
    """

    data: PyTree
    write_index: Array
    stream_added: Array
    num_added: Array
    steps_since_end: Array


class ReplaySample(NamedTuple):
    """A batch of B windows.

    transition: the stored pytree at each window start, leaves shaped (B, ...).
    n_step_return: (B,) ``sum_{i<k} gamma^i r_{t+i}``.
    discount: (B,) ``gamma^k (1 - terminal)`` of the last included step.
    bootstrap_obs: the observation to bootstrap from, leaves shaped (B, ...).
    n_steps: (B,) k, the number of steps summed (``1 <= k <= n``; with ``next_obs=None`` a
        0 marks a row with nothing, such as a truncated start).
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


class ReplayFactory(Protocol):
    """``make(n_step, gamma, *, num_streams) -> ReplayBuffer``: a buffer's builder, such as
    :func:`make_replay_buffer` or :func:`hyperx.replay_frames.make_frame_replay` (what
    :func:`hyperx.agents.core.make_agent` builds its replay with)."""

    def __call__(self, n_step: int, gamma: float, *, num_streams: int) -> ReplayBuffer: ...


def n_step_target(rewards: Array, terminal: Array, *, gamma: float,
                  ends: Array | None = None, cuts: Array | None = None,
                  valid: Array | None = None) -> NStepTarget:
    """The n-step return and discount of ``B`` windows of ``n`` stored steps: the one rule
    every buffer uses.

    Step ``i`` of a window is included iff no step before it ends the episode (``ends``,
    default ``terminal``) and no step up to it is cut (``cuts``: a step that is not stored
    with what followed it: a truncation when successors are not stored), and the row is
    ``valid``::

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
    return tree_bytes(state)


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
    """The flag and reward fields the spec reads, checked present in ``tree`` (with the field
    the successor is read from)."""
    names = (spec.reward, spec.terminal) + (
        (spec.truncated,) if _has_field(tree, spec.truncated) else ())
    for name in names:
        _field(tree, name, argname)
    _field(tree, spec.obs if spec.next_obs is None else spec.next_obs, argname)
    return names


def _per_stream(spec: ReplaySpec, capacity: int) -> int:
    return -(-int(capacity) // spec.num_streams)


def min_slots(spec: ReplaySpec) -> int:
    """The fewest slots per stream that hold one complete window: ``n`` steps, the successor
    slot when successors are not stored (``next_obs=None``), and ``history`` slots before."""
    return spec.n_step + int(spec.next_obs is None) + spec.history


def init(spec: ReplaySpec, capacity: int, example: PyTree) -> ReplayState:
    """An empty buffer of ``capacity`` slots (split evenly over the streams, rounded up), shaped
    like ``example``: ONE transition, unbatched."""
    check_int("capacity", capacity, high=2**62)
    per_stream = _per_stream(spec, capacity)
    if per_stream < min_slots(spec):
        raise ValueError(f"capacity: expected at least {min_slots(spec) * spec.num_streams} "
                         f"({min_slots(spec)} per stream for n_step = {spec.n_step}), got "
                         f"{capacity!r} for {spec.num_streams} stream(s)")
    for name in _scalar_fields(spec, example, "example_transition"):
        shape = np.shape(_field(example, name, "example_transition"))
        if shape != ():
            raise ValueError(f"example_transition.{name}: expected shape (), got {shape}")
    shape = (spec.num_streams, per_stream)
    if not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(example)):
        # a concrete init; a traced one (a trainer's jitted or abstract init) is estimated by
        # its caller, with the sizes named in the caller's words
        check_memory(f"capacity {capacity}", sum(
            per_stream * spec.num_streams * np.prod(np.shape(x), dtype=np.int64)
            * jnp.result_type(x).itemsize for x in jax.tree.leaves(example)),
            device_memory_bytes(), "device memory for the replay's slots")
    data = jax.tree.map(lambda x: jnp.zeros(shape + np.shape(x), jnp.result_type(x)), example)
    streams = jnp.zeros((spec.num_streams,), jnp.int32)
    return ReplayState(data, streams, streams, jnp.zeros((), jnp.int32), streams)


def _check_state(spec: ReplaySpec, state: ReplayState) -> None:
    """``ValueError`` unless ``state`` holds the spec's ``num_streams`` streams."""
    streams = np.shape(state.write_index)
    if streams != (spec.num_streams,):
        raise ValueError(f"state: expected the state of a buffer of {spec.num_streams} "
                         f"stream(s) (write_index shape ({spec.num_streams},)), got shape "
                         f"{streams}: build the state with this buffer's init")


def _check_batch(spec: ReplaySpec, state: ReplayState, transitions: PyTree) -> None:
    """Check ``transitions`` (leaves ``(E, ...)``) against the state."""
    _check_state(spec, state)
    _scalar_fields(spec, transitions, "transitions")
    e = spec.num_streams
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


def _flag(data: PyTree, name: str | None) -> Array | None:
    """The flag field ``name`` of ``data`` as bool, None when there is no such field."""
    if not _has_field(data, name):
        return None
    return jnp.asarray(_field(data, name, "transitions")).astype(bool)


def _episode_ends(spec: ReplaySpec, data: PyTree) -> Array:
    """terminal | truncated (terminal alone when there is no truncation field)."""
    end, truncated = _flag(data, spec.terminal), _flag(data, spec.truncated)
    return end if truncated is None else end | truncated


def _capacity(state: ReplayState) -> int:
    return jax.tree.leaves(state.data)[0].shape[1]


def add(spec: ReplaySpec, state: ReplayState, transitions: PyTree,
        valid: Array | None = None) -> ReplayState:
    """Write one transition per stream at its head (overwriting its oldest when full).

    ``transitions``: the example's pytree with a leading ``(E,)`` axis on every leaf; ``valid``
    (E,) bool, default all True: a stream with ``valid = False`` stores nothing.
    """
    _check_batch(spec, state, transitions)
    e = spec.num_streams
    valid = jnp.ones((e,), bool) if valid is None else jnp.asarray(valid, bool)
    if valid.shape != (e,):
        raise ValueError(f"valid: expected shape ({e},), got {valid.shape}")
    streams = jnp.arange(e)
    slot = state.write_index
    capacity = _capacity(state)

    def put(buf: Array, x: Array) -> Array:
        x = jnp.asarray(x, buf.dtype)
        keep = valid.reshape((-1,) + (1,) * (x.ndim - 1))
        return buf.at[streams, slot].set(jnp.where(keep, x, buf[streams, slot]))

    since_end = jnp.where(_episode_ends(spec, transitions), 0,
                          jnp.minimum(state.steps_since_end + 1, spec.n_step))
    return ReplayState(
        data=jax.tree.map(put, state.data, transitions),
        write_index=jnp.where(valid, (slot + 1) % capacity, slot).astype(jnp.int32),
        stream_added=state.stream_added + valid.astype(jnp.int32),
        num_added=state.num_added + jnp.sum(valid, dtype=jnp.int32),
        steps_since_end=jnp.where(valid, since_end, state.steps_since_end).astype(jnp.int32))


def _ranges(spec: ReplaySpec, state: ReplayState) -> tuple[Array, Array]:
    """Per stream: the slot of the oldest sampleable start, and how many starts there are."""
    capacity = _capacity(state)
    stored = jnp.minimum(state.stream_added, capacity)
    wrapped = state.stream_added > capacity
    skip = jnp.where(wrapped, spec.history, 0)
    oldest = (jnp.where(wrapped, state.write_index, 0) + skip) % capacity
    waiting = (spec.n_step if spec.next_obs is None
               else jnp.minimum(spec.n_step - 1, state.steps_since_end))
    return oldest, jnp.maximum(stored - skip - waiting, 0)


def num_sampleable(spec: ReplaySpec, state: ReplayState) -> Array:
    """Number of start slots (over all streams) whose n-step window is complete."""
    return jnp.sum(_ranges(spec, state)[1])


def can_sample(spec: ReplaySpec, state: ReplayState, batch_size: int) -> Array:
    """True when at least ``batch_size`` (an integer > 0) complete windows are stored."""
    check_int("batch_size", batch_size)
    _check_state(spec, state)
    return num_sampleable(spec, state) >= batch_size


def keep_valid(valid: Array, tree: PyTree) -> PyTree:
    """``tree`` (leaves with a leading (B,) axis) with the rows where ``valid`` is False
    zeroed."""
    return jax.tree.map(lambda x: jnp.where(valid.reshape((-1,) + (1,) * (x.ndim - 1)), x,
                                            jnp.zeros_like(x)), tree)


def sample(spec: ReplaySpec, state: ReplayState, key: Array, batch_size: int) -> ReplaySample:
    """Draw ``batch_size`` complete windows uniformly with replacement, over all streams.

    On a buffer with nothing sampleable every row has ``valid = False``, a zero return and a
    zero discount (never an unwritten window with garbage): check :func:`can_sample` first or
    weight the loss by ``valid``.
    """
    check_int("batch_size", batch_size)
    _check_state(spec, state)
    data = state.data
    capacity = _capacity(state)
    start_slot, count = _ranges(spec, state)
    total = jnp.sum(count)
    u = jax.random.randint(key, (batch_size,), 0, jnp.maximum(total, 1))
    ends = jnp.cumsum(count)
    stream = jnp.clip(jnp.searchsorted(ends, u, side="right"), 0, spec.num_streams - 1)
    t = (start_slot[stream] + u - (ends[stream] - count[stream])) % capacity
    window = (t[:, None] + jnp.arange(spec.n_step)) % capacity
    at = lambda tree, slot: jax.tree.map(
        lambda x: x[stream.reshape(stream.shape + (1,) * (slot.ndim - 1)), slot], tree)
    steps = at({name: _field(data, name, "state.data") for name in _scalar_fields(
        spec, data, "state.data")}, window)
    terminal = steps[spec.terminal].astype(bool)
    stored_successor = spec.next_obs is not None
    target = n_step_target(
        steps[spec.reward].astype(jnp.float32), terminal, gamma=spec.gamma,
        ends=_episode_ends(spec, steps) if stored_successor else terminal,
        cuts=None if stored_successor else _flag(steps, spec.truncated),
        valid=jnp.broadcast_to(total > 0, (batch_size,)))
    valid = target.n_steps > 0
    if stored_successor:
        k = jnp.maximum(target.n_steps, 1)
        last = jnp.take_along_axis(window, (k - 1)[:, None], axis=1)[:, 0]
        successor = at(_field(data, spec.next_obs, "state.data"), last)
    else:
        k = target.n_steps
        successor = at(_field(data, spec.obs, "state.data"), (t + k) % capacity)
    return ReplaySample(
        transition=keep_valid(valid, at(data, t)), n_step_return=target.n_step_return,
        discount=target.discount, bootstrap_obs=keep_valid(valid, successor),
        n_steps=k.astype(jnp.int32), indices=(stream * capacity + t).astype(jnp.int32),
        valid=valid)


def make_replay_buffer(n_step: int = 1, gamma: float = 0.99, *, num_streams: int = 1,
                       reward: str = "reward", terminal: str = "terminal",
                       next_obs: str | None = "next_obs", truncated: str | None = "truncated",
                       obs: str = "obs", history: int = 0) -> ReplayBuffer:
    """Build a uniform n-step replay buffer (the core's functions with the spec bound).

    Args:
      n_step: maximum number of rewards summed per target (n >= 1).
      gamma: discount in [0, 1].
      num_streams: E >= 1 environments writing one transition each per :func:`add`.
      reward, terminal: names of the fields holding the scalar reward and the scalar terminal
        flag (no bootstrap).
      next_obs: name of the field holding the observation pytree to bootstrap from; None: the
        successor of a step is the ``obs`` field of its stream's next slot (see the module
        docstring).
      truncated: name of a scalar truncation flag (the episode ends; the step bootstraps when
        its successor is stored, and is cut when it is not); used when the transition has such
        a field, ignored when it has none (or ``truncated=None``).
      obs: name of the observation field (read as the successor when ``next_obs=None``).
      history: slots before a start that a layout reads (>= 0); once a stream has wrapped, its
        ``history`` oldest slots are never starts.

    Returns:
      :class:`ReplayBuffer`: ``init(capacity, example)``, ``add(state, transitions,
      valid=None)``, ``sample(state, key, batch_size)`` (``batch_size`` static),
      ``can_sample(state, batch_size)``, ``num_sampleable(state)`` and ``spec``.
    """
    check_int("n_step", n_step)
    check_range("gamma", gamma, 0.0, 1.0)
    check_int("num_streams", num_streams)
    check_int("history", history, low=0)
    spec = ReplaySpec(int(n_step), float(gamma), int(num_streams), reward, terminal, next_obs,
                      truncated, obs, int(history))
    bind = lambda fn: functools.partial(fn, spec)
    return ReplayBuffer(bind(init), bind(add), bind(sample), bind(can_sample),
                        bind(num_sampleable), spec)
