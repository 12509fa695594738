import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperx.bandits import neural
from hyperx.bandits.base import BanditSpec
from hyperx.bandits.baselines import uniform_random
from hyperx.bandits.neural import (
    NEURAL_LEARNERS,
    PRESETS,
    ensemble_pp_model,
    neural_ensemble_plus,
    neural_ensemble_pp,
    neural_epinet,
    neural_epsilon_greedy,
    neural_hyperagent,
    neural_learner,
    neural_ts,
    neural_ucb,
)
from hyperx.bandits.neural_core import NeuralConfig, make_neural_learner, neural_loss
from hyperx.bandits.runner import run_bandit
from hyperx.envs.bandits import make_bandit_env

SMALL = NeuralConfig(hidden=(16, 16), learning_rate=3e-3, batch_size=16, learning_starts=16)
# A small quadratic game (d = 5, 10 of 100 candidates per round, mean gaps ~1 against noise
# 0.1) on which a few hundred rounds separate learning from uniform play.
ENV = make_bandit_env("quadratic", dim=5, num_arms=10, num_candidates=100, scale=1.0)
HORIZON = 300
SEEDS = 6


def _run(learner, env=ENV, horizon=HORIZON, seeds=SEEDS):
    """Initial states, final states and cumulative expected regret (S,) of ``seeds`` runs."""
    spec = BanditSpec.from_env(env, horizon)

    def one(key):
        k_env, k_learner, k_run = jax.random.split(key, 3)
        env_state = env.init(k_env)
        state0 = learner.init(k_learner, spec)

        def step(carry, t):
            state, key = carry
            key, k_obs, k_act, k_rew, k_upd = jax.random.split(key, 5)
            round_ = env.observe(env_state, k_obs, t)
            arm = learner.act(state, k_act, round_.contexts)
            reward = env.reward(env_state, k_rew, round_, arm)
            state = learner.update(state, k_upd, round_.contexts[arm], arm, reward)
            means = round_.expected_rewards
            return (state, key), jnp.max(means) - means[arm]

        (state, _), regret = jax.lax.scan(step, (state0, k_run), jnp.arange(horizon))
        return state0, state, jnp.sum(regret)

    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.PRNGKey(0), s))(jnp.arange(seeds))
    return jax.jit(jax.vmap(one))(keys)


@functools.cache
def _uniform_regret():
    return np.asarray(_run(uniform_random())[2])


def _leaves_equal(a, b):
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b),
                                                    strict=True))


def test_bad_config_raises_naming_the_argument():
    cases = [
        (lambda: neural_ensemble_pp(index_dim=0), "index_dim"),
        (lambda: neural_ensemble_pp(index_dim=-3), "index_dim"),
        (lambda: neural_ensemble_pp(sigma=-1.0), "sigma"),
        (lambda: neural_hyperagent(num_indices=0), "num_indices"),
        (lambda: neural_ensemble_plus(num_members=0), "num_members"),
        (lambda: neural_epinet(index_dim=0), "index_dim"),
        (lambda: neural_ucb(ridge=0.0), "ridge"),
        (lambda: neural_ts(nu=-1.0), "nu"),
        (lambda: neural_epsilon_greedy(epsilon=1.5), "epsilon"),
        (lambda: neural_ensemble_pp(config=NeuralConfig(batch_size=0)), "config.batch_size"),
        (lambda: neural_ensemble_pp(config=NeuralConfig(hidden=())), "config.hidden"),
        (lambda: neural_ts(config=NeuralConfig(learning_starts=-1)), "config.learning_starts"),
        (lambda: neural_ucb(config=NeuralConfig(update_every=0)), "config.update_every"),
        (lambda: neural_learner("nope"), "name"),
        (lambda: neural_learner("neural_ts", game="nope"), "game"),
    ]
    for make, name in cases:
        with pytest.raises(ValueError, match=name):
            make()


def test_bad_inputs_raise_naming_the_argument():
    learner = neural_epsilon_greedy(config=SMALL)
    state = learner.init(jax.random.PRNGKey(0), BanditSpec(4, 3, 10))
    with pytest.raises(ValueError, match="contexts"):
        learner.act(state, jax.random.PRNGKey(1), jnp.zeros((4, 2)))
    with pytest.raises(ValueError, match="context"):
        learner.update(state, jax.random.PRNGKey(1), jnp.zeros((2,)), 0, jnp.float32(1.0))
    with pytest.raises(ValueError, match="reward"):
        learner.update(state, jax.random.PRNGKey(1), jnp.zeros((3,)), 0, jnp.zeros(2))


def test_presets_set_the_schedule_and_scales():
    assert PRESETS["quadratic"]["updates_per_step"] == 4
    assert PRESETS["neural_classification"]["update_every"] == 10
    assert set(NEURAL_LEARNERS) >= {"neural_ensemble_pp", "neural_ts", "neural_ucb"}


def test_weight_decay_uses_num_added_not_capacity():
    # 10 samples through a 4-slot buffer: the decay must be lambda/10 ||theta||^2, not /4.
    model = ensemble_pp_model(4, hidden=(8,))
    decay = SMALL._replace(buffer_size=4, learning_starts=100, weight_decay=0.5)
    learner = make_neural_learner(model, decay)
    state = learner.init(jax.random.PRNGKey(0), BanditSpec(3, 2, 50))
    update = jax.jit(learner.update)
    for i in range(10):
        state = update(state, jax.random.PRNGKey(i), jnp.array([1.0, -0.5 * i]), 0,
                       jnp.float32(i))
    assert int(state.replay.num_added) == 10
    key = jax.random.PRNGKey(7)
    with_decay = neural_loss(model, decay, state, key)
    without = neural_loss(model, decay._replace(weight_decay=0.0), state, key)
    sq = sum(float(jnp.sum(p ** 2)) for p in jax.tree.leaves(state.variables["params"]))
    np.testing.assert_allclose(float(with_decay - without), 0.5 / 10 * sq, rtol=1e-4)


def test_update_schedule_counts_gradient_steps():
    # Adam's step count = updates_per_step x number of training events.
    config = SMALL._replace(learning_starts=4, update_every=3, updates_per_step=2)
    learner = neural_epsilon_greedy(config=config)
    state = learner.init(jax.random.PRNGKey(0), BanditSpec(3, 2, 50))
    update = jax.jit(learner.update)
    for i in range(12):
        state = update(state, jax.random.PRNGKey(i), jnp.array([1.0, 0.1 * i]), 0,
                       jnp.float32(0.5))
    # Training events at n = 6, 9, 12 (n >= 4 and n % 3 == 0): 3 events x 2 steps.
    assert int(state.opt_state[0].count) == 6


@settings(max_examples=8, deadline=None)
@given(num_arms=st.integers(1, 6), dim=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_act_returns_a_valid_arm(num_arms, dim, seed):
    learner = neural_ensemble_pp(2, config=SMALL._replace(hidden=(4,)))
    key = jax.random.PRNGKey(seed)
    state = learner.init(key, BanditSpec(num_arms, dim, 10))
    arm = learner.act(state, key, jax.random.normal(key, (num_arms, dim)))
    assert arm.dtype == jnp.int32 and 0 <= int(arm) < num_arms


def test_epsilon_one_plays_uniformly():
    learner = neural_epsilon_greedy(epsilon=1.0, config=SMALL)
    state = learner.init(jax.random.PRNGKey(0), BanditSpec(4, 3, 10))
    contexts = jnp.arange(12.0).reshape(4, 3)
    keys = jax.random.split(jax.random.PRNGKey(1), 4000)
    arms = jax.jit(jax.vmap(learner.act, in_axes=(None, 0, None)))(state, keys, contexts)
    freq = np.bincount(np.asarray(arms), minlength=4) / 4000
    # p = 1/4 per arm, sd 0.0068 with 4000 draws; tolerance 0.03 (> 4 sd).
    np.testing.assert_allclose(freq, 0.25, atol=0.03)


@pytest.fixture(scope="module")
def ensemble_pp_run():
    return _run(neural_ensemble_pp(4, prior_scale=1.0, posterior_scale=1.0, config=SMALL))


def test_ensemble_pp_prior_frozen_and_params_trained(ensemble_pp_run):
    state0, state, _ = ensemble_pp_run
    assert jax.tree.leaves(state0.variables["prior"])
    assert _leaves_equal(state0.variables["prior"], state.variables["prior"])
    assert not _leaves_equal(state0.variables["params"], state.variables["params"])


def test_ensemble_pp_beats_uniform(ensemble_pp_run):
    # 6 seeds (common random numbers: the same problems as uniform's): a learner that uses its
    # data has mean regret well below uniform's; we ask for 0.8x (measured: about 0.5x).
    regret = np.asarray(ensemble_pp_run[2])
    assert np.all(np.isfinite(regret))
    assert regret.mean() < 0.8 * _uniform_regret().mean()


def test_ensemble_pp_reference_switches_init_and_hold_the_biases_at_zero():
    # The ablation knobs of neural Ensemble++ (benchmarks/bandit_neural_ablation.py): torch's
    # nn.Linear init U(+-1/sqrt(fan_in)) on torso and mean head, A ~ N(0, 2 / (M + P)), and the
    # mean-head bias c and factor bias b held at exactly 0 through training (stop_gradient:
    # zero gradient, so Adam's step is 0) while everything else trains.
    m = 4
    learner = neural_ensemble_pp(m, prior_scale=1.0, posterior_scale=1.0, torso_init="torch",
                                 factor_init="xavier", mean_bias=False, factor_bias=False,
                                 config=SMALL)
    state0, state, regret = _run(learner, horizon=60, seeds=2)
    params0, params = state0.variables["params"], state.variables["params"]
    for layer in (*params0["torso"].values(), params0["mean"]):
        kernel = np.asarray(layer["kernel"])
        bound = 1.0 / np.sqrt(kernel.shape[-2])
        assert np.all(np.abs(kernel) <= bound) and np.abs(kernel).max() > 0.5 * bound
    bias = np.asarray(params0["torso"]["Dense_0"]["bias"])
    assert np.all(np.abs(bias) <= 1 / np.sqrt(ENV.context_dim)) and np.any(bias != 0)
    a = np.asarray(params0["hyper"]["A"])  # (seeds, O, P, M)
    # sd of 2 x 16 x 4 = 128 normal draws: relative error ~ 1/sqrt(256) = 0.06; tolerance 0.25
    np.testing.assert_allclose(a.std(), np.sqrt(2 / (m + a.shape[-2])), rtol=0.25)
    for p in (params0, params):
        assert not np.any(np.asarray(p["mean"]["bias"]))
        assert not np.any(np.asarray(p["hyper"]["b"]))
    assert not np.array_equal(params0["hyper"]["A"], params["hyper"]["A"])
    assert not np.array_equal(params0["mean"]["kernel"], params["mean"]["kernel"])
    assert np.all(np.isfinite(np.asarray(regret)))


def test_ensemble_pp_defaults_keep_their_biases_trainable(ensemble_pp_run):
    state0, state, _ = ensemble_pp_run
    assert not np.array_equal(state0.variables["params"]["mean"]["bias"],
                              state.variables["params"]["mean"]["bias"])
    assert not np.array_equal(state0.variables["params"]["hyper"]["b"],
                              state.variables["params"]["hyper"]["b"])


@pytest.mark.parametrize(("kwargs", "argument"), [
    (dict(torso_init="xavier"), "torso_init"), (dict(factor_init="torch"), "factor_init"),
    (dict(mean_bias=0), "mean_bias"), (dict(factor_bias="no"), "factor_bias")])
def test_ensemble_pp_switches_reject_bad_values(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        neural_ensemble_pp(4, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["neural_ts", "neural_ucb", "neural_epinet",
                                  "neural_hyperagent", "neural_ensemble_plus",
                                  "neural_epsilon_greedy"])
def test_learner_end_to_end(name):
    # Same protocol as test_ensemble_pp_beats_uniform (6 seeds, 300 rounds, below 0.8x uniform).
    state0, state, regret = _run(neural_learner(name, "reference", config=SMALL))
    regret = np.asarray(regret)
    assert np.all(np.isfinite(regret))
    assert regret.mean() < 0.8 * _uniform_regret().mean()
    assert _leaves_equal(state0.variables["prior"], state.variables["prior"])
    assert not _leaves_equal(state0.variables["params"], state.variables["params"])


def _interval(x):
    """Mean and the half-width of its normal 95% interval."""
    return x.mean(), 1.96 * x.std(ddof=1) / np.sqrt(x.size)


@pytest.mark.slow
def test_ensemble_pp_vs_baselines_on_quadratic():
    # The paper's quadratic game (d = 100, 50 of 1000 candidates per round) with the reference
    # settings (quadratic preset: prior 5 / posterior 1, 4 gradient steps per round; Adam 1e-4),
    # 20 seeds with common random numbers, T = 500 (about 2.5 min on 2 cores). Claims are
    # checked with normal 95% intervals of the paired per-seed differences.
    # Measured (20 seeds): Ensemble++ 166 +- 6, eps-greedy 142 +- 6, Ensemble+ 148 +- 5,
    # uniform 170. At this horizon Ensemble++ does NOT win: with Adam at 1e-4 its posterior
    # factor needs far more steps than 2000 to cancel a prior of scale 5, so it still explores
    # almost uniformly. The test asserts that finding; it fails once Ensemble++ catches up.
    env = make_bandit_env("quadratic")
    regret = {name: run_bandit(env, neural_learner(name, "quadratic"), horizon=500,
                               num_seeds=20).final_regret
              for name in ("neural_ensemble_pp", "neural_epsilon_greedy", "neural_ensemble_plus")}
    regret["uniform"] = run_bandit(env, uniform_random(), horizon=500, num_seeds=20).final_regret
    for name, values in regret.items():
        mean, half = _interval(values)
        print(f"{name}: {mean:.1f} +- {half:.1f}")
    for name in ("neural_epsilon_greedy", "neural_ensemble_plus"):
        mean, half = _interval(regret["uniform"] - regret[name])
        assert mean - half > 0, f"{name} does not beat uniform: {mean:.1f} +- {half:.1f}"
        mean, half = _interval(regret["neural_ensemble_pp"] - regret[name])
        assert mean - half > 0, f"Ensemble++ now beats or ties {name}: {mean:.1f} +- {half:.1f}"


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=() if n == "neural_ensemble_pp" else pytest.mark.slow)
    for n in NEURAL_LEARNERS])
def test_vmapped_seeds_equal_separate_single_seed_runs(name):
    # One compiled program over 3 seeds against 3 single-seed runs of run_bandit (seed s keyed
    # fold_in(PRNGKey(0), s) in both), with the neural_classification preset's schedule (train
    # every 10 observations), so the vmapped schedule's branch is exercised. Tolerance 1e-4 on
    # the cumulative regret: XLA may reorder float32 reductions for another batch shape (seen:
    # bit-identical on CPU), while one diverging choice would change it by a reward gap, ~0.1+.
    # The learners share one engine, so only neural Ensemble++ runs in the default suite.
    config = SMALL._replace(hidden=(8,), batch_size=8, learning_starts=8)
    learner = neural_learner(name, "neural_classification", config=config)
    together = run_bandit(ENV, learner, horizon=60, num_seeds=3, group_size=None)
    assert together.group_size == 3
    alone = np.concatenate([run_bandit(ENV, learner, horizon=60, num_seeds=1,
                                       first_seed=s).regret for s in range(3)])
    np.testing.assert_allclose(together.regret, alone, rtol=0, atol=1e-4)
    assert np.ptp(together.final_regret) > 0  # three different runs, not one copied


def test_the_preset_schedule_fills_only_what_the_caller_left_at_the_default(monkeypatch):
    seen = []
    monkeypatch.setitem(neural._FACTORIES, "neural_ts",
                        lambda config, **kw: seen.append(config) or config)
    neural_learner("neural_ts", "neural_regression")  # preset: 10 updates every step
    neural_learner("neural_ts", "neural_regression", config=NeuralConfig(update_every=3))
    neural_learner("neural_ts", "neural_regression", config=NeuralConfig(updates_per_step=2))
    assert [(c.updates_per_step, c.update_every) for c in seen] == [(10, 1), (10, 3), (2, 1)]
