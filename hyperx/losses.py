"""Perturbed losses for index-sampled models (rlax style: pure functions on arrays).

* :func:`perturbed_regression_loss`: the neural Ensemble++ loss (Li et al., Scalable
  Exploration via Ensemble++, arXiv:2407.13195).
* :func:`double_q_targets` + :func:`perturbed_value_loss`: the perturbed n-step double-DQN loss
  shared by HyperDQN (Li et al., ICLR 2022), HyperFQI and HyperAgent (Li et al., ICML 2024,
  arXiv:2402.10228), and by the baselines DQN (no index, sigma = 0), Ensemble+ (one-hot index;
  Osband et al., NeurIPS 2018) and the epinet DQN (Osband et al., NeurIPS 2023).
* :func:`index_quantile`: optimistic index sampling (HyperFQI's OIS), for acting and targets.

Shapes: B transitions/samples, K indices per transition, M index dim, A actions, J indices
for the bootstrap target. ``mask`` (B,) weights transitions; an all-zero mask (or B = 0) gives a
data term of 0, never NaN. ``num_data`` (|D|, samples added so far) may be a traced scalar; it is
clamped to >= 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from hyperx._validation import (
    check_floating,
    check_integer,
    check_positive,
    check_rank,
    check_shape,
)

Array = jax.Array


def masked_mean(per_sample: Array, mask: Array | None) -> Array:
    """``sum_b mask_b x_b / max(sum_b mask_b, 1)`` over the leading axis (a fully masked
    batch gives 0, not NaN); ``mask=None`` is the plain mean."""
    if mask is None:
        mask = jnp.ones(per_sample.shape[:1], jnp.float32)
    mask = mask.astype(jnp.float32)
    return jnp.sum(per_sample * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def _check_mask(mask: Array | None, batch: int) -> None:
    if mask is not None:
        check_shape("mask", mask, (batch,), "(B,)")


def _perturbation(xi: Array | None, z: Array | None, sigma: float, batch: int,
                  num_indices: int) -> Array:
    """``sigma <xi_k, z>`` of shape (B, K); zero when no index / perturbation is given."""
    if (xi is None) != (z is None):
        raise ValueError("xi, z: give both (a perturbed loss) or neither (sigma = 0)")
    if xi is None:
        return jnp.zeros((batch, num_indices), jnp.float32)
    check_floating("xi", xi)
    check_floating("z", z)
    check_rank("xi", xi, (2, 3))
    check_shape("z", z, (batch, None), "(B, M)")
    m = z.shape[-1]
    if xi.ndim == 2:
        check_shape("xi", xi, (num_indices, m), "(K, M)")
        return sigma * z @ xi.T
    check_shape("xi", xi, (batch, num_indices, m), "(B, K, M)")
    return sigma * jnp.einsum("bkm,bm->bk", xi, z)


def _num_data(num_data: Any) -> Array:
    if isinstance(num_data, int | float):
        check_positive("num_data", num_data, allow_zero=True)
    return jnp.maximum(jnp.asarray(num_data, jnp.float32), 1.0)


def perturbed_regression_loss(
    predictions: Array,
    targets: Array,
    *,
    xi: Array | None = None,
    z: Array | None = None,
    sigma: float = 0.0,
    params: Any = None,
    weight_decay: float = 0.0,
    num_data: int | Array = 1,
    mask: Array | None = None,
) -> Array:
    """Perturbed least squares over K indices (Ensemble++, arXiv:2407.13195).

    ``L = mean_{i,k} (y_i + sigma <xi_k, z_i> - f(x_i, xi_k))^2 + (lambda/|D|) ||theta||^2``

    Args:
      predictions: ``f(x_i, xi_k)``, shape (B, K).
      targets: ``y_i``, shape (B,).
      xi: the indices, (K, M) shared or (B, K, M) per sample; with ``z`` (B, M), the
        perturbation drawn when sample i was stored (z ~ Unif(S^{M-1}) in the reference).
      sigma: perturbation scale (the assumed observation-noise std).
      params: trainable parameters (pytree) for the weight decay; ``None`` skips it.
      weight_decay: lambda (0.01 in the reference). The term is ``lambda/|D| ||theta||^2``; torch's
        ``Adam(weight_decay=w)`` corresponds to ``w/2 ||theta||^2``.
      num_data: |D|, samples added so far (not capped by the buffer's capacity). Passed in
        fresh every step: the reference divides its optimiser's decay by |D| in place, a bug.
      mask: optional (B,) sample weights.

    Returns:
      The scalar loss.
    """
    check_floating("predictions", predictions)
    check_rank("predictions", predictions, 2)
    batch, num_indices = predictions.shape
    check_floating("targets", targets)
    check_shape("targets", targets, (batch,), "(B,)")
    if num_indices == 0:
        raise ValueError("predictions: expected K >= 1 indices, got shape (B, 0)")
    check_positive("weight_decay", weight_decay, allow_zero=True)
    _check_mask(mask, batch)
    noise = _perturbation(xi, z, sigma, batch, num_indices)
    err = targets[:, None] + noise - predictions
    loss = masked_mean(jnp.mean(jnp.square(err), axis=1), mask)
    if params is not None and weight_decay > 0:
        loss = loss + weight_decay / _num_data(num_data) * _tree_sq_norm(params)
    return loss


def index_quantile(values: Array, quantile: float, axis: int = -2) -> Array:
    """The ``quantile`` over sampled indices (OIS: ``q = 0.8`` of Q(s, a, .) per action).

    Linear interpolation between order statistics (``jnp.quantile``'s default).
    """
    check_floating("values", values)
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile: expected a value in [0, 1], got {quantile}")
    if values.shape[axis] == 0:
        raise ValueError(f"values: expected at least one index on axis {axis}, "
                         f"got shape {values.shape}")
    return jnp.quantile(values, quantile, axis=axis)


def double_q_targets(
    returns: Array,
    discounts: Array,
    q_next_target: Array,
    q_next_online: Array | None = None,
    *,
    quantile: float | None = None,
) -> Array:
    """n-step (double-)DQN targets per bootstrap index, under stop-gradient.

    ``y(xi') = R^{(n)} + gamma_n Q_target(s', a*, xi')`` with
    ``a* = argmax_a Q_online(s', a, xi')``: the SAME index xi' picks a* and evaluates it
    (van Hasselt et al., AAAI 2016; Li et al., HyperAgent). ``q_next_online=None`` is plain
    DQN: ``a* = argmax_a Q_target(s', a, xi')``. With ``quantile`` (OIS, HyperFQI), the J
    indices are pooled: ``a* = argmax_a quantile_j Q_online(s', a, xi'_j)`` and
    ``y = R + gamma_n quantile_j Q_target(s', a*, xi'_j)``.

    Args:
      returns: ``R^{(n)} = sum_{i<k} gamma^i r_{t+i}``, (B,), stopping at episode ends.
      discounts: ``gamma_n = gamma^k (1 - done)``, (B,); 0 after a terminal.
      q_next_target: target network at s', (B, J, A), J bootstrap indices (J = K to reuse the
        loss indices, J = 1 for one fresh index per transition).
      q_next_online: online network at s' with the same indices, (B, J, A), or ``None``.
      quantile: OIS quantile (0.8 in HyperFQI) or ``None``.

    Returns:
      Targets of shape (B, J), or (B, 1) with ``quantile``.
    """
    check_floating("returns", returns)
    check_rank("returns", returns, 1)
    batch = returns.shape[0]
    check_floating("discounts", discounts)
    check_shape("discounts", discounts, (batch,), "(B,)")
    check_floating("q_next_target", q_next_target)
    check_shape("q_next_target", q_next_target, (batch, None, None), "(B, J, A)")
    if q_next_target.shape[1] == 0 or q_next_target.shape[2] == 0:
        raise ValueError(f"q_next_target: expected J >= 1 and A >= 1, got {q_next_target.shape}")
    selector = q_next_target
    if q_next_online is not None:
        check_floating("q_next_online", q_next_online)
        check_shape("q_next_online", q_next_online, q_next_target.shape, "(B, J, A)")
        selector = q_next_online
    if quantile is not None:
        selector = index_quantile(selector, quantile)[:, None, :]
        q_next_target = index_quantile(q_next_target, quantile)[:, None, :]
    best = jnp.argmax(selector, axis=-1)
    bootstrap = jnp.take_along_axis(q_next_target, best[..., None], axis=-1)[..., 0]
    return jax.lax.stop_gradient(returns[:, None] + discounts[:, None] * bootstrap)


def perturbed_value_loss(
    q: Array,
    actions: Array,
    targets: Array,
    *,
    xi: Array | None = None,
    z: Array | None = None,
    sigma: float = 0.0,
    reg_sq_norm: Array | None = None,
    beta: float = 0.0,
    num_data: int | Array | None = None,
    l2: float = 0.0,
    mask: Array | None = None,
) -> Array:
    """Perturbed value loss over K indices per transition (squared error, not Huber).

    ``L = mean_b [(1/K) sum_k (y_b(xi'_k) + sigma <xi_k, z_b> - Q(s_b, a_b, xi_k))^2]
    + (beta/|D| + l2) mean_k ||A xi_k + b||^2``

    (Li et al., HyperAgent, ICML 2024, arXiv:2402.10228; HyperFQI; with ``l2`` and no
    ``beta``, HyperDQN, ICLR 2022.)

    Args:
      q: online ``Q(s, ., xi_k)``, (B, K, A).
      actions: taken actions, integer (B,).
      targets: from :func:`double_q_targets`, (B, K) (one per index) or (B, 1) (shared).
      xi, z, sigma: the indices (K, M) or (B, K, M) and the stored perturbations (B, M); both
        ``None`` for an unperturbed loss (DQN, Ensemble+).
      reg_sq_norm: ``||A xi_k + b||^2`` (K,) or (B, K), e.g. from
        :func:`hyperx.heads.generated_sq_norm`; ``None`` skips the regulariser.
      beta: coefficient divided by ``num_data`` = |D| (transitions added so far, not capped by
        the buffer's capacity; passed in fresh every step) — HyperAgent / HyperFQI.
      l2: a plain coefficient, not divided by |D| (HyperDQN: 0.01).
      mask: optional (B,) transition weights.

    Returns:
      The scalar loss.
    """
    check_floating("q", q)
    check_rank("q", q, 3)
    batch, num_indices, _ = q.shape
    if num_indices == 0 or q.shape[2] == 0:
        raise ValueError(f"q: expected K >= 1 indices and A >= 1 actions, got {q.shape}")
    check_integer("actions", actions)
    check_shape("actions", actions, (batch,), "(B,)")
    check_floating("targets", targets)
    check_shape("targets", targets, (batch, None), "(B, K) or (B, 1)")
    if targets.shape[1] not in (1, num_indices):
        raise ValueError(f"targets: expected shape (B, K) = {(batch, num_indices)} or (B, 1), "
                         f"got {targets.shape}")
    check_positive("beta", beta, allow_zero=True)
    check_positive("l2", l2, allow_zero=True)
    _check_mask(mask, batch)
    q_taken = jnp.take_along_axis(q, actions[:, None, None], axis=-1)[..., 0]
    noise = _perturbation(xi, z, sigma, batch, num_indices)
    err = jax.lax.stop_gradient(targets) + noise - q_taken
    loss = masked_mean(jnp.mean(jnp.square(err), axis=1), mask)
    if reg_sq_norm is None:
        if beta > 0 or l2 > 0:
            raise ValueError("reg_sq_norm: required when beta > 0 or l2 > 0")
        return loss
    check_floating("reg_sq_norm", reg_sq_norm)
    if reg_sq_norm.ndim == 1:
        check_shape("reg_sq_norm", reg_sq_norm, (num_indices,), "(K,)")
    else:
        check_shape("reg_sq_norm", reg_sq_norm, (batch, num_indices), "(B, K)")
    coef = l2
    if beta > 0:
        if num_data is None:
            raise ValueError("num_data: required (|D|) when beta > 0")
        coef = coef + beta / _num_data(num_data)
    return loss + coef * jnp.sum(reg_sq_norm) / max(reg_sq_norm.size, 1)


def grad_sq_norm(fn: Callable[[Any], Array], params: Any) -> Array:
    """``||grad_theta fn(theta)||^2`` summed over every leaf of ``params``, differentiable in
    ``params`` (the caller's ``jax.grad`` then backpropagates through the inner gradient).

    The HyperAgent reference's Atari loss adds ``grad_coef * ||d/dtheta mean_{b,k}
    Q(s_b, a_b, xi_k)||^2`` (``grad_coef = 0.01``, szrlee/HyperAgent
    hyperagent/policy/hyperagent.py), a penalty on the sensitivity of the mean value to the
    parameters; ``fn`` is then the mean of the taken actions' values. Its gradient is a
    second backward pass through ``fn``, so an update costs nearly twice one without it.
    """
    return _tree_sq_norm(jax.grad(fn)(params))


def grad_sq_norm_with_output(fn: Callable[[Any], Array], reduce: Callable[[Array], Array],
                             params: Any) -> tuple[Array, Array]:
    """``(y, ||grad_theta reduce(fn(theta))||^2)`` with ``y = fn(params)``, from ONE forward
    pass of ``fn``: ``y`` and its pullback come from ``jax.vjp(fn, params)``, and the gradient
    is the pullback of ``d reduce / d y``. Equal to ``(fn(params), grad_sq_norm(lambda p:
    reduce(fn(p)), params))``, and differentiable in ``params`` the same way, without the
    second forward pass that form makes: the agent's loss reads ``y`` (the values Q) and
    penalises the gradient of their mean (:func:`grad_sq_norm`'s HyperAgent term) on the same
    pass.
    """
    out, pullback = jax.vjp(fn, params)
    return out, _tree_sq_norm(pullback(jax.grad(reduce)(out))[0])


def _tree_sq_norm(tree: Any) -> Array:
    """``sum_leaves sum_i leaf_i^2``, the squared Euclidean norm of a pytree of arrays."""
    return sum(jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(tree))
