"""The engine shared by every neural bandit learner: replay, update schedule, optimiser.

A neural learner is a :class:`NeuralModel` (how to initialise the network, score K arms and
compute the training loss) run by :func:`make_neural_learner`, which supplies the rest of the
:class:`hyperx.bandits.base.Learner` interface:

* every observation ``(x, r)`` is stored in a uniform replay buffer together with a perturbation
  ``z ~ Unif(S^{P-1})`` drawn once, when it is stored (Li et al., Scalable Exploration via
  Ensemble++, arXiv:2407.13195; P is the model's index dimension);
* the update schedule: from the ``learning_starts``-th observation on, every ``update_every``
  observations, ``updates_per_step`` Adam steps, each on a batch of ``batch_size`` samples drawn
  uniformly with replacement. The schedule is a
  :func:`~hyperx.lockstep.lockstep_cond` around a ``lax.fori_loop``, so a whole run stays
  one ``lax.scan``, seeds are one ``vmap``, and the vmapped seeds (in lockstep: the same
  observation count) train only on the rounds where training is due, not (as ``lax.cond``
  under ``vmap`` would) on every round;
* the weight decay ``lambda/|D| ||theta||^2`` uses |D| = ``replay.num_added`` (observations so
  far, not capped by the buffer's capacity), read fresh at each step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from hyperx._validation import check_positive, check_shape
from hyperx.bandits.base import (
    BanditSpec,
    Learner,
    argmax_random_tiebreak,
    check_contexts,
    check_feedback,
)
from hyperx.heads import trainable_params, with_params
from hyperx.index import make_index
from hyperx.lockstep import lockstep_cond
from hyperx.replay import ReplayState, make_replay_buffer, replay_capacity

Array = jax.Array
Variables = dict[str, Any]


class NeuralConfig(NamedTuple):
    """Training hyper-parameters shared by the neural learners (reference defaults of the
    neural Ensemble++ learner, arXiv:2407.13195).

    Attributes:
      hidden: widths of the ReLU MLP torso.
      learning_rate: Adam step size.
      batch_size: samples per gradient step.
      buffer_size: replay capacity (capped at the horizon).
      learning_starts: first observation count at which training runs.
      updates_per_step: gradient steps per training event.
      update_every: observations between training events.
      weight_decay: lambda of ``lambda/|D| ||theta||^2``.
    """

    hidden: tuple[int, ...] = (64, 64)
    learning_rate: float = 1e-4
    batch_size: int = 128
    buffer_size: int = 10_000
    learning_starts: int = 128
    updates_per_step: int = 1
    update_every: int = 1
    weight_decay: float = 0.01


def check_config(config: NeuralConfig) -> None:
    """Raise ``ValueError`` naming the first bad field of ``config``."""
    if not config.hidden:
        raise ValueError("config.hidden: expected at least one layer width, got ()")
    for width in config.hidden:
        check_positive("config.hidden", width)
    for name in ("learning_rate", "batch_size", "buffer_size", "updates_per_step",
                 "update_every"):
        check_positive(f"config.{name}", getattr(config, name))
    check_positive("config.learning_starts", config.learning_starts, allow_zero=True)
    check_positive("config.weight_decay", config.weight_decay, allow_zero=True)


class Batch(NamedTuple):
    """Training samples: x (B, d), reward (B,), z (B, P) perturbations, mask (B,)."""

    x: Array
    reward: Array
    z: Array
    mask: Array


class NeuralModel(NamedTuple):
    """What distinguishes one neural learner from another.

    Attributes:
      init: ``init(key, x (1, d)) -> {"params", "prior"}``.
      scores: ``scores(variables, extra, key, contexts (K, d)) -> (K,)``; the arm played is the
        argmax (ties at random).
      loss: ``loss(params, variables, key, batch, weight_decay, num_data) -> ()``.
      perturbation_dim: P, the size of the stored perturbation z.
      init_extra: ``init_extra(variables) -> extra`` (statistics beside the network).
      observe: ``observe(extra, variables, x (d,)) -> extra`` for the chosen arm's features,
        called before training on the new observation.
    """

    init: Callable[[Array, Array], Variables]
    scores: Callable[[Variables, Any, Array, Array], Array]
    loss: Callable[..., Array]
    perturbation_dim: int = 1
    init_extra: Callable[[Variables], Any] = lambda variables: ()
    observe: Callable[[Any, Variables, Array], Any] = lambda extra, variables, x: extra


class NeuralState(NamedTuple):
    """variables: {"params", "prior"}; opt_state: Adam's; replay: the buffer; extra: model's."""

    variables: Variables
    opt_state: Any
    replay: ReplayState
    extra: Any


_BUFFER = make_replay_buffer(n_step=1, gamma=0.0)


def sample_batch(state: NeuralState, key: Array, batch_size: int) -> Batch:
    """``batch_size`` stored samples, uniformly with replacement (mask 0 if nothing stored)."""
    sample = _BUFFER.sample(state.replay, key, batch_size)
    t = sample.transition
    return Batch(t["x"], t["reward"], t["z"], sample.valid.astype(jnp.float32))


def neural_loss(model: NeuralModel, config: NeuralConfig, state: NeuralState, key: Array,
                params: Any = None) -> Array:
    """The training loss the learner minimises at ``params`` (default: current) on one batch.

    |D| in the weight decay is ``state.replay.num_added``.
    """
    k_batch, k_loss = jax.random.split(key)
    batch = sample_batch(state, k_batch, config.batch_size)
    params = trainable_params(state.variables) if params is None else params
    return model.loss(params, state.variables, k_loss, batch, config.weight_decay,
                      state.replay.num_added)


def make_neural_learner(model: NeuralModel, config: NeuralConfig) -> Learner:
    """A :class:`Learner` that plays ``argmax_k model.scores`` and trains on its replay."""
    check_config(config)
    optimizer = optax.adam(config.learning_rate)

    def init(key: Array, spec: BanditSpec) -> NeuralState:
        variables = model.init(key, jnp.zeros((1, spec.context_dim), jnp.float32))
        example = {"x": jnp.zeros((spec.context_dim,), jnp.float32),
                   "z": jnp.zeros((model.perturbation_dim,), jnp.float32),
                   "reward": jnp.zeros((), jnp.float32), "terminal": jnp.ones((), bool),
                   "next_obs": jnp.zeros((), jnp.float32)}
        capacity = replay_capacity(config.buffer_size, spec.horizon)
        return NeuralState(variables, optimizer.init(trainable_params(variables)),
                           _BUFFER.init(capacity, example), model.init_extra(variables))

    def context_dim(state: NeuralState) -> int:
        return state.replay.data["x"].shape[-1]

    def act(state: NeuralState, key: Array, contexts: Array) -> Array:
        check_contexts(contexts, context_dim(state))
        k_score, k_tie = jax.random.split(key)
        scores = model.scores(state.variables, state.extra, k_score,
                              contexts.astype(jnp.float32))
        return argmax_random_tiebreak(k_tie, scores)

    def gradient_step(i: Array, carry: tuple[NeuralState, Array]) -> tuple[NeuralState, Array]:
        state, key = carry
        params = trainable_params(state.variables)
        grads = jax.grad(lambda p: neural_loss(model, config, state, jax.random.fold_in(key, i),
                                               p))(params)
        updates, opt_state = optimizer.update(grads, state.opt_state, params)
        variables = with_params(state.variables, optax.apply_updates(params, updates))
        return state._replace(variables=variables, opt_state=opt_state), key

    def train(state: NeuralState, key: Array) -> tuple[Variables, Any]:
        state = jax.lax.fori_loop(0, config.updates_per_step, gradient_step, (state, key))[0]
        return state.variables, state.opt_state

    def skip(state: NeuralState, key: Array) -> tuple[Variables, Any]:
        del key
        return state.variables, state.opt_state

    def update(state: NeuralState, key: Array, context: Array, arm: Array,
               reward: Array) -> NeuralState:
        check_shape("context", context, (context_dim(state),), "(d,)")
        check_feedback(context, arm, reward)
        k_z, k_train = jax.random.split(key)
        context = context.astype(jnp.float32)
        z = make_index("sphere", model.perturbation_dim).sample(k_z)
        extra = model.observe(state.extra, state.variables, context)
        replay = _BUFFER.add(state.replay, jax.tree.map(lambda x: x[None], {
            "x": context, "z": z, "reward": jnp.asarray(reward, jnp.float32),
            "terminal": jnp.ones((), bool), "next_obs": jnp.zeros((), jnp.float32)}))
        state = state._replace(replay=replay, extra=extra)
        n = replay.num_added
        due = (n >= config.learning_starts) & (n % config.update_every == 0)
        # only what training changes leaves the branch (no copy of the replay buffer)
        variables, opt_state = lockstep_cond(due, train, skip, state, k_train)
        return state._replace(variables=variables, opt_state=opt_state)

    return Learner(init, act, update)
