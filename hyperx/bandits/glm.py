"""A GLM bandit learner: Laplace-approximation Thompson sampling for logistic rewards.

Model: r ~ Bernoulli(sigmoid(x^T theta)), prior theta ~ N(0, prior_var I) (default 10, matching
``hyperx.envs.bandits.logistic``). The posterior is approximated by a Gaussian N(m, Sigma)
updated online by one Newton (IRLS) step per observation from the current mean — the
extended-Kalman / online Laplace update. With p = sigmoid(x^T m) and the Fisher weight
h = p (1 - p),

    Sigma' = (Sigma^{-1} + h x x^T)^{-1} = Sigma - h Sigma x x^T Sigma / (1 + h x^T Sigma x),
    m'     = m + Sigma' x (r - p)                  (one Newton step on the log posterior).

Only a square root S (Sigma = S S^T) is kept, updated like Potter's square-root filter:
f = S^T x, s = f^T f, S' = S - c (S f) f^T with c = h / (1 + h s + sqrt(1 + h s)), which gives
S' S'^T = Sigma' exactly and stays well defined as h -> 0 (saturated p). Cost O(d^2) per update.
Acting samples theta~ = m + S z, z ~ N(0, I) (O(d^2)) and plays argmax_k x_k^T theta~ (the
sigmoid is increasing), ties at random. This is the Laplace-approximation Thompson sampling of
O. Chapelle and L. Li, *An Empirical Evaluation of Thompson Sampling* (NeurIPS 2011, Alg. 3,
there with a diagonal Laplace approximation; here the full covariance).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from hyperx._validation import check_positive, check_shape
from hyperx.bandits.base import (
    BanditSpec,
    Learner,
    argmax_random_tiebreak,
    check_contexts,
    check_feedback,
    sequential_update_batch,
)

Array = jax.Array
BERNOULLI_SUPPORT = (0.0, 1.0)
"""The rewards a logistic model explains: r in [0, 1] (a Bernoulli reward, or its mean)."""


class LaplaceState(NamedTuple):
    """mean (d,): the Laplace mean m; sqrt_cov (d, d): S with Sigma = S S^T."""

    mean: Array
    sqrt_cov: Array


def laplace_step(state: LaplaceState, x: Array, reward: Array) -> LaplaceState:
    """One online Newton / Laplace update of the logistic posterior (module docstring)."""
    p = jax.nn.sigmoid(x @ state.mean)
    h = p * (1.0 - p)
    f = x @ state.sqrt_cov
    sf = state.sqrt_cov @ f
    q = 1.0 + h * (f @ f)
    sqrt_cov = state.sqrt_cov - (h / (q + jnp.sqrt(q))) * jnp.outer(sf, f)
    return LaplaceState(state.mean + sf * ((reward - p) / q), sqrt_cov)


def logistic_ts(*, prior_var: float = 10.0) -> Learner:
    """Thompson sampling for logistic (Bernoulli) rewards with the online Laplace posterior.

    ``update`` is one Newton step (O(d^2)); ``update_batch`` is B sequential steps, since the
    Newton steps of a GLM do not combine into one exact block update. ``m' = m + Sigma' x (r-p)``
    uses Sigma' x = Sigma x / (1 + h x^T Sigma x). A reward outside [0, 1], the support of
    the model's Bernoulli rewards, given from the host raises ``ValueError`` naming it.

    Args:
      prior_var: prior variance of each coordinate of theta.
    """
    check_positive("prior_var", prior_var)

    def init(key: Array, spec: BanditSpec) -> LaplaceState:
        del key
        dim = spec.context_dim
        return LaplaceState(jnp.zeros(dim, jnp.float32),
                            math.sqrt(prior_var) * jnp.eye(dim, dtype=jnp.float32))

    def act(state: LaplaceState, key: Array, contexts: Array) -> Array:
        check_contexts(contexts, state.mean.shape[0])
        k_sample, k_tie = jax.random.split(key)
        z = jax.random.normal(k_sample, state.mean.shape, jnp.float32)
        theta = state.mean + state.sqrt_cov @ z
        return argmax_random_tiebreak(k_tie, contexts @ theta)

    def update(state: LaplaceState, key: Array, context: Array, arm: Array,
               reward: Array) -> LaplaceState:
        del key
        check_shape("context", context, state.mean.shape, "(d,)")
        check_feedback(context, arm, reward, reward_range=BERNOULLI_SUPPORT)
        return laplace_step(state, jnp.asarray(context, jnp.float32),
                            jnp.asarray(reward, jnp.float32))

    sequential = sequential_update_batch(Learner(init, act, update))

    def update_batch(state: LaplaceState, key: Array, contexts: Array, arms: Array,
                     rewards: Array) -> LaplaceState:
        check_shape("contexts", contexts, (None, state.mean.shape[0]), "(B, d)")
        check_feedback(contexts, arms, rewards, reward_range=BERNOULLI_SUPPORT, batch=True)
        return sequential(state, key, contexts, arms, rewards)

    return Learner(init, act, update, update_batch)
