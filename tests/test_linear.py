import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.linear import (
    EnsemblePPState,
    ensemble_pp_posterior,
    ensemble_pp_recompute,
    exact_posterior,
    gaussian_update,
)


def posterior64(xs, ys, mu0, cov0, noise_std):
    """Closed-form posterior in float64 NumPy (the reference every test compares against)."""
    xs, ys = np.asarray(xs, np.float64), np.asarray(ys, np.float64)
    prec0 = np.linalg.inv(np.asarray(cov0, np.float64))
    cov = np.linalg.inv(prec0 + xs.T @ xs / noise_std**2)
    return cov @ (prec0 @ np.asarray(mu0, np.float64) + xs.T @ ys / noise_std**2), cov


def run_sequential(model, state, key, xs, ys):
    """``model.update`` over the rows with keys ``jax.random.split(key, n)`` (as update_batch)."""

    def step(s, inp):
        k, x, y = inp
        return model.update(s, k, x, y), None

    return jax.lax.scan(step, state, (jax.random.split(key, xs.shape[0]), xs, ys))[0]


def linear_data(key, n, d, noise_std):
    kx, kt, ke = jax.random.split(key, 3)
    xs = jax.random.normal(kx, (n, d), jnp.float32)
    theta = jax.random.normal(kt, (d,), jnp.float32)
    return xs, xs @ theta + noise_std * jax.random.normal(ke, (n,), jnp.float32)


def rel_fro(a, b):
    return np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b)


@pytest.mark.parametrize("full_prior", [False, True])
def test_mean_and_cov_match_float64_closed_form(full_prior):
    d, n, noise_std = 10, 500, 0.5
    xs, ys = linear_data(jax.random.key(0), n, d, noise_std)
    mu0 = jnp.linspace(-1.0, 1.0, d)
    cov0 = 2.0 * np.eye(d)
    if full_prior:
        g = np.random.default_rng(0).normal(size=(d, d))
        cov0 = g @ g.T / d + 0.5 * np.eye(d)
    prior = {"prior_cov": jnp.asarray(cov0, jnp.float32)} if full_prior else {"prior_var": 2.0}
    mu_ref, cov_ref = posterior64(xs, ys, mu0, cov0, noise_std)
    for model in (ensemble_pp_posterior(d, 4, noise_std=noise_std, prior_mean=mu0, **prior),
                  exact_posterior(d, noise_std=noise_std, prior_mean=mu0, **prior)):
        state = jax.jit(lambda s, k, m=model: run_sequential(m, s, k, xs, ys))(
            model.init(jax.random.key(1)), jax.random.key(2))
        # float32 over 500 steps: measured relative errors 5e-7 (mu) and 4e-7 (Sigma);
        # 1e-4 leaves a wide margin while a wrong gain or noise scale gives errors > 1e-2.
        assert rel_fro(state.mu, mu_ref) < 1e-4
        assert rel_fro(state.sigma, cov_ref) < 1e-4
    assert rel_fro(state.sqrt_cov @ state.sqrt_cov.T, cov_ref) < 1e-4
    mu, sigma = jnp.asarray(mu0), jnp.asarray(cov0, jnp.float32)
    for x, y in zip(xs[:20], ys[:20], strict=True):
        mu, sigma = gaussian_update(mu, sigma, x, y, noise_std=noise_std)
    mu_ref20, cov_ref20 = posterior64(xs[:20], ys[:20], mu0, cov0, noise_std)
    assert rel_fro(mu, mu_ref20) < 1e-4 and rel_fro(sigma, cov_ref20) < 1e-4


@pytest.mark.parametrize("index", ["gaussian", "sphere"])
def test_factor_tracks_posterior_covariance_over_seeds(index):
    d, m, n, seeds, noise_std = 6, 8, 30, 2000, 0.5
    xs, ys = linear_data(jax.random.key(3), n, d, noise_std)  # FIXED x sequence for all seeds
    model = ensemble_pp_posterior(d, m, noise_std=noise_std, index=index)
    _, cov_ref = posterior64(xs, ys, np.zeros(d), np.eye(d), noise_std)

    @jax.jit
    @jax.vmap
    def one_seed(key):
        k_init, k_upd, k_smp = jax.random.split(key, 3)
        state = run_sequential(model, model.init(k_init), k_upd, xs, ys)
        return state.factor @ state.factor.T, model.sample(state, k_smp, (8,)) - state.mu

    aat, dev = one_seed(jax.random.split(jax.random.key(4), seeds))
    # Monte-Carlo error of the 2000-seed mean with M = 8: measured 1-2% (relative Frobenius,
    # two seed sets; the spec measured 7-8% at M = 1); 10% is the acceptance bound. A missing
    # sigma in the perturbation or a missing 1/sqrt(c) index rescaling (sphere: off by M = 8x)
    # fails by far.
    assert rel_fro(aat.mean(0), cov_ref) < 0.10
    dev = np.asarray(dev, np.float64).reshape(-1, d)
    assert rel_fro(dev.T @ dev / len(dev), cov_ref) < 0.10


def test_batched_update_equals_sequential_and_recompute():
    d, m, b, noise_std = 8, 4, 6, 0.3
    xs, ys = linear_data(jax.random.key(5), b, d, noise_std)
    key_init, key_upd = jax.random.key(6), jax.random.key(7)
    fast = ensemble_pp_posterior(d, m, noise_std=noise_std, prior_var=1.5)
    ref = ensemble_pp_recompute(d, m, noise_std=noise_std, prior_var=1.5)
    s0, r0 = fast.init(key_init), ref.init(key_init)
    np.testing.assert_allclose(s0.factor, r0.factor)
    np.testing.assert_allclose(r0.sigma @ r0.p, r0.factor, atol=1e-6)
    seq = jax.jit(run_sequential, static_argnums=0)(fast, s0, key_upd, xs, ys)
    states = {"batch": jax.jit(fast.update_batch)(s0, key_upd, xs, ys),
              "recompute_seq": jax.jit(run_sequential, static_argnums=0)(ref, r0, key_upd, xs, ys),
              "recompute_batch": jax.jit(ref.update_batch)(r0, key_upd, xs, ys)}
    scale = {f: np.abs(np.asarray(getattr(seq, f))).max() for f in EnsemblePPState._fields}
    for name, st in states.items():
        for field in EnsemblePPState._fields:
            # float32 rounding only: measured <= 7e-7 of the entries' largest magnitude
            np.testing.assert_allclose(getattr(st, field), getattr(seq, field), rtol=0,
                                       atol=1e-5 * scale[field], err_msg=f"{name}.{field}")
    mu_ref, cov_ref = posterior64(xs, ys, np.zeros(d), 1.5 * np.eye(d), noise_std)
    assert rel_fro(seq.mu, mu_ref) < 1e-4 and rel_fro(seq.sigma, cov_ref) < 1e-4
    assert not np.allclose(seq.factor, s0.factor, atol=1e-3)


@pytest.mark.parametrize("factory", ["ensemble_pp", "exact_posterior"])
def test_batch_mask_and_empty(factory):
    d, b, noise_std = 5, 4, 0.4
    model = (ensemble_pp_posterior(d, 3, noise_std=noise_std) if factory == "ensemble_pp"
             else exact_posterior(d, noise_std=noise_std))
    model = model._replace(update=jax.jit(model.update), update_batch=jax.jit(model.update_batch))
    xs, ys = linear_data(jax.random.key(8), b, d, noise_std)
    ys = ys.at[1].set(jnp.nan)  # padding garbage under the mask must not leak
    mask = jnp.array([True, False, True, False])
    s0, key = model.init(jax.random.key(9)), jax.random.key(10)
    got = model.update_batch(s0, key, xs, ys, mask)
    keys = jax.random.split(key, b)
    want = model.update(model.update(s0, keys[0], xs[0], ys[0]), keys[2], xs[2], ys[2])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
    for g, w in zip(model.update_batch(s0, key, xs, ys, jnp.zeros(b, bool)), s0, strict=True):
        np.testing.assert_array_equal(g, w)
    for g, w in zip(model.update_batch(s0, key, xs[:0], ys[:0]), s0, strict=True):
        np.testing.assert_array_equal(g, w)
    if factory == "exact_posterior":
        seq = run_sequential(model, s0, key, xs[::2], ys[::2])
        for g, w in zip(model.update_batch(s0, key, xs[::2], ys[::2]), seq, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)


def test_float32_stability_small_noise():
    d, n, noise_std = 50, 100_000, 0.01
    kx, ke = jax.random.split(jax.random.key(11))
    xs = jax.random.normal(kx, (n, d), jnp.float32)
    ys = xs @ jnp.ones(d) + noise_std * jax.random.normal(ke, (n,))
    for model in (ensemble_pp_posterior(d, 4, noise_std=noise_std),
                  exact_posterior(d, noise_std=noise_std)):
        state = jax.jit(lambda s, k, m=model: run_sequential(m, s, k, xs, ys))(
            model.init(jax.random.key(12)), jax.random.key(13))
        sigma = np.asarray(state.sigma)
        np.testing.assert_array_equal(sigma, sigma.T)
        assert np.isfinite(np.asarray(jnp.linalg.cholesky(state.sigma))).all()
        _, cov_ref = posterior64(xs, ys, np.zeros(d), np.eye(d), noise_std)
        # eigenvalues ~1e-9; float32 rounding over 1e5 steps: measured relative error 3e-5
        assert rel_fro(sigma, cov_ref) < 1e-3
        assert np.linalg.eigvalsh(sigma.astype(np.float64)).min() > 0
        assert np.isfinite(np.asarray(state.mu)).all()


def test_exact_sampler_covariance_and_shapes():
    d, noise_std, n = 5, 0.5, 100_000
    xs, ys = linear_data(jax.random.key(14), 12, d, noise_std)
    model = exact_posterior(d, noise_std=noise_std, prior_var=3.0)
    state = model.update_batch(model.init(jax.random.key(0)), jax.random.key(15), xs, ys)
    mu_ref, cov_ref = posterior64(xs, ys, np.zeros(d), 3.0 * np.eye(d), noise_std)
    draws = np.asarray(model.sample(state, jax.random.key(16), (n,)), np.float64)
    assert draws.shape == (n, d)
    # sample covariance of 1e5 Gaussian draws: relative Frobenius error ~ sqrt(d / n) ~ 1%
    mean_tol = 5 * np.sqrt(cov_ref.diagonal().max() / n)  # 5 standard errors
    np.testing.assert_allclose(draws.mean(0), mu_ref, atol=mean_tol)
    assert rel_fro(np.cov(draws.T), cov_ref) < 0.05
    assert model.sample(state, jax.random.key(0), (2, 3)).shape == (2, 3, d)
    fast = ensemble_pp_posterior(d, 4, noise_std=noise_std)
    st = fast.init(jax.random.key(0))
    assert fast.sample(st, jax.random.key(1)).shape == (d,)
    vm = jax.vmap(fast.sample, in_axes=(None, 0))(st, jax.random.split(jax.random.key(1), 7))
    assert vm.shape == (7, d)


def test_bad_input_names_argument():
    model = ensemble_pp_posterior(4, 2, noise_std=1.0)
    st = model.init(jax.random.key(0))
    k = jax.random.key(1)
    with pytest.raises(ValueError, match=r"x: expected shape \(d,\) = \(4,\)"):
        model.update(st, k, jnp.ones(3), 1.0)
    with pytest.raises(TypeError, match="x: expected a floating"):
        model.update(st, k, jnp.ones(4, jnp.int32), 1.0)
    with pytest.raises(ValueError, match="y: expected shape"):
        model.update(st, k, jnp.ones(4), jnp.ones(2))
    with pytest.raises(ValueError, match="X: expected shape"):
        model.update_batch(st, k, jnp.ones((3, 5)), jnp.ones(3))
    with pytest.raises(ValueError, match="Y: expected shape"):
        model.update_batch(st, k, jnp.ones((3, 4)), jnp.ones(2))
    with pytest.raises(TypeError, match="mask"):
        model.update_batch(st, k, jnp.ones((3, 4)), jnp.ones(3), jnp.ones(3))
    for m in (0, -1):
        with pytest.raises(ValueError, match="index_dim"):
            ensemble_pp_posterior(4, m, noise_std=1.0)
    with pytest.raises(ValueError, match="dim"):
        exact_posterior(0, noise_std=1.0)
    with pytest.raises(ValueError, match="noise_std"):
        ensemble_pp_posterior(4, 2, noise_std=0.0)
    with pytest.raises(ValueError, match="index"):
        ensemble_pp_posterior(4, 2, noise_std=1.0, index="normal")
    with pytest.raises(ValueError, match="prior_var"):
        exact_posterior(4, noise_std=1.0, prior_var=-1.0)
    with pytest.raises(ValueError, match="prior_mean"):
        exact_posterior(4, noise_std=1.0, prior_mean=jnp.zeros(3))
    with pytest.raises(ValueError, match="prior_cov: expected a positive-definite"):
        exact_posterior(2, noise_std=1.0, prior_cov=jnp.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="prior_cov: expected shape"):
        exact_posterior(2, noise_std=1.0, prior_cov=jnp.eye(3))
