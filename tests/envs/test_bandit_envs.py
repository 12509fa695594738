import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.envs.bandits import bandit_env_names, classification, make_bandit_env

pytest.importorskip("sklearn")

SMALL = {
    "russo": dict(dim=5, num_arms=4),
    "russo_contextual": dict(dim=5, num_arms=4),
    "quadratic": dict(dim=6, num_arms=5, num_candidates=20),
    "neural_regression": dict(dim=6, num_arms=5, num_candidates=20),
    "neural_classification": dict(dim=6, num_arms=5, num_candidates=20),
    "logistic": dict(dim=5, num_arms=4),
}


def _env(name):
    return make_bandit_env(name, **SMALL.get(name, {}))


def _rounds(env, num_seeds=3, t=0):
    keys = jax.random.split(jax.random.PRNGKey(0), num_seeds)
    states = jax.jit(jax.vmap(env.init))(keys)
    obs_keys = jax.random.split(jax.random.PRNGKey(1), num_seeds)
    rounds = jax.jit(jax.vmap(env.observe, in_axes=(0, 0, None)))(states, obs_keys, jnp.int32(t))
    return states, rounds


# the text game needs a model and a data set: tests/envs/test_text_bandit.py builds them
@pytest.mark.parametrize("name", [n for n in bandit_env_names() if n != "text"])
def test_every_env_gives_shapes_and_finite_means(name):
    env = _env(name)
    states, rounds = _rounds(env)
    assert rounds.contexts.shape == (3, env.num_arms, env.context_dim)
    assert rounds.expected_rewards.shape == (3, env.num_arms)
    assert rounds.contexts.dtype == jnp.float32
    assert np.all(np.isfinite(rounds.expected_rewards))
    keys = jax.random.split(jax.random.PRNGKey(2), 3)
    rewards = jax.jit(jax.vmap(env.reward, in_axes=(0, 0, 0, None)))(
        states, keys, rounds, jnp.int32(1))
    assert rewards.shape == (3,) and np.all(np.isfinite(rewards))


def test_russo_matches_its_definition():
    dim, num_arms, seeds = 5, 8, 2000
    env = make_bandit_env("russo", dim=dim, num_arms=num_arms)
    states = jax.jit(jax.vmap(env.init))(jax.random.split(jax.random.PRNGKey(0), seeds))
    theta = np.asarray(states["theta"])
    # 10,000 N(0, 10) draws: the variance estimate has sd 10 sqrt(2/n) = 0.14; tolerance 0.6.
    assert abs(theta.var() - 10.0) < 0.6
    arms = np.asarray(states["arms"])
    bound = 1 / math.sqrt(5)
    assert arms.min() >= -bound and arms.max() <= bound
    # 80,000 Unif(-u, u) draws: variance u^2/3 = 1/15, sd of the estimate ~2e-4; tolerance 2e-3.
    assert abs(arms.var() - 1 / 15) < 2e-3

    state = jax.tree.map(lambda x: x[0], states)
    r0 = env.observe(state, jax.random.PRNGKey(1), jnp.int32(0))
    r9 = env.observe(state, jax.random.PRNGKey(2), jnp.int32(9))
    np.testing.assert_array_equal(r0.contexts, r9.contexts)
    np.testing.assert_allclose(r0.expected_rewards, r0.contexts @ state["theta"], rtol=1e-6)

    # Reward noise: 20,000 draws of N(0, 1): variance sd sqrt(2/n) = 0.01; tolerance 0.05.
    keys = jax.random.split(jax.random.PRNGKey(3), 20_000)
    rewards = jax.jit(jax.vmap(env.reward, in_axes=(None, 0, None, None)))(
        state, keys, r0, jnp.int32(2))
    noise = np.asarray(rewards) - float(r0.expected_rewards[2])
    assert abs(noise.mean()) < 0.04
    assert abs(noise.var() - 1.0) < 0.05


def test_contextual_russo_redraws_arms_each_round():
    env = make_bandit_env("russo_contextual", dim=5, num_arms=4)
    state = env.init(jax.random.PRNGKey(0))
    r0 = env.observe(state, jax.random.PRNGKey(1), jnp.int32(0))
    r1 = env.observe(state, jax.random.PRNGKey(2), jnp.int32(1))
    assert not np.allclose(r0.contexts, r1.contexts)
    assert not env.fixed_arms and make_bandit_env("russo").fixed_arms


def test_quadratic_pool_arms_are_distinct_unit_vectors_with_nonnegative_means():
    env = make_bandit_env("quadratic", dim=6, num_arms=10, num_candidates=10)
    state = jax.jit(env.init)(jax.random.PRNGKey(0))
    r = jax.jit(env.observe)(state, jax.random.PRNGKey(1), jnp.int32(0))
    np.testing.assert_allclose(np.linalg.norm(r.contexts, axis=1), 1.0, rtol=1e-5)
    # num_candidates == num_arms: every candidate offered once (sampling without replacement).
    assert len({tuple(np.round(x, 5)) for x in np.asarray(r.contexts)}) == 10
    np.testing.assert_allclose(np.sort(r.expected_rewards), np.sort(state["means"]), rtol=1e-6)
    assert np.all(np.asarray(r.expected_rewards) >= 0)


def test_bernoulli_envs_give_binary_rewards_with_the_stated_mean():
    env = make_bandit_env("neural_classification", dim=6, num_arms=5, num_candidates=20)
    state = jax.jit(env.init)(jax.random.PRNGKey(0))
    r = jax.jit(env.observe)(state, jax.random.PRNGKey(1), jnp.int32(0))
    assert np.all((r.expected_rewards > 0) & (r.expected_rewards < 1))
    keys = jax.random.split(jax.random.PRNGKey(2), 4000)
    rewards = np.asarray(jax.jit(jax.vmap(env.reward, in_axes=(None, 0, None, None)))(
        state, keys, r, jnp.int32(0)))
    assert set(np.unique(rewards)) <= {0.0, 1.0}
    # 4000 Bernoulli draws: sd <= 0.008; tolerance 0.035 (> 4 sd).
    assert abs(rewards.mean() - float(r.expected_rewards[0])) < 0.035


def test_logistic_mean_is_sigmoid_of_linear_score():
    env = make_bandit_env("logistic", dim=5, num_arms=4)
    state = env.init(jax.random.PRNGKey(0))
    r = env.observe(state, jax.random.PRNGKey(1), jnp.int32(0))
    expected = 1 / (1 + np.exp(-(np.asarray(r.contexts) @ np.asarray(state["theta"]))))
    np.testing.assert_allclose(r.expected_rewards, expected, rtol=1e-5)


def test_classification_disjoint_encoding_and_rewards():
    env = classification("iris")
    assert (env.num_arms, env.context_dim) == (3, 12)
    state = env.init(jax.random.PRNGKey(0))
    r = env.observe(state, jax.random.PRNGKey(5), jnp.int32(0))
    contexts = np.asarray(r.contexts).reshape(3, 3, 4)
    x = contexts[0, 0]
    for k in range(3):
        np.testing.assert_array_equal(contexts[k, k], x)
        assert not np.any(np.delete(contexts[k], k, axis=0))
    label = int(np.argmax(r.expected_rewards))
    np.testing.assert_array_equal(r.expected_rewards, np.eye(3)[label])
    key = jax.random.PRNGKey(0)
    assert float(env.reward(state, key, r, jnp.int32(label))) == 1.0
    assert float(env.reward(state, key, r, jnp.int32((label + 1) % 3))) == 0.0


def test_classification_concat_encoding():
    env = classification("wine", encoding="concat")
    assert (env.num_arms, env.context_dim) == (3, 13 + 3)
    r = env.observe(env.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1), jnp.int32(0))
    np.testing.assert_array_equal(r.contexts[:, 13:], np.eye(3))
    np.testing.assert_array_equal(r.contexts[0, :13], r.contexts[2, :13])


@pytest.mark.parametrize("name", ["quadratic", "neural_regression", "neural_classification"])
def test_instance_seed_shares_the_game_across_seeds(name):
    # Per-seed instances by default; with instance_seed every seed gets the same pool and means
    # (the reference's single instance), drawn reproducibly from the seed, while the arms
    # offered each round still depend on the seed's key.
    kwargs = SMALL[name]
    per_seed, _ = _rounds(make_bandit_env(name, **kwargs))
    assert not np.array_equal(per_seed["pool"][0], per_seed["pool"][1])
    shared, rounds = _rounds(make_bandit_env(name, instance_seed=7, **kwargs))
    again, _ = _rounds(make_bandit_env(name, instance_seed=7, **kwargs))
    other, _ = _rounds(make_bandit_env(name, instance_seed=8, **kwargs))
    for key in ("pool", "means"):
        np.testing.assert_array_equal(shared[key][0], shared[key][1])
        np.testing.assert_array_equal(shared[key], again[key])
        assert not np.array_equal(shared[key][0], other[key][0])
    assert not np.array_equal(rounds.contexts[0], rounds.contexts[1])
    norms = np.linalg.norm(np.asarray(shared["pool"][0]), axis=-1)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-5)
    assert shared["means"].shape == (3, kwargs["num_candidates"])


@pytest.mark.parametrize(
    ("name", "kwargs", "argument"),
    [
        ("nope", {}, "name"),
        ("russo", dict(num_arms=1), "num_arms"),
        ("russo", dict(dim=0), "dim"),
        ("quadratic", dict(num_arms=30, num_candidates=10), "num_candidates"),
        ("quadratic", dict(instance_seed=-1), "instance_seed"),
        ("neural_regression", dict(instance_seed=1.5), "instance_seed"),
        ("russo", dict(noise_std=-1.0), "noise_std"),
        ("logistic", dict(prior_var=0.0), "prior_var"),
        ("iris", dict(encoding="onehot"), "encoding"),
        ("text", {}, "data"),
        ("text", dict(data="texts.csv"), "model"),
    ],
)
def test_bad_arguments_name_the_argument(name, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        make_bandit_env(name, **kwargs)


def test_reward_rejects_a_non_scalar_arm():
    env = _env("russo")
    state = env.init(jax.random.PRNGKey(0))
    r = env.observe(state, jax.random.PRNGKey(1), jnp.int32(0))
    with pytest.raises(ValueError, match="arm"):
        env.reward(state, jax.random.PRNGKey(2), r, jnp.array([0, 1]))


@pytest.mark.parametrize("name", ["russo", "logistic", "quadratic", "iris"])
@pytest.mark.parametrize("arm", [-1, 4, 99])
def test_reward_refuses_an_arm_outside_the_game(name, arm):
    """JAX would clamp the index and return another arm's reward without a word."""
    env = _env(name)
    state = env.init(jax.random.PRNGKey(0))
    r = env.observe(state, jax.random.PRNGKey(1), jnp.int32(0))
    k = r.expected_rewards.shape[0]
    arm = k if arm == 4 else arm
    with pytest.raises(ValueError, match=rf"^arm: expected integers in \[0, {k - 1}\], got {arm}"):
        env.reward(state, jax.random.PRNGKey(2), r, jnp.int32(arm))
    with pytest.raises(TypeError, match="^arm: expected an integer dtype"):
        env.reward(state, jax.random.PRNGKey(2), r, jnp.float32(1.0))
    assert np.isfinite(env.reward(state, jax.random.PRNGKey(2), r, jnp.int32(k - 1)))


def test_reward_draws_refuse_means_outside_their_family():
    logistic, russo = _env("logistic"), _env("russo")
    state = logistic.init(jax.random.PRNGKey(0))
    r = logistic.observe(state, jax.random.PRNGKey(1), jnp.int32(0))
    for mean in (1.5, -0.2):  # a Bernoulli mean is a probability
        bad = r._replace(expected_rewards=r.expected_rewards.at[2].set(mean))
        with pytest.raises(ValueError, match=rf"^round.expected_rewards: expected values in "
                                             rf"\[0, 1\], got {mean:g}"):
            logistic.reward(state, jax.random.PRNGKey(2), bad, jnp.int32(0))
    state = russo.init(jax.random.PRNGKey(0))
    r = russo.observe(state, jax.random.PRNGKey(1), jnp.int32(0))
    bad = r._replace(expected_rewards=r.expected_rewards.at[0].set(jnp.nan))
    with pytest.raises(ValueError, match="^round.expected_rewards: expected finite"):
        russo.reward(state, jax.random.PRNGKey(2), bad, jnp.int32(1))
    with pytest.raises(ValueError, match="^noise_std: expected a finite number"):
        make_bandit_env("russo", dim=3, num_arms=2, noise_std=math.nan)


def test_reward_draws_with_their_checks_trace_under_jit():
    env = _env("russo")
    state = env.init(jax.random.PRNGKey(0))
    r = env.observe(state, jax.random.PRNGKey(1), jnp.int32(0))
    draw = jax.jit(lambda a: env.reward(state, jax.random.PRNGKey(2), r, a))
    np.testing.assert_allclose(draw(jnp.int32(2)), env.reward(state, jax.random.PRNGKey(2), r,
                                                             jnp.int32(2)))
