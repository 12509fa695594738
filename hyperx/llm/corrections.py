"""Rollout correction: importance weights and rejection masks for training-inference mismatch.

Sampled tokens come from the rollout policy ``mu`` (the inference engine); the trainer
recomputes their log-probs under ``pi`` (``pi_old`` in decoupled mode, ``pi_theta`` in bypass
mode). The per-token correction ratio is ``rho_t = pi(y_t | c_t) / mu(y_t | c_t)``, always built
in log space and clamped to ``[-20, 20]`` per token and again after summing over a sequence.

Sources: token TIS (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
Off-Policy RL Training"); sequence IS and rejection (Liu, Li et al. 2025, "When Speed Kills
Stability"); Geo-Mask, k1/k2/k3 rejection and presets (the verl Rollout Correction
documentation, and verl's code: verl/trainer/ppo/rollout_corr_helper.py,
verl/trainer/config/algorithm.py); Trust Region Masking (Li et al. 2025, arXiv:2512.23075).

``rollout_correction`` returns ``CorrectionOutput(weights, mask, metrics)``: ``weights`` multiply
the per-token loss, ``mask`` replaces the response mask (so rejected tokens leave the loss
denominator). Both are wrapped in ``stop_gradient`` and have the log-probs' floating dtype
(float64 in, float64 out; bf16/fp16 are computed in float32). Every array argument is
keyword-only: ``old_log_prob`` and ``rollout_log_prob`` are too easy to swap.

Non-finite values. Concrete inputs (a call outside ``jit``) are checked: a NaN or inf log-prob at
a valid token raises a one-line error naming the argument (padding may hold anything, even
``-inf``). Under ``jit`` nothing is checked unless ``check_finite=True``, which adds a
``checkify`` check (run the jitted function under ``hyperx._validation.checked``); without it a
NaN log-prob at a valid token gives a NaN weight and NaN metrics for that batch, which a
``jnp.isfinite`` test of ``metrics["mismatch_kl"]`` detects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from hyperx._validation import (
    check_choice,
    check_finite_where,
    check_flag,
    check_floating,
    check_index,
    check_integer,
    check_log_prob_where,
    check_range,
    check_rank,
    check_shape,
    float_dtype,
)
from hyperx.llm import diagnostics
from hyperx.llm.diagnostics import LOG_RATIO_CLAMP, clamped_log_ratio, sequence_log_ratio

WEIGHT_MODES = ("none", "token_is", "token_tis", "token_mis", "seq_is", "seq_tis", "seq_mis")
STATISTICS = ("ratio", "k1", "k2", "k3")
LEVELS = ("token", "seq_sum", "seq_mean", "seq_max", "seq_min")
_FORMULAS = {"k1": "-log rho", "k2": "0.5 (log rho)^2", "k3": "rho - 1 - log rho"}


def _one_sided_k1(level: str, lower: float | None, upper: float | None) -> str:
    """The error for a k1 rejection with one bound (see :class:`Rejection`)."""
    side = "upper" if lower is None else "lower"
    message = (f"{side}: a k1 rejection needs both lower and upper, in nats of k1 = -log rho "
               f"(k1 is signed: one side bounds rho on one side only, use "
               f"Rejection('ratio', ...) for that)")
    if upper is not None and upper > 1:
        log_u = math.log(upper)
        message += (f"; verl's k1 thresholds are ratios: verl's {float(upper)} keeps "
                    f"{1 / upper:g} <= rho <= {upper:g}, which is "
                    f"Rejection('k1', {level!r}, {-log_u:.6g}, {log_u:.6g}) here "
                    f"(hyperx.llm.verl.from_verl_options converts)")
    return message


def _geo_rs(lower: float, upper: float) -> Rejection:
    """verl's Geo-RS rejection for ratio thresholds ``"L_U"`` (see
    :meth:`CorrectionConfig.geo_mask`), with errors in the caller's ratio units."""
    for name, value in (("lower", lower), ("upper", upper)):
        check_range(name, value, 0.0, open_low=True)
    if not lower <= 1.0 <= upper:
        raise ValueError(f"lower/upper: expected ratio thresholds with lower <= 1 <= upper "
                         f"(on-policy responses, rho = 1, are kept), got ({lower}, {upper})")
    return Rejection("k1", "seq_mean", math.log(lower), math.log(upper))


@dataclass(frozen=True)
class Rejection:
    """One rejection criterion: keep iff ``lower <= stat <= upper`` (both sides inclusive).

    ``statistic`` is computed per token from the clamped ``log rho_t``:

    * ``"ratio"``: ``rho_t`` itself;
    * ``"k1"``: ``-log rho_t``;
    * ``"k2"``: ``0.5 (log rho_t)^2``;
    * ``"k3"``: ``rho_t - 1 - log rho_t``.

    ``level`` says where the bound is applied. ``"token"`` rejects single tokens;
    ``"seq_sum"``, ``"seq_mean"``, ``"seq_max"``, ``"seq_min"`` aggregate over the valid tokens of
    each response and reject the whole response. For ``"ratio"`` the sum and mean are taken of
    ``log rho`` (so ``seq_sum`` bounds ``prod_t rho_t`` and ``seq_mean`` bounds the geometric
    ratio ``exp(mean_t log rho_t)``). The bound always applies to the named statistic: a k1
    bound ``(lower, upper)`` keeps ``lower <= -log rho <= upper``; to bound the ratio instead use
    ``statistic="ratio"``. ``None`` means that side is unbounded.

    Units: ``ratio`` bounds are ratios; ``k1`` bounds are in nats of ``-log rho`` (so a verl
    ``"0.5_2.0"`` k1 threshold, which verl reads as ratio bounds, is NOT ``(0.5, 2.0)`` here:
    use :func:`hyperx.llm.verl.from_verl_options`). A bound pair that rejects on-policy tokens
    (``rho = 1``: ratio 1, k1 = k2 = k3 = 0) is refused with an error saying so.

    A ``k1`` rejection takes both bounds, as verl's does (``compute_rollout_rejection_mask`` in
    verl/trainer/ppo/rollout_corr_helper.py applies ``log L <= k1 <= log U`` and reads a single
    threshold ``U`` as ``"1/U_U"``). ``k1`` is signed, so one side alone bounds ``rho`` on one
    side only (use ``statistic="ratio"`` for that), and an upper-only ``k1`` bound is what a
    copied verl threshold looks like: ``Rejection("k1", "token", upper=2.0)`` would keep
    ``rho >= e^-2`` with no upper limit, where verl's ``2.0`` keeps ``0.5 <= rho <= 2``, i.e.
    ``Rejection("k1", "token", -log 2, log 2)``. A one-sided ``k1`` bound is refused with an
    error giving that translation.
    """

    statistic: str
    level: str
    lower: float | None = None
    upper: float | None = None

    def __post_init__(self) -> None:
        check_choice("statistic", self.statistic, STATISTICS)
        check_choice("level", self.level, LEVELS)
        if self.lower is None and self.upper is None:
            raise ValueError("lower/upper: expected at least one bound, got both None")
        floor = 0.0 if self.statistic == "ratio" else None
        for name, v in (("lower", self.lower), ("upper", self.upper)):
            if v is not None:
                check_range(name, v, floor)
        if self.lower is not None and self.upper is not None and self.lower > self.upper:
            raise ValueError(f"lower/upper: expected lower <= upper, "
                             f"got {self.lower} > {self.upper}")
        ideal = 1.0 if self.statistic == "ratio" else 0.0
        if ((self.lower is not None and self.lower > ideal)
                or (self.upper is not None and self.upper < ideal)):
            units = ("ratio bounds" if self.statistic == "ratio" else
                     f"bounds on {self.statistic} = {_FORMULAS[self.statistic]}, in nats")
            raise ValueError(
                f"lower/upper: ({self.lower}, {self.upper}) rejects on-policy tokens "
                f"({self.statistic} = {ideal:g} at rho = 1); these are {units}"
                + ("; for ratio bounds use Rejection('ratio', ...) or "
                   "hyperx.llm.verl.from_verl_options" if self.statistic == "k1" else ""))
        if self.statistic == "k1" and (self.lower is None or self.upper is None):
            raise ValueError(_one_sided_k1(self.level, self.lower, self.upper))

    @property
    def name(self) -> str:
        return f"{self.level}_{self.statistic}"


@dataclass(frozen=True)
class CorrectionConfig:
    """Static (hashable) description of a rollout correction.

    Attributes:
      weights: one of ``WEIGHT_MODES``; with ``C = weight_upper`` and ``L = weight_lower``:
        ``token_is`` ``rho_t``; ``token_tis`` ``min(rho_t, C)``; ``token_mis`` (IcePop)
        ``rho_t 1[L <= rho_t <= C]``; ``seq_is`` ``W = prod_t rho_t``; ``seq_tis``
        ``min(W, C)``; ``seq_mis`` ``W 1[L <= W <= C]`` (``L`` None: no lower side).
        MIS zeroes weights but does not touch the mask.
      weight_lower, weight_upper: ``L`` and ``C`` above.
      rejections: criteria chained with AND; each edits the mask.
      trm_kl: Trust Region Masking with the exact per-token ``KL(mu || pi)`` from logits:
        reject the response iff ``max_t KL_t > trm_kl``.
      batch_normalize: divide weights by their masked batch mean after truncation/rejection.
      bypass: ``pi_old := mu``; ``old_log_prob`` passed to ``rollout_correction`` is then the
        current policy's log-prob, and PPO objectives must not apply the weights
        (see ``hyperx.llm.objectives.corrected_policy_loss``).
    """

    weights: str = "none"
    weight_lower: float | None = None
    weight_upper: float = 2.0
    rejections: tuple[Rejection, ...] = ()
    trm_kl: float | None = None
    batch_normalize: bool = False
    bypass: bool = False

    def __post_init__(self) -> None:
        check_choice("weights", self.weights, WEIGHT_MODES)
        check_range("weight_upper", self.weight_upper, 0.0, open_low=True)
        if self.weight_lower is not None:
            check_range("weight_lower", self.weight_lower, 0.0)
            if self.weight_lower > self.weight_upper:
                raise ValueError(f"weight_lower: expected <= weight_upper={self.weight_upper}, "
                                 f"got {self.weight_lower}")
        if self.trm_kl is not None:
            check_range("trm_kl", self.trm_kl, 0.0, open_low=True)
        if not isinstance(self.rejections, tuple) or not all(
                isinstance(r, Rejection) for r in self.rejections):
            raise TypeError(f"rejections: expected a tuple of Rejection, got {self.rejections!r}")
        check_flag("batch_normalize", self.batch_normalize)
        check_flag("bypass", self.bypass)

    @classmethod
    def disabled(cls) -> CorrectionConfig:
        """Metrics only: weights 1, mask = response mask."""
        return cls()

    @classmethod
    def token_tis(cls, c: float = 2.0) -> CorrectionConfig:
        """Decoupled token TIS, ``min(rho_t, C)`` (Yao et al. 2025)."""
        return cls(weights="token_tis", weight_upper=c)

    @classmethod
    def seq_tis(cls, c: float = 2.0) -> CorrectionConfig:
        """Decoupled Seq-TIS, ``min(prod_t rho_t, C)`` (Liu, Li et al. 2025)."""
        return cls(weights="seq_tis", weight_upper=c)

    @classmethod
    def seq_mis(cls, c: float = 2.0) -> CorrectionConfig:
        """Seq-MIS, ``W 1[W <= C]`` (Liu, Li et al. 2025)."""
        return cls(weights="seq_mis", weight_upper=c)

    @classmethod
    def icepop(cls, lower: float = 0.5, upper: float = 5.0) -> CorrectionConfig:
        """Token MIS / IcePop: ``rho_t 1[L <= rho_t <= U]``, weights only."""
        return cls(weights="token_mis", weight_lower=lower, weight_upper=upper)

    @classmethod
    def token_rejection(cls, lower: float = 0.5, upper: float = 5.0) -> CorrectionConfig:
        """Token rejection: mask tokens with ``rho_t`` outside ``[L, U]``."""
        return cls(rejections=(Rejection("ratio", "token", lower, upper),))

    @classmethod
    def geo_mask(cls, lower: float = 1 / 1.1, upper: float = 1 / 0.9) -> CorrectionConfig:
        """Geo-Mask: verl's Geo-RS, ``rollout_rs="seq_mean_k1"`` with the ratio thresholds
        ``rollout_rs_threshold="L_U"`` (verl/trainer/ppo/rollout_corr_helper.py,
        ``compute_rollout_rejection_mask``). The defaults keep ``0.9 <= rho_geo <= 1.1``;
        verl's ``decoupled_geo_rs`` and other ``*_geo_rs*`` presets use ``"0.999_1.001"``
        (``geo_mask(0.999, 1.001)``, or ``hyperx.llm.verl.from_verl_options(preset=...)``),
        which rejects nearly every response of a bf16 + lag rollout.

        Keeps a response iff ``log L <= mean_t(-log rho_t) <= log U`` over its valid tokens (both
        sides inclusive), i.e. ``1/U <= rho_geo <= 1/L`` with ``rho_geo = exp(mean_t log rho_t)``:
        verl bounds the mean k1, so its ``L`` and ``U`` bound ``1/rho_geo``. For symmetric
        thresholds (``L = 1/U``, e.g. the blog's looser 0.5 / 2.0) that is ``L <= rho_geo <= U``;
        for 0.999 / 1.001 it is ``0.999001 <= rho_geo <= 1.001001``. ``L`` and ``U`` are
        positive ratios with ``L <= 1 <= U``. These defaults are ``hyperx llm --correction
        geo_mask`` (:data:`hyperx.llm.train.CORRECTIONS` holds every preset's defaults).
        """
        return cls(rejections=(_geo_rs(lower, upper),))

    @classmethod
    def geo_mask_token_tis(cls, lower: float = 0.5, upper: float = 2.0,
                           c: float = 2.0) -> CorrectionConfig:
        """Geo-Mask indicator (:meth:`geo_mask`'s rule) times token TIS ``min(rho_t, C)``; verl's
        ``decoupled_geo_rs_token_tis`` is ``geo_mask_token_tis(0.999, 1.001, 2.0)``."""
        return cls(weights="token_tis", weight_upper=c, rejections=(_geo_rs(lower, upper),))

    @classmethod
    def trm(cls, delta: float = 1.0, kl: float = 0.05) -> CorrectionConfig:
        """Sample-based TRM: reject a response iff ``max_t |log rho_t| > delta`` (seq-max k2 above
        ``delta^2 / 2``) or ``mean_t k3_t > kl`` (nats). verl's K3-RS presets
        (``decoupled_k3_rs``: ``seq_mean_k3``) use ``kl = 0.01``; ``delta`` is ours. Tune both
        per model; the defaults are ``hyperx llm --correction trm``."""
        return cls(rejections=(Rejection("k2", "seq_max", upper=0.5 * delta**2),
                               Rejection("k3", "seq_mean", upper=kl)))

    @classmethod
    def trm_exact(cls, kl: float = 0.05) -> CorrectionConfig:
        """Exact TRM from logits: reject iff ``max_t KL(mu(.|c_t) || pi(.|c_t)) > kl`` (nats; the
        default as :meth:`trm`'s, and ``hyperx llm --correction trm_exact``'s)."""
        return cls(trm_kl=kl)

    @classmethod
    def bypass_ppo_clip(cls) -> CorrectionConfig:
        """Bypass mode with PPO clip: ``pi_old := mu``, the PPO ratio ``pi_theta / mu`` is the
        only correction (no weights, no rejection; metrics still reported)."""
        return cls(bypass=True)


class CorrectionOutput(NamedTuple):
    """Weights ``[B, T]`` and mask ``[B, T]`` (stop-gradient, the log-probs' floating dtype) and
    scalar metrics."""

    weights: Array
    mask: Array
    metrics: dict[str, Array]


def token_statistic(statistic: str, log_rho: Array) -> Array:
    """Per-token statistic of ``log rho``: ratio (returned as ``log rho``), k1, k2 or k3."""
    if statistic == "ratio":
        return log_rho
    if statistic == "k1":
        return -log_rho
    if statistic == "k2":
        return 0.5 * jnp.square(log_rho)
    return jnp.expm1(log_rho) - log_rho


def _aggregate(level: str, stat: Array, valid: Array) -> Array:
    n = jnp.sum(valid, axis=-1).astype(stat.dtype)
    if level == "seq_sum":
        return jnp.sum(jnp.where(valid, stat, 0.0), axis=-1)
    if level == "seq_mean":
        return jnp.sum(jnp.where(valid, stat, 0.0), axis=-1) / jnp.maximum(n, 1.0)
    if level == "seq_max":
        agg = jnp.max(jnp.where(valid, stat, -jnp.inf), axis=-1)
    else:
        agg = jnp.min(jnp.where(valid, stat, jnp.inf), axis=-1)
    return jnp.where(n > 0, agg, 0.0)


def _log_bound(value: float) -> float:
    return -math.inf if value == 0 else math.log(value)


def rejection_keep(rule: Rejection, log_rho: Array, mask: Array) -> Array:
    """Indicator ``[B, T]`` (``log_rho``'s dtype) of the tokens ``rule`` keeps (1 at masked
    tokens too); a token is valid where ``mask > 0``.

    Ratio statistics are compared in log space, ``log L <= log-stat <= log U``, so no
    ``exp`` is needed; sequence sums of ``log rho`` are clamped to ``[-20, 20]`` first.
    """
    stat = token_statistic(rule.statistic, log_rho)
    if rule.level != "token":
        stat = _aggregate(rule.level, stat, mask > 0)
        if rule.statistic == "ratio" and rule.level == "seq_sum":
            stat = jnp.clip(stat, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        stat = stat[:, None]
    lower, upper = rule.lower, rule.upper
    if rule.statistic == "ratio":
        lower = None if lower is None else _log_bound(lower)
        upper = None if upper is None else _log_bound(upper)
    keep = jnp.ones(stat.shape, bool)
    if lower is not None:
        keep = keep & (stat >= lower)
    if upper is not None:
        keep = keep & (stat <= upper)
    return jnp.broadcast_to(keep, log_rho.shape).astype(log_rho.dtype)


def token_kl(*, rollout_logits: Array, train_logits: Array) -> Array:
    """Exact ``KL(mu(.|c_t) || pi(.|c_t)) = sum_v mu_v (log mu_v - log pi_v)``, ``[B, T]``.

    Computed in the logits' floating dtype (at least float32)."""
    check_floating("rollout_logits", rollout_logits)
    check_floating("train_logits", train_logits)
    check_shape("train_logits", train_logits, np.shape(rollout_logits),
                "rollout_logits.shape (one vocabulary)")
    dtype = float_dtype(rollout_logits, train_logits)
    log_mu = jax.nn.log_softmax(rollout_logits.astype(dtype), axis=-1)
    log_pi = jax.nn.log_softmax(train_logits.astype(dtype), axis=-1)
    return jnp.maximum(jnp.sum(jnp.exp(log_mu) * (log_mu - log_pi), axis=-1), 0.0)


def topk_bucket_kl(*, rollout_topk_log_probs: Array, rollout_topk_ids: Array,
                   train_logits: Array) -> Array:
    """KL over ``k + 1`` buckets: the rollout's top-k tokens plus one "rest" bucket, ``[B, T]``.

    The rest bucket holds ``1 - sum_top-k p`` under each policy. Merging tokens into buckets is a
    deterministic map of the token, so by the data processing inequality this is a LOWER bound
    of the full ``KL(mu || pi)``: TRM from top-k logits can miss violations, never invent them.
    """
    check_floating("rollout_topk_log_probs", rollout_topk_log_probs)
    check_floating("train_logits", train_logits)
    check_shape("rollout_topk_ids", rollout_topk_ids, np.shape(rollout_topk_log_probs),
                "rollout_topk_log_probs.shape (B, T, K)")
    check_shape("train_logits", train_logits, (*np.shape(rollout_topk_log_probs)[:-1], None),
                "(B, T, V)")
    check_integer("rollout_topk_ids", rollout_topk_ids)
    check_index("rollout_topk_ids", rollout_topk_ids, np.shape(train_logits)[-1])
    check_log_prob_where("rollout_topk_log_probs", rollout_topk_log_probs)
    dtype = float_dtype(rollout_topk_log_probs, train_logits)
    log_pi_full = jax.nn.log_softmax(train_logits.astype(dtype), axis=-1)
    log_mu = rollout_topk_log_probs.astype(dtype)
    log_pi = jnp.take_along_axis(log_pi_full, rollout_topk_ids, axis=-1)
    tiny = jnp.finfo(dtype).tiny
    mu_rest = jnp.clip(1.0 - jnp.sum(jnp.exp(log_mu), axis=-1), 0.0, 1.0)
    pi_rest = jnp.clip(1.0 - jnp.sum(jnp.exp(log_pi), axis=-1), tiny, 1.0)
    top = jnp.sum(jnp.exp(log_mu) * (log_mu - log_pi), axis=-1)
    rest = jnp.where(mu_rest > 0,
                     mu_rest * (jnp.log(jnp.maximum(mu_rest, tiny)) - jnp.log(pi_rest)), 0.0)
    return jnp.maximum(top + rest, 0.0)


def _weights(config: CorrectionConfig, log_rho: Array, valid: Array) -> tuple[Array, bool]:
    mode, c, lo = config.weights, config.weight_upper, config.weight_lower
    if mode == "none":
        return jnp.ones_like(log_rho), False
    if mode.startswith("token"):
        log_w = log_rho
    else:
        log_w = jnp.broadcast_to(sequence_log_ratio(log_rho, valid)[:, None], log_rho.shape)
    w = jnp.exp(log_w)
    if mode.endswith("tis"):
        w = jnp.minimum(w, c)
    elif mode.endswith("mis"):
        keep = log_w <= math.log(c)
        if lo is not None:
            keep = keep & (log_w >= _log_bound(lo))
        w = jnp.where(keep, w, 0.0)
    return w, mode.startswith("seq")


def _batch_normalize(w: Array, kept: Array, per_sequence: bool) -> Array:
    kept = kept.astype(w.dtype)
    if per_sequence:
        has = (jnp.sum(kept, axis=-1) > 0).astype(w.dtype)
        total, count = jnp.sum(w[:, 0] * has), jnp.sum(has)
    else:
        total, count = jnp.sum(w * kept), jnp.sum(kept)
    mean = total / jnp.maximum(count, 1.0)
    return w / jnp.where(mean > 0, mean, 1.0)


def _check_inputs(old_log_prob, rollout_log_prob, response_mask, rollout_logits, old_logits,
                  rollout_topk_log_probs, rollout_topk_ids, trm: bool) -> None:
    check_rank("old_log_prob", old_log_prob, 2)
    check_floating("old_log_prob", old_log_prob)
    b, t = old_log_prob.shape
    if b == 0 or t == 0:
        raise ValueError(f"old_log_prob: expected at least one response and one position "
                         f"(B >= 1, T >= 1), got shape {(b, t)}")
    check_shape("rollout_log_prob", rollout_log_prob, (b, t), "(B, T)")
    check_floating("rollout_log_prob", rollout_log_prob)
    check_shape("response_mask", response_mask, (b, t), "(B, T)")
    if not trm:
        return
    if old_logits is None:
        raise ValueError("old_logits: expected [B, T, V] training logits when trm_kl is set")
    check_shape("old_logits", old_logits, (b, t, None), "(B, T, V)")
    if rollout_logits is not None:
        check_shape("rollout_logits", rollout_logits, old_logits.shape, "(B, T, V)")
    elif rollout_topk_log_probs is not None and rollout_topk_ids is not None:
        # the ids and log-probs themselves are checked by topk_bucket_kl
        check_shape("rollout_topk_log_probs", rollout_topk_log_probs, (b, t, None), "(B, T, K)")
    else:
        raise ValueError("rollout_logits: expected [B, T, V] rollout logits (or both "
                         "rollout_topk_log_probs and rollout_topk_ids) when trm_kl is set")


def rollout_correction(config: CorrectionConfig, *, old_log_prob: Array,
                       rollout_log_prob: Array, response_mask: Array,
                       rollout_logits: Array | None = None, old_logits: Array | None = None,
                       rollout_topk_log_probs: Array | None = None,
                       rollout_topk_ids: Array | None = None,
                       check_finite: bool = False) -> CorrectionOutput:
    """Correction weights, rejection mask and diagnostics for one batch.

    Args:
      config: static ``CorrectionConfig`` (hashable; pass it as a static argument under jit).
      old_log_prob: ``[B, T]`` log-prob of the sampled tokens under ``pi_old`` (``pi_theta`` in
        bypass mode). Keyword-only, like every array argument.
      rollout_log_prob: ``[B, T]`` log-prob under the rollout policy ``mu``.
      response_mask: ``[B, T]``; a token is valid where it is ``> 0`` (bool, int or float). A
        non-binary mask is carried through as token weights: the returned ``mask`` is
        ``response_mask * keep`` (``keep`` the 0/1 rejection indicator), so
        ``hyperx.llm.objectives.policy_loss`` weights each token by it in both the numerator and
        the denominator; ratios, weights and metrics count valid tokens, not weights.
      rollout_logits, old_logits: ``[B, T, V]`` full logits, for exact TRM (``trm_kl``).
      rollout_topk_log_probs, rollout_topk_ids: ``[B, T, K]`` normalised rollout log-probs of
        the rollout's top-k tokens and their ids, for the k+1-bucket TRM lower bound.
      check_finite: check the valid tokens' log-probs under ``jit`` too (``checkify``; see the
        module docstring). Concrete inputs are always checked.

    Returns:
      ``CorrectionOutput``: ``weights`` (0 wherever ``mask`` is 0), ``mask`` = response mask AND
      every rejection, ``metrics`` (see ``hyperx.llm.diagnostics.correction_metrics``).
    """
    _check_inputs(old_log_prob, rollout_log_prob, response_mask, rollout_logits, old_logits,
                  rollout_topk_log_probs, rollout_topk_ids, config.trm_kl is not None)
    dtype = float_dtype(old_log_prob, rollout_log_prob)
    mask_in = jnp.asarray(response_mask)
    valid = mask_in > 0
    for name, x in (("old_log_prob", old_log_prob), ("rollout_log_prob", rollout_log_prob)):
        check_finite_where(name, x, valid, checked=check_finite)
        check_log_prob_where(name, x, valid, checked=check_finite)
    log_rho = clamped_log_ratio(old_log_prob.astype(dtype), rollout_log_prob.astype(dtype), valid)
    keep = jnp.ones(log_rho.shape, dtype)
    extra: dict[str, Array] = {}
    n_valid = jnp.maximum(jnp.sum(valid).astype(dtype), 1.0)
    for i, rule in enumerate(config.rejections):
        rule_keep = rejection_keep(rule, log_rho, valid)
        extra[f"reject{i}_{rule.name}_token_fraction"] = (
            jnp.sum(jnp.where(valid, 1 - rule_keep, 0.0)) / n_valid)
        keep = keep * rule_keep
    if config.trm_kl is not None:
        if rollout_logits is not None:
            kl = token_kl(rollout_logits=rollout_logits, train_logits=old_logits)
        else:
            kl = topk_bucket_kl(rollout_topk_log_probs=rollout_topk_log_probs,
                                rollout_topk_ids=rollout_topk_ids, train_logits=old_logits)
        max_kl = jnp.max(jnp.where(valid, kl, 0.0), axis=-1).astype(dtype)
        keep_seq = (max_kl <= config.trm_kl).astype(dtype)
        has = jnp.any(valid, axis=-1).astype(dtype)
        extra["trm_max_token_kl"] = jnp.max(max_kl)
        extra["trm_rejected_seq_fraction"] = (jnp.sum(has * (1 - keep_seq))
                                              / jnp.maximum(jnp.sum(has), 1.0))
        keep = keep * keep_seq[:, None]
    kept = valid & (keep > 0)
    w, per_sequence = _weights(config, log_rho, valid)
    if config.batch_normalize:
        w = _batch_normalize(w, kept, per_sequence)
    weights = jax.lax.stop_gradient(jnp.where(kept, w, 0.0))
    mask = jax.lax.stop_gradient(jnp.where(kept, mask_in.astype(dtype), 0.0))
    lower = config.weight_lower if config.weight_lower is not None else 1.0 / config.weight_upper
    metrics = diagnostics.correction_metrics(
        train_log_prob=jax.lax.stop_gradient(old_log_prob.astype(dtype)),
        rollout_log_prob=jax.lax.stop_gradient(rollout_log_prob.astype(dtype)),
        response_mask=valid, weights=weights, mask=kept, lower=lower, upper=config.weight_upper)
    metrics.update(extra)
    return CorrectionOutput(weights, mask, metrics)
