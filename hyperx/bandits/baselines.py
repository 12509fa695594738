"""Baseline learners: uniform random play and epsilon-greedy.

Epsilon-greedy plays a uniformly random arm with probability epsilon and otherwise the arm with
the largest estimated mean (ties at random). Two mean models:

- ``ridge``: linear ridge regression r ~ x^T theta,
  theta_t = (lambda I + sum_s x_s x_s^T)^{-1} sum_s x_s r_s, kept incrementally: with
  P = (lambda I + sum x x^T)^{-1}, a new (x, r) gives the gain k = P x / (1 + x^T P x),
  theta <- theta + k (r - x^T theta), P <- P - k x^T P (Sherman-Morrison), O(d^2) per round.
  The block update for B observations X (B, d), r (B,) is the Woodbury identity
  S = I_B + X P X^T, theta <- theta + P X^T S^{-1} (r - X theta), P <- P - P X^T S^{-1} X P,
  O(B d^2 + B^3).
- ``per_arm``: one mean per arm index, mean_k = sum of k's rewards / (n_k + lambda) (ridge
  regression on one-hot features; only meaningful when arm indices keep their meaning across
  rounds, i.e. fixed arms or class-as-arm games).

The ridge model is the mean of the linear learners of Li et al. (LinUCB, WWW 2010) and
Abbasi-Yadkori et al. (NeurIPS 2011) without their confidence bonus.

Hyper-parameters ``epsilon`` and ``ridge`` may be traced scalars, so a sweep can vmap them.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from hyperx._validation import check_choice, check_positive, check_range, check_shape
from hyperx.bandits.base import (
    BanditSpec,
    Learner,
    argmax_random_tiebreak,
    check_contexts,
    check_feedback,
)

Array = jax.Array


class UniformState(NamedTuple):
    """Uniform play keeps no statistics."""


def uniform_random() -> Learner:
    """Plays every arm with probability 1/K, whatever it has seen."""

    def init(key: Array, spec: BanditSpec) -> UniformState:
        del key, spec
        return UniformState()

    def act(state: UniformState, key: Array, contexts: Array) -> Array:
        del state
        check_contexts(contexts)
        return argmax_random_tiebreak(key, jnp.zeros(contexts.shape[0], jnp.float32))

    def update(state, key, context, arm, reward) -> UniformState:
        del key
        check_feedback(context, arm, reward)
        return state

    return Learner(init, act, update)


class RidgeState(NamedTuple):
    """theta (d,): ridge estimate; precision_inv (d, d): (lambda I + sum x x^T)^{-1}."""

    theta: Array
    precision_inv: Array


class PerArmState(NamedTuple):
    """sums (K,): summed rewards per arm; counts (K,): pulls per arm."""

    sums: Array
    counts: Array


def _ridge_update(state: RidgeState, x: Array, r: Array) -> RidgeState:
    px = state.precision_inv @ x
    denom = 1.0 + x @ px
    p = state.precision_inv - jnp.outer(px, px) / denom
    return RidgeState(state.theta + px * ((r - x @ state.theta) / denom), p)


def _ridge_update_batch(state: RidgeState, xs: Array, rs: Array) -> RidgeState:
    pxt = state.precision_inv @ xs.T
    s = jnp.eye(xs.shape[0], dtype=xs.dtype) + xs @ pxt
    gain = jnp.linalg.solve(s, pxt.T).T
    p = state.precision_inv - gain @ pxt.T
    return RidgeState(state.theta + gain @ (rs - xs @ state.theta), 0.5 * (p + p.T))


def epsilon_greedy(
    epsilon: float | Array = 0.1, *, mean: str = "ridge", ridge: float | Array = 1.0,
) -> Learner:
    """Epsilon-greedy on a ridge-regression (``mean="ridge"``) or per-arm mean.

    Args:
      epsilon: exploration probability in [0, 1].
      mean: ``"ridge"`` (linear in the arm features) or ``"per_arm"``.
      ridge: lambda > 0, the ridge penalty (prior precision).
    """
    check_choice("mean", mean, ("ridge", "per_arm"))
    if isinstance(epsilon, int | float):
        check_range("epsilon", epsilon, 0.0, 1.0)
    if isinstance(ridge, int | float):
        check_positive("ridge", ridge)

    def choose(key: Array, values: Array) -> Array:
        k_explore, k_uniform, k_greedy = jax.random.split(key, 3)
        uniform = argmax_random_tiebreak(k_uniform, jnp.zeros_like(values))
        greedy = argmax_random_tiebreak(k_greedy, values)
        return jnp.where(jax.random.uniform(k_explore) < epsilon, uniform, greedy)

    if mean == "per_arm":

        def init(key: Array, spec: BanditSpec) -> PerArmState:
            del key
            return PerArmState(jnp.zeros(spec.num_arms, jnp.float32),
                               jnp.zeros(spec.num_arms, jnp.float32))

        def act(state: PerArmState, key: Array, contexts: Array) -> Array:
            check_shape("contexts", contexts, (state.sums.shape[0], None), "(K, d)")
            check_contexts(contexts)
            return choose(key, state.sums / (state.counts + ridge))

        def update(state, key, context, arm, reward) -> PerArmState:
            del key
            check_feedback(context, arm, reward, num_arms=state.sums.shape[0])
            return PerArmState(state.sums.at[arm].add(reward), state.counts.at[arm].add(1.0))

        def update_batch(state, key, contexts, arms, rewards) -> PerArmState:
            del key
            check_feedback(contexts, arms, rewards, num_arms=state.sums.shape[0], batch=True)
            return PerArmState(state.sums.at[arms].add(rewards),
                               state.counts.at[arms].add(1.0))

        return Learner(init, act, update, update_batch)

    def init(key: Array, spec: BanditSpec) -> RidgeState:
        del key
        d = spec.context_dim
        return RidgeState(jnp.zeros(d, jnp.float32), jnp.eye(d, dtype=jnp.float32) / ridge)

    def act(state: RidgeState, key: Array, contexts: Array) -> Array:
        check_contexts(contexts, state.theta.shape[0])
        return choose(key, contexts @ state.theta)

    def update(state, key, context, arm, reward) -> RidgeState:
        del key
        check_shape("context", context, state.theta.shape, "(d,)")
        check_feedback(context, arm, reward)
        return _ridge_update(state, context, reward)

    def update_batch(state, key, contexts, arms, rewards) -> RidgeState:
        del key
        check_shape("contexts", contexts, (None, state.theta.shape[0]), "(B, d)")
        check_feedback(contexts, arms, rewards, batch=True)
        return _ridge_update_batch(state, contexts, rewards)

    return Learner(init, act, update, update_batch)
