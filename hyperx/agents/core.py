"""The value-based agent core behind HyperAgent, HyperFQI, HyperDQN, DQN, Ensemble+ and epinet DQN.

One machinery (Li et al., HyperAgent, ICML 2024, arXiv:2402.10228; HyperFQI; Li et al.,
HyperDQN, ICLR 2022), configured by a frozen :class:`~hyperx.agents.config.AgentConfig`:

* Network: ``Q(s, a, xi)`` from :class:`hyperx.heads.HypermodelHead` (or the epinet head) on a
  torso; its frozen prior lives in a separate collection and never trains.
* Acting: uniformly random actions for the first ``random_start`` env steps (the HyperAgent
  reference's ``--random-start``), then one index xi per episode, redrawn at each step with
  probability ``redraw_prob`` (HyperAgent); with OIS the index is a set of J indices and the
  agent acts on the ``q``-quantile over them of Q(s, a, .) per action; greedy argmax with a
  uniformly random tie-break; epsilon-greedy when the config asks (DQN).
* Replay (:func:`hyperx.replay.make_replay_buffer`): each transition stores a perturbation
  ``z ~ Unif(S^{M-1})`` drawn when it is stored; ``|D|`` is the buffer's ``num_added``.
* Loss: :func:`hyperx.losses.perturbed_value_loss` on n-step (double-)DQN targets from
  :func:`hyperx.losses.double_q_targets`, over K indices per transition,

      L = mean_b (1/K) sum_k (y_b(xi'_k) + sigma <xi_k, z_b> - Q(s_b, a_b, xi_k))^2
          + (beta/|D| + l2) mean_k ||A xi_k + b||^2
          + c_grad ||d/dtheta mean_{b,k} Q(s_b, a_b, xi_k)||^2

  (``c_grad`` = ``grad_penalty``, the HyperAgent reference's Atari term; with
  ``normalise_index`` the network reads ``xi_k / ||xi_k||`` while the perturbation keeps the
  raw ``xi_k``, as the reference does),

  minimised by Adam (optax) after optional global-norm clipping; the target network is synced
  every ``target_update_period`` gradient steps.

:func:`make_agent` returns an :class:`Agent` of pure functions over an :class:`AgentState`,
so any loop can drive it: ``act(state, key, obs)`` on one observation and
``observe(state, key, transition)`` (store, redraw the index, and learn when due), and every
trainer evaluates with ``eval_act(params, prior, key, obs, xi)`` (greedy, or epsilon-greedy
with ``eval_epsilon``: :func:`epsilon_greedy`, the draw ``act`` makes too). For JAX
environments the whole run is one ``lax.scan`` (:mod:`hyperx.agents.deepsea`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from hyperx._validation import (
    check_int,
    check_memory,
    check_range,
    check_rank,
    check_shape,
    device_memory_bytes,
    format_bytes,
    tree_bytes,
)
from hyperx.agents.checks import check_observation, check_transition
from hyperx.agents.config import AgentConfig
from hyperx.heads import (
    EpinetHead,
    HypermodelHead,
    MLPTorso,
    NatureCNN,
    Network,
    OneHotMLPTorso,
    generated_sq_norm,
    make_network,
    unit_index,
)
from hyperx.index import IndexDistribution, make_index
from hyperx.lockstep import lockstep_cond
from hyperx.loop import compiler_options
from hyperx.losses import (
    double_q_targets,
    grad_sq_norm_with_output,
    index_quantile,
    masked_mean,
    perturbed_value_loss,
)
from hyperx.replay import (
    ReplayFactory,
    ReplaySample,
    ReplayState,
    make_replay_buffer,
    min_slots,
    replay_capacity,
)

Array = jax.Array
PyTree = Any


class Transition(NamedTuple):
    """One environment step as the agent receives it (leaves unbatched).

    obs: the observation acted on; action: int32 scalar; reward: float32 scalar;
    next_obs: the successor observation (to bootstrap from); terminal: bool scalar (no
    bootstrap); truncated: bool scalar (the episode ends but bootstraps, e.g. a time limit).
    """

    obs: Array
    action: Array
    reward: Array
    next_obs: Array
    terminal: Array
    truncated: Array


class BatchTransition(NamedTuple):
    """One step of B environments at once (leaves with a leading B axis), for a batched agent
    (``make_agent(..., num_envs=B, replay=...)``) whose replay stores one stream per env.

    obs: the observations acted on; action, reward, terminal, truncated as in
    :class:`Transition`; first: ``obs`` is the first of a game (no frame stack reaches before
    it); valid: False for an environment whose step stored nothing (an autoreset step).
    The successor observation is the stream's next stored one, so it is not carried.
    """

    obs: Array
    action: Array
    reward: Array
    terminal: Array
    truncated: Array
    first: Array
    valid: Array


class AgentState(NamedTuple):
    """Everything the agent carries (a pytree; vmap it for many seeds).

    params / target_params: trainable parameters of the online / target network; prior: the
    frozen collection shared by both; opt_state: Adam's state; replay: the buffer (its
    ``num_added`` is |D|); index: the acting index of the current episode, (J, M) with J = 1
    or the OIS count; env_steps / grad_steps: int32 counters; loss: the last update's loss.
    """

    params: PyTree
    target_params: PyTree
    prior: PyTree
    opt_state: PyTree
    replay: ReplayState
    index: Array
    env_steps: Array
    grad_steps: Array
    loss: Array


_LEARNED = ("params", "target_params", "opt_state", "grad_steps", "loss")


class AgentInitFn(Protocol):
    """``init(key) -> AgentState``: a fresh state (parameters, target, prior, Adam, an empty
    replay, the first acting index)."""

    def __call__(self, key: Array) -> AgentState: ...


class AgentActFn(Protocol):
    """``act(state, key, obs) -> action``: epsilon-greedy (or uniformly random during
    ``random_start``) on the episode's index; one observation -> an int32 scalar, or (B, ...)
    observations -> (B,) actions for a batched agent."""

    def __call__(self, state: AgentState, key: Array, obs: Array) -> Array: ...


class AgentObserveFn(Protocol):
    """``observe(state, key, transition) -> AgentState``: store the transition with its
    perturbation z, redraw the index at episode ends (and with probability ``redraw_prob``),
    and run the due gradient steps. Vmapped over seeds, the update still runs only on the calls
    where some seed is due (:func:`hyperx.lockstep.lockstep_cond`)."""

    def __call__(self, state: AgentState, key: Array,
                 transition: Transition | BatchTransition) -> AgentState: ...


class AgentUpdateFn(Protocol):
    """``update(state, key) -> AgentState``: one gradient step (and the target sync when
    due)."""

    def __call__(self, state: AgentState, key: Array) -> AgentState: ...


class AgentEvalIndexFn(Protocol):
    """``eval_index(key) -> index``: a fresh (J, M) index for one greedy evaluation game."""

    def __call__(self, key: Array) -> Array: ...


class AgentEvalActFn(Protocol):
    """``eval_act(params, prior, key, obs, xi, epsilon=None) -> action``: the evaluation
    policy of the network ``(params, prior)``, greedy on ``xi`` with probability ``epsilon``
    (default: the config's ``eval_epsilon``; a Python float) of a uniformly random action
    instead. One observation with ``xi`` (J, M) gives an int32 scalar; a batch (n, ...) of
    any n with one index per row, ``xi`` (n, J, M), gives (n,) actions."""

    def __call__(self, params: PyTree, prior: PyTree, key: Array, obs: Array, xi: Array,
                 epsilon: float | None = None) -> Array: ...


class AgentQValuesFn(Protocol):
    """``q_values(params, prior, obs, xi) -> (B, A)``: the values of a batch of observations
    under an acting index, (J, M) shared or (B, J, M) one per row (the OIS quantile over J)."""

    def __call__(self, params: PyTree, prior: PyTree, obs: Array, xi: Array) -> Array: ...


class Agent(NamedTuple):
    """The agent as pure functions (optax style; each field's Protocol gives its signature);
    :meth:`jit` compiles the step functions.

    init(key) -> AgentState
    act(state, key, obs) -> action, with the episode's index (one observation, or B).
    observe(state, key, transition) -> AgentState: store, redraw the index, learn when due.
    update(state, key) -> AgentState: one gradient step (and target sync when due).
    eval_index(key) -> index: a fresh index for one evaluation episode.
    eval_act(params, prior, key, obs, xi, epsilon=None) -> action: the evaluation policy,
      greedy or epsilon-greedy with the config's ``eval_epsilon`` (every trainer evaluates
      with it).
    q_values(params, prior, obs, xi) -> (B, A) values of a batch under an acting index.
    """

    config: AgentConfig
    network: Network
    init: AgentInitFn
    act: AgentActFn
    observe: AgentObserveFn
    update: AgentUpdateFn
    eval_index: AgentEvalIndexFn
    eval_act: AgentEvalActFn
    q_values: AgentQValuesFn

    def jit(self, donate: bool = True) -> Agent:
        """The same agent with ``init``, ``act``, ``observe``, ``update`` and ``eval_act``
        jitted (each compiled once per input shape and cached by ``jax.jit``).

        ``observe`` and ``update`` compile with :func:`hyperx.loop.compiler_options` (no copy of
        the parameters on a call that does not learn). With ``donate`` (the default) they
        donate their state argument, so XLA updates the replay buffer and parameters in place
        instead of copying them every call; the state passed in is then invalid
        (``state = agent.observe(state, ...)``), as its arrays are deleted.
        """
        donated = (0,) if donate else ()
        options = compiler_options()
        return self._replace(init=jax.jit(self.init), act=jax.jit(self.act),
                             observe=jax.jit(self.observe, donate_argnums=donated,
                                             compiler_options=options),
                             update=jax.jit(self.update, donate_argnums=donated,
                                            compiler_options=options),
                             eval_act=jax.jit(self.eval_act, static_argnames="epsilon"))


def make_torso(config: AgentConfig, num_states: int | None = None) -> nn.Module:
    """The torso: an embedding MLP on integer states when ``num_states`` is given (DeepSea's
    ``row * N + column``; exactly a dense layer on the one-hot, at O(1) cost), else the
    config's MLP or the Nature CNN (Mnih et al., Nature 2015) on (B, 4, 84, 84) stacks with
    ``torso_widths[-1]`` hidden units."""
    if num_states is not None:
        return OneHotMLPTorso(num_states, tuple(config.torso_widths),
                              init_scheme=config.init_scheme)
    if config.torso == "nature_cnn":
        return NatureCNN(config.input_scale, config.torso_widths[-1], channels_first=True,
                         feature_norm=config.feature_norm, init_scheme=config.init_scheme)
    return MLPTorso(tuple(config.torso_widths), init_scheme=config.init_scheme)


def make_head(config: AgentConfig, num_actions: int, torso: nn.Module) -> nn.Module:
    """The value head ``Q(s, ., xi)`` of the config on ``torso``."""
    if config.head == "epinet":
        return EpinetHead(num_actions, config.index_dim, torso, tuple(config.epinet_hiddens),
                          tuple(config.epinet_hiddens), config.prior_scale,
                          include_inputs=isinstance(torso, MLPTorso))
    return HypermodelHead(num_actions, config.index_dim, torso, config.prior_torso,
                          config.prior_std, config.prior_scale, config.posterior_scale,
                          config.bias_coef, init_scheme=config.init_scheme,
                          bias_init=config.bias_init, normalise_index=config.normalise_index)


def greedy_action(key: Array, q: Array) -> Array:
    """``argmax_a q[a]`` with ties broken uniformly at random; ``q`` of shape (A,)."""
    ties = q >= jnp.max(q)
    return jax.random.categorical(key, jnp.where(ties, 0.0, -jnp.inf)).astype(jnp.int32)


def greedy_actions(key: Array, q: Array) -> Array:
    """:func:`greedy_action` on ``q`` of shape (A,) with ``key``, or on each row of (n, A)
    with ``split(key, n)``."""
    if q.ndim == 1:
        return greedy_action(key, q)
    return jax.vmap(greedy_action)(jax.random.split(key, q.shape[0]), q)


def epsilon_greedy(key: Array, q: Array, epsilon: Array | float,
                   explore: Array | bool = False) -> Array:
    """Epsilon-greedy actions for values ``q`` of shape (A,) or (n, A):

        a = U{0, ..., A-1}                    with probability epsilon (or where ``explore``)
        a = argmax_a' q[a'] (random tie-break) otherwise

    ``key`` splits into the greedy tie-breaks (:func:`greedy_actions`), the uniform draws
    ``u < epsilon`` and the random actions, one per row."""
    k_greedy, k_explore, k_random = jax.random.split(key, 3)
    lead = q.shape[:-1]
    greedy = greedy_actions(k_greedy, q)
    explore = (jax.random.uniform(k_explore, lead) < epsilon) | explore
    return jnp.where(explore, jax.random.randint(k_random, lead, 0, q.shape[-1], jnp.int32),
                     greedy)


def make_agent(config: AgentConfig, num_actions: int, obs_example: Array, *,
               num_states: int | None = None, step_budget: int | None = None,
               num_envs: int | None = None, replay: ReplayFactory = make_replay_buffer,
               num_seeds: int = 1) -> Agent:
    """Build the agent of ``config`` for observations shaped like ``obs_example``.

    One set of functions serves one environment or ``B = num_envs`` at once: every per-env
    quantity has a leading shape ``lead``, ``()`` for the one-environment agent and ``(B,)``
    for the batched one, and each per-env draw uses the key itself when ``lead = ()`` and one
    split key per env otherwise (so a one-environment run draws exactly what it always drew).

    * one environment (``num_envs=None``): ``act(state, key, obs)`` on one observation returns
      a scalar action; ``observe`` takes one :class:`Transition` (with ``next_obs``); the
      replay has one stream; the acting index is (J, M).
    * B environments (``num_envs=B``, one replay stream per env): ``act`` takes (B, ...)
      observations and returns (B,) actions; ``observe`` takes a :class:`Transition` with
      (B, ...) leaves, or a :class:`BatchTransition` when the replay does not store successors
      (:func:`hyperx.replay_frames.make_frame_replay`: the successor is the stream's next
      stored observation); each env has its own (J, M) index, epsilon and tie-break draws;
      every call advances ``env_steps`` by B.

    The replay is built here, once: ``replay(config.n_step, config.gamma, num_streams=B)``
    with ``min(buffer_size, step_budget)`` slots (at least the buffer's
    :func:`~hyperx.replay.min_slots` per stream). The learning schedule is one rule for both:
    ``updates_per_step`` gradient steps per ``update_every`` env steps
    (:func:`updates_per_iteration`), once ``learning_starts`` env steps are taken and the
    buffer can fill a batch.

    Args:
      config: the configuration (see :func:`hyperx.agents.config.get_config`).
      num_actions: |A|.
      obs_example: one observation (unbatched); it fixes the replay's storage.
      num_states: for integer state ids (DeepSea's compact ``row * N + column``), the number
        of states; the torso then embeds the id (O(1) in the number of states).
      step_budget: env steps of the run; the buffer holds ``min(buffer_size, step_budget)``.
      num_envs: act in B = ``num_envs`` environments at once.
      replay: the buffer's builder (:class:`~hyperx.replay.ReplayFactory`), default
        :func:`hyperx.replay.make_replay_buffer` (whole transitions).
      num_seeds: seeds of this agent on one device (vmapped), for the memory check.

    Raises ``ValueError`` with the estimate (:func:`check_agent_memory`) when ``num_seeds``
    seeds' states cannot fit in device memory, before anything is allocated.
    """
    check_int("num_actions", num_actions)
    check_int("num_seeds", num_seeds)
    obs_example = jnp.asarray(obs_example)
    if num_states is not None:
        check_int("num_states", num_states)
        check_shape("obs_example", obs_example, (), "() for integer state ids")
    if num_envs is not None:
        check_int("num_envs", num_envs)
    buffer = replay(config.n_step, config.gamma, num_streams=num_envs or 1)
    if num_envs is None and buffer.spec.next_obs is None:
        raise ValueError("replay: expected a buffer that stores successors (next_obs) for one "
                         "environment; one that does not takes a BatchTransition: pass num_envs")
    capacity = config.buffer_size if step_budget is None else replay_capacity(
        config.buffer_size, step_budget)
    capacity = max(capacity, min_slots(buffer.spec) * buffer.spec.num_streams)
    network = make_network(make_head(config, num_actions, make_torso(config, num_states)))
    index = make_index(config.index, config.index_dim)
    if config.update_index == "support":  # before _make_learner builds the (n, M) support
        check_memory(f"index_dim = {config.index_dim}",
                     4 * index.support_size() * config.index_dim, device_memory_bytes(),
                     f"device memory for the {index.support_size():,} support points of the "
                     f"{config.index} index (update_index='support')")
    perturbation = make_index("sphere", config.index_dim)
    lead = () if num_envs is None else (num_envs,)
    envs = num_envs or 1
    per_iteration, period = updates_per_iteration(config, envs)
    optimiser = make_optimizer(config)
    epsilon = (optax.linear_schedule(config.epsilon_start, config.epsilon_end,
                                     config.epsilon_decay_steps)
               if config.epsilon_decay_steps > 0 else optax.constant_schedule(config.epsilon_end))
    num_acting = config.ois_num_indices if config.ois_quantile is not None else 1
    learn = _make_learner(config, network, index, buffer, optimiser)

    def per_env(draw: Callable[[Array], Array], key: Array) -> Array:
        """``draw(key)`` for one environment, ``draw`` on B split keys for B."""
        return draw(key) if not lead else jax.vmap(draw)(jax.random.split(key, num_envs))

    def acting_index(key: Array) -> Array:
        return index.sample(key, (num_acting,))

    def q_values(params: PyTree, prior: PyTree, obs: Array, xi: Array) -> Array:
        """(B, A) values under the acting index (J, M) or one per row (B, J, M): the OIS
        quantile, or J = 1."""
        q = network.apply({"params": params, "prior": prior}, obs, xi)
        if config.ois_quantile is None:
            return q[:, 0]
        return index_quantile(q, config.ois_quantile, axis=1)

    def init(key: Array) -> AgentState:
        k_net, k_example, k_index = jax.random.split(key, 3)
        variables = network.init(k_net, obs_example[None], acting_index(k_example))
        params = variables["params"]
        zero = jnp.zeros((), jnp.int32)
        return AgentState(params, jax.tree.map(jnp.copy, params), variables["prior"],
                          optimiser.init(params), buffer.init(capacity, stored_example()),
                          per_env(acting_index, k_index), zero, zero,
                          jnp.zeros((), jnp.float32))

    def stored_example() -> dict:
        """One stored transition with its perturbation z: a :class:`Transition` when the
        buffer stores successors, else a :class:`BatchTransition` without ``valid``."""
        fields = (Transition._fields if buffer.spec.next_obs is not None
                  else tuple(name for name in BatchTransition._fields if name != "valid"))
        dtypes = dict(action=jnp.int32, reward=jnp.float32)
        example = {name: (obs_example if name in ("obs", "next_obs")
                          else jnp.zeros((), dtypes.get(name, jnp.bool_))) for name in fields}
        return dict(example, z=jnp.zeros((config.index_dim,), jnp.float32))

    def values(params: PyTree, prior: PyTree, obs: Array, xi: Array) -> Array:
        """Q-values (A,) of one observation or (n, A) of a batch, under ``xi``."""
        obs = jnp.asarray(obs)
        one = obs.ndim == obs_example.ndim
        q = q_values(params, prior, obs[None] if one else obs, xi)
        return q[0] if one else q

    def act(state: AgentState, key: Array, obs: Array) -> Array:
        if not lead:
            check_observation(obs, num_states)
        check_shape("obs", obs, (*lead, *obs_example.shape),
                    "(num_envs, *obs_shape)" if lead else "one observation")
        q = values(state.params, state.prior, obs, state.index)
        return epsilon_greedy(key, q, epsilon(state.env_steps),
                              state.env_steps < config.random_start)

    def eval_act(params: PyTree, prior: PyTree, key: Array, obs: Array, xi: Array,
                 epsilon: float | None = None) -> Array:
        epsilon = config.eval_epsilon if epsilon is None else epsilon
        check_range("epsilon", epsilon, 0.0, 1.0)
        check_rank("obs", obs, (obs_example.ndim, obs_example.ndim + 1))
        check_shape("obs", obs, (None,) * (np.ndim(obs) - obs_example.ndim) + obs_example.shape,
                    "one observation or (n, *obs_shape)")
        q = values(params, prior, obs, xi)
        return greedy_actions(key, q) if epsilon == 0.0 else epsilon_greedy(key, q, epsilon)

    def observe(state: AgentState, key: Array,
                transition: Transition | BatchTransition) -> AgentState:
        if not lead:
            check_transition(transition, num_actions, num_states)
        k_z, k_redraw, k_index, k_learn = jax.random.split(key, 4)
        fields = transition._asdict()
        valid = fields.pop("valid", None)
        stored = dict(fields, z=perturbation.sample(k_z, lead))
        if not lead:
            stored = jax.tree.map(lambda x: jnp.asarray(x)[None], stored)
        replay = buffer.add(state.replay, stored, valid)
        ended = jnp.asarray(transition.terminal) | jnp.asarray(transition.truncated)
        if valid is not None:
            ended = ended & valid
        redraw = ended | (jax.random.uniform(k_redraw, lead) < config.redraw_prob)
        new_index = jnp.where(redraw[..., None, None], per_env(acting_index, k_index),
                              state.index)
        iteration = state.env_steps // envs
        state = state._replace(replay=replay, index=new_index, env_steps=state.env_steps + envs)
        due = ((state.env_steps >= config.learning_starts) & ((iteration + 1) % period == 0)
               & buffer.can_sample(replay, config.batch_size))
        return _learn_if(due, state, k_learn, learn, per_iteration)

    agent = Agent(config, network, init, act, observe, learn, acting_index, eval_act,
                  q_values)
    check_agent_memory(agent, capacity, num_seeds)
    return agent


def check_agent_memory(agent: Agent, capacity: int, num_seeds: int = 1) -> None:
    """Raise ``ValueError`` with the estimate when ``num_seeds`` seeds of ``agent`` cannot fit
    in device memory, from shapes only (``jax.eval_shape`` of ``init``: nothing is allocated).

    Counted per seed: the state (online and target parameters, the
    frozen prior, Adam's two moments, the replay of ``capacity`` transitions with their
    ``index_dim`` perturbations z), one gradient (the parameters' size) and the loss's float32
    indices (``batch_size x num_indices x index_dim``, or the support, twice: online and
    target). Activations of a gradient step are not counted, so this is a floor: a refusal is
    certain, a pass is not.
    """
    config = agent.config
    state = jax.eval_shape(agent.init, jax.ShapeDtypeStruct((2,), jnp.uint32))
    if config.update_index == "support":
        indices = make_index(config.index, config.index_dim).support_size()
    else:
        indices = config.batch_size * config.num_indices
    per_seed = (tree_bytes(state) + tree_bytes(state.params)
                + 2 * 4 * indices * config.index_dim)
    seeds = "" if num_seeds == 1 else f" x {num_seeds:,} seeds"
    check_memory(f"{config.name} with index_dim = {config.index_dim} and {capacity:,} replay "
                 f"slots ({format_bytes(per_seed)} per seed){seeds}",
                 num_seeds * per_seed, device_memory_bytes(), "device memory for the agent's "
                 "state, a gradient and the loss's indices")


def make_optimizer(config: AgentConfig) -> optax.GradientTransformation:
    """Adam (``learning_rate``, ``adam_eps``) after global-norm clipping at ``max_grad_norm``
    (none when 0)."""
    return optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm) if config.max_grad_norm
        else optax.identity(),
        optax.adam(config.learning_rate, eps=config.adam_eps))


def _learned(state: AgentState) -> tuple:
    return tuple(getattr(state, name) for name in _LEARNED)


def _learn_if(due: Array, state: AgentState, key: Array, learn: Callable,
              num_updates: int) -> AgentState:
    """``num_updates`` gradient steps when ``due``. A :func:`~hyperx.lockstep.lockstep_cond`:
    vmapped over seeds it branches once for all of them (a ``lax.cond`` would become a select
    that runs the update at every step, due or not: 4x the work for ``update_every`` = 4), and
    only the learned parts leave the branch, so the replay buffer is not copied."""

    def learn_all(s: AgentState, k: Array) -> tuple:
        keys = jax.random.split(k, num_updates)
        return _learned(jax.lax.fori_loop(0, num_updates, lambda i, s: learn(s, keys[i]), s))

    parts = lockstep_cond(due, learn_all, lambda s, _: _learned(s), state, key)
    return state._replace(**dict(zip(_LEARNED, parts, strict=True)))


def updates_per_iteration(config: AgentConfig, num_envs: int) -> tuple[int, int]:
    """(gradient steps per learning iteration, iterations between them) for B envs that each
    take one step per iteration: ``updates_per_step`` per ``update_every`` env steps."""
    steps, every = num_envs, config.update_every
    if steps % every == 0:
        return config.updates_per_step * (steps // every), 1
    if every % steps == 0:
        return config.updates_per_step, every // steps
    raise ValueError(f"num_envs: expected a multiple or a divisor of update_every = {every} "
                     f"(so each iteration runs a fixed number of updates), got {steps}")


def bootstrap_targets(config: AgentConfig, network: Network, params: PyTree,
                      target_params: PyTree, prior: PyTree, batch: ReplaySample,
                      xi_target: Array) -> Array:
    """The n-step double-Q targets ``y = R + discount * Q_target(s', argmax_a Q(s', a, z'), z')``
    (B, J) on the bootstrap indices ``xi_target`` (B, J, M): one fresh index per transition
    (J = 1) unless OIS takes the quantile over J (Hasselt et al., double DQN, AAAI 2016; Li et
    al., HyperAgent, ICML 2024, the target on an index independent of the loss's)."""
    q_next_target = network.apply({"params": target_params, "prior": prior},
                                  batch.bootstrap_obs, xi_target)
    q_next_online = (network.apply({"params": params, "prior": prior}, batch.bootstrap_obs,
                                   xi_target) if config.double_q else None)
    return double_q_targets(batch.n_step_return, batch.discount, q_next_target, q_next_online,
                            quantile=config.ois_quantile)


def value_loss(config: AgentConfig, network: Network, params: PyTree, prior: PyTree,
               batch: ReplaySample, xi: Array, targets: Array, num_data: int | Array) -> Array:
    """The loss one gradient step minimises over ``params``: the perturbed value loss of
    :func:`hyperx.losses.perturbed_value_loss` on the indices ``xi`` (B, K, M), or (K, M)
    shared by the batch (the support of an enumerable index), against
    ``targets`` (from :func:`bootstrap_targets`), the target perturbation ``sigma <xi, z>``
    with the ``z`` stored per transition, the hypermodel regulariser ``beta / num_data``
    (``num_data`` = |D|, transitions added so far), and ``grad_penalty`` times
    ``||d/dtheta mean_{b,k} Q(s_b, a_b, xi_{b,k})||^2`` (HyperAgent's reference code)."""
    actions = batch.transition["action"]
    xi_net = unit_index(xi) if config.normalise_index else xi
    perturbed = config.sigma > 0

    def q_values(params: PyTree) -> Array:
        return network.apply({"params": params, "prior": prior}, batch.transition["obs"], xi)

    def mean_taken(q: Array) -> Array:
        taken = jnp.take_along_axis(q, actions[:, None, None], axis=-1)[..., 0]
        return masked_mean(jnp.mean(taken, axis=1), batch.valid)

    if config.grad_penalty > 0:
        q, penalty = grad_sq_norm_with_output(q_values, mean_taken, params)
    else:
        q = q_values(params)
    loss = perturbed_value_loss(
        q, actions, targets, xi=xi if perturbed else None,
        z=batch.transition["z"] if perturbed else None, sigma=config.sigma,
        reg_sq_norm=(generated_sq_norm(params, xi_net) if config.beta > 0 or config.l2 > 0
                     else None),
        beta=config.beta, num_data=num_data, l2=config.l2, mask=batch.valid)
    return loss + config.grad_penalty * penalty if config.grad_penalty > 0 else loss


def _make_learner(config: AgentConfig, network: Network, index: IndexDistribution,
                  buffer: Any, optimiser: optax.GradientTransformation
                  ) -> Callable[[AgentState, Array], AgentState]:
    """One gradient step of the perturbed n-step double-DQN loss, plus the target sync."""
    support = np.asarray(index.support()) if config.update_index == "support" else None
    num_targets = config.ois_num_indices if config.ois_quantile is not None else 1

    def loss_indices(key: Array) -> Array:
        if support is not None:
            return jnp.asarray(support)
        return index.sample(key, (config.batch_size, config.num_indices))

    def update(state: AgentState, key: Array) -> AgentState:
        k_sample, k_xi, k_target = jax.random.split(key, 3)
        batch = buffer.sample(state.replay, k_sample, config.batch_size)
        xi = loss_indices(k_xi)
        if config.target_index == "same" and config.ois_quantile is None:
            xi_target = xi
        else:
            xi_target = index.sample(k_target, (config.batch_size, num_targets))
        targets = bootstrap_targets(config, network, state.params, state.target_params,
                                    state.prior, batch, xi_target)
        loss, grads = jax.value_and_grad(
            lambda params: value_loss(config, network, params, state.prior, batch, xi, targets,
                                      state.replay.num_added))(state.params)
        updates, opt_state = optimiser.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        grad_steps = state.grad_steps + 1
        target = lockstep_cond(grad_steps % config.target_update_period == 0,
                               lambda new, _: new, lambda _, old: old, params,
                               state.target_params)
        return state._replace(params=params, target_params=target, opt_state=opt_state,
                              grad_steps=grad_steps, loss=loss)

    return update
