"""Diagnostics of training-inference mismatch, correction weights and advantage information.

Every function returns a flat ``dict[str, Array]`` of scalars in the inputs' floating dtype
(float64 in, float64 out; bf16/fp16 and integer inputs give float32), safe on fully masked input
(no NaN; ``fully_masked`` = 1 says so). Notation: ``rho_t = pi(y_t) / mu(y_t)`` with ``pi`` the
training policy and ``mu`` the rollout policy; tokens are sampled from ``mu``, so masked means
over tokens estimate expectations under ``mu``. A token is valid where ``response_mask > 0``.
Every array argument is keyword-only (two log-prob arrays are too easy to swap).

Sources: mismatch KL, k3 KL, perplexity ratio and chi^2 diagnostics follow Liu, Li et al. 2025
("When Speed Kills Stability", chi^2 governs the variance of IS) and the verl Rollout
Correction documentation; the advantage-entropy ("information bandwidth") diagnostic follows
the seed note on scalar vs per-timestep advantages (a scalar advantage carries at most
``log2(B)`` bits per episode).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from hyperx._validation import (
    check_finite_where,
    check_floating,
    check_int,
    check_rank,
    check_shape,
    float_dtype,
)

LOG_RATIO_CLAMP = 20.0


def _check_pair(name: str, x, mask_name: str, mask) -> None:
    check_rank(name, x, 2)
    check_shape(mask_name, mask, np.shape(x), "(B, T)")


def clamped_log_ratio(log_p: Array, log_q: Array, mask: Array) -> Array:
    """``clip(log p - log q, -20, 20)`` at valid tokens, 0 at masked ones (no inf/NaN leak)."""
    diff = jnp.where(mask > 0, log_p - log_q, 0.0)
    return jnp.clip(diff, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def sequence_log_ratio(log_rho: Array, mask: Array) -> Array:
    """``clip(sum_t m_t log rho_t, -20, 20)``, shape ``[B]``: the log of ``prod_t rho_t``
    (``m_t`` the 0/1 validity of token ``t``)."""
    valid = (mask > 0).astype(log_rho.dtype)
    return jnp.clip(jnp.sum(log_rho * valid, axis=-1), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def _masked_mean(x: Array, mask: Array) -> Array:
    count = jnp.sum((mask > 0).astype(x.dtype))
    return jnp.sum(jnp.where(mask > 0, x, 0.0)) / jnp.maximum(count, 1.0)


def _log_mean_exp(log_x: Array, mask: Array) -> Array:
    """``log(mean_{mask} exp(log_x))`` via a masked logsumexp; 0 when nothing is valid."""
    n = jnp.sum((mask > 0).astype(log_x.dtype))
    lse = jax.nn.logsumexp(jnp.where(mask > 0, log_x, -jnp.inf))
    return jnp.where(n > 0, lse - jnp.log(jnp.maximum(n, 1.0)), 0.0)


def saturating_exp(log_x: Array) -> Array:
    """``exp(log_x)``, saturating at the dtype's largest finite value instead of overflowing."""
    return jnp.minimum(jnp.exp(log_x), jnp.finfo(log_x.dtype).max)


def mismatch_metrics(*, train_log_prob: Array, rollout_log_prob: Array, response_mask: Array,
                     check_finite: bool = False) -> dict[str, Array]:
    """Mismatch between ``pi`` (training) and ``mu`` (rollout) on the sampled tokens.

    Exact (no clamp), means over valid tokens:

    * ``mismatch_kl`` = mean_t (log mu - log pi) (k1 estimate of ``KL(mu || pi)``; verl ``kl``);
    * ``rollout_ppl`` = exp(-mean_t log mu), ``training_ppl`` = exp(-mean_t log pi) and
      ``ppl_ratio`` = training_ppl / rollout_ppl = exp(``log_ppl_ratio``) with
      ``log_ppl_ratio`` = mismatch_kl. The perplexities are formed in log space; an ``exp``
      beyond the dtype's range saturates at its largest finite value (the ``log_*`` entries stay
      exact).

    With ``log rho_t`` clamped to [-20, 20] (the IS-weight convention, so ``exp`` is bounded):

    * ``k3_kl`` = mean_t (rho_t - 1 - log rho_t) (non-negative, unbiased for the same KL);
    * ``chi2_token`` = E_t[rho_t^2] - 1 and ``chi2_seq`` = E_y[(prod_t rho_t)^2] - 1 (the sum of
      ``log rho`` clamped again), as ``exp(logmeanexp(2 log rho)) - 1``; ``chi2_seq`` averages over
      responses with a valid token.

    ``check_finite``: also check the valid tokens' log-probs under ``jit`` (with
    ``hyperx._validation.checked``); concrete inputs are always checked.
    """
    _check_pair("train_log_prob", train_log_prob, "response_mask", response_mask)
    check_shape("rollout_log_prob", rollout_log_prob, np.shape(train_log_prob), "(B, T)")
    check_floating("train_log_prob", train_log_prob)
    check_floating("rollout_log_prob", rollout_log_prob)
    dtype = float_dtype(train_log_prob, rollout_log_prob)
    valid = jnp.asarray(response_mask) > 0
    check_finite_where("train_log_prob", train_log_prob, valid, checked=check_finite)
    check_finite_where("rollout_log_prob", rollout_log_prob, valid, checked=check_finite)
    train = train_log_prob.astype(dtype)
    roll = rollout_log_prob.astype(dtype)
    log_rho = clamped_log_ratio(train, roll, valid)
    mean_train, mean_roll = _masked_mean(train, valid), _masked_mean(roll, valid)
    log_ppl_ratio = _masked_mean(roll - train, valid)  # = mean_roll - mean_train, no cancellation
    has = jnp.sum(valid, axis=-1) > 0
    return {
        "mismatch_kl": log_ppl_ratio,
        "k3_kl": _masked_mean(jnp.expm1(log_rho) - log_rho, valid),
        "rollout_ppl": saturating_exp(-mean_roll),
        "training_ppl": saturating_exp(-mean_train),
        "log_ppl_ratio": log_ppl_ratio,
        "ppl_ratio": saturating_exp(log_ppl_ratio),
        "chi2_token": jnp.expm1(_log_mean_exp(2.0 * log_rho, valid)),
        "chi2_seq": jnp.expm1(_log_mean_exp(2.0 * sequence_log_ratio(log_rho, valid), has)),
    }


def weight_metrics(*, weights: Array, mask: Array) -> dict[str, Array]:
    """Mean/std/min/max of ``weights`` over kept tokens (``mask`` > 0) and the effective
    sample size ``ESS = (sum w)^2 / (n sum w^2)`` in [0, 1] (0 if nothing is kept or all
    weights are 0; verl's ``eff_sample_size`` ``1 / mean((w / mean w)^2)`` is the same number)."""
    _check_pair("weights", weights, "mask", mask)
    dtype = float_dtype(weights)
    keep = jnp.asarray(mask) > 0
    w = jnp.where(keep, weights.astype(dtype), 0.0)
    n = jnp.sum(keep.astype(dtype))
    mean = jnp.sum(w) / jnp.maximum(n, 1.0)
    var = jnp.sum(jnp.where(keep, jnp.square(w - mean), 0.0)) / jnp.maximum(n, 1.0)
    sum_sq = jnp.sum(jnp.square(w))
    ess = jnp.square(jnp.sum(w)) / jnp.maximum(n * sum_sq, jnp.finfo(dtype).tiny)
    return {
        "weight_mean": mean,
        "weight_std": jnp.sqrt(var),
        "weight_min": jnp.where(n > 0, jnp.min(jnp.where(keep, w, jnp.inf)), 0.0),
        "weight_max": jnp.where(n > 0, jnp.max(jnp.where(keep, w, -jnp.inf)), 0.0),
        "ess": jnp.where(sum_sq > 0, ess, 0.0),
    }


def mask_metrics(*, response_mask: Array, mask: Array, dtype=np.float32) -> dict[str, Array]:
    """``masked_token_fraction``: valid tokens rejected; ``masked_seq_fraction``: responses with a
    valid token but no kept token; ``fully_masked``: 1 iff no token is kept. Counts tokens
    (``> 0``), whatever weights the masks hold; scalars of ``dtype``."""
    _check_pair("response_mask", response_mask, "mask", mask)
    valid = jnp.asarray(response_mask) > 0
    kept = (jnp.asarray(mask) > 0) & valid
    n_valid = jnp.sum(valid).astype(dtype)
    n_kept = jnp.sum(kept).astype(dtype)
    has = jnp.sum(valid, axis=-1) > 0
    lost = has & (jnp.sum(kept, axis=-1) == 0)
    return {
        "masked_token_fraction": (n_valid - n_kept) / jnp.maximum(n_valid, 1.0),
        "masked_seq_fraction": jnp.sum(lost).astype(dtype) / jnp.maximum(jnp.sum(has), 1),
        "fully_masked": (n_kept == 0).astype(dtype),
    }


def correction_metrics(*, train_log_prob: Array, rollout_log_prob: Array, response_mask: Array,
                       weights: Array, mask: Array, lower: float,
                       upper: float) -> dict[str, Array]:
    """All correction diagnostics: ``mismatch_metrics``, ``weight_metrics``, ``mask_metrics``
    and ``ratio_frac_above``/``ratio_frac_below``, the fractions of valid tokens with
    ``rho_t > upper`` / ``rho_t < lower`` (compared in log space)."""
    out = mismatch_metrics(train_log_prob=train_log_prob, rollout_log_prob=rollout_log_prob,
                           response_mask=response_mask)
    dtype = out["mismatch_kl"].dtype
    valid = jnp.asarray(response_mask) > 0
    log_rho = clamped_log_ratio(train_log_prob.astype(dtype), rollout_log_prob.astype(dtype),
                                valid)
    out.update(weight_metrics(weights=weights, mask=mask))
    out.update(mask_metrics(response_mask=response_mask, mask=mask, dtype=dtype))
    out["ratio_frac_above"] = _masked_mean((log_rho > np.log(upper)).astype(dtype), valid)
    below = log_rho < (np.log(lower) if lower > 0 else -np.inf)
    out["ratio_frac_below"] = _masked_mean(below.astype(dtype), valid)
    return out


def _entropy_bits(x: Array, w: Array, n_bins: int) -> Array:
    """Entropy in bits of ``x`` binned into ``n_bins`` equal-width bins over its ``w > 0`` range."""
    valid = w > 0
    lo = jnp.min(jnp.where(valid, x, jnp.inf))
    hi = jnp.max(jnp.where(valid, x, -jnp.inf))
    span = hi - lo
    scaled = jnp.where(valid & (span > 0), (x - lo) / jnp.where(span > 0, span, 1.0), 0.0)
    idx = jnp.clip(jnp.floor(scaled * n_bins).astype(jnp.int32), 0, n_bins - 1)
    counts = jnp.zeros(n_bins, x.dtype).at[idx.reshape(-1)].add(w.reshape(-1))
    p = counts / jnp.maximum(jnp.sum(counts), 1.0)
    return -jnp.sum(jnp.where(p > 0, p * jnp.log2(jnp.where(p > 0, p, 1.0)), 0.0))


def information_bandwidth(*, advantages: Array, response_mask: Array,
                          n_bins: int = 16) -> dict[str, Array]:
    """Empirical entropy (bits) of the advantage values in a batch.

    * ``adv_bits_per_episode``: entropy of the per-response advantage (its masked mean, i.e. the
      scalar advantage when it is broadcast over tokens), binned into ``n_bins`` equal-width bins;
      at most ``min(log2(B'), log2(n_bins))`` with ``B'`` the responses with a valid token.
    * ``adv_bits_per_token``: entropy of the per-token advantage values (valid tokens, same
      binning).
    * ``adv_bits_episode_bound``: ``log2(B')``, the scalar-advantage ceiling.
    """
    check_int("n_bins", n_bins)
    _check_pair("advantages", advantages, "response_mask", response_mask)
    dtype = float_dtype(advantages)
    valid = (jnp.asarray(response_mask) > 0).astype(dtype)
    adv = jnp.where(valid > 0, advantages.astype(dtype), 0.0)
    n_tok = jnp.sum(valid, axis=-1)
    has = (n_tok > 0).astype(dtype)
    episode = jnp.sum(adv, axis=-1) / jnp.maximum(n_tok, 1.0)
    return {
        "adv_bits_per_episode": _entropy_bits(episode, has, n_bins),
        "adv_bits_per_token": _entropy_bits(adv, valid, n_bins),
        "adv_bits_episode_bound": jnp.log2(jnp.maximum(jnp.sum(has), 1.0)),
    }
