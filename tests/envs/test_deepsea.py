import functools

import bsuite.environments.deep_sea as bsuite_deep_sea
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.envs import deepsea as ds


@functools.cache
def run_episode():
    """Jitted scan over one episode: per-step obs, compact position, reward, done, bad flag."""

    def episode(params, actions):
        state, obs0 = ds.reset(params)

        def body(state, a):
            out = ds.step(params, state, a)
            return out.state, (out.obs, ds.position(out.state), out.reward, out.done,
                               out.info.bad_episode)

        return obs0, jax.lax.scan(body, state, actions)

    return jax.jit(episode)


def test_bsuite_mapping_matches_bsuite():
    for size in (10, 20, 50):
        env = bsuite_deep_sea.DeepSea(size, mapping_seed=42, seed=7)
        np.testing.assert_array_equal(ds.bsuite_mapping(size), env._action_mapping)
    assert ds.bsuite_mapping(10).dtype == np.int32


@pytest.mark.parametrize("size", [10, 20, 30, 40, 50])
def test_step_by_step_parity_with_bsuite(size):
    # 6 episodes: 4 uniformly random, 1 always "right" (reaches the +1), 1 right then left on
    # the diagonal (a bad episode that ends away from the corner).
    env = bsuite_deep_sea.DeepSea(size, mapping_seed=42, seed=0)
    params = ds.make_params(ds.bsuite_mapping(size))
    rng = np.random.default_rng(size)
    right_path = [env._action_mapping[r, r] for r in range(size)]
    diag_slip = right_path[: size // 2] + [1 - right_path[size // 2]] * (size - size // 2)
    episodes = [rng.integers(0, 2, size) for _ in range(4)] + [right_path, diag_slip]
    for actions in episodes:
        actions = np.asarray(actions, np.int32)
        obs0, (_, (obs, pos, rewards, dones, bad)) = run_episode()(params, jnp.asarray(actions))
        np.testing.assert_array_equal(obs0, env.reset().observation)
        bad_before = env.bsuite_info()["total_bad_episodes"]
        for t, a in enumerate(actions):
            ts = env.step(int(a))
            np.testing.assert_array_equal(obs[t], ts.observation)
            np.testing.assert_array_equal(ds.one_hot_obs(pos[t], size), ts.observation)
            # bsuite sums float64 rewards; ours are float32 (1 ulp at 1.0 is 1.2e-7).
            np.testing.assert_allclose(rewards[t], ts.reward, rtol=0, atol=2e-7)
            assert bool(dones[t]) == ts.last()
        bad_after = env.bsuite_info()["total_bad_episodes"]
        assert bool(bad[-1]) == (bad_after == bad_before + 1)
    np.testing.assert_allclose(run_episode()(params, jnp.asarray(right_path))[1][1][2].sum(),
                               0.99, atol=1e-5)


def test_hand_computed_small_grid():
    params = ds.make_params(np.ones((3, 3), np.int32))  # action 1 is "right" everywhere
    state, obs = ds.reset(params)
    np.testing.assert_array_equal(obs, np.eye(3)[0][:, None] * np.eye(3)[0][None, :])
    rewards = []
    for _ in range(3):
        out = ds.step(params, state, jnp.int32(1))
        state = out.state
        rewards.append(float(out.reward))
    np.testing.assert_allclose(rewards, [-0.01 / 3, -0.01 / 3, 1 - 0.01 / 3], rtol=1e-6)
    assert bool(out.done) and not bool(out.info.bad_episode)
    assert float(out.info.optimal_return) == pytest.approx(0.99)
    assert (np.asarray(out.obs) == 0).all()  # terminal observation
    np.testing.assert_array_equal(ds.position(state), [3, 2])

    state, _ = ds.reset(params)
    out = ds.step(params, state, jnp.int32(0))  # left on the diagonal at (0, 0)
    assert bool(out.info.bad_episode) and float(out.reward) == 0.0
    np.testing.assert_array_equal(ds.position(out.state), [1, 0])  # clipped at column 0
    out = ds.step(params, out.state, jnp.int32(1))
    assert bool(out.info.bad_episode)  # the flag stays for the episode
    reset_state = ds.auto_reset(params, out.state)
    np.testing.assert_array_equal(ds.position(reset_state), [2, 1])  # not done: unchanged
    done_state = ds.step(params, out.state, jnp.int32(1)).state
    assert tuple(ds.auto_reset(params, done_state)) == (0, 0, False)


def test_one_hot_obs_batched_and_terminal():
    pos = jnp.array([[0, 0], [2, 1], [3, 0]], jnp.int32)
    obs = ds.one_hot_obs(pos, 3)
    assert obs.shape == (3, 3, 3) and obs.dtype == jnp.float32
    assert obs[1, 2, 1] == 1 and obs[1].sum() == 1 and obs[2].sum() == 0


def test_jit_vmap_over_seeds_and_mappings():
    size, envs = 8, 5
    mappings = jax.vmap(lambda k: ds.random_mapping(k, size))(
        jax.random.split(jax.random.key(0), envs))
    params = jax.vmap(ds.make_params)(mappings)
    assert params.action_mapping.shape == (envs, size, size) and params.size == size
    actions = jax.random.bernoulli(jax.random.key(1), 0.5, (envs, size)).astype(jnp.int32)
    _, (_, (obs, _, rewards, dones, bad)) = jax.vmap(run_episode())(params, actions)
    assert obs.shape == (envs, size, size, size)
    for e in range(envs):
        one = ds.make_params(np.asarray(mappings[e]))
        _, (_, (o, _, r, d, b)) = run_episode()(one, actions[e])
        np.testing.assert_array_equal(obs[e], o)
        np.testing.assert_array_equal(rewards[e], r)
        np.testing.assert_array_equal(bad[e], b)
    assert dones[:, -1].all() and not dones[:, :-1].any()


def test_random_mapping_is_fair_bits():
    m = ds.random_mapping(jax.random.key(3), 100)
    assert m.dtype == jnp.int32 and set(np.unique(m).tolist()) == {0, 1}
    # 10^4 fair bits: std of the mean is 0.005; 5 sigma = 0.025.
    assert abs(float(m.mean()) - 0.5) < 0.025


def test_bsuite_learned_episode():
    bad = np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1], bool)
    # cumulative bad fraction: 1, ..., 1 (e = 9), 9/10 (not < 0.9), 10/11 -> never
    assert int(ds.bsuite_learned_episode(bad)) == -1
    bad = np.array([1, 0, 1, 1], bool)  # 1/1, 1/2 < 0.9 at episode 2
    assert int(ds.bsuite_learned_episode(bad)) == 2
    assert int(ds.bsuite_learned_episode(np.zeros(0, bool))) == -1
    assert int(jax.jit(ds.bsuite_learned_episode)(jnp.array([0, 1], bool))) == 1


def test_running_mean_learned_episode():
    returns = np.zeros(300, np.float32)
    returns[150:] = 1.0
    # The mean over episodes e-99..e reaches 0.891 = 0.9 x 0.99 once 90 of them are 1.0
    # (89 give 0.89): episodes 151..240 -> e = 240.
    assert int(ds.running_mean_learned_episode(returns)) == 240
    assert int(ds.running_mean_learned_episode(returns[:239])) == -1
    assert int(ds.running_mean_learned_episode(np.full(50, 0.99))) == -1  # fewer than 100
    assert int(ds.running_mean_learned_episode(np.full(4, 1.0), window=2)) == 2


def test_gymnasium_make():
    env = gymnasium.make("hyperx/DeepSea-v0", size=10)
    params = ds.make_params(ds.bsuite_mapping(10))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (10, 10) and obs.dtype == np.float32 and obs[0, 0] == 1
    total, terminated, steps = 0.0, False, 0
    while not terminated:
        row, col = np.argwhere(obs)[0]
        obs, reward, terminated, truncated, info = env.step(int(params.action_mapping[row, col]))
        total, steps = total + reward, steps + 1
        assert not truncated
    assert steps == 10 and total == pytest.approx(0.99, abs=1e-5)
    assert not info["bad_episode"] and (obs == 0).all()


def test_bad_input_names_the_argument():
    params = ds.make_params(ds.bsuite_mapping(4))
    state, _ = ds.reset(params)
    with pytest.raises(ValueError, match=r"action: expected shape \(\)"):
        ds.step(params, state, jnp.zeros(2, jnp.int32))
    with pytest.raises(TypeError, match="action: expected an integer"):
        ds.step(params, state, jnp.float32(1))
    with pytest.raises(ValueError, match="action_mapping"):
        ds.make_params(np.zeros((3, 4), np.int32))
    with pytest.raises(ValueError, match=r"pos: expected shape"):
        ds.one_hot_obs(jnp.zeros(3, jnp.int32), 4)
    with pytest.raises(ValueError, match="bad_episodes: expected rank 1"):
        ds.bsuite_learned_episode(np.zeros((2, 2), bool))
    with pytest.raises(ValueError, match="size"):
        ds.bsuite_mapping(0)
