"""The one interface every bandit learner implements, plus helpers shared by all learners.

A :class:`Learner` is a NamedTuple of pure functions (in the style of optax's
``GradientTransformation``)::

    state = learner.init(key, spec)
    arm   = learner.act(state, key, contexts)                # contexts: (K, d) -> int32 ()
    state = learner.update(state, key, context, arm, reward) # context: (d,) chosen arm's features

and optionally ``update_batch(state, key, contexts (B, d), arms (B,), rewards (B,))`` for
learners with a cheaper block update (e.g. Woodbury for linear models). :func:`delayed` turns
any learner into one that learns every ``B`` rounds (batched / delayed feedback), using
``update_batch`` where the learner provides it and ``B`` sequential updates otherwise.
:func:`hyperx.lockstep.lockstep_cond` is the conditional that learners use for such
schedules: unlike ``lax.cond``, it stays a branch when the learner is vmapped over seeds.
:func:`check_positive` (``check_positive("scale", scale)``: a one-line ``ValueError`` unless the
value is finite and > 0) is the check learners run on their knobs when they are built;
:func:`check_contexts` and :func:`check_feedback` are the checks every learner runs on what it
is given (``act``'s arms, ``update``'s round), naming the argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import (
    check_finite,
    check_index,
    check_int,
    check_integer,
    check_rank,
    check_shape,
    check_values_in,
)
from hyperx._validation import check_positive as check_positive  # public: a learner's knob check
from hyperx.lockstep import lockstep_cond

Array = jax.Array
LearnerState = Any


def check_contexts(contexts, dim: int | None = None, *, checked: bool = False) -> None:
    """Raise ``ValueError`` naming ``contexts`` unless they are ``(K, d)`` arm features
    (``d = dim`` when given) holding no NaN or inf (values checked where concrete; traced, a
    ``checkify`` check when ``checked``, run under :func:`hyperx.checked`)."""
    check_shape("contexts", contexts, (None, dim), "(K, d)")
    check_finite("contexts", contexts, checked=checked)


def check_feedback(context, arm, reward, *, num_arms: int | None = None,
                   reward_range: tuple[float, float] | None = None, batch: bool = False,
                   checked: bool = False) -> None:
    """Raise naming the argument unless one round's feedback is well formed: ``context`` (d,)
    finite, ``arm`` an integer scalar in ``[0, num_arms)`` (``>= 0`` when the learner does not
    know K), ``reward`` a finite scalar inside ``reward_range`` (the reward family's support,
    e.g. ``(0, 1)`` for Bernoulli rewards; ``None``: any real). With ``batch``, B rounds:
    ``contexts (B, d)``, ``arms (B,)``, ``rewards (B,)``.

    Ranks and dtypes are static checks; values are checked where concrete (host calls).
    Traced values (inside ``jit``/``scan``) are checked only with ``checked`` (run under
    :func:`hyperx.checked`): otherwise a non-finite reward propagates into the learner's state.
    """
    names = ("contexts", "arms", "rewards") if batch else ("context", "arm", "reward")
    check_rank(names[0], context, 2 if batch else 1)
    check_rank(names[1], arm, 1 if batch else 0)
    check_integer(names[1], arm)
    if batch:
        rounds = np.shape(context)[0]
        check_shape(names[1], arm, (rounds,), "(B,)")
        check_shape(names[2], reward, (rounds,), "(B,)")
    else:
        check_rank(names[2], reward, 0)
    check_finite(names[0], context, checked=checked)
    check_index(names[1], arm, num_arms, checked=checked)
    check_finite(names[2], reward, checked=checked)
    if reward_range is not None:
        check_values_in(names[2], reward, *reward_range, checked=checked)


class BanditSpec(NamedTuple):
    """What a learner may know about the problem before it starts.

    Attributes:
      num_arms: K, arms offered per round.
      context_dim: d, arm-feature dimension.
      horizon: T, number of rounds of the run (e.g. to size buffers).
      fixed_arms: True when every round offers the same K arm features in the same order.
      arms: the fixed arm features (K, d) when ``fixed_arms`` and known before the run (the
        runner fills them in, so learners such as LinUCB can cache per-arm quantities), else None.
    """

    num_arms: int
    context_dim: int
    horizon: int
    fixed_arms: bool = False
    arms: Any = None

    @classmethod
    def from_env(cls, env: Any, horizon: int) -> BanditSpec:
        """The spec of a ``hyperx.envs.bandits.BanditEnv`` run for ``horizon`` rounds."""
        check_int("horizon", horizon)
        return cls(env.num_arms, env.context_dim, horizon, env.fixed_arms)


class LearnerInitFn(Protocol):
    """``init(key, spec) -> state``: the learner's state before the first round."""

    def __call__(self, key: Array, spec: BanditSpec) -> LearnerState: ...


class LearnerActFn(Protocol):
    """``act(state, key, contexts) -> arm``: the int32 arm chosen among the (K, d) arms."""

    def __call__(self, state: LearnerState, key: Array, contexts: Array) -> Array: ...


class LearnerUpdateFn(Protocol):
    """``update(state, key, context, arm, reward) -> state``: learn from one round (the
    chosen arm's (d,) features, its index and its reward)."""

    def __call__(self, state: LearnerState, key: Array, context: Array, arm: Array,
                 reward: Array) -> LearnerState: ...


class LearnerUpdateBatchFn(Protocol):
    """``update_batch(state, key, contexts, arms, rewards) -> state``: learn from B rounds at
    once ((B, d), (B,), (B,)), for learners with a cheaper block update."""

    def __call__(self, state: LearnerState, key: Array, contexts: Array, arms: Array,
                 rewards: Array) -> LearnerState: ...


class Learner(NamedTuple):
    """A bandit learner as pure functions (see the module docstring; each field's Protocol
    gives its signature)."""

    init: LearnerInitFn
    act: LearnerActFn
    update: LearnerUpdateFn
    update_batch: LearnerUpdateBatchFn | None = None


def argmax_random_tiebreak(key: Array, values: Array) -> Array:
    """Index of the largest entry of ``values`` (K,), ties broken uniformly at random.

    One uniform draw r in {0, ..., #ties - 1} picks the r-th maximiser (the first index whose
    running count of maximisers exceeds r), so every tied arm is chosen with probability
    1/#ties at the cost of one random number, not K. NaN entries count as -inf (never chosen
    unless every entry is NaN or -inf, in which case all arms tie).
    """
    check_rank("values", values, 1)
    if values.shape[0] == 0:
        raise ValueError("values: expected at least one entry, got shape (0,)")
    values = jnp.where(jnp.isnan(values), -jnp.inf, values)
    is_max = values == jnp.max(values)
    count = jnp.cumsum(is_max, dtype=jnp.int32)
    r = jax.random.randint(key, (), 0, count[-1])
    return jnp.argmax(count > r).astype(jnp.int32)


class DelayedState(NamedTuple):
    """State of :func:`delayed`: the inner learner's state and the pending observations."""

    inner: LearnerState
    contexts: Array
    arms: Array
    rewards: Array
    count: Array


def sequential_update_batch(learner: Learner) -> Callable[..., LearnerState]:
    """``update_batch`` made of ``B`` sequential ``update`` calls (one key each)."""

    def update_batch(state, key, contexts, arms, rewards):
        keys = jax.random.split(key, arms.shape[0])

        def body(s, obs):
            k, x, a, r = obs
            return learner.update(s, k, x, a, r), None

        return jax.lax.scan(body, state, (keys, contexts, arms, rewards))[0]

    return update_batch


def delayed(learner: Learner, batch_size: int) -> Learner:
    """Batched / delayed feedback: act on the state of the last full batch.

    Observations are buffered; every ``batch_size`` rounds the learner's ``update_batch``
    (or ``batch_size`` sequential updates when it has none) folds them in at once. A trailing
    partial batch at the end of the horizon is never folded in (it could not change any action).
    """
    check_int("batch_size", batch_size)
    flush = learner.update_batch or sequential_update_batch(learner)

    def init(key: Array, spec: BanditSpec) -> DelayedState:
        return DelayedState(
            inner=learner.init(key, spec),
            contexts=jnp.zeros((batch_size, spec.context_dim), jnp.float32),
            arms=jnp.zeros((batch_size,), jnp.int32),
            rewards=jnp.zeros((batch_size,), jnp.float32),
            count=jnp.zeros((), jnp.int32),
        )

    def act(state: DelayedState, key: Array, contexts: Array) -> Array:
        return learner.act(state.inner, key, contexts)

    def update(state: DelayedState, key: Array, context: Array, arm: Array,
               reward: Array) -> DelayedState:
        check_shape("context", context, (state.contexts.shape[1],), "(d,)")
        check_feedback(context, arm, reward)
        i = state.count
        state = state._replace(
            contexts=state.contexts.at[i].set(context),
            arms=state.arms.at[i].set(arm),
            rewards=state.rewards.at[i].set(reward),
            count=i + 1,
        )

        def do_flush(s: DelayedState) -> DelayedState:
            inner = flush(s.inner, key, s.contexts, s.arms, s.rewards)
            return s._replace(inner=inner, count=jnp.zeros((), jnp.int32))

        return lockstep_cond(state.count == batch_size, do_flush, lambda s: s, state)

    return Learner(init, act, update)
