"""hyperx.lockstep.lockstep_cond: lax.cond's values, a branch under vmap, closures allowed."""

import jax
import jax.numpy as jnp
import numpy as np

from hyperx.bandits.neural import neural_learner
from hyperx.bandits.neural_core import NeuralConfig
from hyperx.bandits.runner import run_bandit
from hyperx.envs.bandits import make_bandit_env
from hyperx.lockstep import lockstep_cond


def _scheduled(t, scale, shift):
    # Both branches close over vmapped values (an int and a float), as a grid point's
    # hyper-parameters do inside a learner.
    return lockstep_cond(t % 3 == 0, lambda x: x * scale + shift, lambda x: x - shift,
                         t.astype(jnp.float32))


def test_branches_closing_over_vmapped_values_equal_lax_cond_per_member():
    ts, scales, shifts = jnp.array([0, 1, 3]), jnp.array([2, 3, 4]), jnp.array([0.5, 1.0, 2.0])
    expected = [float(jax.lax.cond(t % 3 == 0, lambda x, s=s, k=k: x * s + k,
                                   lambda x, k=k: x - k, jnp.float32(t)))
                for t, s, k in zip(ts, scales, shifts, strict=True)]
    assert expected == [0.5, 0.0, 14.0]
    np.testing.assert_array_equal(jax.jit(jax.vmap(_scheduled))(ts, scales, shifts), expected)
    nested = jax.jit(jax.vmap(jax.vmap(_scheduled)))(
        jnp.stack([ts, 3 * ts]), jnp.stack([scales] * 2), jnp.stack([shifts] * 2))
    np.testing.assert_array_equal(nested, [expected, [0.5, 10.0, 38.0]])
    assert "cond[" in str(jax.make_jaxpr(jax.vmap(_scheduled))(ts, scales, shifts))


def test_members_all_due_or_none_due_take_one_branch_without_a_select():
    """In lockstep (all members due, or none) the result is true_fn's (false_fn's) alone; the
    per-member select runs only on the mixed branch, which still gives each its own."""
    f = jax.jit(jax.vmap(_scheduled))
    scales, shifts = jnp.array([2, 3]), jnp.array([0.5, 1.0])
    np.testing.assert_array_equal(f(jnp.array([3, 6]), scales, shifts), [6.5, 19.0])  # all due
    np.testing.assert_array_equal(f(jnp.array([1, 2]), scales, shifts), [0.5, 1.0])  # none
    np.testing.assert_array_equal(f(jnp.array([3, 2]), scales, shifts), [6.5, 1.0])  # mixed
    jaxpr = jax.make_jaxpr(jax.vmap(_scheduled))(jnp.array([3, 6]), scales, shifts)
    text = str(jaxpr)
    assert "reduce_or" in text and "reduce_and" in text  # any(pred), then all(pred)
    conds = [e for e in _eqns(jaxpr.jaxpr) if e.primitive.name == "cond"]
    # the all(pred) cond: its false branch selects per member, its true branch does not
    assert any(["select_n" in str(b) for b in e.params["branches"]] == [True, False]
               for e in conds)


def _eqns(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs nested in its equations' parameters."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _eqns(inner)


def test_a_neural_learner_runs_over_a_grid_of_prior_scales():
    """A grid point's prior scale is a vmapped value the training branch closes over."""
    env = make_bandit_env("quadratic", dim=4, num_arms=5, num_candidates=20, scale=1.0)
    config = NeuralConfig(hidden=(8,), batch_size=8, learning_starts=8, update_every=2)
    result = run_bandit(env, lambda prior_scale: neural_learner(
        "neural_ensemble_pp", "quadratic", config=config, prior_scale=prior_scale),
        horizon=30, num_seeds=2, grid={"prior_scale": [0.1, 1.0]})
    assert result.regret.shape[:2] == (2, 2)
    assert np.isfinite(result.regret).all()
    alone = run_bandit(env, neural_learner("neural_ensemble_pp", "quadratic", config=config,
                                           prior_scale=1.0), horizon=30, num_seeds=2)
    np.testing.assert_allclose(result.regret[1], alone.regret, rtol=0, atol=1e-4)
