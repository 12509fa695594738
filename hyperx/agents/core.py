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
``observe(state, key, transition)`` (store, redraw the index, and learn when due). For JAX
environments the whole run is one ``lax.scan`` (:mod:`hyperx.agents.deepsea`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from hyperx._validation import (
    check_int,
    check_memory,
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
from hyperx.losses import (
    double_q_targets,
    grad_sq_norm,
    index_quantile,
    masked_mean,
    perturbed_value_loss,
)
from hyperx.replay import ReplayState, make_replay_buffer, replay_capacity

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


class Agent(NamedTuple):
    """The agent as pure functions (optax style); :meth:`jit` compiles the step functions.

    init(key) -> AgentState
    act(state, key, obs) -> int32 action, on ONE observation, with the episode's index.
    observe(state, key, transition) -> AgentState: store the transition with its perturbation
      z, redraw the index at episode ends (and with probability ``redraw_prob``), and run
      ``updates_per_step`` gradient steps when learning is due. Vmapped over seeds, the
      update still runs only on the calls where some seed is due
      (:func:`hyperx.lockstep.lockstep_cond`; the seeds' step counters move together).
    update(state, key) -> AgentState: one gradient step (and target sync when due).
    eval_index(key) -> index: a fresh index for one greedy evaluation episode.
    eval_act(state, key, obs, index) -> action: greedy, no epsilon.
    q_values(params, prior, obs, index) -> (B, A) values of a batch under an acting index.
    """

    config: AgentConfig
    network: Network
    init: Callable[[Array], AgentState]
    act: Callable[[AgentState, Array, Array], Array]
    observe: Callable[[AgentState, Array, Transition], AgentState]
    update: Callable[[AgentState, Array], AgentState]
    eval_index: Callable[[Array], Array]
    eval_act: Callable[[AgentState, Array, Array, Array], Array]
    q_values: Callable[[PyTree, PyTree, Array, Array], Array]

    def jit(self, donate: bool = True) -> Agent:
        """The same agent with ``init``, ``act``, ``observe``, ``update`` and ``eval_act``
        jitted (each compiled once per input shape and cached by ``jax.jit``).

        With ``donate`` (the default) ``observe`` and ``update`` donate their state argument,
        so XLA updates the replay buffer and parameters in place instead of copying them every
        call; the state passed in is then invalid (``state = agent.observe(state, ...)``), as
        its arrays are deleted.
        """
        donated = (0,) if donate else ()
        return self._replace(init=jax.jit(self.init), act=jax.jit(self.act),
                             observe=jax.jit(self.observe, donate_argnums=donated),
                             update=jax.jit(self.update, donate_argnums=donated),
                             eval_act=jax.jit(self.eval_act))


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


def make_agent(config: AgentConfig, num_actions: int, obs_example: Array, *,
               num_states: int | None = None, step_budget: int | None = None,
               num_envs: int | None = None, replay: Any = None) -> Agent:
    """Build the agent of ``config`` for observations shaped like ``obs_example``.

    Args:
      config: the configuration (see :func:`hyperx.agents.config.get_config`).
      num_actions: |A|.
      obs_example: one observation (unbatched); it fixes the replay's storage.
      num_states: for integer state ids (DeepSea's compact ``row * N + column``), the number
        of states; the torso then embeds the id (O(1) in the number of states).
      step_budget: env steps of the run; the buffer holds ``min(buffer_size, step_budget)``.
      num_envs: act in B = ``num_envs`` environments at once (see :func:`_batched`); then
        ``replay`` is the buffer (one stream per environment, e.g.
        :func:`hyperx.replay.make_replay_buffer` with ``layout="frames"``). ``None``: the
        one-environment agent, on a one-stream ``"transitions"`` buffer.

    Raises ``ValueError`` with the estimate (:func:`check_agent_memory`) when one seed's state
    cannot fit in device memory, before anything is allocated.
    """
    check_int("num_actions", num_actions)
    if (num_envs is None) != (replay is None):
        raise ValueError("num_envs, replay: expected both (a batched agent) or neither")
    obs_example = jnp.asarray(obs_example)
    if num_states is not None:
        check_int("num_states", num_states)
        check_shape("obs_example", obs_example, (), "() for integer state ids")
    capacity = config.buffer_size if step_budget is None else replay_capacity(
        config.buffer_size, step_budget)
    capacity = max(capacity, config.n_step)
    network = make_network(make_head(config, num_actions, make_torso(config, num_states)))
    index = make_index(config.index, config.index_dim)
    if config.update_index == "support":  # before _make_learner builds the (n, M) support
        check_memory(f"index_dim = {config.index_dim}",
                     4 * index.support_size() * config.index_dim, device_memory_bytes(),
                     f"device memory for the {index.support_size():,} support points of the "
                     f"{config.index} index (update_index='support')")
    perturbation = make_index("sphere", config.index_dim)
    if num_envs is not None:
        check_int("num_envs", num_envs)
    buffer = make_replay_buffer(config.n_step, config.gamma) if replay is None else replay
    optimiser = make_optimizer(config)
    epsilon = (optax.linear_schedule(config.epsilon_start, config.epsilon_end,
                                     config.epsilon_decay_steps)
               if config.epsilon_decay_steps > 0 else optax.constant_schedule(config.epsilon_end))
    num_acting = config.ois_num_indices if config.ois_quantile is not None else 1
    learn = _make_learner(config, network, index, buffer, optimiser)

    def acting_index(key: Array) -> Array:
        return index.sample(key, (num_acting,))

    def q_values(params: PyTree, prior: PyTree, obs: Array, xi: Array) -> Array:
        """(B, A) values under the acting index (J, M): the OIS quantile, or J = 1."""
        q = network.apply({"params": params, "prior": prior}, obs, xi)
        if config.ois_quantile is None:
            return q[:, 0]
        return index_quantile(q, config.ois_quantile, axis=1)

    def init(key: Array) -> AgentState:
        k_net, k_example, k_index = jax.random.split(key, 3)
        variables = network.init(k_net, obs_example[None], index.sample(k_example, (1,)))
        params = variables["params"]
        example = dict(obs=obs_example, action=jnp.int32(0), reward=jnp.float32(0.0),
                       next_obs=obs_example, terminal=jnp.bool_(False),
                       truncated=jnp.bool_(False),
                       z=jnp.zeros((config.index_dim,), jnp.float32))
        zero = jnp.zeros((), jnp.int32)
        return AgentState(params, jax.tree.map(jnp.copy, params), variables["prior"],
                          optimiser.init(params),
                          buffer.init(capacity, example), acting_index(k_index), zero, zero,
                          jnp.zeros((), jnp.float32))

    def greedy(state: AgentState, key: Array, obs: Array, xi: Array) -> Array:
        check_shape("obs", obs, obs_example.shape, "one observation")
        q = q_values(state.params, state.prior, jnp.asarray(obs)[None], xi)[0]
        return greedy_action(key, q)

    def act(state: AgentState, key: Array, obs: Array) -> Array:
        check_observation(obs, num_states)
        k_greedy, k_explore, k_random = jax.random.split(key, 3)
        action = greedy(state, k_greedy, obs, state.index)
        explore = ((jax.random.uniform(k_explore) < epsilon(state.env_steps))
                   | (state.env_steps < config.random_start))
        random_action = jax.random.randint(k_random, (), 0, num_actions, jnp.int32)
        return jnp.where(explore, random_action, action)

    def observe(state: AgentState, key: Array, transition: Transition) -> AgentState:
        check_transition(transition, num_actions, num_states)
        k_z, k_redraw, k_index, k_learn = jax.random.split(key, 4)
        stored = dict(transition._asdict(), z=perturbation.sample(k_z))
        replay = buffer.add(state.replay, jax.tree.map(lambda x: jnp.asarray(x)[None], stored))
        ended = jnp.asarray(transition.terminal) | jnp.asarray(transition.truncated)
        redraw = ended | (jax.random.uniform(k_redraw) < config.redraw_prob)
        new_index = jnp.where(redraw, acting_index(k_index), state.index)
        state = state._replace(replay=replay, index=new_index, env_steps=state.env_steps + 1)
        due = ((state.env_steps >= config.learning_starts)
               & (state.env_steps % config.update_every == 0)
               & buffer.can_sample(replay, config.batch_size))
        return _learn_if(due, state, k_learn, learn, config.updates_per_step)

    def eval_act(state: AgentState, key: Array, obs: Array, xi: Array) -> Array:
        return greedy(state, key, obs, xi)

    if num_envs is not None:
        agent = _batched(_Shared(config, network, num_actions, obs_example, capacity, optimiser,
                                 epsilon, acting_index, perturbation, q_values, learn),
                         num_envs, buffer)
    else:
        agent = Agent(config, network, init, act, observe, learn, acting_index, eval_act,
                      q_values)
    check_agent_memory(agent, capacity)
    return agent


def check_agent_memory(agent: Agent, capacity: int, num_seeds: int = 1) -> None:
    """Raise ``ValueError`` with the estimate when ``num_seeds`` seeds of ``agent`` cannot fit
    in device memory, from shapes only (``jax.eval_shape`` of ``init``: nothing is allocated).

    Counted per seed: the state (online and target parameters, the frozen prior, Adam's two
    moments, the replay of ``capacity`` transitions with their ``index_dim`` perturbations z),
    one gradient (the parameters' size) and the loss's float32 indices (``batch_size x
    num_indices x index_dim``, or the support, twice: online and target). Activations of a
    gradient step are not counted, so this is a floor: a refusal is certain, a pass is not.
    """
    config = agent.config
    state = jax.eval_shape(agent.init, jax.ShapeDtypeStruct((2,), jnp.uint32))
    if config.update_index == "support":
        indices = make_index(config.index, config.index_dim).support_size()
    else:
        indices = config.batch_size * config.num_indices
    per_seed = (tree_bytes(state) + tree_bytes(state.params)
                + 2 * 4 * indices * config.index_dim)
    check_memory(f"{config.name} with index_dim = {config.index_dim} and {capacity:,} replay "
                 f"slots ({format_bytes(per_seed)} per seed)", num_seeds * per_seed,
                 device_memory_bytes(), "device memory for the agent's state, a gradient and "
                 "the loss's indices")


def make_optimizer(config: AgentConfig) -> optax.GradientTransformation:
    """Adam (``learning_rate``, ``adam_eps``) after global-norm clipping at ``max_grad_norm``
    (none when 0)."""
    return optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm) if config.max_grad_norm
        else optax.identity(),
        optax.adam(config.learning_rate, eps=config.adam_eps))


def make_optimiser(config: AgentConfig) -> optax.GradientTransformation:
    """Deprecated spelling of :func:`make_optimizer` (kept for one release)."""
    warnings.warn("hyperx.agents.core.make_optimiser is make_optimizer (one spelling, as "
                  "hyperx.llm.train.make_optimizer); make_optimiser goes in the next release",
                  DeprecationWarning, stacklevel=2)
    return make_optimizer(config)


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


class _Shared(NamedTuple):
    """What :func:`make_agent` builds once for either agent: the network, its optimiser, the
    exploration schedule, the acting index and perturbation draws, the values and the
    learner."""

    config: AgentConfig
    network: Network
    num_actions: int
    obs_example: Array
    capacity: int
    optimiser: Any
    epsilon: Any
    acting_index: Callable
    perturbation: IndexDistribution
    q_values: Callable
    learn: Callable


def _batched(shared: _Shared, num_envs: int, buffer: Any) -> Agent:
    """The agent acting in ``num_envs`` environments at once (Atari's vector of games).

    Each environment has its own acting index, drawn at its own episode ends (a terminal or a
    truncation as the learner sees them, so a lost life in Atari training) and redrawn with
    probability ``redraw_prob`` per step, and its own epsilon and tie-break draws. The replay
    holds one stream per environment. Every call advances all B environments, so
    ``env_steps`` grows by B (an autoreset step counts, though it stores nothing); the
    update ratio stays ``updates_per_step`` per ``update_every`` env steps.
    """
    (config, network, num_actions, obs_example, capacity, optimiser, epsilon, acting_index,
     perturbation, q_values, learn) = shared
    per_iteration, period = updates_per_iteration(config, num_envs)

    def init(key: Array) -> AgentState:
        k_net, k_example, k_index = jax.random.split(key, 3)
        variables = network.init(k_net, obs_example[None], acting_index(k_example))
        params = variables["params"]
        example = dict(obs=obs_example, action=jnp.int32(0), reward=jnp.float32(0.0),
                       terminal=jnp.bool_(False), truncated=jnp.bool_(False),
                       first=jnp.bool_(False), z=jnp.zeros((config.index_dim,), jnp.float32))
        zero = jnp.zeros((), jnp.int32)
        return AgentState(params, jax.tree.map(jnp.copy, params), variables["prior"],
                          optimiser.init(params), buffer.init(capacity, example),
                          jax.vmap(acting_index)(jax.random.split(k_index, num_envs)),
                          zero, zero, jnp.zeros((), jnp.float32))

    def greedy(state: AgentState, key: Array, obs: Array, xi: Array) -> Array:
        check_shape("obs", obs, (num_envs, *obs_example.shape), "(num_envs, *obs_shape)")
        q = q_values(state.params, state.prior, jnp.asarray(obs), xi)
        return jax.vmap(greedy_action)(jax.random.split(key, num_envs), q)

    def act(state: AgentState, key: Array, obs: Array) -> Array:
        k_greedy, k_explore, k_random = jax.random.split(key, 3)
        action = greedy(state, k_greedy, obs, state.index)
        explore = ((jax.random.uniform(k_explore, (num_envs,)) < epsilon(state.env_steps))
                   | (state.env_steps < config.random_start))
        random_action = jax.random.randint(k_random, (num_envs,), 0, num_actions, jnp.int32)
        return jnp.where(explore, random_action, action)

    def observe(state: AgentState, key: Array, transition: BatchTransition) -> AgentState:
        k_z, k_redraw, k_index, k_learn = jax.random.split(key, 4)
        stored = dict(obs=transition.obs, action=transition.action, reward=transition.reward,
                      terminal=transition.terminal, truncated=transition.truncated,
                      first=transition.first,
                      z=perturbation.sample(k_z, (num_envs,)))
        replay = buffer.add(state.replay, stored, transition.valid)
        ended = (jnp.asarray(transition.terminal) | jnp.asarray(transition.truncated)) \
            & transition.valid
        redraw = ended | (jax.random.uniform(k_redraw, (num_envs,)) < config.redraw_prob)
        fresh = jax.vmap(acting_index)(jax.random.split(k_index, num_envs))
        new_index = jnp.where(redraw[:, None, None], fresh, state.index)
        iteration = state.env_steps // num_envs
        state = state._replace(replay=replay, index=new_index,
                               env_steps=state.env_steps + num_envs)
        due = ((state.env_steps >= config.learning_starts) & ((iteration + 1) % period == 0)
               & buffer.can_sample(replay, config.batch_size))
        return _learn_if(due, state, k_learn, learn, per_iteration)

    return Agent(config, network, init, act, observe, learn, acting_index, greedy, q_values)


def _make_learner(config: AgentConfig, network: Network, index: IndexDistribution,
                  buffer: Any, optimiser: optax.GradientTransformation
                  ) -> Callable[[AgentState, Array], AgentState]:
    """One gradient step of the perturbed n-step double-DQN loss, plus the target sync."""
    support = np.asarray(index.support()) if config.update_index == "support" else None
    num_targets = config.ois_num_indices if config.ois_quantile is not None else 1
    regularise = config.beta > 0 or config.l2 > 0

    def loss_indices(key: Array) -> Array:
        if support is not None:
            return jnp.asarray(support)
        return index.sample(key, (config.batch_size, config.num_indices))

    def update(state: AgentState, key: Array) -> AgentState:
        k_sample, k_xi, k_target = jax.random.split(key, 3)
        batch = buffer.sample(state.replay, k_sample, config.batch_size)
        xi = loss_indices(k_xi)
        xi_net = unit_index(xi) if config.normalise_index else xi
        if config.target_index == "same" and config.ois_quantile is None:
            xi_target = xi
        else:
            xi_target = index.sample(k_target, (config.batch_size, num_targets))
        online = {"params": state.params, "prior": state.prior}
        q_next_target = network.apply({"params": state.target_params, "prior": state.prior},
                                      batch.bootstrap_obs, xi_target)
        q_next_online = (network.apply(online, batch.bootstrap_obs, xi_target)
                         if config.double_q else None)
        targets = double_q_targets(batch.n_step_return, batch.discount, q_next_target,
                                   q_next_online, quantile=config.ois_quantile)
        perturbed = config.sigma > 0

        def q_taken(params: PyTree) -> tuple[Array, Array]:
            q = network.apply({"params": params, "prior": state.prior},
                              batch.transition["obs"], xi)
            return q, jnp.take_along_axis(q, batch.transition["action"][:, None, None],
                                          axis=-1)[..., 0]

        def loss_fn(params: PyTree) -> Array:
            q, _ = q_taken(params)
            loss = perturbed_value_loss(
                q, batch.transition["action"], targets,
                xi=xi if perturbed else None,
                z=batch.transition["z"] if perturbed else None, sigma=config.sigma,
                reg_sq_norm=generated_sq_norm(params, xi_net) if regularise else None,
                beta=config.beta, num_data=state.replay.num_added, l2=config.l2,
                mask=batch.valid)
            if config.grad_penalty > 0:
                loss = loss + config.grad_penalty * grad_sq_norm(mean_q, params)
            return loss

        def mean_q(params: PyTree) -> Array:
            return masked_mean(jnp.mean(q_taken(params)[1], axis=1), batch.valid)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        updates, opt_state = optimiser.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        grad_steps = state.grad_steps + 1
        target = optax.periodic_update(params, state.target_params, grad_steps,
                                       config.target_update_period)
        return state._replace(params=params, target_params=target, opt_state=opt_state,
                              grad_steps=grad_steps, loss=loss)

    return update
