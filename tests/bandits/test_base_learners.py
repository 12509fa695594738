import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.bandits.base import BanditSpec, argmax_random_tiebreak, delayed
from hyperx.bandits.baselines import epsilon_greedy, uniform_random
from hyperx.lockstep import lockstep_cond

SPEC = BanditSpec(num_arms=4, context_dim=3, horizon=10)
KEY = jax.random.PRNGKey(0)
XS = jnp.array([[1.0, 0.0, 2.0], [0.5, -1.0, 0.0], [0.0, 1.0, 1.0], [2.0, 1.0, -1.0],
                [1.0, 1.0, 1.0], [-1.0, 0.5, 0.0]])
RS = jnp.array([1.0, -0.5, 2.0, 0.3, 1.2, -1.0])


def _choices(values, n=3000):
    keys = jax.random.split(jax.random.PRNGKey(1), n)
    return np.asarray(jax.jit(jax.vmap(argmax_random_tiebreak, in_axes=(0, None)))(keys, values))


def test_tiebreak_is_uniform_over_tied_arms():
    freq = np.bincount(_choices(jnp.array([1.0, 3.0, 3.0, 0.0, 3.0])), minlength=5) / 3000
    assert freq[0] == 0 and freq[3] == 0
    # Each tied arm has p = 1/3: with 3000 draws the sd is 0.0086; tolerance 0.04 (> 4.5 sd).
    np.testing.assert_allclose(freq[[1, 2, 4]], 1 / 3, atol=0.04)


def test_tiebreak_unique_max_nan_and_all_nan():
    assert set(_choices(jnp.array([0.0, 2.0, 1.0]), 50)) == {1}
    assert set(_choices(jnp.array([jnp.nan, 2.0, 1.0]), 50)) == {1}
    assert set(_choices(jnp.full(3, jnp.nan), 600)) == {0, 1, 2}
    assert _choices(jnp.array([0, 5, 5]), 50).dtype == np.int32


def test_tiebreak_rejects_bad_shapes():
    with pytest.raises(ValueError, match="values"):
        argmax_random_tiebreak(KEY, jnp.zeros((2, 2)))
    with pytest.raises(ValueError, match="values"):
        argmax_random_tiebreak(KEY, jnp.zeros((0,)))


def _ridge_reference(xs, rs, lam):
    xs, rs = np.asarray(xs, np.float64), np.asarray(rs, np.float64)
    return np.linalg.solve(lam * np.eye(xs.shape[1]) + xs.T @ xs, xs.T @ rs)


def _run_updates(learner, xs=XS, rs=RS):
    state = learner.init(KEY, SPEC)
    for i in range(xs.shape[0]):
        state = learner.update(state, jax.random.PRNGKey(i), xs[i], jnp.int32(i % 4), rs[i])
    return state


def test_ridge_mean_matches_closed_form():
    state = _run_updates(epsilon_greedy(0.1, ridge=2.0))
    np.testing.assert_allclose(state.theta, _ridge_reference(XS, RS, 2.0), rtol=1e-5, atol=1e-6)
    expected_inv = np.linalg.inv(2.0 * np.eye(3) + np.asarray(XS, np.float64).T @ XS)
    np.testing.assert_allclose(state.precision_inv, expected_inv, rtol=1e-5, atol=1e-6)


def test_ridge_batch_update_equals_sequential_updates():
    learner = epsilon_greedy(0.1, ridge=2.0)
    batch = learner.update_batch(learner.init(KEY, SPEC), KEY, XS, jnp.zeros(6, jnp.int32), RS)
    seq = _run_updates(learner)
    np.testing.assert_allclose(batch.theta, seq.theta, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch.precision_inv, seq.precision_inv, rtol=1e-5, atol=1e-6)


def test_per_arm_mean_by_hand():
    learner = epsilon_greedy(0.0, mean="per_arm", ridge=1.0)
    state = learner.init(KEY, SPEC)
    for arm, r in [(0, 1.0), (0, 3.0), (2, 4.0)]:
        state = learner.update(state, KEY, XS[0], jnp.int32(arm), jnp.float32(r))
    np.testing.assert_allclose(state.sums / (state.counts + 1.0), [4 / 3, 0, 2, 0], rtol=1e-6)
    assert int(learner.act(state, KEY, jnp.zeros((4, 3)))) == 2
    batch = learner.update_batch(learner.init(KEY, SPEC), KEY, XS[:3],
                                 jnp.array([0, 0, 2]), jnp.array([1.0, 3.0, 4.0]))
    np.testing.assert_allclose(batch.sums, state.sums)
    np.testing.assert_allclose(batch.counts, state.counts)


def test_greedy_and_fully_random_choices():
    contexts = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    greedy = epsilon_greedy(0.0)
    state = greedy.init(KEY, SPEC)._replace(theta=jnp.array([0.1, 0.2, 5.0]))
    keys = jax.random.split(KEY, 200)
    arms = jax.vmap(greedy.act, in_axes=(None, 0, None))(state, keys, contexts)
    assert set(np.asarray(arms)) == {2}
    explore = epsilon_greedy(1.0)
    arms = jax.vmap(explore.act, in_axes=(None, 0, None))(state, keys, contexts)
    assert set(np.asarray(arms)) == {0, 1, 2, 3}
    arms = jax.vmap(uniform_random().act, in_axes=(None, 0, None))((), keys, contexts)
    assert set(np.asarray(arms)) == {0, 1, 2, 3}


@pytest.mark.parametrize("with_batch_hook", [True, False])
def test_delayed_learns_only_at_full_batches(with_batch_hook):
    inner = epsilon_greedy(0.1, ridge=2.0)
    if not with_batch_hook:
        inner = inner._replace(update_batch=None)
    learner = delayed(inner, 3)
    state = learner.init(KEY, SPEC)
    for i in range(5):
        state = learner.update(state, jax.random.PRNGKey(i), XS[i], jnp.int32(0), RS[i])
        if i < 2:
            np.testing.assert_array_equal(state.inner.theta, 0.0)
    assert int(state.count) == 2
    np.testing.assert_allclose(state.inner.theta, _ridge_reference(XS[:3], RS[:3], 2.0),
                               rtol=1e-5, atol=1e-6)


def _heavy(x, key, scale):
    return x * scale + jax.random.normal(key, x.shape), jax.random.split(key)[0], scale


def _light(x, key, scale):
    return x - 1.0, key, scale


def _branch(cond, t):
    x = jnp.arange(3.0) + t
    return cond(t % 3 == 0, _heavy, _light, x, jax.random.fold_in(KEY, t), jnp.float32(2.0))


def test_lockstep_cond_under_vmap_equals_cond_per_member():
    unbatched = jnp.float32(2.0)  # an operand the vmap does not batch

    def one(t):
        return lockstep_cond(t % 3 == 0, _heavy, _light, jnp.arange(3.0) + t,
                             jax.random.fold_in(KEY, t), unbatched)

    batched, single = jax.jit(jax.vmap(one)), jax.jit(lambda t: _branch(jax.lax.cond, t))
    for ts in (jnp.array([3, 3, 3]), jnp.array([4, 4, 4]), jnp.array([0, 1, 2])):
        out = batched(ts)  # all due, none due, mixed
        for i, t in enumerate(ts):
            for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(single(t)), strict=True):
                np.testing.assert_array_equal(a[i], b)
    nested = jnp.array([[0, 1, 2], [3, 6, 9]])  # a mixed row, then a row in lockstep
    out = jax.jit(jax.vmap(jax.vmap(lambda t: _branch(lockstep_cond, t)[0])))(nested)
    np.testing.assert_array_equal(out, [[single(t)[0] for t in row] for row in nested])


def test_lockstep_cond_stays_a_branch_under_vmap():
    # lax.cond with a batched predicate becomes a select of both branches (no cond left);
    # lockstep_cond keeps a cond, so the heavy branch runs only when a member needs it.
    ts = jnp.array([3, 3])
    plain = str(jax.make_jaxpr(jax.vmap(lambda t: _branch(jax.lax.cond, t)))(ts))
    lockstep = str(jax.make_jaxpr(jax.vmap(lambda t: _branch(lockstep_cond, t)))(ts))
    assert "cond[" not in plain and "select_n" in plain
    assert "cond[" in lockstep


def test_bad_learner_arguments_name_the_argument():
    with pytest.raises(ValueError, match="epsilon"):
        epsilon_greedy(1.5)
    with pytest.raises(ValueError, match="ridge"):
        epsilon_greedy(0.1, ridge=0.0)
    with pytest.raises(ValueError, match="mean"):
        epsilon_greedy(0.1, mean="median")
    with pytest.raises(ValueError, match="batch_size"):
        delayed(uniform_random(), 0)
    learner = epsilon_greedy(0.1)
    state = learner.init(KEY, SPEC)
    with pytest.raises(ValueError, match="context"):
        learner.update(state, KEY, jnp.zeros(4), jnp.int32(0), jnp.float32(1.0))
    with pytest.raises(ValueError, match="contexts"):
        learner.act(state, KEY, jnp.zeros((4, 5)))
    with pytest.raises(ValueError, match="horizon"):
        BanditSpec.from_env(SPEC, 0)
