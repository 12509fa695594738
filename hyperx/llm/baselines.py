"""Advantage baselines for group-sampled LLM policy gradients: OTB, GRPO, Dr.GRPO, RLOO.

Layout. Every function here works on prompt groups laid out as ``[G, N, T]``: ``G`` prompts,
``N`` sampled responses per prompt, ``T`` response positions (left-aligned, padded with
``response_mask == 0``). A flat ``[B, T]`` batch whose groups are contiguous (the usual
"repeat each prompt N times" layout) is ``x.reshape(G, N, T)`` and the advantages go back
with ``a.reshape(B, T)``. A rejected response is one whose mask is all zero: it drops out of
every group statistic and gets advantage 0. A group with one valid response gets no baseline
(its advantage is its own return), for every estimator.

Optimal Token Baseline (OTB, arXiv:2602.07078). For a token with logits ``z`` and sampled
token ``y`` the logit-gradient proxy of the score norm is

    w = ||e_y - softmax(z)||^2 = 1 - 2 pi(y) + sum_v pi(v)^2,
    sum_v pi(v)^2 = exp(logsumexp(2 z) - 2 logsumexp(z)),

computed in float32 (float64 for float64 logits) without forming the normalised softmax. The
realized energy is
``W_t = sum_{j<=t} m_j w_j`` (``w_j`` times the squared IS weight under rollout IS), and the
per-position baseline over the ``N`` responses of a group is

    B*_t = sum_i G^i_t W^i_t m^i_t / (sum_i W^i_t m^i_t + eps),   A_t = (G_t - B*_t) m_t,

the minimiser of ``E[(G_t - b)^2 W_t]``. A group with fewer than two valid responses (``N = 1``,
or all but one rejected) gets no baseline: ``B*_t = 0``, its advantage is its return (as verl's
singleton groups). With ``zero_tail`` (default) the same holds position by position: where only
one response is alive (past the second-longest response, the "zero tail") ``B*_t = 0``.

Multi-turn OTB (``multi_turn=True``; verl's ``tir_optimal_token_baseline``): with tool responses
masked out, a response's valid tokens are not contiguous. The baseline is then taken across the
group at the same RANK ``k`` of valid token (the k-th valid token of each response) rather than at
the same position, and the zero tail is past the second-largest number of valid tokens.

All outputs are stop-gradient: advantages are targets, never differentiated through. They are
computed and returned in the inputs' floating dtype (float64 in, float64 out; bf16/fp16 and the
logits of :func:`sum_squared_probs` at least float32). Array arguments that could be swapped
without a shape error are keyword-only. Concrete inputs are checked for NaN/inf (rewards, proxy,
IS weights at valid tokens; scores of valid responses) with a one-line error naming the
argument; under ``jit`` pass ``check_finite=True`` and run under ``hyperx._validation.checked``,
otherwise one NaN score makes its group's advantages NaN.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from hyperx._validation import (
    check_finite,
    check_finite_where,
    check_flag,
    check_floating,
    check_index,
    check_integer,
    check_range,
    check_rank,
    check_shape,
    float_dtype,
)


class OTBOutput(NamedTuple):
    """Result of :func:`otb_advantages` (all ``[G, N, T]``, stop-gradient)."""

    advantages: jax.Array
    baselines: jax.Array
    returns: jax.Array
    energy: jax.Array


def sum_squared_probs(logits: jax.Array) -> jax.Array:
    """``sum_v softmax(z)_v^2 = exp(logsumexp(2z) - 2 logsumexp(z))`` over the last axis.

    Computed in float32 for bf16/fp16/float32 logits (bfloat16 intermediates are off by percent
    to over 100%, arXiv:2602.07078) and in float64 for float64 logits, from two sums over the
    vocabulary, ``sum e^u`` and ``sum e^{2u}`` with ``u = z - max z``: no normalised softmax is
    formed or returned, and it fuses into the forward pass that produces the logits.
    Shape ``[..., V] -> [...]``.
    """
    check_rank("logits", logits, tuple(range(1, 6)))
    check_floating("logits", logits)
    return _shifted_sum_sq(logits)[0]


def _shifted_sum_sq(logits: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    # With u = z - max(z) and e = exp(u): logsumexp(2z) - 2 logsumexp(z) = log(sum e^2 / (sum e)^2)
    # = log sum (e / sum e)^2. sum e >= 1 (the max term is exp(0)), so this is exact to float32
    # rounding and an offset of ~1000 never cancels (it would cost ~1e-4 otherwise). The second
    # sum is written over e / sum e: XLA fuses it into one reduction with no [.., V] temporary
    # (memory_analysis: 0 temp bytes), and on CPU it runs 5x faster than sum(e * e) / s1^2.
    z = logits.astype(float_dtype(logits))
    u = z - lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
    s1 = jnp.sum(jnp.exp(u), axis=-1, keepdims=True)
    sum_sq = jnp.sum(jnp.square(jnp.exp(u) / s1), axis=-1)
    return jnp.minimum(sum_sq, 1.0), u, jnp.log(s1[..., 0])


def logit_gradient_proxy_from_sum_sq(*, log_prob: jax.Array, sum_sq: jax.Array) -> jax.Array:
    """``w = 1 - 2 pi(y) + sum_v pi(v)^2`` from ``log pi(y)`` and a precomputed ``sum pi^2``.

    ``log_prob`` and ``sum_sq`` have the same shape (keyword-only: they are easy to swap); the
    result is clipped at 0, which the exact value never goes below (it is a squared norm).
    """
    check_floating("log_prob", log_prob)
    check_floating("sum_sq", sum_sq)
    check_shape("sum_sq", sum_sq, jnp.shape(log_prob), "log_prob.shape")
    dtype = float_dtype(log_prob, sum_sq)
    p = jnp.exp(jnp.minimum(log_prob.astype(dtype), 0.0))
    return jnp.maximum(1.0 - 2.0 * p + sum_sq.astype(dtype), 0.0)


def log_prob_and_sum_sq(logits: jax.Array, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(log pi(y), sum_v pi(v)^2)`` from one pass over logits ``[..., V]``; tokens ``[...]``.

    Both come from the same max-shifted exponentials (float32; float64 for float64 logits), so a
    training forward can return the OTB proxy's ``sum pi^2`` next to the log-probs it
    differentiates. ``log pi(y)`` carries gradients; ``sum pi^2`` is stop-gradient.
    """
    check_rank("logits", logits, tuple(range(2, 6)))
    check_floating("logits", logits)
    check_integer("tokens", tokens)
    check_shape("tokens", tokens, jnp.shape(logits)[:-1], "logits.shape[:-1]")
    check_index("tokens", tokens, jnp.shape(logits)[-1])
    check_finite("logits", logits)
    sum_sq, u, log_s1 = _shifted_sum_sq(logits)
    u_y = jnp.take_along_axis(u, tokens[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return u_y - log_s1, lax.stop_gradient(sum_sq)


def logit_gradient_proxy(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """``w = ||e_y - softmax(z)||^2`` from logits ``[..., V]`` and sampled tokens ``[...]``.

    One pass over the logits (float32; float64 for float64 logits):
    ``log pi(y) = z_y - logsumexp(z)`` and :func:`sum_squared_probs`; the ``[..., V]`` softmax
    is never formed.
    """
    log_prob, sum_sq = log_prob_and_sum_sq(lax.stop_gradient(logits), tokens)
    return logit_gradient_proxy_from_sum_sq(log_prob=log_prob, sum_sq=sum_sq)


def _check_group(name: str, x: jax.Array, mask: jax.Array) -> None:
    check_shape(name, x, jnp.shape(mask), "response_mask.shape (G, N, T)")


def _check_mask(response_mask: jax.Array) -> None:
    check_rank("response_mask", response_mask, 3)


def returns_to_go(*, token_rewards: jax.Array, response_mask: jax.Array) -> jax.Array:
    """Undiscounted reward-to-go ``G_t = sum_{j>=t} m_j r_j`` along the last axis."""
    check_shape("token_rewards", token_rewards, jnp.shape(response_mask), "response_mask.shape")
    check_floating("token_rewards", token_rewards)
    check_finite_where("token_rewards", token_rewards, jnp.asarray(response_mask) > 0)
    r = jnp.where(response_mask > 0, token_rewards.astype(float_dtype(token_rewards)), 0.0)
    return lax.cumsum(r, axis=r.ndim - 1, reverse=True)


def realized_energy(
    *, proxy: jax.Array, response_mask: jax.Array, is_weights: jax.Array | None = None
) -> jax.Array:
    """Realized energy ``W_t = sum_{j<=t} m_j w_j rho_j^2`` (``rho = 1`` without IS weights)."""
    check_shape("proxy", proxy, jnp.shape(response_mask), "response_mask.shape")
    check_floating("proxy", proxy)
    dtype = float_dtype(proxy, is_weights)
    w = proxy.astype(dtype)
    if is_weights is not None:
        check_shape("is_weights", is_weights, jnp.shape(response_mask), "response_mask.shape")
        check_floating("is_weights", is_weights)
        w = w * jnp.square(is_weights.astype(dtype))
    return jnp.cumsum(jnp.where(response_mask > 0, w, 0.0), axis=-1)


def _rank_order(valid: jax.Array) -> jax.Array:
    """Permutation of the last axis that moves the valid tokens first, in order (stable)."""
    return jnp.argsort(~valid, axis=-1, stable=True)


def _group_baseline(returns, energy, valid, zero_tail: bool, eps: float) -> jax.Array:
    """``B*_t`` ``[G, N, T]`` for position-aligned groups (see the module docstring)."""
    m = valid.astype(returns.dtype)
    num = jnp.sum(returns * energy * m, axis=1, keepdims=True)
    den = jnp.sum(energy * m, axis=1, keepdims=True) + eps
    responses = jnp.sum(jnp.any(valid, axis=-1), axis=1)[:, None, None]
    has_baseline = responses >= 2
    if zero_tail:
        has_baseline = has_baseline & (jnp.sum(m, axis=1, keepdims=True) >= 2.0)
    return jnp.broadcast_to(jnp.where(has_baseline, num / den, 0.0), m.shape)


def otb_advantages(
    *,
    token_rewards: jax.Array,
    response_mask: jax.Array,
    proxy: jax.Array,
    is_weights: jax.Array | None = None,
    zero_tail: bool = True,
    multi_turn: bool = False,
    eps: float = 1e-8,
    check_finite: bool = False,
) -> OTBOutput:
    """Optimal Token Baseline advantages (arXiv:2602.07078) for ``[G, N, T]`` groups.

    Args:
      token_rewards: ``[G, N, T]`` per-token rewards (an outcome reward sits on the last token).
      response_mask: ``[G, N, T]``; a token is valid where it is ``> 0``; an all-zero row is a
        rejected response.
      proxy: ``[G, N, T]`` per-token logit-gradient proxy ``w_j`` (:func:`logit_gradient_proxy`
        or :func:`logit_gradient_proxy_from_sum_sq`).
      is_weights: optional ``[G, N, T]`` rollout IS weights; ``w_j`` is scaled by their square.
      zero_tail: set ``B*_t = 0`` where fewer than two responses of the group are alive (past
        the second-longest response), so the lone response keeps its return as advantage
        (verl's ``handle_zero_tail``). With ``False`` the baseline there is the lone response's
        own return (advantage 0), as in verl. Either way a group with fewer than two valid
        responses gets no baseline at all.
      multi_turn: align the group by the rank of valid tokens instead of by position (verl's
        ``tir_optimal_token_baseline``, for masks with holes where tool responses are masked
        out); ``baselines`` is then 0 at masked positions.
      eps: added to the baseline's denominator.
      check_finite: check the inputs at valid tokens under ``jit`` too (``checkify``).

    Returns:
      :class:`OTBOutput` with ``advantages = (G_t - B*_t) m_t``, the baselines ``B*_t``
      broadcast to ``[G, N, T]``, the returns ``G_t`` and the energy ``W_t``.
    """
    _check_mask(response_mask)
    _check_group("token_rewards", token_rewards, response_mask)
    _check_group("proxy", proxy, response_mask)
    if is_weights is not None:
        _check_group("is_weights", is_weights, response_mask)
    check_range("eps", eps, 0.0, open_low=True)
    check_flag("zero_tail", zero_tail)
    check_flag("multi_turn", multi_turn)
    valid = lax.stop_gradient(jnp.asarray(response_mask)) > 0
    for name, x in (("token_rewards", token_rewards), ("proxy", proxy),
                    ("is_weights", is_weights)):
        if x is not None:
            check_finite_where(name, x, valid, checked=check_finite)
    returns = returns_to_go(token_rewards=lax.stop_gradient(token_rewards), response_mask=valid)
    energy = realized_energy(
        proxy=lax.stop_gradient(proxy), response_mask=valid,
        is_weights=None if is_weights is None else lax.stop_gradient(is_weights))
    dtype = float_dtype(returns, energy)
    returns, energy = returns.astype(dtype), energy.astype(dtype)
    if multi_turn:
        order = _rank_order(valid)
        take = lambda x: jnp.take_along_axis(x, order, axis=-1)  # noqa: E731
        ranked = _group_baseline(take(returns), take(energy), take(valid), zero_tail, eps)
        inverse = jnp.argsort(order, axis=-1)
        baselines = jnp.where(valid, jnp.take_along_axis(ranked, inverse, axis=-1), 0.0)
    else:
        baselines = _group_baseline(returns, energy, valid, zero_tail, eps)
    m = valid.astype(dtype)
    return OTBOutput((returns - baselines) * m, baselines, returns, energy)


def otb_advantages_from_logits(
    *,
    token_rewards: jax.Array,
    response_mask: jax.Array,
    logits: jax.Array,
    tokens: jax.Array,
    **kwargs,
) -> OTBOutput:
    """:func:`otb_advantages` with the proxy from logits ``[G, N, T, V]`` and tokens ``[G, N, T]``.

    ``kwargs`` are those of :func:`otb_advantages` (``is_weights``, ``zero_tail``,
    ``multi_turn``, ``eps``, ``check_finite``).
    """
    _check_mask(response_mask)
    check_shape("logits", logits, (*jnp.shape(response_mask), None), "(G, N, T, V)")
    proxy = logit_gradient_proxy(lax.stop_gradient(logits), tokens)
    return otb_advantages(token_rewards=token_rewards, response_mask=response_mask, proxy=proxy,
                          **kwargs)


def otb_advantages_from_sum_sq(
    *,
    token_rewards: jax.Array,
    response_mask: jax.Array,
    log_prob: jax.Array,
    sum_sq: jax.Array,
    **kwargs,
) -> OTBOutput:
    """:func:`otb_advantages` with the proxy from ``log pi(y)`` and ``sum pi^2`` (``[G, N, T]``).

    ``log_prob`` is the training policy's (pi_old) log-probability of the sampled tokens.
    """
    _check_mask(response_mask)
    _check_group("log_prob", log_prob, response_mask)
    proxy = logit_gradient_proxy_from_sum_sq(log_prob=log_prob, sum_sq=sum_sq)
    return otb_advantages(token_rewards=token_rewards, response_mask=response_mask, proxy=proxy,
                          **kwargs)


def _group_stats(scores: jax.Array, response_mask: jax.Array, check_finite: bool):
    _check_mask(response_mask)
    check_shape("scores", scores, jnp.shape(response_mask)[:2], "(G, N)")
    check_floating("scores", scores)
    valid = jnp.any(lax.stop_gradient(response_mask) > 0, axis=-1)
    check_finite_where("scores", scores, valid, checked=check_finite)
    dtype = float_dtype(scores)
    r = jnp.where(valid, lax.stop_gradient(scores).astype(dtype), 0.0)
    n = jnp.sum(valid, axis=1, keepdims=True).astype(dtype)
    mean = jnp.sum(r, axis=1, keepdims=True) / jnp.maximum(n, 1.0)
    return valid, r, n, mean


def _broadcast(adv: jax.Array, valid: jax.Array, n: jax.Array, r: jax.Array, mask: jax.Array):
    adv = jnp.where(n >= 2.0, adv, r)
    adv = jnp.where(valid, adv, 0.0)
    return adv[..., None] * (lax.stop_gradient(mask) > 0).astype(adv.dtype)


def grpo_advantages(
    scores: jax.Array, response_mask: jax.Array, *, eps: float = 1e-6,
    check_finite: bool = False,
) -> jax.Array:
    """GRPO advantages ``A_i = (r_i - mean_g r) / (std_g r + eps)`` broadcast to tokens.

    (Shao et al., DeepSeekMath, arXiv:2402.03300.) Mean and the unbiased (``N - 1``) standard
    deviation run over the valid responses of each group only. ``scores`` is ``[G, N]``,
    ``response_mask`` ``[G, N, T]``; returns ``[G, N, T]`` in the scores' floating dtype. A NaN
    score of a valid response is an error on concrete input (``check_finite`` under ``jit``);
    otherwise it makes its whole group NaN.
    """
    check_range("eps", eps, 0.0, open_low=True)
    valid, r, n, mean = _group_stats(scores, response_mask, check_finite)
    dev = jnp.where(valid, r - mean, 0.0)
    std = jnp.sqrt(jnp.sum(dev**2, axis=1, keepdims=True) / jnp.maximum(n - 1.0, 1.0))
    return _broadcast(dev / (std + eps), valid, n, r, response_mask)


def dr_grpo_advantages(scores: jax.Array, response_mask: jax.Array, *,
                       check_finite: bool = False) -> jax.Array:
    """Dr.GRPO advantages ``A_i = r_i - mean_g r`` (no std division; arXiv:2503.20783).

    Dr.GRPO also drops the per-response length normalisation of the loss: pair it with a
    ``seq-mean-token-sum-norm`` (fixed-length) aggregation in the objective.
    """
    valid, r, n, mean = _group_stats(scores, response_mask, check_finite)
    return _broadcast(r - mean, valid, n, r, response_mask)


def rloo_advantages(scores: jax.Array, response_mask: jax.Array, *,
                    check_finite: bool = False) -> jax.Array:
    """RLOO advantages ``A_i = r_i - mean_{j != i} r_j = n/(n-1) (r_i - mean_g r)``.

    (Ahmadian et al., Back to Basics, arXiv:2402.14740; Kool et al. 2019.) ``n`` counts the
    valid responses of the group.
    """
    valid, r, n, mean = _group_stats(scores, response_mask, check_finite)
    return _broadcast(n / jnp.maximum(n - 1.0, 1.0) * (r - mean), valid, n, r, response_mask)


def gradient_noise_proxy(
    *, advantages: jax.Array, energy: jax.Array, response_mask: jax.Array
) -> jax.Array:
    """Per-group gradient-noise proxy ``(1/n_g) sum_{i,t} m^i_t (A^i_t)^2 W^i_t`` -> ``[G]``.

    ``W`` is the realized energy (:func:`realized_energy`), ``n_g`` the number of valid
    responses (a group with none gives 0). OTB's baseline minimises it position by position
    (arXiv:2602.07078); feed GRPO / RLOO advantages with the same ``W`` to compare estimators.
    """
    _check_mask(response_mask)
    _check_group("advantages", advantages, response_mask)
    _check_group("energy", energy, response_mask)
    dtype = float_dtype(advantages, energy)
    valid = response_mask > 0
    total = jnp.sum(jnp.where(valid, jnp.square(advantages.astype(dtype)) * energy, 0.0),
                    axis=(1, 2))
    n = jnp.sum(jnp.any(valid, axis=-1), axis=1).astype(dtype)
    return lax.stop_gradient(total / jnp.maximum(n, 1.0))


def variance_diagnostics(
    *, advantages: jax.Array, returns: jax.Array, energy: jax.Array, response_mask: jax.Array
) -> dict[str, jax.Array]:
    """Flat dict of scalar variance diagnostics for one batch of ``[G, N, T]`` groups.

    - ``noise_proxy_mean`` / ``noise_proxy_max``: mean / max over groups of
      :func:`gradient_noise_proxy` with the given advantages;
    - ``noise_proxy_no_baseline_mean``: the same with ``A = G`` (no baseline);
    - ``noise_reduction``: ``1 - sum_g noise / sum_g noise_no_baseline`` (0 when both are 0);
    - ``energy_final_mean``: mean over valid responses of ``W`` at the last position.
    """
    noise = gradient_noise_proxy(advantages=advantages, energy=energy,
                                 response_mask=response_mask)
    noise_nb = gradient_noise_proxy(advantages=returns, energy=energy,
                                    response_mask=response_mask)
    nb_total = jnp.sum(noise_nb)
    reduction = jnp.where(
        nb_total > 0, 1.0 - jnp.sum(noise) / jnp.where(nb_total > 0, nb_total, 1.0), 0.0
    )
    valid = jnp.any(response_mask > 0, axis=-1)
    n_valid = jnp.maximum(jnp.sum(valid), 1).astype(noise.dtype)
    energy_final = jnp.sum(jnp.where(valid, energy[..., -1], 0.0)) / n_valid
    return {
        "noise_proxy_mean": jnp.mean(noise),
        "noise_proxy_max": jnp.max(noise),
        "noise_proxy_no_baseline_mean": jnp.mean(noise_nb),
        "noise_reduction": reduction,
        "energy_final_mean": energy_final,
    }
