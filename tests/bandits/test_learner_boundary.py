"""Every bandit learner checks what it is given, at its boundary, naming the argument.

From the host (concrete values): non-finite contexts at ``act`` and at ``update`` /
``update_batch``, non-integer or negative arms and arms outside ``[0, K)`` where the learner
knows K, non-finite rewards and rewards outside the reward family's support (Bernoulli for the
logistic learner). Under ``jit`` the posterior learners built with ``checked=True`` do the same
through ``checkify``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx import checked
from hyperx.bandits import baselines, glm, linear, neural
from hyperx.bandits.base import BanditSpec, delayed

SPEC = BanditSpec(num_arms=4, context_dim=3, horizon=20)
KEY = jax.random.PRNGKey(0)
CONTEXTS = jnp.ones((4, 3), jnp.float32)
ROUNDS = jnp.ones((2, 3), jnp.float32)

LEARNERS = {
    "exact_ts": lambda: linear.exact_ts(),
    "ensemble_pp": lambda: linear.ensemble_pp(4),
    "linucb": lambda: linear.linucb(),
    "logistic_ts": lambda: glm.logistic_ts(),
    "epsilon_greedy": lambda: baselines.epsilon_greedy(0.1),
    "epsilon_greedy_per_arm": lambda: baselines.epsilon_greedy(0.1, mean="per_arm"),
    "uniform": lambda: baselines.uniform_random(),
    "neural_ensemble_pp": lambda: neural.neural_learner("neural_ensemble_pp"),
    "delayed": lambda: delayed(linear.exact_ts(), 2),
}
KNOWS_K = {"exact_ts", "ensemble_pp", "epsilon_greedy_per_arm"}


def test_the_block_updates_tested_below_are_every_learner_s():
    with_block = {name for name, make in LEARNERS.items() if make().update_batch is not None}
    assert with_block == set(BLOCK_UPDATES)


@pytest.fixture(scope="module", params=sorted(LEARNERS))
def learner_state(request):
    learner = LEARNERS[request.param]()
    return request.param, learner, learner.init(KEY, SPEC)


@pytest.mark.parametrize("bad", [jnp.nan, jnp.inf, -jnp.inf])
def test_act_refuses_non_finite_contexts(learner_state, bad):
    _, learner, state = learner_state
    with pytest.raises(ValueError, match=r"^contexts: expected finite values.*index \[2, 1\]"):
        learner.act(state, KEY, CONTEXTS.at[2, 1].set(bad))


def test_update_refuses_bad_feedback_by_name(learner_state):
    name, learner, state = learner_state
    x, arm, reward = CONTEXTS[0], jnp.int32(1), jnp.float32(1.0)
    cases = [
        ((x.at[0].set(jnp.nan), arm, reward), ValueError, "^context: expected finite"),
        ((x, arm, jnp.float32(jnp.inf)), ValueError, "^reward: expected finite"),
        ((x, jnp.float32(1.0), reward), TypeError, "^arm: expected an integer dtype"),
        ((x, jnp.int32(-1), reward), ValueError, "^arm: expected integers"),
        ((x, jnp.ones(2, jnp.int32), reward), ValueError, "^arm: expected rank 0"),
        ((x, arm, jnp.ones(2)), ValueError, "^reward: expected rank 0"),
    ]
    if name in KNOWS_K:
        cases.append(((x, jnp.int32(4), reward), ValueError,
                      r"^arm: expected integers in \[0, 3\], got 4"))
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            learner.update(state, KEY, *args)
    learner.update(state, KEY, x, arm, reward)  # the good round still passes


BLOCK_UPDATES = ["exact_ts", "ensemble_pp", "linucb", "logistic_ts", "epsilon_greedy",
                 "epsilon_greedy_per_arm"]


@pytest.mark.parametrize("name", BLOCK_UPDATES)
def test_update_batch_refuses_bad_feedback_by_name(name):
    learner = LEARNERS[name]()
    state = learner.init(KEY, SPEC)
    arms, rewards = jnp.array([0, 1], jnp.int32), jnp.array([1.0, 0.0])
    cases = [
        ((ROUNDS.at[1, 2].set(jnp.nan), arms, rewards), "^contexts: expected finite"),
        ((ROUNDS, arms, rewards.at[1].set(jnp.nan)), "^rewards: expected finite"),
        ((ROUNDS, jnp.array([0, -3]), rewards), "^arms: expected integers"),
        ((ROUNDS, jnp.array([0, 1, 2]), rewards), r"^arms: expected shape \(B,\) = \(2,\)"),
    ]
    if name in KNOWS_K:
        cases.append(((ROUNDS, jnp.array([0, 9]), rewards), r"^arms: expected integers in"))
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            learner.update_batch(state, KEY, *args)


@pytest.mark.parametrize("reward", [-0.5, 1.5, 3.0])
def test_logistic_learner_refuses_rewards_outside_the_bernoulli_support(reward):
    learner = glm.logistic_ts()
    state = learner.init(KEY, SPEC)
    with pytest.raises(ValueError, match=rf"^reward: expected values in \[0, 1\], got {reward:g}"):
        learner.update(state, KEY, CONTEXTS[0], jnp.int32(0), jnp.float32(reward))
    with pytest.raises(ValueError, match=r"^rewards: expected values in \[0, 1\]"):
        learner.update_batch(state, KEY, ROUNDS, jnp.array([0, 1]), jnp.array([1.0, reward]))
    for fine in (0.0, 0.25, 1.0):  # a Bernoulli draw or its mean
        learner.update(state, KEY, CONTEXTS[0], jnp.int32(0), jnp.float32(fine))


def test_gaussian_learners_take_any_finite_reward():
    for make in (linear.exact_ts, linear.linucb, baselines.epsilon_greedy):
        learner = make()
        state = learner.update(learner.init(KEY, SPEC), KEY, CONTEXTS[0], jnp.int32(0),
                               jnp.float32(-37.5))
        assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(state))


def test_checked_learner_catches_bad_feedback_under_jit():
    learner = linear.exact_ts(checked=True)
    state = learner.init(KEY, SPEC)
    step = jax.jit(checked(lambda s, x, a, r: learner.update(s, KEY, x, a, r)))
    err, _ = step(state, CONTEXTS[0], jnp.int32(1), jnp.float32(1.0))
    err.throw()  # a good round: no error
    for args, message in [((CONTEXTS[0], jnp.int32(7), jnp.float32(1.0)), "arm: expected"),
                          ((CONTEXTS[0].at[1].set(jnp.nan), jnp.int32(1), jnp.float32(1.0)),
                           "context: expected finite"),
                          ((CONTEXTS[0], jnp.int32(1), jnp.float32(jnp.nan)),
                           "reward: expected finite")]:
        err, _ = step(state, *args)
        with pytest.raises(Exception, match=message):
            err.throw()
    act = jax.jit(checked(lambda s, c: learner.act(s, KEY, c)))
    err, _ = act(state, CONTEXTS.at[0, 0].set(jnp.inf))
    with pytest.raises(Exception, match="contexts: expected finite"):
        err.throw()


def test_a_learner_built_with_a_fractional_count_names_it():
    with pytest.raises(ValueError, match=r"^index_dim: expected an integer"):
        neural.neural_ensemble_pp(2.5)
    with pytest.raises(ValueError, match=r"^batch_size: expected an integer"):
        delayed(linear.exact_ts(), 2.5)
    with pytest.raises(ValueError, match=r"^horizon: expected an integer"):
        BanditSpec.from_env(type("Env", (), dict(num_arms=2, context_dim=1,
                                                  fixed_arms=False))(), 10.5)
