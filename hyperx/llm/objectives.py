"""Policy-gradient objectives for LLM RL with rollout correction, and loss aggregation.

Per-token losses (``w_t`` a stop-gradient correction weight, ``r_t = pi_theta / pi_old``):

* REINFORCE with IS: ``l_t = -sg(w_t) A_t log pi_theta(y_t)`` (gradient ``-w_t A_t grad log pi``).
* PPO clip (Schulman et al. 2017):
  ``l_t = -sg(w_t) min(r_t A_t, clip(r_t, 1-eps_lo, 1+eps_hi) A_t)``;
  dual clip (Ye et al. 2020) caps the loss of ``A_t < 0`` tokens at ``-c A_t``.
* Decoupled PPO (three policies; the verl Rollout Correction documentation): PPO with
  ``pi_old`` the trainer's proximal policy and ``w_t`` built from ``rho_t = pi_old / mu``.
* Bypass: ``pi_old := mu``; the PPO ratio ``pi_theta / mu`` already carries the correction, so
  PPO applies only the rejection mask, never the weights (no double count). Bypass REINFORCE
  applies ``sg(w_t)`` with ``w`` built from ``pi_theta / mu``.
* Optional sequence ratio (GSPO, Zheng et al. 2025): ``r_i = exp(mean_t log(pi_theta/pi_old))``.

All log-ratios are clamped to ``[-20, 20]`` before ``exp``. The loss is reduced by
``aggregate_loss``; see its docstring for the denominator rule and micro-batch invariance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import Array

from hyperx._validation import check_choice, check_floating, check_positive, check_rank, check_shape
from hyperx.llm.corrections import CorrectionConfig, rollout_correction
from hyperx.llm.diagnostics import LOG_RATIO_CLAMP

AGGREGATIONS = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                "seq-mean-token-sum-norm")
LOSSES = ("ppo", "reinforce")


@dataclass(frozen=True)
class ObjectiveConfig:
    """Static objective settings.

    Attributes:
      loss: ``"ppo"`` (clip) or ``"reinforce"`` (IS-weighted log-likelihood).
      clip_eps: lower PPO clip ``eps_lo``; ``clip_eps_high`` the upper one (None: same).
      dual_clip: ``c > 1`` to cap negative-advantage losses at ``-c A`` (None: off).
      sequence_ratio: use the GSPO length-normalised sequence ratio in PPO.
      agg: one of ``AGGREGATIONS``.
      max_length: the fixed length of ``seq-mean-token-sum-norm`` (None: the array's ``T``).
    """

    loss: str = "ppo"
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    dual_clip: float | None = None
    sequence_ratio: bool = False
    agg: str = "token-mean"
    max_length: int | None = None

    def __post_init__(self) -> None:
        check_choice("loss", self.loss, LOSSES)
        check_choice("agg", self.agg, AGGREGATIONS)
        check_positive("clip_eps", self.clip_eps)
        if self.clip_eps_high is not None:
            check_positive("clip_eps_high", self.clip_eps_high)
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip: expected > 1, got {self.dual_clip}")
        if self.max_length is not None:
            check_positive("max_length", self.max_length)


class LossOutput(NamedTuple):
    """Scalar loss and a flat dict of scalar metrics."""

    loss: Array
    metrics: dict[str, Array]


def _kept_sequences(mask: Array) -> Array:
    return jnp.sum((jnp.sum(mask, axis=-1) > 0).astype(jnp.float32))


def loss_denominator(agg: str, mask: Array) -> Array:
    """The normaliser ``aggregate_loss`` uses for ``mask`` (after rejection): the number of kept
    tokens (``token-mean``), of responses with a kept token (``seq-mean-*``), or 1
    (``token-sum``). Compute it once on the FULL batch and pass it to every micro-batch."""
    check_choice("agg", agg, AGGREGATIONS)
    m = jnp.asarray(mask).astype(jnp.float32)
    if agg == "token-mean":
        return jnp.sum(m)
    if agg == "token-sum":
        return jnp.ones((), jnp.float32)
    return _kept_sequences(m)


def aggregate_loss(loss_mat: Array, mask: Array, agg: str, *, denominator: Array | None = None,
                   max_length: int | None = None) -> Array:
    """Reduce a per-token loss ``[B, T]`` to a scalar over the tokens with ``mask`` = 1.

    With ``m`` the mask after rejection, ``n_i = sum_t m_it``, ``S`` the responses with
    ``n_i > 0`` and ``D`` the denominator (default ``loss_denominator(agg, mask)``):

    * ``token-mean``: ``sum_it m l / D``, ``D = sum_it m`` (kept tokens);
    * ``token-sum``: ``sum_it m l`` (no denominator);
    * ``seq-mean-token-sum``: ``sum_i sum_t m l / D``, ``D = |S|``;
    * ``seq-mean-token-mean``: ``sum_i (sum_t m l / n_i) / D``, ``D = |S|``;
    * ``seq-mean-token-sum-norm``: ``sum_i sum_t m l / (L_max D)``, ``D = |S|``, ``L_max`` fixed.

    Denominator rule: rejected tokens leave every denominator (they are not counted as tokens,
    and a response whose tokens are all rejected is not counted as a response). A zero
    denominator (fully masked batch) is replaced by 1, so the loss and its gradient are 0.

    Micro-batch invariance: the sum over micro-batches of ``aggregate_loss(..., denominator=D)``
    with ``D`` computed once on the full batch equals the full-batch loss, for every mode
    (``seq-mean-token-mean`` because ``n_i`` is per response; ``token-sum`` needs no ``D``).
    Without a global ``D``, only ``token-sum`` is invariant: the mean of per-micro-batch means
    differs whenever micro-batches hold different numbers of kept tokens / responses.
    """
    check_choice("agg", agg, AGGREGATIONS)
    check_rank("loss_mat", loss_mat, 2)
    check_shape("mask", mask, loss_mat.shape, "(B, T)")
    m = jnp.asarray(mask).astype(jnp.float32)
    l = jnp.where(m > 0, loss_mat, 0.0)
    if agg == "token-sum":
        return jnp.sum(l)
    den = loss_denominator(agg, m) if denominator is None else jnp.asarray(denominator, jnp.float32)
    den = jnp.where(den > 0, den, 1.0)
    if agg == "token-mean":
        return jnp.sum(l) / den
    per_seq = jnp.sum(l, axis=-1)
    if agg == "seq-mean-token-mean":
        per_seq = per_seq / jnp.maximum(jnp.sum(m, axis=-1), 1.0)
    elif agg == "seq-mean-token-sum-norm":
        per_seq = per_seq / float(max_length or loss_mat.shape[-1])
    return jnp.sum(per_seq) / den


def _ppo_token_loss(config: ObjectiveConfig, log_ratio: Array,
                    advantages: Array) -> tuple[Array, dict[str, Array]]:
    ratio = jnp.exp(log_ratio)
    hi = config.clip_eps if config.clip_eps_high is None else config.clip_eps_high
    unclipped = -advantages * ratio
    clipped = -advantages * jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + hi)
    loss = jnp.maximum(unclipped, clipped)
    parts = {"clipped": (clipped > unclipped).astype(jnp.float32), "ratio": ratio}
    if config.dual_clip is not None:
        cap = -config.dual_clip * advantages
        dual = (advantages < 0) & (loss > cap)
        loss = jnp.where(dual, cap, loss)
        parts["dual_clipped"] = dual.astype(jnp.float32)
    return loss, parts


def policy_loss(config: ObjectiveConfig, log_prob: Array, old_log_prob: Array | None,
                advantages: Array, mask: Array, weights: Array | None = None, *,
                denominator: Array | None = None) -> LossOutput:
    """Policy-gradient loss of ``config.loss`` aggregated by ``config.agg``.

    Args:
      log_prob: ``[B, T]`` log pi_theta of the sampled tokens (differentiated).
      old_log_prob: ``[B, T]`` PPO anchor (``pi_old``; ``mu`` in bypass mode); unused by
        REINFORCE (may be None).
      advantages: ``[B, T]`` advantages (treated as constants).
      mask: ``[B, T]`` response mask after rejection (e.g. ``CorrectionOutput.mask``).
      weights: ``[B, T]`` correction weights applied as ``sg(w)`` (None: 1).
      denominator: global denominator for micro-batching (see ``aggregate_loss``).
    """
    check_rank("log_prob", log_prob, 2)
    check_floating("log_prob", log_prob)
    shape = log_prob.shape
    check_shape("advantages", advantages, shape, "(B, T)")
    check_shape("mask", mask, shape, "(B, T)")
    if weights is not None:
        check_shape("weights", weights, shape, "(B, T)")
    m = jnp.asarray(mask).astype(jnp.float32)
    keep = m > 0
    adv = jax.lax.stop_gradient(jnp.where(keep, advantages.astype(jnp.float32), 0.0))
    lp = jnp.where(keep, log_prob.astype(jnp.float32), 0.0)
    w = 1.0 if weights is None else jax.lax.stop_gradient(jnp.where(keep, weights, 0.0))
    metrics: dict[str, Array] = {}
    if config.loss == "reinforce":
        loss_mat = -adv * lp
    else:
        if old_log_prob is None:
            raise ValueError("old_log_prob: expected a [B, T] array for the PPO loss, got None")
        check_shape("old_log_prob", old_log_prob, shape, "(B, T)")
        old = jax.lax.stop_gradient(jnp.where(keep, old_log_prob.astype(jnp.float32), 0.0))
        log_ratio = lp - old
        if config.sequence_ratio:
            seq = jnp.sum(log_ratio, axis=-1) / jnp.maximum(jnp.sum(m, axis=-1), 1.0)
            log_ratio = jnp.broadcast_to(seq[:, None], shape)
        log_ratio = jnp.clip(log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        loss_mat, parts = _ppo_token_loss(config, log_ratio, adv)
        n = jnp.maximum(jnp.sum(m), 1.0)
        for name, value in parts.items():
            metrics[f"{name}_fraction" if name != "ratio" else "ratio_mean"] = (
                jax.lax.stop_gradient(jnp.sum(value * m) / n))
        metrics["approx_kl"] = jax.lax.stop_gradient(jnp.sum(-log_ratio * m) / n)
    loss = aggregate_loss(loss_mat * w, m, config.agg, denominator=denominator,
                          max_length=config.max_length)
    metrics["loss"] = jax.lax.stop_gradient(loss)
    return LossOutput(loss, metrics)


def corrected_policy_loss(objective: ObjectiveConfig, correction: CorrectionConfig,
                          log_prob: Array, old_log_prob: Array | None, rollout_log_prob: Array,
                          advantages: Array, response_mask: Array, *,
                          denominator: Array | None = None, **trm_inputs: Array) -> LossOutput:
    """Rollout correction followed by the policy loss, with the bypass rule in one place.

    Decoupled (``correction.bypass`` False): ``rho = pi_old / mu``, PPO anchor ``pi_old``, loss
    weighted by ``sg(w)``. Bypass: ``rho = pi_theta / mu`` (from ``log_prob``; ``old_log_prob``
    is ignored and may be None), anchor ``mu``; PPO uses the rejection mask only, REINFORCE
    uses ``sg(w)`` and the mask. ``trm_inputs`` are forwarded to ``rollout_correction``.
    """
    if correction.bypass:
        corr = rollout_correction(correction, log_prob, rollout_log_prob, response_mask,
                                  **trm_inputs)
        anchor = rollout_log_prob
        weights = None if objective.loss == "ppo" else corr.weights
    else:
        if old_log_prob is None:
            raise ValueError("old_log_prob: expected a [B, T] array in decoupled mode, got None")
        corr = rollout_correction(correction, old_log_prob, rollout_log_prob, response_mask,
                                  **trm_inputs)
        anchor, weights = old_log_prob, corr.weights
    out = policy_loss(objective, log_prob, anchor, advantages, corr.mask, weights,
                      denominator=denominator)
    return LossOutput(out.loss, {**corr.metrics, **out.metrics})
