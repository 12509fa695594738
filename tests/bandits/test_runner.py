"""The bandit regret runner: regret bounds, seeds and groups, grids, sharding."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperx.bandits.baselines import epsilon_greedy, uniform_random
from hyperx.bandits.linear import ensemble_pp, exact_ts
from hyperx.bandits.runner import bandit_program, run_bandit
from hyperx.envs.bandits import make_bandit_env
from hyperx.loop import log_grid

pytest.importorskip("sklearn")

RUSSO = make_bandit_env("russo", dim=3, num_arms=5)
ENVS = {
    "russo": RUSSO,
    "logistic": make_bandit_env("logistic", dim=3, num_arms=4),
    "iris": make_bandit_env("iris"),
}
LEARNERS = {
    "uniform": uniform_random(),
    "ridge": epsilon_greedy(0.1),
    "per_arm": epsilon_greedy(0.1, mean="per_arm"),
}
HORIZON = 40


def _russo_means(seed, s):
    """Arm means of seed s, rebuilt from run_bandit's documented key layout."""
    key = jax.random.fold_in(jax.random.PRNGKey(seed), s)
    state = RUSSO.init(jax.random.split(key, 3)[0])
    return np.asarray(state["arms"] @ state["theta"])


def _russo_gap(seed, s):
    means = _russo_means(seed, s)
    return means.max() - means.min()


# Expected regret is a sum of per-round gaps: 0 <= regret(t) <= t * (largest gap), and it never
# decreases. Means of the logistic and iris games lie in [0, 1], so their gap is at most 1.
@settings(max_examples=12, deadline=None)
@given(env_name=st.sampled_from(sorted(ENVS)), learner_name=st.sampled_from(["ridge", "uniform"]),
       seed=st.integers(0, 2**16))
def test_expected_regret_is_between_zero_and_t_times_the_largest_gap(env_name, learner_name,
                                                                    seed):
    result = run_bandit(ENVS[env_name], LEARNERS[learner_name], horizon=HORIZON, num_seeds=2,
                        seed=seed)
    regret = result.regret
    assert regret.shape == (2, result.t.size)
    assert np.all(regret >= 0)
    assert np.all(np.diff(regret, axis=1) >= -1e-5)
    for s in range(2):
        gap = _russo_gap(seed, s) if env_name == "russo" else 1.0
        assert np.all(regret[s] <= result.t * gap * (1 + 1e-5) + 1e-5)


def test_uniform_play_on_russo_pays_the_mean_gap():
    # Uniform play's expected regret after T rounds is a sum of T i.i.d. gaps with mean
    # max(mu) - mean(mu) and sd sd(mu); each of the 2 seeds must lie within 4.5 sd of T * mean.
    result = run_bandit(RUSSO, LEARNERS["uniform"], horizon=HORIZON, num_seeds=2, seed=5)
    for s in range(2):
        means = _russo_means(5, s)
        expected = HORIZON * (means.max() - means.mean())
        assert abs(result.final_regret[s] - expected) < 4.5 * np.sqrt(HORIZON) * means.std()


def test_epsilon_greedy_beats_uniform_on_real_data():
    # wine: 3 classes, uniform play loses 2/3 per round (200 over T = 300); a ridge
    # epsilon-greedy learner on the disjoint encoding should be far better. 4 seeds, every seed
    # must be below half of uniform's mean regret (measured: ~10x below).
    env = make_bandit_env("wine")
    greedy = run_bandit(env, epsilon_greedy(0.05), horizon=300, num_seeds=4)
    uniform = run_bandit(env, uniform_random(), horizon=300, num_seeds=4)
    assert np.all(greedy.final_regret < 0.5 * uniform.final_regret.mean())
    assert abs(uniform.final_regret.mean() - 200) < 40


def test_same_seed_same_regret_and_batch_size_does_not_matter():
    learner = LEARNERS["ridge"]
    a = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=2, seed=7)
    b = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=2, seed=7)
    c = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=2, seed=8)
    wide = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=5, seed=7)
    np.testing.assert_array_equal(a.regret, b.regret)
    assert not np.array_equal(a.regret, c.regret)
    assert not np.array_equal(a.regret[0], a.regret[1])
    np.testing.assert_array_equal(wide.regret[:2], a.regret)


def test_a_held_program_runs_more_seeds_as_fresh_calls_do_and_refuses_other_settings():
    """A sweep's parts: one program, seeds 0-1 then 2-4, give the regret of fresh calls; a
    program built for another horizon, learner or chunk is refused naming ``program``."""
    learner = LEARNERS["ridge"]
    program = bandit_program(RUSSO, learner, horizon=HORIZON)
    first = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=2, seed=7, program=program)
    rest = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=3, first_seed=2, seed=7,
                      program=program)
    fresh = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=5, seed=7)
    np.testing.assert_array_equal(np.concatenate([first.regret, rest.regret]), fresh.regret)
    for kwargs in (dict(horizon=HORIZON + 1), dict(horizon=HORIZON, chunk_size=7)):
        with pytest.raises(ValueError, match="program: built for another"):
            run_bandit(RUSSO, learner, num_seeds=2, program=program, **kwargs)
    with pytest.raises(ValueError, match="program: built for another"):
        run_bandit(RUSSO, LEARNERS["uniform"], horizon=HORIZON, program=program)


def test_grid_points_match_single_runs_and_chunking_changes_nothing():
    grid = run_bandit(RUSSO, lambda epsilon: epsilon_greedy(epsilon), horizon=HORIZON,
                      num_seeds=2, seed=3, grid={"epsilon": np.array([0.0, 0.1, 1.0])})
    single = run_bandit(RUSSO, LEARNERS["ridge"], horizon=HORIZON, num_seeds=2, seed=3)
    assert grid.regret.shape == (3, 2, single.t.size)
    np.testing.assert_allclose(grid.regret[1], single.regret, rtol=1e-6)
    chunked = run_bandit(RUSSO, LEARNERS["ridge"], horizon=HORIZON, num_seeds=2, seed=3,
                         chunk_size=7)
    np.testing.assert_array_equal(chunked.regret, single.regret)
    rows = grid.to_records()
    assert len(rows) == 3 * 2 * single.t.size
    assert set(rows[0]) == {"epsilon", "seed", "t", "regret"}


def test_seed_groups_give_the_same_regret_and_report_progress_over_all_groups():
    learner = LEARNERS["ridge"]
    whole = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=5, seed=2, group_size=None)
    assert whole.group_size == 5
    calls = []
    grouped = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=5, seed=2, group_size=2,
                         chunk_size=16, progress=lambda done, total: calls.append((done, total)))
    assert grouped.group_size == 2
    np.testing.assert_array_equal(grouped.regret, whole.regret)
    # 3 groups (the last padded) x 3 chunks of 16 rounds; progress counts over all groups
    assert calls == [(16, 120), (32, 120), (40, 120), (56, 120), (72, 120), (80, 120),
                     (96, 120), (112, 120), (120, 120)]
    auto = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=5, seed=2)
    assert auto.group_size == 5  # a few hundred bytes of state per run: one group
    np.testing.assert_array_equal(auto.regret, whole.regret)


def test_auto_groups_split_runs_whose_arm_features_fill_the_cache():
    env = make_bandit_env("russo", dim=64, num_arms=8192)  # 2 MiB of arms per seed
    result = run_bandit(env, exact_ts(), horizon=3, num_seeds=3)
    assert result.group_size == 1
    single = run_bandit(env, exact_ts(), horizon=3, num_seeds=1)
    np.testing.assert_array_equal(result.regret[:1], single.regret)


@pytest.mark.parametrize("make", [exact_ts, ensemble_pp], ids=["exact_ts", "ensemble_pp"])
def test_one_learner_object_runs_again_with_new_shapes(make):
    # the linear learners build their model lazily inside the trace and cache it: it must not
    # keep that trace's values (a second trace for a new batch shape used to fail)
    learner = make()
    first = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=3, group_size=None)
    again = run_bandit(RUSSO, learner, horizon=HORIZON, num_seeds=2, group_size=None)
    np.testing.assert_allclose(again.regret, first.regret[:2], rtol=1e-5)


def test_delayed_feedback_run():
    every = run_bandit(RUSSO, LEARNERS["ridge"], horizon=HORIZON, num_seeds=2, update_every=1)
    batched = run_bandit(RUSSO, LEARNERS["ridge"], horizon=HORIZON, num_seeds=2,
                         update_every=8)
    assert np.all(batched.regret >= 0)
    assert not np.array_equal(every.regret, batched.regret)


def test_bad_arguments_name_the_argument():
    learner = LEARNERS["uniform"]
    with pytest.raises(ValueError, match="horizon"):
        run_bandit(RUSSO, learner, horizon=0)
    with pytest.raises(ValueError, match="num_seeds"):
        run_bandit(RUSSO, learner, horizon=5, num_seeds=0)
    with pytest.raises(ValueError, match="checkpoints"):
        run_bandit(RUSSO, learner, horizon=5, checkpoints=[1, 6])
    with pytest.raises(ValueError, match="checkpoints"):
        run_bandit(RUSSO, learner, horizon=5, checkpoints=[3, 2])
    with pytest.raises(ValueError, match="grid"):
        run_bandit(RUSSO, epsilon_greedy, horizon=5,
                   grid={"epsilon": [0.1, 0.2], "ridge": [1.0]})
    with pytest.raises(TypeError, match="learner"):
        run_bandit(RUSSO, epsilon_greedy, horizon=5)
    with pytest.raises(ValueError, match="update_every"):
        run_bandit(RUSSO, learner, horizon=5, update_every=0)
    for bad in (0, -2, 1.5, "big", True):
        with pytest.raises(ValueError, match="group_size"):
            run_bandit(RUSSO, learner, horizon=5, group_size=bad)


SHARDED_SCRIPT = textwrap.dedent("""
    import json
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax
    import numpy as np
    from hyperx.bandits.baselines import epsilon_greedy
    from hyperx.envs.bandits import make_bandit_env
    from hyperx.bandits.runner import bandit_program, run_bandit
    env = make_bandit_env("russo", dim=3, num_arms=5)
    learner = epsilon_greedy(0.1)
    kw = dict(horizon=30, num_seeds=6, seed=11)
    sharded = run_bandit(env, learner, devices=jax.devices(), **kw)
    single = run_bandit(env, learner, devices=jax.devices()[:1], **kw)
    grouped = run_bandit(env, learner, devices=jax.devices(), group_size=2, **kw)
    print(json.dumps({"devices": len(jax.devices()), "sharded": sharded.regret.tolist(),
                      "single": single.regret.tolist(), "grouped": grouped.regret.tolist(),
                      "group_size": grouped.group_size}))
""")


def test_sharded_run_equals_unsharded_in_a_subprocess():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", SHARDED_SCRIPT], capture_output=True, text=True,
                         env=env, timeout=300, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["devices"] == 4
    sharded, single = np.array(result["sharded"]), np.array(result["single"])
    assert sharded.shape == (6, log_grid(30).size)
    np.testing.assert_array_equal(sharded, single)
    assert result["group_size"] == 4  # rounded up to the device count: 2 groups of 4 runs
    np.testing.assert_array_equal(np.array(result["grouped"]), single)
