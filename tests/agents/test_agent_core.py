import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hyperx.agents.core as core
from hyperx.agents import AGENT_NAMES, Transition, get_config, make_agent
from hyperx.agents.core import greedy_action
from hyperx.replay_frames import make_frame_replay

NUM_STATES = 16


def _transition(obs: int, terminal: bool, action: int = 0) -> Transition:
    return Transition(jnp.int32(obs), jnp.int32(action), jnp.float32(0.5),
                      jnp.int32((obs + 1) % NUM_STATES), jnp.bool_(terminal), jnp.bool_(False))


def _agent(name: str, **overrides):
    return make_agent(get_config(name, **overrides), 2, jnp.int32(0), num_states=NUM_STATES,
                      step_budget=500)


def test_get_config_rejects_unknown_names_and_bad_values():
    with pytest.raises(ValueError, match="name: expected one of"):
        get_config("rainbow")
    with pytest.raises(ValueError, match="env: expected one of"):
        get_config("dqn", env="mujoco")
    with pytest.raises(ValueError, match="gamma"):
        get_config("dqn", gamma=1.5)
    with pytest.raises(ValueError, match="beta, l2"):
        get_config("epinet_dqn", beta=0.1)


def test_named_configs_differ_only_in_knobs():
    agent, fqi = get_config("hyperagent"), get_config("hyperfqi")
    assert (agent.index, agent.index_dim, agent.redraw_prob, agent.n_step) == ("sphere", 4, 0.01, 1)
    assert (fqi.index, fqi.sigma, fqi.redraw_prob, fqi.n_step) == ("gaussian", 1e-4, 0.0, 1)
    assert get_config("hyperfqi", env="atari").n_step == 10
    assert get_config("hyperfqi_oh").update_index == "support"
    assert get_config("hyperfqi_ois").ois_quantile == 0.8
    dqn = get_config("dqn")
    assert (dqn.index, dqn.index_dim, dqn.prior_scale, dqn.epsilon_end) == ("one_hot", 1, 0.0,
                                                                            0.05)
    ens = get_config("ensemble_plus")
    assert (ens.index, ens.index_dim, ens.prior_scale, ens.torso_widths) == ("one_hot", 20, 5.0,
                                                                             (50, 50))
    assert get_config("hyperagent", env="atari").torso == "nature_cnn"


def test_make_agent_validates_observations():
    with pytest.raises(ValueError, match="obs_example"):
        make_agent(get_config("dqn"), 2, jnp.zeros((3,), jnp.int32), num_states=4)
    with pytest.raises(ValueError, match="num_actions"):
        make_agent(get_config("dqn"), 0, jnp.int32(0), num_states=4)
    agent = _agent("dqn")
    with pytest.raises(ValueError, match="obs: expected shape"):
        agent.act(agent.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1), jnp.zeros((2,)))


@pytest.mark.parametrize("name", AGENT_NAMES)
def test_every_config_uses_the_one_shared_loss_path(name, monkeypatch):
    """Each named config's update must go through losses.perturbed_value_loss and
    losses.double_q_targets (no config has its own loss code)."""
    calls = []
    real_loss, real_targets = core.perturbed_value_loss, core.double_q_targets

    def loss_spy(q, actions, targets, **kw):
        calls.append(("loss", q.shape, kw["xi"] is not None))
        return real_loss(q, actions, targets, **kw)

    def targets_spy(*args, **kw):
        calls.append(("targets", args[2].shape, kw["quantile"]))
        return real_targets(*args, **kw)

    monkeypatch.setattr(core, "perturbed_value_loss", loss_spy)
    monkeypatch.setattr(core, "double_q_targets", targets_spy)
    config = get_config(name)
    agent = _agent(name)
    jax.eval_shape(agent.update, agent.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    kinds = [c[0] for c in calls]
    assert kinds == ["targets", "loss"]
    num_k = config.index_dim if config.update_index == "support" else config.num_indices
    assert calls[1][1] == (num_k, 2) or calls[1][1] == (config.batch_size, num_k, 2)
    assert calls[1][2] == (config.sigma > 0)
    assert calls[0][2] == config.ois_quantile


def test_greedy_action_breaks_ties_uniformly():
    keys = jax.random.split(jax.random.PRNGKey(0), 400)
    tied = jax.vmap(lambda k: greedy_action(k, jnp.array([1.0, 1.0, 0.0])))(keys)
    clear = jax.vmap(lambda k: greedy_action(k, jnp.array([0.0, 2.0, 1.0])))(keys)
    assert np.all(np.asarray(clear) == 1)
    assert set(np.unique(tied).tolist()) == {0, 1}
    # 400 fair draws: count of action 0 ~ Bin(400, 0.5), sd 10; 5 sd bounds never fail by chance.
    assert 150 < int(np.sum(np.asarray(tied) == 0)) < 250


def test_act_is_greedy_with_random_ties_and_epsilon_explores():
    agent = _agent("dqn", epsilon_start=0.0, epsilon_end=0.0)
    state = agent.init(jax.random.PRNGKey(0))
    keys = jax.random.split(jax.random.PRNGKey(1), 200)
    zero = jax.tree.map(jnp.zeros_like, state.params)
    tied = jax.vmap(lambda k: agent.act(state._replace(params=zero), k, jnp.int32(3)))(keys)
    # All-zero parameters make Q(s, .) = 0 for both actions: a tie, broken at random.
    assert 60 < int(np.sum(np.asarray(tied))) < 140
    q = agent.q_values(state.params, state.prior, jnp.array([3], jnp.int32), state.index)[0]
    greedy = jax.vmap(lambda k: agent.act(state, k, jnp.int32(3)))(keys)
    assert np.all(np.asarray(greedy) == int(jnp.argmax(q)))
    explorer = _agent("dqn", epsilon_start=1.0, epsilon_end=1.0)
    random = jax.vmap(lambda k: explorer.act(state, k, jnp.int32(3)))(keys)
    assert 60 < int(np.sum(np.asarray(random))) < 140


def test_index_is_redrawn_at_episode_start_only():
    agent = _agent("hyperfqi").jit()  # observe donates its state: keep host copies
    state = agent.init(jax.random.PRNGKey(0))
    first = np.asarray(state.index)
    mid = agent.observe(state, jax.random.PRNGKey(1), _transition(2, terminal=False))
    np.testing.assert_array_equal(mid.index, first)
    end = agent.observe(mid, jax.random.PRNGKey(2), _transition(3, terminal=True))
    assert not np.allclose(end.index, first)
    assert end.index.shape == (1, 4)


def test_per_step_redraw_probability():
    assert get_config("hyperagent").redraw_prob == pytest.approx(1 - get_config("hyperagent").gamma)
    agent = _agent("hyperagent", redraw_prob=0.2, learning_starts=10**6)
    state = agent.init(jax.random.PRNGKey(0))
    keys = jax.random.split(jax.random.PRNGKey(1), 500)
    new = jax.vmap(lambda k: agent.observe(state, k, _transition(2, False)).index)(keys)
    changed = np.any(np.asarray(new) != np.asarray(state.index), axis=(1, 2))
    # 500 steps at p = 0.2: mean 100, sd 8.9; [60, 140] is a 4.5-sd band.
    assert 60 <= int(changed.sum()) <= 140


def test_ois_acts_on_the_quantile_over_several_indices():
    agent = _agent("hyperfqi_ois")
    state = agent.init(jax.random.PRNGKey(0))
    assert state.index.shape == (5, 4)
    obs = jnp.arange(4, dtype=jnp.int32)
    per_index = agent.network.apply({"params": state.params, "prior": state.prior}, obs,
                                    state.index)
    np.testing.assert_allclose(agent.q_values(state.params, state.prior, obs, state.index),
                               np.quantile(np.asarray(per_index), 0.8, axis=1), rtol=1e-5,
                               atol=1e-6)


def test_replay_stores_compact_states_and_sphere_perturbations():
    agent = _agent("hyperagent").jit()
    state = agent.init(jax.random.PRNGKey(0))
    for i in range(5):
        state = agent.observe(state, jax.random.PRNGKey(i), _transition(i, i == 4))
    data = jax.tree.map(lambda x: x[0], state.replay.data)  # the one stream
    assert data["obs"].dtype == jnp.int32 and data["obs"].shape == (500,)
    np.testing.assert_array_equal(data["obs"][:5], np.arange(5))
    np.testing.assert_allclose(np.linalg.norm(data["z"][:5], axis=1), 1.0, rtol=1e-5)
    assert int(state.replay.num_added) == 5 and int(state.env_steps) == 5


def test_learning_starts_and_target_sync():
    agent = _agent("dqn", learning_starts=8, batch_size=4, target_update_period=3).jit()
    state = agent.init(jax.random.PRNGKey(0))
    history = []
    for i in range(14):
        state = agent.observe(state, jax.random.PRNGKey(i), _transition(i % 16, i % 4 == 3))
        history.append(int(state.grad_steps))
    assert history == [0] * 7 + [1, 2, 3, 4, 5, 6, 7]
    # After 7 gradient steps the target was last synced at step 6: it differs from params.
    leaf = jax.tree.leaves(state.params)[0]
    assert not np.array_equal(leaf, jax.tree.leaves(state.target_params)[0])
    for i in range(2):  # gradient steps 8 and 9; 9 is a multiple of the period: synced
        state = agent.update(state, jax.random.PRNGKey(99 + i))
    np.testing.assert_array_equal(jax.tree.leaves(state.params)[0],
                                  jax.tree.leaves(state.target_params)[0])


def test_prior_never_trains():
    agent = _agent("hyperagent", learning_starts=4, batch_size=4).jit()
    state = agent.init(jax.random.PRNGKey(0))
    prior0 = jax.tree.map(np.asarray, state.prior)  # observe donates the state
    for i in range(10):
        state = agent.observe(state, jax.random.PRNGKey(i), _transition(i, i % 4 == 3))
    assert int(state.grad_steps) == 7
    jax.tree.map(np.testing.assert_array_equal, state.prior, prior0)
    assert np.isfinite(float(state.loss))


def test_evaluation_is_greedy_with_a_fresh_index_and_no_epsilon():
    agent = _agent("hyperagent", epsilon_start=1.0, epsilon_end=1.0)
    state = agent.init(jax.random.PRNGKey(0))
    index = agent.eval_index(jax.random.PRNGKey(5))
    assert index.shape == state.index.shape and not np.allclose(index, state.index)
    q = agent.q_values(state.params, state.prior, jnp.array([7], jnp.int32), index)[0]
    keys = jax.random.split(jax.random.PRNGKey(1), 50)
    actions = jax.vmap(lambda k: agent.eval_act(state.params, state.prior, k,
                                                           jnp.int32(7), index))(keys)
    assert np.all(np.asarray(actions) == int(jnp.argmax(q)))


@pytest.mark.parametrize("num_envs", [None, 3])
def test_evaluation_policy_is_the_acting_policy_on_the_given_index(num_envs):
    """``eval_act`` at the training epsilon picks exactly what ``act`` picks on the episode's
    index (one policy, one key use), also on a batch of another size than ``num_envs``."""
    agent = make_agent(get_config("dqn", epsilon_start=0.3, epsilon_end=0.3, random_start=0),
                       4, jnp.zeros(5), num_envs=num_envs)
    state = agent.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (num_envs or 1, 5))
    obs = obs if num_envs else obs[0]
    for k in range(20):
        key = jax.random.PRNGKey(k)
        np.testing.assert_array_equal(
            agent.act(state, key, obs),
            agent.eval_act(state.params, state.prior, key, obs, state.index, epsilon=0.3))
    batch = jax.random.normal(jax.random.PRNGKey(2), (7, 5))
    one = state.index.reshape(-1, *state.index.shape[-2:])[0]
    xi = jnp.broadcast_to(one, (7, *one.shape))
    assert agent.eval_act(state.params, state.prior, key, batch, xi).shape == (7,)
    with pytest.raises(ValueError, match="obs: expected rank"):
        agent.eval_act(state.params, state.prior, key, batch[None], xi)


def test_vmapped_observe_learns_only_when_due_and_equals_each_seed_alone():
    """Three seeds, update_every = 3: vmapped ``observe`` keeps a branch (a ``lax.cond``
    would become a select that runs the update at every step) and gives each seed the state
    it gets alone, to 1e-6, on due and not-due steps."""
    agent = _agent("dqn", learning_starts=4, update_every=3, batch_size=4)
    states = jax.vmap(agent.init)(jax.random.split(jax.random.PRNGKey(0), 3))
    vmapped, single = jax.jit(jax.vmap(agent.observe)), jax.jit(agent.observe)
    seeds = [jax.tree.map(lambda x, i=i: x[i], states) for i in range(3)]
    grad_steps = []
    for step in range(12):
        keys = jax.random.split(jax.random.PRNGKey(step + 1), 3)
        t = _transition(step % NUM_STATES, step % 5 == 4, step % 2)
        states = vmapped(states, keys, jax.tree.map(lambda x: jnp.stack([x] * 3), t))
        seeds = [single(s, keys[i], t) for i, s in enumerate(seeds)]
        grad_steps.append(int(states.grad_steps[0]))
        for i, s in enumerate(seeds):
            for x, y in zip(jax.tree.leaves(states), jax.tree.leaves(s), strict=True):
                np.testing.assert_allclose(np.asarray(x)[i], np.asarray(y), rtol=1e-6, atol=1e-6)
    assert grad_steps == [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    t = jax.tree.map(lambda x: jnp.stack([x] * 3), _transition(0, False))
    jaxpr = str(jax.make_jaxpr(jax.vmap(agent.observe))(states, keys, t))
    assert "cond[" in jaxpr


def test_one_make_agent_path_for_one_or_many_environments():
    """The batched face of the same functions on the whole-transition layout: B = 3 DeepSea-
    style streams, each env its own index; one call stores one transition per env, advances
    env_steps by B and keeps one update per ``update_every`` env steps (here 1 per 3)."""
    config = get_config("hyperagent", learning_starts=6, batch_size=4, update_every=3)
    agent = make_agent(config, 2, jnp.int32(0), num_states=NUM_STATES, step_budget=90,
                       num_envs=3).jit()
    state = agent.init(jax.random.PRNGKey(0))
    assert state.index.shape == (3, 1, config.index_dim)
    assert not np.allclose(state.index[0], state.index[1])
    for i in range(6):
        obs = jnp.arange(3, dtype=jnp.int32) + i
        actions = agent.act(state, jax.random.PRNGKey(10 + i), obs)
        assert actions.shape == (3,) and actions.dtype == jnp.int32
        batch = Transition(obs, actions, jnp.full(3, 0.5), (obs + 1) % NUM_STATES,
                           jnp.array([False, i == 2, False]), jnp.zeros(3, bool))
        state = agent.observe(state, jax.random.PRNGKey(i), batch)
    assert int(state.env_steps) == 18 and int(state.replay.num_added) == 18
    assert int(state.grad_steps) == 5  # one update per call once env_steps >= 6: calls 2..6
    np.testing.assert_array_equal(state.replay.data["obs"][:, :6], np.arange(6)[None] +
                                  np.arange(3)[:, None])


def test_the_agent_builds_one_replay_stream_per_environment():
    config = get_config("hyperagent")
    agent = make_agent(config, 2, jnp.int32(0), num_states=NUM_STATES, num_envs=3,
                       step_budget=30)
    state = jax.eval_shape(agent.init, jax.ShapeDtypeStruct((2,), jnp.uint32))
    assert state.replay.write_index.shape == (3,) and state.replay.data["obs"].shape == (3, 10)
    with pytest.raises(ValueError, match="replay: expected a buffer that stores successors"):
        make_agent(config, 2, jnp.zeros((4, 2, 2), jnp.uint8), replay=make_frame_replay)


def test_initial_parameters_do_not_depend_on_the_number_of_acting_indices():
    """``init`` builds the network on the acting index, (J, M) with OIS; the parameters are
    those of a (1, M) index (what the one-environment agent always used), so OIS runs keep
    their initial weights."""
    agent = _agent("hyperfqi_ois")
    key = jax.random.PRNGKey(3)
    k_net, k_example, _ = jax.random.split(key, 3)
    one = agent.network.init(k_net, jnp.zeros((1,), jnp.int32),
                             jnp.zeros((1, agent.config.index_dim)))["params"]
    for a, b in zip(jax.tree.leaves(agent.init(key).params), jax.tree.leaves(one), strict=True):
        np.testing.assert_array_equal(a, b)
