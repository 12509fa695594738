"""Linear Ensemble++ against exact Bayesian linear regression.

One fixed stream of T observations y = x^T theta* + N(0, sigma^2) is fed to the exact
posterior and to Ensemble++ under many vmapped seeds (each seed draws its own A_0 and its own
perturbations). Ensemble++'s mean must equal the exact posterior mean, and E[A_T A_T^T] over
seeds must approach Sigma_T (Li et al., Scalable Exploration via Ensemble++, arXiv:2407.13195).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import (
    check_int,
    check_memory,
    device_memory_bytes,
    format_bytes,
    plural,
)
from hyperx.linear import ensemble_pp_posterior, exact_posterior


class LinearDemoResult(NamedTuple):
    """What the demo measured."""

    mean_rel_error: float       # max over seeds of ||mu_EPP - mu|| / ||mu||, mu in float64
    cov_rel_error: float        # ||mean_seeds A A^T - Sigma||_F / ||Sigma||_F
    sample_cov_rel_error: float  # same for the covariance of theta samples, one per seed
    seconds: float
    updates_per_second: float


def check_linear_demo_memory(dim: int, index_dim: int, steps: int, seeds: int, *,
                             name: str | None = None) -> None:
    """Raise ``ValueError`` with the estimate when :func:`run_linear_demo` cannot fit in device
    memory, before anything is allocated. Counted, float32: per seed the Ensemble++ state
    (d + d^2 + d M, twice: the scan's input and output), its update keys (2 x T uint32), the
    d x d A A^T and the sample it returns; once, the T x (d + 1) data and the exact posterior
    (3 d^2). ``name`` replaces the sizes' names in the message (a command's options)."""
    for size, value in (("dim", dim), ("index_dim", index_dim), ("steps", steps),
                        ("seeds", seeds)):
        check_int(size, value)
    per_seed = 4 * (2 * (dim + dim * dim + dim * index_dim) + 2 * steps + dim * dim + dim)
    shared = 4 * (steps * (dim + 1) + 3 * dim * dim)
    name = name or f"seeds = {seeds}, index_dim = {index_dim}, dim = {dim}, steps = {steps}"
    check_memory(f"{name} ({format_bytes(per_seed)} per seed)", seeds * per_seed + shared,
                 device_memory_bytes(), "device memory for the vmapped Ensemble++ runs")


def run_linear_demo(dim: int = 20, index_dim: int = 16, steps: int = 1000, seeds: int = 2000,
                    noise_std: float = 1.0, prior_var: float = 10.0, seed: int = 0,
                    verbose: bool = True) -> LinearDemoResult:
    """Run the comparison and print a short report; returns the measured errors. Sizes that
    cannot fit raise ``ValueError`` first (:func:`check_linear_demo_memory`)."""
    check_linear_demo_memory(dim, index_dim, steps, seeds)
    key_data, key_theta, key_noise, key_seeds = jax.random.split(jax.random.PRNGKey(seed), 4)
    theta_star = jnp.sqrt(prior_var) * jax.random.normal(key_theta, (dim,))
    xs = jax.random.uniform(key_data, (steps, dim), minval=-1 / np.sqrt(5), maxval=1 / np.sqrt(5))
    ys = xs @ theta_star + noise_std * jax.random.normal(key_noise, (steps,))

    exact = exact_posterior(dim, noise_std=noise_std, prior_var=prior_var)
    epp = ensemble_pp_posterior(dim, index_dim, noise_std=noise_std, prior_var=prior_var)

    @jax.jit
    def run_exact():
        return exact.update_batch(exact.init(key_seeds), key_seeds, xs, ys)

    @jax.jit
    def run_epp(keys):
        def one(key):
            k_init, k_upd, k_sample = jax.random.split(key, 3)
            state = epp.init(k_init)

            def body(s, inp):
                k, x, y = inp
                return epp.update(s, k, x, y), None

            state = jax.lax.scan(body, state, (jax.random.split(k_upd, steps), xs, ys))[0]
            return state.mu, state.factor @ state.factor.T, epp.sample(state, k_sample)

        return jax.vmap(one)(keys)

    post = jax.block_until_ready(run_exact())
    keys = jax.random.split(key_seeds, seeds)
    jax.block_until_ready(run_epp(keys))  # compile
    start = time.perf_counter()
    mus, covs, thetas = jax.block_until_ready(run_epp(keys))
    seconds = time.perf_counter() - start

    x64, y64 = np.asarray(xs, np.float64), np.asarray(ys, np.float64)
    precision = np.eye(dim) / prior_var + x64.T @ x64 / noise_std**2
    mu_closed = np.linalg.solve(precision, x64.T @ y64 / noise_std**2)
    mu_err = float(np.max(np.linalg.norm(np.asarray(mus, np.float64) - mu_closed, axis=1))
                   / np.linalg.norm(mu_closed))
    fro = jnp.linalg.norm(post.sigma)
    cov_err = float(jnp.linalg.norm(covs.mean(0) - post.sigma) / fro)
    centred = thetas - post.mu
    sample_err = float(jnp.linalg.norm(centred.T @ centred / seeds - post.sigma) / fro)
    result = LinearDemoResult(mu_err, cov_err, sample_err, seconds, seeds * steps / seconds)
    if verbose:
        print(f"hyperx demo: linear Ensemble++ (d={dim}, M={index_dim}) vs exact Bayesian linear "
              f"regression, T={steps} observations, {plural(seeds, 'vmapped seed')}")
        print(f"  posterior mean vs float64 closed form (max relative error over seeds): "
              f"{mu_err:.2e}")
        print(f"  mean over seeds of A A^T vs Sigma_T (relative Frobenius error): {cov_err:.3f}"
              f"  (Monte-Carlo scale ~ {np.sqrt((dim + 1) / (seeds * index_dim)):.3f})")
        print(f"  covariance of theta samples, one per seed, vs Sigma_T:            "
              f"{sample_err:.3f}  (Monte-Carlo scale ~ {np.sqrt((dim + 1) / seeds):.3f})")
        print(f"  {seeds * steps:,} Ensemble++ updates in {seconds:.2f} s "
              f"({result.updates_per_second:,.0f} updates/s)")
    return result
