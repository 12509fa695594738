"""hyperx rollout corrections, OTB and the length-aware LR inside Google's Tunix (``google-tunix``).

Install with the ``tunix`` extra (``pip install "hyperx-rl[tunix]"``); ``hyperx.llm`` itself never
imports this module. Importing it registers, in Tunix's function registry
(``tunix.rl.function_registry``):

* the policy loss ``"hyperx"`` (:func:`hyperx_policy_loss_fn`): Tunix's GRPO/PPO clip objective
  with a :class:`~hyperx.llm.CorrectionConfig` applied to the trainer's and the sampler's per-token
  log-probs, computed by :func:`hyperx.llm.corrected_policy_loss`;
* the advantage estimator ``"otb"`` (:func:`otb_advantage_estimator`): the Optimal Token
  Baseline.

A Tunix GRPO user changes two lines (docs/llm/tunix.md)::

    algo_config = CorrectedGRPOConfig(..., correction=CorrectionConfig.token_tis())
    learner = CorrectedGRPOLearner(rl_cluster, algo_config, reward_fns)

(they were ``GRPOConfig`` and ``GRPOLearner``),
with ``RolloutConfig(return_logprobs=True)``, which :class:`CorrectedGRPOLearner` requires.

The math. Tokens ``y_t`` of a response are sampled by the rollout engine ``mu`` (Tunix's
sampler; here a bf16 copy of the actor), the trainer recomputes ``log pi_old(y_t)`` in float32,
and ``pi_theta`` is optimised. With ``rho_t = pi_old(y_t) / mu(y_t)`` (log space, clamped to
``[-20, 20]``) the correction gives weights ``w`` and a response mask ``m'`` (token TIS
``w_t = min(rho_t, C)``, Yao et al. 2025; sequence TIS/MIS ``min(prod_t rho_t, C)`` /
``W 1[W <= C]``, Liu, Li et al. 2025, "When Speed Kills Stability"; Geo-Mask
``1[L <= exp(mean_t log rho_t) <= U]`` and k1/k2/k3 rejection, verl's Rollout Correction; Trust
Region Masking ``1[max_t |log rho_t| <= delta and mean_t k3_t <= kl]``, Li et al. 2025,
arXiv:2512.23075), and the loss is decoupled PPO

    L = agg_{m'}( sg(w_t) max(-A_t r_t, -A_t clip(r_t, 1 - eps_lo, 1 + eps_hi)) ),
    r_t = pi_theta(y_t) / pi_old(y_t),

with Tunix's dual clip (``epsilon_c``), aggregation (``loss_agg_mode``) and KL penalty
(``beta``, ``kl_loss_mode``) taken from the GRPO config. In bypass mode
(``CorrectionConfig.bypass_ppo_clip()``) ``pi_old := mu``: ``r_t = pi_theta / mu`` and no
weights. With ``CorrectionConfig.disabled()`` and Tunix's ``old_per_token_logps`` this is
exactly Tunix's ``grpo_loss_fn`` (the parity tests check value and gradient).

What Tunix's ``TrainExample`` lacks. Tunix 0.1.7's GRPO ``TrainExample`` has no sampler
log-probs: its ``GRPOLearner`` discards the rollout's ``logprobs``, and its ``old_per_token_logps``
(only computed when ``num_iterations > 1``) come from the ROLLOUT model, not the trainer.
Tunix's agentic GRPO learner is where Tunix itself gets both: the rollout's ``logprobs``
(``RolloutConfig(return_logprobs=True)``), right-padded to the completion length, and the
trainer's log-probs from ``RLCluster.get_actor_per_token_logps`` (the anchor weights, at the
rollout temperature). :class:`CorrectedGRPOLearner` does the same on top of
``GRPOLearner`` and returns a :class:`CorrectedTrainExample` with ``rollout_per_token_logps``.
Per-token entropy is not needed (Tunix's loss computes it from the logits it already has).
``CorrectionConfig.trm_exact`` needs the sampler's full logits, which no Tunix rollout returns
per position: it is refused with an error (sample-based ``CorrectionConfig.trm`` works).

OTB (arXiv:2602.07078). For token ``j`` with proxy ``w_j = ||e_y - softmax(z_j)||^2 =
1 - 2 pi(y_j) + sum_v pi(v)^2`` and energy ``W_t = sum_{j<=t} m_j w_j rho_j^2``, the baseline of
the ``N`` responses of a group at position ``t`` is ``B*_t = sum_i G^i_t W^i_t / sum_i W^i_t``
and ``A_t = G_t - B*_t`` (``G_t`` the reward-to-go: the outcome reward for every token).
Tunix's estimator interface passes only ``rewards`` and ``num_generations``; with nothing more
:func:`otb_advantage_estimator` has ``W`` equal across a group and returns ``r_i - mean_g r``
(``[B]``). :class:`CorrectedGRPOLearner` passes the completion mask (after rejection), the proxy
from the trainer's logits and the IS weights, and gets token-level ``[B, T]`` advantages, which
Tunix's loss accepts.

Length-aware LR (arXiv:2602.01826; the rule is hyperx's, see
:func:`hyperx.llm.length_aware_scale`). Tunix's trainer calls ``optimizer.update(model, grads)``
with no extra arguments, so :func:`tunix_length_aware_scale` keeps the batch's mean response
length in its own state; :class:`CorrectedGRPOLearner` writes it there (:func:`feed_length`)
for every rollout batch. Put it last in ``RLTrainingConfig(actor_optimizer=optax.chain(...,
tunix_length_aware_scale()))``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tunix.generate import utils as tunix_generate_utils
from tunix.rl import common as tunix_common
from tunix.rl import function_registry
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl.grpo import grpo_learner

from hyperx._validation import check_choice, check_positive, check_range, check_rank, check_shape
from hyperx.llm import (
    CorrectionConfig,
    LengthAwareScaleState,
    ObjectiveConfig,
    corrected_policy_loss,
    length_aware_scale,
    log_prob_and_sum_sq,
    otb_advantages,
    rollout_correction,
)

__all__ = [
    "AGG_MODES",
    "OTB_ESTIMATOR",
    "POLICY_LOSS",
    "CorrectedGRPOConfig",
    "CorrectedGRPOLearner",
    "CorrectedTrainExample",
    "LengthFeedState",
    "corrected_loss_from_log_probs",
    "feed_length",
    "hyperx_policy_loss_fn",
    "length_scale",
    "objective_from_tunix",
    "otb_advantage_estimator",
    "tunix_length_aware_scale",
]

POLICY_LOSS = "hyperx"
OTB_ESTIMATOR = "otb"

#: Tunix's ``loss_agg_mode`` -> hyperx's ``ObjectiveConfig.agg`` (same reduction; for
#: ``sequence-mean-token-scale`` hyperx's ``max_length`` is set to the completion length ``T``,
#: Tunix's default norm; Tunix's ``sequence-mean-token-sum-norm`` divides by the number of
#: non-empty responses, which is ``seq-mean-token-sum``).
AGG_MODES = {
    "token-mean": "token-mean",
    "sequence-mean-token-mean": "seq-mean-token-mean",
    "sequence-mean-token-scale": "seq-mean-token-sum-norm",
    "seq-mean-token-sum": "seq-mean-token-sum",
    "sequence-mean-token-sum-norm": "seq-mean-token-sum",
}


@dataclasses.dataclass(kw_only=True)
class CorrectedGRPOConfig(grpo_learner.GRPOConfig):
    """Tunix's ``GRPOConfig`` with a rollout correction (and the ``"hyperx"`` loss by default).

    Attributes:
      epsilon_high: the upper clip ``1 + epsilon_high`` (None: ``epsilon``); Tunix's
        ``grpo_loss_fn`` reads it too (as Tunix's agentic ``GRPOConfig`` declares it).
      epsilon_c: the dual clip ``c > 1`` (None: off), read by both losses.
      correction: the :class:`~hyperx.llm.CorrectionConfig` (presets: ``token_tis()``,
        ``seq_tis()``, ``seq_mis()``, ``geo_mask()``, ``trm()``, ``bypass_ppo_clip()``, ...).
      objective: None (default) builds the PPO objective from Tunix's fields
        (:func:`objective_from_tunix`); an explicit :class:`~hyperx.llm.ObjectiveConfig`
        overrides them (e.g. ``loss="reinforce"``).
      otb_is_weights: with ``advantage_estimator="otb"``, scale OTB's energy by the squared
        correction weights (as :func:`hyperx.llm.otb_advantages`'s ``is_weights``).
    """

    policy_loss_fn: str = POLICY_LOSS
    epsilon_high: float | None = None
    epsilon_c: float | None = None
    correction: CorrectionConfig = CorrectionConfig()
    objective: ObjectiveConfig | None = None
    otb_is_weights: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epsilon_high is None:
            self.epsilon_high = self.epsilon
        for name in ("epsilon", "epsilon_high"):
            check_positive(name, getattr(self, name))
        if self.epsilon_c is not None:
            check_range("epsilon_c", self.epsilon_c, 1.0, open_low=True)
        if not isinstance(self.correction, CorrectionConfig):
            raise TypeError(f"correction: expected a hyperx.llm.CorrectionConfig, "
                            f"got {type(self.correction).__name__}")
        if self.objective is not None and not isinstance(self.objective, ObjectiveConfig):
            raise TypeError(f"objective: expected a hyperx.llm.ObjectiveConfig or None, "
                            f"got {type(self.objective).__name__}")
        if self.correction.trm_kl is not None:
            raise ValueError("correction: trm_kl (exact TRM) needs the sampler's per-position "
                             "logits, which Tunix's rollouts do not return; use "
                             "CorrectionConfig.trm() (sample-based TRM from log-probs)")
        if self.loss_algo != "grpo":
            raise ValueError(f"loss_algo: the 'hyperx' loss implements loss_algo='grpo' "
                             f"(token ratios), got {self.loss_algo!r}; for a sequence ratio "
                             f"pass objective=ObjectiveConfig(sequence_ratio=True)")
        check_choice("loss_agg_mode", self.loss_agg_mode, AGG_MODES)


def objective_from_tunix(algo_config: Any, completion_length: int) -> ObjectiveConfig:
    """The :class:`~hyperx.llm.ObjectiveConfig` equal to Tunix's GRPO clip objective.

    ``clip_eps = epsilon``, ``clip_eps_high = epsilon_high`` (``epsilon`` when absent),
    ``dual_clip = epsilon_c``, ``agg = AGG_MODES[loss_agg_mode]`` (``max_length`` =
    ``completion_length`` for ``sequence-mean-token-scale``). An explicit
    ``algo_config.objective`` is returned as is.
    """
    explicit = getattr(algo_config, "objective", None)
    if explicit is not None:
        return explicit
    mode = getattr(algo_config, "loss_agg_mode", "sequence-mean-token-mean")
    check_choice("algo_config.loss_agg_mode", mode, AGG_MODES)
    epsilon = float(algo_config.epsilon)
    high = getattr(algo_config, "epsilon_high", None)
    dual = getattr(algo_config, "epsilon_c", None)
    return ObjectiveConfig(
        loss="ppo", clip_eps=epsilon, clip_eps_high=epsilon if high is None else float(high),
        dual_clip=None if dual is None else float(dual), agg=AGG_MODES[mode],
        max_length=completion_length if mode == "sequence-mean-token-scale" else None)


@flax.struct.dataclass(frozen=True)
class CorrectedTrainExample(grpo_learner.TrainExample):
    """Tunix's GRPO ``TrainExample`` plus the sampler's per-token log-probs ``[B, T]``
    (``rollout_per_token_logps``: ``log mu(y_t)``, 0 at padding)."""

    rollout_per_token_logps: jax.Array | None = None


def _correction(algo_config: Any) -> CorrectionConfig:
    correction = getattr(algo_config, "correction", None)
    if not isinstance(correction, CorrectionConfig):
        raise TypeError(f"algo_config.correction: the 'hyperx' policy loss needs a "
                        f"hyperx.llm.CorrectionConfig (use CorrectedGRPOConfig), "
                        f"got {correction!r}")
    return correction


def corrected_loss_from_log_probs(
    per_token_logps: jax.Array, train_example: Any, algo_config: Any
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The ``"hyperx"`` loss given ``log pi_theta`` ``[B, T]`` (differentiated).

    Reads ``completion_mask``, ``advantages`` (``[B]`` or ``[B, T]``), ``old_per_token_logps``
    (None: ``sg(log pi_theta)``, Tunix's own convention for ``num_iterations = 1``),
    ``rollout_per_token_logps`` and ``ref_per_token_logps`` from ``train_example``; returns
    ``(loss, aux)`` with the correction's and the objective's metrics, Tunix's ``"kl"`` and
    ``"kl_loss"`` (added as ``beta * kl_loss`` when ``beta != 0``), ``"pg_loss"`` and
    ``"pg_clipfrac"``.
    """
    correction = _correction(algo_config)
    if getattr(train_example, "segment_ids", None) is not None:
        raise ValueError("train_example.segment_ids: the 'hyperx' loss needs one response per "
                         "row; sequence packing is not supported")
    log_prob = jnp.asarray(per_token_logps, jnp.float32)
    check_rank("per_token_logps", log_prob, 2)
    mask = jnp.asarray(train_example.completion_mask).astype(jnp.float32)
    check_shape("train_example.completion_mask", mask, log_prob.shape,
                "[B, T] of per_token_logps")
    adv = jnp.asarray(train_example.advantages, jnp.float32)
    if adv.ndim == 1:
        adv = jnp.broadcast_to(adv[:, None], log_prob.shape)
    if adv.shape != log_prob.shape:
        raise ValueError(f"train_example.advantages: expected [B] or {log_prob.shape}, "
                         f"got {adv.shape}")
    rollout = getattr(train_example, "rollout_per_token_logps", None)
    if rollout is None:
        raise ValueError("train_example.rollout_per_token_logps: the 'hyperx' loss needs the "
                         "sampler's per-token log-probs; train with CorrectedGRPOLearner and "
                         "RolloutConfig(return_logprobs=True)")
    rollout = jnp.asarray(rollout, jnp.float32)
    check_shape("train_example.rollout_per_token_logps", rollout, log_prob.shape,
                "[B, T] of per_token_logps")
    old = train_example.old_per_token_logps
    old = (jax.lax.stop_gradient(log_prob) if old is None
           else jnp.asarray(old, jnp.float32))
    objective = objective_from_tunix(algo_config, log_prob.shape[1])
    out = corrected_policy_loss(
        objective, correction, log_prob=log_prob,
        old_log_prob=None if correction.bypass else old, rollout_log_prob=rollout,
        advantages=adv, response_mask=mask)
    loss = out.loss
    aux = {k: jnp.asarray(v, jnp.float32) for k, v in out.metrics.items()}
    aux["pg_loss"] = out.loss
    aux["pg_clipfrac"] = aux.get("clipped_fraction", jnp.float32(0.0))
    aux["kl"] = jnp.float32(0.0)
    aux["kl_loss"] = jnp.float32(0.0)
    ref = train_example.ref_per_token_logps
    if ref is not None:
        kl = tunix_common.compute_kl_divergence(
            log_prob, ref, algo_config.kl_loss_mode,
            clamp_value=getattr(algo_config, "kl_clamp_value", None))
        aux["kl"] = jnp.sum(kl * mask) / jnp.maximum(jnp.sum(mask), 1.0)
        kl_loss = tunix_common.aggregate_loss(kl, mask, algo_config.loss_agg_mode)
        aux["kl_loss"] = kl_loss
        beta = getattr(algo_config, "beta", 0.0)
        if beta is not None and beta != 0.0:
            loss = loss + beta * kl_loss
    return loss, aux


@function_registry.register_policy_loss_fn(POLICY_LOSS)
def hyperx_policy_loss_fn(model: nnx.Module, train_example: Any, algo_config: Any, pad_id: int,
                          eos_id: int, **kwargs: Any) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Tunix policy loss ``"hyperx"``: decoupled / bypass PPO with ``algo_config.correction``.

    Same signature and forward pass as Tunix's ``grpo_loss_fn``
    (``tunix.rl.common.compute_per_token_logps`` at ``algo_config.temperature``); the loss is
    :func:`corrected_loss_from_log_probs` (see the module docstring for the math).
    """
    del kwargs
    graphdef, state = nnx.split(model)
    per_token_logps = tunix_common.compute_per_token_logps(
        graphdef, state, prompt_tokens=train_example.prompt_ids,
        completion_tokens=train_example.completion_ids, pad_id=pad_id, eos_id=eos_id,
        stop_gradient=False, return_logits=False,
        temperature=getattr(algo_config, "temperature", 1.0))
    return corrected_loss_from_log_probs(per_token_logps, train_example, algo_config)


@function_registry.register_advantage_estimator(OTB_ESTIMATOR)
def otb_advantage_estimator(rewards: Any, num_generations: int, *,
                            completion_mask: Any = None, proxy: Any = None,
                            is_weights: Any = None) -> jax.Array:
    """Tunix advantage estimator ``"otb"``: Optimal Token Baseline advantages (arXiv:2602.07078).

    Args:
      rewards: ``[B]`` outcome rewards, groups of ``num_generations`` contiguous responses.
      num_generations: responses per prompt ``N`` (>= 2, dividing ``B``).
      completion_mask: ``[B, T]`` (after rejection: an all-zero row leaves its group); None:
        one position per response, so ``W`` is equal within a group and ``A_i = r_i - mean_g r``.
      proxy: ``[B, T]`` logit-gradient proxy ``w_t`` (None: 1 per token).
      is_weights: ``[B, T]`` IS weights; the energy takes their square.

    Returns:
      ``[B]`` advantages without ``completion_mask``, else ``[B, T]`` (``G_t - B*_t`` masked).
    """
    r = jnp.asarray(rewards, jnp.float32)
    check_rank("rewards", r, 1)
    if isinstance(num_generations, bool) or not isinstance(num_generations, int | np.integer) \
            or num_generations < 2 or r.shape[0] % num_generations:
        raise ValueError(f"num_generations: expected an int >= 2 dividing the batch size "
                         f"{r.shape[0]}, got {num_generations!r}")
    b, n = r.shape[0], int(num_generations)
    if completion_mask is None:
        out = otb_advantages(token_rewards=r.reshape(b // n, n, 1),
                             response_mask=jnp.ones((b // n, n, 1), jnp.float32),
                             proxy=jnp.ones((b // n, n, 1), jnp.float32))
        return out.advantages.reshape(b)
    mask = jnp.asarray(completion_mask).astype(jnp.float32)
    check_shape("completion_mask", mask, (b, None), "(B, T)")
    t = mask.shape[1]
    lengths = jnp.sum(mask > 0, axis=-1)
    last = jnp.arange(t)[None, :] == (lengths - 1)[:, None]
    token_rewards = jnp.where(last, r[:, None], 0.0)
    w = jnp.ones_like(mask) if proxy is None else jnp.asarray(proxy, jnp.float32)
    for name, x in (("proxy", w), ("is_weights", is_weights)):
        if x is not None:
            check_shape(name, x, mask.shape, "[B, T] of completion_mask")
    group = lambda x: jnp.asarray(x, jnp.float32).reshape(b // n, n, t)  # noqa: E731
    out = otb_advantages(token_rewards=group(token_rewards), response_mask=group(mask),
                         proxy=group(w),
                         is_weights=None if is_weights is None else group(is_weights))
    return out.advantages.reshape(b, t)


class LengthFeedState(NamedTuple):
    """State of :func:`tunix_length_aware_scale`: the fed ``mean_length`` / ``mismatch_kl``
    (NaN until :func:`feed_length` is called) and the inner
    :class:`~hyperx.llm.LengthAwareScaleState` (``inner.scale`` is the current scale)."""

    mean_length: jax.Array
    mismatch_kl: jax.Array
    inner: LengthAwareScaleState


def tunix_length_aware_scale(*, dtype: Any = jnp.float32,
                             **kwargs: Any) -> optax.GradientTransformation:
    """:func:`hyperx.llm.length_aware_scale` as a plain ``optax.GradientTransformation``.

    Tunix's trainer calls ``update(grads, state, params)`` with no extra arguments, so the
    batch's mean response length (and, with ``kl_threshold``, the mismatch KL) is read from
    this transformation's state, written by :func:`feed_length` (which
    :class:`CorrectedGRPOLearner` calls for every rollout batch). Every optimizer update uses
    the latest fed values (when Tunix prepares the next rollout batch while the current one
    trains, that is the newest batch's length: the surge signal is then one batch early). An
    update before the first feed is an error outside ``jit``; inside ``jit`` (Tunix's train
    step) it sees NaN, which the inner scale skips and counts in ``inner.skipped`` (it never
    poisons the averages). ``kwargs`` are
    :func:`~hyperx.llm.length_aware_scale`'s.
    """
    inner = length_aware_scale(dtype=dtype, **kwargs)
    tracks_kl = kwargs.get("kl_threshold") is not None

    def init_fn(params: Any) -> LengthFeedState:
        nan = jnp.full((), jnp.nan, dtype)
        return LengthFeedState(nan, nan, inner.init(params))

    def update_fn(updates: Any, state: LengthFeedState, params: Any = None
                  ) -> tuple[Any, LengthFeedState]:
        try:
            unfed = bool(jnp.isnan(state.mean_length))
        except jax.errors.ConcretizationTypeError:  # inside jit: the inner scale skips NaN
            unfed = False
        if unfed:
            raise ValueError("mean_length: no length was fed before this update; call "
                             "hyperx.llm.tunix.feed_length(optimizer, mean_length=...) first "
                             "(CorrectedGRPOLearner does, for every rollout batch)")
        updates, new_inner = inner.update(
            updates, state.inner, params, mean_length=state.mean_length,
            mismatch_kl=state.mismatch_kl if tracks_kl else None)
        return updates, state._replace(inner=new_inner)

    return optax.GradientTransformation(init_fn, update_fn)


def _feed_states(tree: Any) -> list[LengthFeedState]:
    leaves = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, LengthFeedState))
    return [x for x in leaves if isinstance(x, LengthFeedState)]


def feed_length(optimizer: nnx.Optimizer, *, mean_length: Any,
                mismatch_kl: Any = None) -> int:
    """Write the batch's ``mean_length`` (and ``mismatch_kl``) into every
    :class:`LengthFeedState` of an ``nnx.Optimizer``'s state (Tunix's
    ``rl_cluster.actor_trainer.optimizer``); returns how many were found (0: the optimizer has
    no :func:`tunix_length_aware_scale`). Host-side, between jitted steps: the shapes and
    dtypes do not change, so nothing recompiles."""
    states = _feed_states(optimizer.opt_state)
    for s in states:
        s.mean_length.set_value(jnp.asarray(mean_length, s.mean_length.get_value().dtype))
        if mismatch_kl is not None:
            s.mismatch_kl.set_value(jnp.asarray(mismatch_kl, s.mismatch_kl.get_value().dtype))
    return len(states)


def length_scale(optimizer: nnx.Optimizer) -> float | None:
    """The current scale of the first :func:`tunix_length_aware_scale` in ``optimizer``."""
    states = _feed_states(optimizer.opt_state)
    if not states:
        return None
    scale = states[0].inner.scale
    return float(scale.get_value() if isinstance(scale, nnx.Variable) else scale)


@nnx.jit(static_argnames=("pad_id", "eos_id", "temperature"))
def _log_prob_and_sum_sq(model: nnx.Module, prompt_ids: jax.Array, completion_ids: jax.Array,
                         pad_id: int, eos_id: int, temperature: float):
    graphdef, state = nnx.split(model)
    _, logits = tunix_common.compute_per_token_logps(
        graphdef, state, prompt_tokens=prompt_ids, completion_tokens=completion_ids,
        pad_id=pad_id, eos_id=eos_id, stop_gradient=True, return_logits=True,
        temperature=temperature)
    return log_prob_and_sum_sq(logits.astype(jnp.float32), completion_ids)  # already / T


class CorrectedGRPOLearner(grpo_learner.GRPOLearner):
    """Tunix's ``GRPOLearner`` whose train examples carry what the ``"hyperx"`` loss needs.

    For every rollout batch, after Tunix's own ``_generate_and_compute_advantage``:

    * ``rollout_per_token_logps``: the sampler's ``logprobs`` (``RolloutConfig(
      return_logprobs=True)`` is required), right-padded with 0 to the completion length by
      ``tunix.generate.utils.pad_to_length``, as Tunix pads the completion tokens;
    * ``old_per_token_logps``: the trainer's ``log pi_old`` from
      ``RLCluster.get_actor_per_token_logps`` (the anchor weights at the rollout temperature, as
      Tunix's agentic learner gets them; Tunix's ``GRPOLearner`` would take them from the
      rollout model, which is ``mu``). Not computed in bypass mode;
    * with ``advantage_estimator="otb"``: token-level OTB advantages
      (:func:`otb_advantage_estimator` with the completion mask after the correction's
      rejection, the proxy from the trainer's logits and, when ``otb_is_weights``, the
      correction weights);
    * the batch's mean completion length and k3 mismatch KL are fed to any
      :func:`tunix_length_aware_scale` in the actor optimizer.

    The last batch's correction metrics are in ``self.last_correction_metrics``.
    """

    def __init__(self, rl_cluster: rl_cluster_lib.RLCluster, algo_config: Any,
                 reward_fns: Callable[..., Any] | Sequence[Callable[..., Any]],
                 metric_fns: Sequence[Callable[..., Any]] | None = None,
                 data_shuffle_seed: int | None = None) -> None:
        _correction(algo_config)
        rollout_config = rl_cluster.get_rollout_config(mode=rl_cluster_lib.Mode.TRAIN)
        if not getattr(rollout_config, "return_logprobs", False):
            raise ValueError("rl_cluster: the rollout config needs return_logprobs=True "
                             "(the correction uses the sampler's per-token log-probs)")
        super().__init__(rl_cluster=rl_cluster, algo_config=algo_config,
                         reward_fns=reward_fns, metric_fns=metric_fns,
                         data_shuffle_seed=data_shuffle_seed)
        self.last_correction_metrics: dict[str, float] = {}

    def _generate_and_compute_advantage(self, training_input: Any,
                                        mode: rl_cluster_lib.Mode = rl_cluster_lib.Mode.TRAIN
                                        ) -> CorrectedTrainExample:
        captured: dict[str, Any] = {}
        cluster = self.rl_cluster
        generate, compute_rewards = cluster.generate, self._compute_rewards

        def capture_generate(*args: Any, **kwargs: Any) -> Any:
            captured["rollout"] = out = generate(*args, **kwargs)
            return out

        def capture_rewards(*args: Any, **kwargs: Any) -> Any:
            captured["rewards"] = out = compute_rewards(*args, **kwargs)
            return out

        cluster.generate, self._compute_rewards = capture_generate, capture_rewards
        try:
            example = super()._generate_and_compute_advantage(training_input, mode)
        finally:
            del cluster.generate, self._compute_rewards
        return self._correct(example, captured["rollout"], captured["rewards"])

    def _correct(self, example: Any, rollout_output: Any, rewards: Any) -> CorrectedTrainExample:
        config = self.algo_config
        correction = _correction(config)
        completion_ids = example.completion_ids
        b, t = completion_ids.shape
        if rollout_output.logprobs is None or len(rollout_output.logprobs) != b:
            raise ValueError("rollout_output.logprobs: expected one log-prob list per "
                             "completion (RolloutConfig(return_logprobs=True))")
        rollout_lp = jnp.asarray(np.stack([
            tunix_generate_utils.pad_to_length(np.asarray(lp, np.float32)[:t], target_length=t,
                                      pad_value=0.0, left=False)
            for lp in rollout_output.logprobs]))
        mask = jnp.asarray(example.completion_mask).astype(jnp.float32)
        pad_id, eos_id = self.rl_cluster.rollout.pad_id(), self.rl_cluster.rollout.eos_id()
        temperature = float(getattr(config, "temperature", 1.0))
        otb = config.advantage_estimator == OTB_ESTIMATOR
        old, sum_sq = example.old_per_token_logps, None
        if otb:
            old, sum_sq = _log_prob_and_sum_sq(self.rl_cluster.actor_trainer.model,
                                               example.prompt_ids, completion_ids, pad_id,
                                               eos_id, temperature)
        elif not correction.bypass:
            old = self.rl_cluster.get_actor_per_token_logps(
                prompt_tokens=example.prompt_ids, completion_tokens=completion_ids,
                pad_id=pad_id, eos_id=eos_id, temperature=temperature)
        reference = old if old is not None else rollout_lp
        corr = rollout_correction(correction, old_log_prob=reference,
                                  rollout_log_prob=rollout_lp, response_mask=mask)
        self.last_correction_metrics = {k: float(v) for k, v in corr.metrics.items()}
        advantages = example.advantages
        if otb:
            kept = jnp.where(jnp.any(corr.mask > 0, axis=-1, keepdims=True), mask, 0.0)
            proxy = jnp.maximum(1.0 - 2.0 * jnp.exp(jnp.minimum(old, 0.0)) + sum_sq, 0.0)
            use_w = config.otb_is_weights and correction.weights != "none"
            advantages = otb_advantage_estimator(
                jnp.asarray(rewards, jnp.float32), config.num_generations,
                completion_mask=kept, proxy=proxy, is_weights=corr.weights if use_w else None)
        k3 = corr.metrics.get("k3_kl")
        feed_length(self.rl_cluster.actor_trainer.optimizer,
                    mean_length=jnp.mean(jnp.sum(mask, axis=-1)),
                    mismatch_kl=None if k3 is None else jnp.maximum(k3, 0.0))
        fields = {f.name: getattr(example, f.name) for f in dataclasses.fields(example)}
        fields.update(old_per_token_logps=None if correction.bypass else old,
                      rollout_per_token_logps=rollout_lp, advantages=advantages)
        return CorrectedTrainExample(**fields)
