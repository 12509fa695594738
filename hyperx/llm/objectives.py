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
``aggregate_loss``; see its docstring for the denominator rule, micro-batch invariance, the
data-parallel factor ``dp_size`` and what a non-binary mask means (token weights).

Every array argument is keyword-only: verl's ``compute_policy_loss(old_log_prob, log_prob, ...)``
takes the two log-probs in the other order, so a positional port would silently be wrong.
Computation runs in the inputs' floating dtype (float64 in, float64 out; bf16/fp16 in float32).
Concrete inputs are checked for NaN/inf at valid tokens (one-line error naming the argument);
under ``jit`` pass ``check_finite=True`` and run under ``hyperx._validation.checked``, otherwise a
non-finite input at a valid token makes the loss (and its gradient) NaN for that step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import Array

from hyperx._validation import (
    check_choice,
    check_finite_where,
    check_flag,
    check_floating,
    check_int,
    check_log_prob_where,
    check_mask_values,
    check_range,
    check_rank,
    check_shape,
    float_dtype,
)
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
      dual_clip: ``c > 1`` to cap negative-advantage losses at ``-c A`` (None: off; verl's
        vanilla PPO always applies it with ``clip_ratio_c = 3``).
      sequence_ratio: use the GSPO length-normalised sequence ratio in PPO.
      agg: one of ``AGGREGATIONS``.
      max_length: the fixed length of ``seq-mean-token-sum-norm`` (None: the array's ``T``;
        verl's ``loss_scale_factor``).
      dp_size: data-parallel ranks that each compute the loss on their shard and average
        gradients (verl's ``dp_size``); see ``aggregate_loss``.
    """

    loss: str = "ppo"
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    dual_clip: float | None = None
    sequence_ratio: bool = False
    agg: str = "token-mean"
    max_length: int | None = None
    dp_size: int = 1

    def __post_init__(self) -> None:
        check_choice("loss", self.loss, LOSSES)
        check_choice("agg", self.agg, AGGREGATIONS)
        check_range("clip_eps", self.clip_eps, 0.0, open_low=True)
        if self.clip_eps_high is not None:
            check_range("clip_eps_high", self.clip_eps_high, 0.0, open_low=True)
        if self.dual_clip is not None:
            check_range("dual_clip", self.dual_clip, 1.0, open_low=True)
        check_flag("sequence_ratio", self.sequence_ratio)
        if self.max_length is not None:
            check_int("max_length", self.max_length)
        check_int("dp_size", self.dp_size)


class LossOutput(NamedTuple):
    """Scalar loss and a flat dict of scalar metrics."""

    loss: Array
    metrics: dict[str, Array]


def loss_denominator(agg: str, mask: Array) -> Array:
    """The normaliser ``aggregate_loss`` uses for ``mask`` (after rejection): the summed mask
    (the number of kept tokens for a 0/1 mask; ``token-mean``), the number of responses with a
    kept token (``seq-mean-*``), or 1 (``token-sum``). For micro-batching or data parallelism,
    compute it once on the FULL (global) batch and pass it to every micro-batch / rank."""
    check_choice("agg", agg, AGGREGATIONS)
    m = jnp.asarray(mask)
    dtype = float_dtype(m)
    m = jnp.where(m > 0, m.astype(dtype), 0.0)
    if agg == "token-mean":
        return jnp.sum(m)
    if agg == "token-sum":
        return jnp.ones((), dtype)
    return jnp.sum((jnp.sum(m, axis=-1) > 0).astype(dtype))


def aggregate_loss(loss_mat: Array, *, mask: Array, agg: str, denominator: Array | None = None,
                   max_length: int | None = None, dp_size: int = 1) -> Array:
    """Reduce a per-token loss ``[B, T]`` to a scalar, each token weighted by its mask value.

    With ``m >= 0`` the mask after rejection (0/1, or token weights: a non-binary mask weights
    a token by ``m`` in the numerator AND the denominator, consistently), ``n_i = sum_t m_it``,
    ``S`` the responses with ``n_i > 0``, ``D`` the denominator (default
    ``loss_denominator(agg, mask)``) and ``k = dp_size``:

    * ``token-mean``: ``k sum_it m l / D``, ``D = sum_it m`` (kept tokens);
    * ``token-sum``: ``k sum_it m l`` (no denominator);
    * ``seq-mean-token-sum``: ``k sum_i sum_t m l / D``, ``D = |S|``;
    * ``seq-mean-token-mean``: ``k sum_i (sum_t m l / n_i) / D``, ``D = |S|``;
    * ``seq-mean-token-sum-norm``: ``k sum_i sum_t m l / (L_max D)``, ``D = |S|``, ``L_max``
      fixed (``max_length``; verl's ``loss_scale_factor``).

    Denominator rule: rejected tokens leave every denominator (they are not counted as tokens,
    and a response whose tokens are all rejected is not counted as a response). A zero
    denominator (fully masked batch) is replaced by 1, so the loss and its gradient are 0.

    Micro-batch invariance: the sum over micro-batches of ``aggregate_loss(..., denominator=D)``
    with ``D`` computed once on the full batch equals the full-batch loss, for every mode
    (``seq-mean-token-mean`` because ``n_i`` is per response; ``token-sum`` needs no ``D``).
    Without a global ``D``, only ``token-sum`` is invariant: the mean of per-micro-batch means
    differs whenever micro-batches hold different numbers of kept tokens / responses.

    Data parallelism (verl's ``dp_size`` with its global ``batch_num_tokens`` /
    ``global_batch_size``): when ``k`` ranks each compute the loss of their shard and the
    gradients are AVERAGED over ranks (DDP / FSDP / ``pmean``), the factor ``k`` makes the mean
    over ranks equal the global loss: ``(1/k) sum_r k L_r = L_global``. Every mode but
    ``token-sum`` then needs the global ``denominator`` (an error otherwise, as in verl). With
    one jitted program over a sharded global batch, keep ``dp_size=1``: XLA sums for you.
    """
    check_choice("agg", agg, AGGREGATIONS)
    check_int("dp_size", dp_size)
    check_rank("loss_mat", loss_mat, 2)
    check_shape("mask", mask, loss_mat.shape, "(B, T)")
    check_mask_values("mask", mask)
    check_finite_where("loss_mat", loss_mat, jnp.asarray(mask) > 0)
    if dp_size > 1 and agg != "token-sum" and denominator is None:
        raise ValueError(f"denominator: expected the global denominator (loss_denominator on "
                         f"the global batch) when dp_size = {dp_size} > 1 with agg={agg!r}")
    dtype = float_dtype(loss_mat)
    m = jnp.asarray(mask)
    m = jnp.where(m > 0, m.astype(dtype), 0.0)
    l = jnp.where(m > 0, loss_mat.astype(dtype) * m, 0.0)
    if agg == "token-sum":
        return dp_size * jnp.sum(l)
    den = loss_denominator(agg, m) if denominator is None else jnp.asarray(denominator, dtype)
    den = jnp.where(den > 0, den, 1.0)
    if agg == "token-mean":
        return dp_size * jnp.sum(l) / den
    per_seq = jnp.sum(l, axis=-1)
    if agg == "seq-mean-token-mean":
        n = jnp.sum(m, axis=-1)
        per_seq = per_seq / jnp.where(n > 0, n, 1.0)
    elif agg == "seq-mean-token-sum-norm":
        per_seq = per_seq / float(max_length or loss_mat.shape[-1])
    return dp_size * jnp.sum(per_seq) / den


def _ppo_token_loss(config: ObjectiveConfig, log_ratio: Array,
                    advantages: Array) -> tuple[Array, dict[str, Array]]:
    ratio = jnp.exp(log_ratio)
    hi = config.clip_eps if config.clip_eps_high is None else config.clip_eps_high
    unclipped = -advantages * ratio
    clipped = -advantages * jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + hi)
    loss = jnp.maximum(unclipped, clipped)
    parts = {"clipped": (clipped > unclipped).astype(ratio.dtype), "ratio": ratio}
    if config.dual_clip is not None:
        cap = -config.dual_clip * advantages
        dual = (advantages < 0) & (loss > cap)
        loss = jnp.where(dual, cap, loss)
        parts["dual_clipped"] = dual.astype(ratio.dtype)
    return loss, parts


def policy_loss(config: ObjectiveConfig, *, log_prob: Array, old_log_prob: Array | None = None,
                advantages: Array, mask: Array, weights: Array | None = None,
                denominator: Array | None = None, check_finite: bool = False) -> LossOutput:
    """Policy-gradient loss of ``config.loss`` aggregated by ``config.agg``.

    Every array argument is keyword-only (verl's order is ``old_log_prob, log_prob``).

    Args:
      log_prob: ``[B, T]`` log pi_theta of the sampled tokens (differentiated).
      old_log_prob: ``[B, T]`` PPO anchor (``pi_old``; ``mu`` in bypass mode); unused by
        REINFORCE (may be None).
      advantages: ``[B, T]`` advantages (treated as constants).
      mask: ``[B, T]`` response mask after rejection (e.g. ``CorrectionOutput.mask``): 0/1, or
        non-negative token weights, applied consistently in numerator and denominator (see
        ``aggregate_loss``); the metrics are weighted the same way. A negative or non-finite
        concrete mask is an error.
      weights: ``[B, T]`` correction weights applied as ``sg(w)`` (None: 1).
      denominator: global denominator for micro-batching / ``dp_size`` (see ``aggregate_loss``).
      check_finite: check ``log_prob``, ``old_log_prob``, ``advantages``, ``weights`` (at tokens
        with ``mask > 0``) and ``mask`` under ``jit`` too (``checkify``); concrete inputs are
        always checked.
    """
    check_rank("log_prob", log_prob, 2)
    check_floating("log_prob", log_prob)
    shape = log_prob.shape
    check_shape("advantages", advantages, shape, "(B, T)")
    check_shape("mask", mask, shape, "(B, T)")
    if weights is not None:
        check_shape("weights", weights, shape, "(B, T)")
    if config.loss == "ppo":
        if old_log_prob is None:
            raise ValueError("old_log_prob: expected a [B, T] array for the PPO loss, got None")
        check_shape("old_log_prob", old_log_prob, shape, "(B, T)")
        check_floating("old_log_prob", old_log_prob)
    mask = jnp.asarray(mask)
    check_mask_values("mask", mask, checked=check_finite)
    keep = mask > 0
    for name, x in (("log_prob", log_prob), ("old_log_prob", old_log_prob),
                    ("advantages", advantages), ("weights", weights)):
        if x is not None and (name != "old_log_prob" or config.loss == "ppo"):
            check_finite_where(name, x, keep, checked=check_finite)
            if name.endswith("log_prob"):
                check_log_prob_where(name, x, keep, checked=check_finite)
    dtype = float_dtype(log_prob, old_log_prob, advantages, weights)
    m = jnp.where(keep, mask.astype(dtype), 0.0)
    adv = jax.lax.stop_gradient(jnp.where(keep, advantages.astype(dtype), 0.0))
    lp = jnp.where(keep, log_prob.astype(dtype), 0.0)
    w = 1.0 if weights is None else jax.lax.stop_gradient(
        jnp.where(keep, weights.astype(dtype), 0.0))
    metrics: dict[str, Array] = {}
    if config.loss == "reinforce":
        loss_mat = -adv * lp
    else:
        old = jax.lax.stop_gradient(jnp.where(keep, old_log_prob.astype(dtype), 0.0))
        log_ratio = lp - old
        if config.sequence_ratio:
            n_tok = jnp.sum(keep, axis=-1).astype(dtype)
            seq = jnp.sum(log_ratio, axis=-1) / jnp.maximum(n_tok, 1.0)
            log_ratio = jnp.broadcast_to(seq[:, None], shape)
        log_ratio = jnp.clip(log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        loss_mat, parts = _ppo_token_loss(config, log_ratio, adv)
        total = jnp.sum(m)
        n = jnp.where(total > 0, total, 1.0)
        for name, value in parts.items():
            metrics[f"{name}_fraction" if name != "ratio" else "ratio_mean"] = (
                jax.lax.stop_gradient(jnp.sum(value * m) / n))
        metrics["approx_kl"] = jax.lax.stop_gradient(jnp.sum(-log_ratio * m) / n)
    loss = aggregate_loss(loss_mat * w, mask=m, agg=config.agg, denominator=denominator,
                          max_length=config.max_length, dp_size=config.dp_size)
    metrics["loss"] = jax.lax.stop_gradient(loss)
    return LossOutput(loss, metrics)


def corrected_policy_loss(objective: ObjectiveConfig, correction: CorrectionConfig, *,
                          log_prob: Array, old_log_prob: Array | None = None,
                          rollout_log_prob: Array, advantages: Array, response_mask: Array,
                          denominator: Array | None = None, check_finite: bool = False,
                          rollout_logits: Array | None = None, old_logits: Array | None = None,
                          rollout_topk_log_probs: Array | None = None,
                          rollout_topk_ids: Array | None = None) -> LossOutput:
    """Rollout correction followed by the policy loss, with the bypass rule in one place.

    Decoupled (``correction.bypass`` False): ``rho = pi_old / mu``, PPO anchor ``pi_old``, loss
    weighted by ``sg(w)``. Bypass: ``rho = pi_theta / mu`` (from ``log_prob``; ``old_log_prob``
    is ignored and may be None), anchor ``mu``; PPO uses the rejection mask only, REINFORCE
    uses ``sg(w)`` and the mask. ``rollout_logits``, ``old_logits``, ``rollout_topk_log_probs``
    and ``rollout_topk_ids`` (TRM) are forwarded to ``rollout_correction``; every array argument
    is keyword-only. The aggregation (verl's ``loss_agg_mode``) is ``objective.agg``; any other
    keyword is a ``TypeError`` naming this function.
    """
    if not correction.bypass and old_log_prob is None:
        raise ValueError("old_log_prob: expected a [B, T] array in decoupled mode, got None")
    corr = rollout_correction(correction,
                              old_log_prob=log_prob if correction.bypass else old_log_prob,
                              rollout_log_prob=rollout_log_prob, response_mask=response_mask,
                              check_finite=check_finite, rollout_logits=rollout_logits,
                              old_logits=old_logits,
                              rollout_topk_log_probs=rollout_topk_log_probs,
                              rollout_topk_ids=rollout_topk_ids)
    if correction.bypass:
        anchor = rollout_log_prob
        weights = None if objective.loss == "ppo" else corr.weights
    else:
        anchor, weights = old_log_prob, corr.weights
    out = policy_loss(objective, log_prob=log_prob, old_log_prob=anchor, advantages=advantages,
                      mask=corr.mask, weights=weights, denominator=denominator,
                      check_finite=check_finite)
    return LossOutput(out.loss, {**corr.metrics, **out.metrics})
