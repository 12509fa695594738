"""The agent as others drive it: donation, the key schedule, budgets, bsuite."""

from __future__ import annotations

import glob

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from hyperx.agents import Transition, get_config, make_agent
from hyperx.agents.bsuite_adapter import BsuiteAgent, decode_one_hot
from hyperx.agents.deepsea import DEEPSEA_STEP_BUDGETS, deepsea_step_budget, train_deepsea
from hyperx.agents.keys import KeySchedule, run_key, split_run_key
from hyperx.envs import deepsea


def _small_agent(**overrides):
    config = get_config("hyperagent", batch_size=8, learning_starts=8, num_indices=2,
                        torso_widths=(8,), **overrides)
    return make_agent(config, 2, jnp.int32(0), num_states=16, step_budget=64)


def _transition(i: int, action) -> Transition:
    return Transition(jnp.int32(i % 16), action, jnp.float32(0.0), jnp.int32((i + 1) % 16),
                      jnp.bool_(i % 4 == 3), jnp.bool_(False))


def test_init_gives_distinct_buffers_and_jit_donates_the_state():
    agent = _small_agent().jit()
    state = agent.init(jax.random.PRNGKey(0))
    pointers = [x.unsafe_buffer_pointer() for x in jax.tree.leaves(state)]
    assert len(set(pointers)) == len(pointers), "two leaves of the state share a buffer"
    keys = KeySchedule(0, 0)
    for i in range(12):  # past learning_starts: observe also runs gradient steps
        k_act, k_obs = next(keys)
        old = state
        state = agent.observe(state, k_obs, _transition(i, agent.act(state, k_act,
                                                                     jnp.int32(i % 16))))
        assert all(x.is_deleted() for x in jax.tree.leaves(old.replay)), "replay was copied"
        assert all(x.is_deleted() for x in jax.tree.leaves(old.params))
    assert int(state.grad_steps) > 0
    # Without donation the old state stays valid.
    plain = _small_agent().jit(donate=False)
    s0 = plain.init(jax.random.PRNGKey(0))
    plain.observe(s0, jax.random.PRNGKey(1), _transition(0, jnp.int32(0)))
    assert not any(x.is_deleted() for x in jax.tree.leaves(s0))


def test_jitted_init_equals_init_to_round_off():
    """jit fuses the init's arithmetic differently (1 ulp), as train_deepsea's jitted init."""
    agent = _small_agent()
    a, b = agent.init(jax.random.PRNGKey(3)), agent.jit().init(jax.random.PRNGKey(3))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_key_schedule_reproduces_train_deepsea():
    """A host loop with KeySchedule gets train_deepsea's seed 1 episodes (seed 1 of 2)."""
    size, episodes = 4, 50
    config = get_config("hyperagent")
    result = train_deepsea(config, size, episodes, num_seeds=2, seed=7)
    agent = make_agent(config, 2, jnp.int32(0), num_states=size * size,
                       step_budget=size * episodes).jit()
    keys = KeySchedule(seed=7, index=1)
    np.testing.assert_array_equal(keys.init_key, split_run_key(run_key(7, 1))[0])
    state = agent.init(keys.init_key)
    params = deepsea.make_params(jnp.asarray(deepsea.bsuite_mapping(size, 42)))
    env, _ = deepsea.reset(params)
    returns, total = [], 0.0
    for _ in range(size * episodes):
        k_act, k_obs = next(keys)
        obs = env.row * size + env.column
        action = agent.act(state, k_act, obs)
        out = deepsea.step(params, env, action)
        total += float(out.reward)
        state = agent.observe(state, k_obs, Transition(
            obs, action, out.reward, out.state.row * size + out.state.column, out.done,
            jnp.bool_(False)))
        env = deepsea.auto_reset(params, out.state)
        if bool(out.done):
            returns.append(total)
            total = 0.0
    assert int(state.grad_steps) > 50
    np.testing.assert_allclose(returns, result.returns[1], atol=1e-6)


def test_step_budget_table_is_the_published_one():
    assert deepsea_step_budget(30) == 100_000 and deepsea_step_budget(40) == 120_000
    assert DEEPSEA_STEP_BUDGETS[50] == 200_000 and DEEPSEA_STEP_BUDGETS[120] == 1_500_000
    with pytest.raises(ValueError, match="published"):
        deepsea_step_budget(33)


def test_decode_one_hot_and_the_terminal_observation():
    obs = np.zeros((5, 5), np.float32)
    obs[2, 3] = 1.0
    assert decode_one_hot(obs, 5) == 13
    assert decode_one_hot(np.zeros((5, 5), np.float32), 5) == 0
    with pytest.raises(ValueError, match="25 entries"):
        decode_one_hot(np.zeros((4, 4)), 5)


@pytest.mark.slow
def test_bsuite_adapter_runs_bsuite_deep_sea_10_with_csv_logging(tmp_path):
    """bsuite's own DeepSea(10) (deep_sea/0, mapping seed 42), loop and CSV logger; the
    logged cumulative return equals train_deepsea's seed 0 over the same episodes."""
    bsuite = pytest.importorskip("bsuite")
    from bsuite.baselines import experiment

    episodes = 30
    env = bsuite.load_and_record_to_csv("deep_sea/0", results_dir=str(tmp_path))
    size = env.observation_spec().shape[0]
    assert size == 10
    agent = BsuiteAgent(get_config("hyperagent"), size, step_budget=size * episodes)
    experiment.run(agent, env, num_episodes=episodes)
    assert int(agent.state.grad_steps) > 100
    (path,) = glob.glob(str(tmp_path / "*.csv"))
    log = pd.read_csv(path)
    last = log.iloc[-1]
    assert int(last["episode"]) == episodes
    reference = train_deepsea(get_config("hyperagent"), size, episodes, num_seeds=1)
    np.testing.assert_allclose(last["total_return"], reference.returns[0].sum(), atol=1e-5)
