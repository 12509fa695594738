"""Closed-form linear bandit learners: exact Thompson sampling, LinUCB, linear Ensemble++.

All three keep the exact Gaussian posterior of the linear model r = x^T theta + N(0, sigma^2),
theta ~ N(0, prior_var I) (defaults matched to the Russo & Van Roy game: prior_var = 10,
sigma = 1), updated by the Kalman / Sherman-Morrison step of :mod:`hyperx.linear`
(O(d^2) per observation); ``update_batch`` is the batched update of :mod:`hyperx.linear`
(one Woodbury block step for LinUCB and Ensemble++, a scan of B square-root steps for exact TS),
which ``hyperx.bandits.base.delayed(learner, B)`` uses for batched / delayed feedback.
They differ in how an arm is chosen from the K arm features X (K, d):

- :func:`exact_ts`: Thompson sampling, theta~ ~ N(mu_t, Sigma_t) through the maintained square
  root S (Sigma = S S^T, Potter's update), arm = argmax X theta~. Cost per round O(d^2) to
  sample plus O(Kd) to score (a Cholesky or eigendecomposition per round would be O(d^3); the
  reference code's SVD per round is why its exact TS is 5x slower than its Ensemble++).
- :func:`linucb`: arm = argmax x_k^T mu + width_k, width_k = alpha sqrt(x_k^T Sigma x_k)
  (Li et al., WWW 2010) or the self-normalised radius of Abbasi-Yadkori et al. (NeurIPS 2011),
  see :func:`linucb`.
- :func:`ensemble_pp`: linear Ensemble++ (Li et al., arXiv:2407.13195),
  theta~ = mu_t + A_t zeta with zeta from any index family of :mod:`hyperx.index` rescaled to
  E[zeta zeta^T] = I; cost per round O(dM + Kd), update O(d^2 + dM).

Every argmax breaks ties at random (:func:`hyperx.bandits.base.argmax_random_tiebreak`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hyperx import linear
from hyperx._validation import (
    check_choice,
    check_flag,
    check_int,
    check_positive,
    check_shape,
)
from hyperx.bandits.base import (
    BanditSpec,
    Learner,
    argmax_random_tiebreak,
    check_contexts,
    check_feedback,
)
from hyperx.index import INDEX_NAMES

Array = jax.Array

PRIOR_VAR = 10.0
NOISE_STD = 1.0


class PosteriorLearnerState(NamedTuple):
    """State of :func:`exact_ts` and :func:`ensemble_pp`.

    Attributes:
      posterior: the model's state (:class:`hyperx.linear.ExactPosteriorState` or
        :class:`hyperx.linear.EnsemblePPState`).
      arms: an empty (K, 0) array: its static shape carries the number of arms K, so that
        ``update`` can check the arm index at no cost.
    """

    posterior: Any
    arms: Array


def _posterior_learner(make_model, *, noise_std: float, prior_var: float,
                       checked: bool) -> Learner:
    """A sampling learner over the :class:`hyperx.linear.LinearModel` ``make_model(d)``.

    Each function builds the model from d (the spec's, or the state's shape): building it is
    host work on NumPy constants, done once per trace under ``jit``, so nothing is cached.

    An arm index outside [0, K) given from the host raises ``ValueError`` naming ``arm``
    (``arms`` in ``update_batch``); inside ``jit`` it is checked only with ``checked=True``
    (run under :func:`hyperx.checked`), like the model's NaN / inf checks.
    """
    check_positive("noise_std", noise_std)
    check_positive("prior_var", prior_var)
    check_flag("checked", checked)

    def init(key: Array, spec: BanditSpec) -> PosteriorLearnerState:
        check_int("spec.num_arms", spec.num_arms)
        return PosteriorLearnerState(make_model(spec.context_dim).init(key),
                                     jnp.zeros((spec.num_arms, 0), jnp.float32))

    def act(state: PosteriorLearnerState, key: Array, contexts: Array) -> Array:
        dim = state.posterior.mu.shape[0]
        check_contexts(contexts, dim, checked=checked)
        k_sample, k_tie = jax.random.split(key)
        theta = make_model(dim).sample(state.posterior, k_sample)
        return argmax_random_tiebreak(k_tie, contexts @ theta)

    def update(state: PosteriorLearnerState, key: Array, context: Array, arm: Array,
               reward: Array) -> PosteriorLearnerState:
        check_feedback(context, arm, reward, num_arms=state.arms.shape[0], checked=checked)
        post = make_model(state.posterior.mu.shape[0]).update(state.posterior, key, context,
                                                             reward)
        return state._replace(posterior=post)

    def update_batch(state: PosteriorLearnerState, key: Array, contexts: Array, arms: Array,
                     rewards: Array) -> PosteriorLearnerState:
        check_feedback(contexts, arms, rewards, num_arms=state.arms.shape[0], batch=True,
                       checked=checked)
        post = make_model(state.posterior.mu.shape[0]).update_batch(state.posterior, key,
                                                                     contexts, rewards)
        return state._replace(posterior=post)

    return Learner(init, act, update, update_batch)


def exact_ts(*, noise_std: float = NOISE_STD, prior_var: float = PRIOR_VAR,
             checked: bool = False) -> Learner:
    """Exact linear Thompson sampling: theta~ ~ N(mu_t, Sigma_t), play argmax_k x_k^T theta~.

    The posterior is :func:`hyperx.linear.exact_posterior` (state
    :class:`hyperx.linear.ExactPosteriorState`). Per round: sampling O(d^2) (theta~ = mu + S z
    with the maintained square root S), scoring O(Kd), update O(d^2); ``update_batch`` of B
    observations O(B d^2). Russo & Van Roy's game is the default prior N(0, 10 I), sigma = 1.
    State: :class:`PosteriorLearnerState`.

    An arm index outside [0, K) or a NaN / inf context or reward given from the host raises
    ``ValueError`` naming it; inside ``jit`` they are checked only with ``checked=True`` (run
    the jitted code under :func:`hyperx.checked`).
    """
    return _posterior_learner(
        lambda dim: linear.exact_posterior(dim, noise_std=noise_std, prior_var=prior_var,
                                           checked=checked),
        noise_std=noise_std, prior_var=prior_var, checked=checked)


def ensemble_pp(index_dim: int = 16, *, index: str = "gaussian", noise_std: float = NOISE_STD,
                prior_var: float = PRIOR_VAR, checked: bool = False) -> Learner:
    """Linear Ensemble++ (Li et al., *Scalable Exploration via Ensemble++*, arXiv:2407.13195).

    Keeps mu_t, Sigma_t and a factor A_t (d, M) with E[A_t A_t^T] = Sigma_t
    (:func:`hyperx.linear.ensemble_pp_posterior`); each decision samples theta~ = mu_t + A_t zeta,
    zeta = xi / sqrt(c) for xi from the index family ``index`` (E[xi xi^T] = c I), and plays
    argmax_k x_k^T theta~. Per round: sampling O(dM), scoring O(Kd), update O(d^2 + dM).
    Regret matches exact Thompson sampling once M = Theta(d log T) (ibid.).

    Args:
      index_dim: M >= 1, the width of the factor A.
      index: an index family of :data:`hyperx.index.INDEX_NAMES`.
      noise_std, prior_var: the model's sigma and prior variance.
      checked: also check traced arm indices, contexts and rewards inside ``jit`` (run the
        jitted code under :func:`hyperx.checked`); host values are always checked.

    State: :class:`PosteriorLearnerState`.
    """
    check_int("index_dim", index_dim)
    check_choice("index", index, INDEX_NAMES)
    return _posterior_learner(
        lambda dim: linear.ensemble_pp_posterior(dim, index_dim, noise_std=noise_std,
                                                 prior_var=prior_var, index=index,
                                                 checked=checked),
        noise_std=noise_std, prior_var=prior_var, checked=checked)


class LinUCBState(NamedTuple):
    """LinUCB state.

    Attributes:
      mu: (d,) posterior mean (the ridge estimate with lambda = sigma^2 / prior_var).
      sigma: (d, d) posterior covariance, sigma^2 V_t^{-1} with V_t = lambda I + sum x x^T.
      log_det_ratio: log det V_t - log det(lambda I) = sum_s log(1 + x_s^T Sigma x_s / sigma^2).
      arm_cov: (K, d) X Sigma_t for fixed arms X, or (0, d) when widths are computed directly.
      widths: (K,) x_k^T Sigma_t x_k for fixed arms, or (0,).
    """

    mu: Array
    sigma: Array
    log_det_ratio: Array
    arm_cov: Array
    widths: Array


def linucb(alpha: float | None = None, *, confidence: str = "fixed", delta: float = 0.05,
           theta_norm: float | None = None, noise_std: float = NOISE_STD,
           prior_var: float = PRIOR_VAR, checked: bool = False) -> Learner:
    """LinUCB: play argmax_k x_k^T mu_t + beta_t sqrt(x_k^T Sigma_t x_k).

    ``confidence="fixed"``: beta_t = alpha (Li et al., *A Contextual-Bandit Approach to
    Personalized News Article Recommendation*, WWW 2010); the default alpha is their
    1 + sqrt(log(2/delta)/2) (2.36 at delta = 0.05; alpha = 1 under-explores on the Russo game:
    mean regret 1164 against 135 at alpha = 3, d = 20, K = 100, T = 1000, 200 seeds).
    ``confidence="abbasi_yadkori"``: the self-normalised radius of Abbasi-Yadkori et al.
    (*Improved Algorithms for Linear Stochastic Bandits*, NeurIPS 2011, Thm. 2). With
    V_t = lambda I + sum x x^T, lambda = sigma^2 / prior_var and
    ||x||_{V^{-1}} = sqrt(x^T Sigma x) / sigma, the bonus is alpha times

        (sigma sqrt(2 log(1/delta) + log(det V_t / det(lambda I))) + sqrt(lambda) S)
        * sqrt(x^T Sigma x) / sigma,

    S = ``theta_norm`` (default sqrt(prior_var d), the prior's typical ||theta*||); the log
    determinant is accumulated in O(1) per update from the Kalman denominator.

    Widths: with fixed arms (``BanditSpec.arms``, filled in by the runner) the K widths
    w_k = x_k^T Sigma x_k and C = X Sigma are kept incrementally in O(Kd) per update: for the
    played arm x = x_j, v = Sigma x = C_j^T, a = sigma^2 + x^T v,
    w_k <- w_k - (C x)_k^2 / a and C <- C - (C x) v^T / a (never O(K d^2)). Otherwise (fresh
    arms each round, or no ``arms`` in the spec) they are computed directly, O(K d^2) per round.
    ``update_batch`` is the Woodbury block update (G = X_B Sigma X_B^T + sigma^2 I = L L^T,
    Z = L^{-1} X_B Sigma X^T: C <- C - Z^T L^{-1} X_B Sigma, w <- w - sum_b Z_b^2; O(KdB)).

    With fixed arms, an arm index outside [0, K) given from the host raises ``ValueError``
    naming ``arm``, as does a NaN / inf context or reward; inside ``jit`` they are checked only
    with ``checked=True`` (run the jitted code under :func:`hyperx.checked`).
    """
    check_choice("confidence", confidence, ("fixed", "abbasi_yadkori"))
    check_positive("noise_std", noise_std)
    check_positive("prior_var", prior_var)
    check_flag("checked", checked)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta: expected a probability in (0, 1), got {delta}")
    if alpha is None:
        alpha = 1.0 + math.sqrt(math.log(2.0 / delta) / 2.0) if confidence == "fixed" else 1.0
    check_positive("alpha", alpha, allow_zero=True)
    if theta_norm is not None:
        check_positive("theta_norm", theta_norm)
    noise_var = noise_std**2

    def init(key: Array, spec: BanditSpec) -> LinUCBState:
        dim = spec.context_dim
        post = linear.exact_posterior(dim, noise_std=noise_std, prior_var=prior_var).init(key)
        arms = spec.arms
        if spec.fixed_arms and arms is not None:
            check_shape("spec.arms", arms, (spec.num_arms, dim), "(K, d)")
            arms = jnp.asarray(arms, jnp.float32)
            arm_cov = arms @ post.sigma
            widths = jnp.sum(arm_cov * arms, axis=-1)
        else:
            arm_cov, widths = jnp.zeros((0, dim), jnp.float32), jnp.zeros((0,), jnp.float32)
        return LinUCBState(post.mu, post.sigma, jnp.zeros((), jnp.float32), arm_cov, widths)

    def scale(state: LinUCBState) -> Array:
        if confidence == "fixed":
            return jnp.float32(alpha)
        s = math.sqrt(prior_var * state.mu.shape[0]) if theta_norm is None else theta_norm
        beta = (jnp.sqrt(2.0 * math.log(1.0 / delta) + state.log_det_ratio)
                + math.sqrt(noise_var / prior_var) * s / noise_std)
        return alpha * beta

    def act(state: LinUCBState, key: Array, contexts: Array) -> Array:
        check_contexts(contexts, state.mu.shape[0], checked=checked)
        if state.widths.shape[0]:
            check_shape("contexts", contexts, state.arm_cov.shape, "(K, d)")
            widths = state.widths
        else:
            widths = jnp.sum((contexts @ state.sigma) * contexts, axis=-1)
        ucb = contexts @ state.mu + scale(state) * jnp.sqrt(jnp.maximum(widths, 0.0))
        return argmax_random_tiebreak(key, ucb)

    def update(state: LinUCBState, key: Array, context: Array, arm: Array,
               reward: Array) -> LinUCBState:
        del key
        check_feedback(context, arm, reward, num_arms=state.widths.shape[0] or None,
                       checked=checked)
        mu, sigma = linear.gaussian_update(state.mu, state.sigma, context, reward,
                                           noise_std=noise_std, checked=checked)
        x = jnp.asarray(context, jnp.float32)
        arm_cov, widths = state.arm_cov, state.widths
        if widths.shape[0]:
            v = arm_cov[arm]
            a = noise_var + x @ v
            cx = arm_cov @ x
            arm_cov = arm_cov - jnp.outer(cx, v / a)
            widths = widths - cx**2 / a
        else:
            a = noise_var + x @ (state.sigma @ x)
        return LinUCBState(mu, sigma, state.log_det_ratio + jnp.log(a / noise_var), arm_cov,
                           widths)

    def update_batch(state: LinUCBState, key: Array, contexts: Array, arms: Array,
                     rewards: Array) -> LinUCBState:
        del key
        check_shape("contexts", contexts, (None, state.mu.shape[0]), "(B, d)")
        check_feedback(contexts, arms, rewards, num_arms=state.widths.shape[0] or None,
                       batch=True, checked=checked)
        xs = jnp.asarray(contexts, jnp.float32)
        gain, sigma, chol, w = linear.woodbury_step(state.sigma, xs, noise_var)
        mu = state.mu + gain @ (rewards - xs @ state.mu)
        log_det = 2.0 * jnp.sum(jnp.log(jnp.diag(chol))) - xs.shape[0] * math.log(noise_var)
        arm_cov, widths = state.arm_cov, state.widths
        if widths.shape[0]:
            z = jax.scipy.linalg.solve_triangular(chol, (arm_cov @ xs.T).T, lower=True)
            arm_cov = arm_cov - z.T @ w
            widths = widths - jnp.sum(z**2, axis=0)
        return LinUCBState(mu, sigma, state.log_det_ratio + log_det, arm_cov, widths)

    return Learner(init, act, update, update_batch)


def direct_widths(sigma: Array, arms: Array) -> Array:
    """x_k^T Sigma x_k for every row of ``arms`` (K, d): the O(K d^2) reference for tests."""
    check_shape("arms", arms, (None, np.shape(sigma)[0]), "(K, d)")
    return jnp.sum((arms @ sigma) * arms, axis=-1)
