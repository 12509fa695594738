"""GRPO / PPO-style RL of a causal LM under a real training-inference mismatch.

One RL step (``train``) has three jitted parts, as in verl's rollout / log-prob / update split:

1. **sample** (``Trainer.rollout``): ``G`` prompts, each repeated ``N`` times (contiguous
   groups), answered by the *inference path*: the model with its parameters cast to
   ``rollout_dtype`` (``bfloat16``, or ``float8`` e4m3 weights computed in bf16) and, with
   ``lag = k``, the parameters of ``k`` updates ago (asynchronous rollouts). The sampler records
   the behaviour log-probs ``log mu(y_t)``.
2. **score** (``Trainer.score``): exact task rewards and the trainer's float32 teacher-forced
   recomputation ``log pi_old(y_t)`` (with ``sum_v pi_old(v)^2`` for the OTB proxy).
3. **update** (``Trainer.update``, ONE jitted function): advantages (GRPO, Dr.GRPO, RLOO or the
   Optimal Token Baseline), rollout correction (:mod:`hyperx.llm.corrections`, weights and
   rejection masks from ``rho_t = pi_old / mu``), the objective
   (:func:`hyperx.llm.objectives.corrected_policy_loss`: decoupled PPO or REINFORCE) and the
   optax step (Adam with global-norm clipping, optionally followed by
   :func:`hyperx.llm.schedules.length_aware_scale`), repeated ``ppo_epochs`` times in a scan.

Because ``mu`` differs from ``pi_old`` both numerically (precision) and in time (lag), the
uncorrected update is biased; the corrections reweight or reject the tokens it gets wrong.
Every step logs reward, response length, mismatch KL, chi-square, ESS, masked fractions,
gradient norm, learning rate and tokens, and how far the update moved the policy on the batch's
own tokens (``update_kl``: the k3 estimate of ``KL(pi_old || pi_new)``; ``update_clip_fraction``:
tokens whose ratio left the PPO clip range). The per-epoch metrics (``ratio_mean``,
``clip_fraction``, ``approx_kl``) are measured before the first optimiser step, where the ratio is
1 by construction; the ``update_*`` pair is measured after the last.

Sources: GRPO (Shao et al. 2024, arXiv:2402.03300); PPO (Schulman et al. 2017); decoupled PPO
and rollout correction (the verl Rollout Correction documentation; Yao et al. 2025; Liu, Li et
al. 2025); OTB (arXiv:2602.07078); length-aware LR (arXiv:2602.01826, rule ours).
"""

from __future__ import annotations

import collections
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import optax

from hyperx._validation import (
    check_choice,
    check_int,
    check_memory,
    check_positive,
    device_memory_bytes,
    plural,
    tree_bytes,
)
from hyperx.llm.baselines import (
    dr_grpo_advantages,
    grpo_advantages,
    log_prob_and_sum_sq,
    otb_advantages_from_sum_sq,
    rloo_advantages,
)
from hyperx.llm.corrections import CorrectionConfig, rollout_correction
from hyperx.llm.diagnostics import information_bandwidth, mismatch_metrics
from hyperx.llm.model import (
    LanguageModel,
    Rollout,
    response_log_probs,
    response_logits,
    routed_response_logits,
    sample,
    transformer_lm,
)
from hyperx.llm.moe import (
    MoEConfig,
    load_balance_loss,
    router_entropy,
    routing_diagnostics,
    routing_flips,
)
from hyperx.llm.objectives import ObjectiveConfig, corrected_policy_loss
from hyperx.llm.schedules import length_aware_scale
from hyperx.llm.tasks import Task
from hyperx.llm.transformer import Transformer

__all__ = ["ADVANTAGES", "CORRECTIONS", "Batch", "ObjectiveConfig", "RLConfig", "Rollout",
           "Scores", "TrainState", "Trainer", "advance_key", "batch_memory_bytes",
           "cast_params", "compare", "corrected_group_advantages", "correction_preset",
           "evaluate", "group_advantages", "last_token_rewards", "make_optimizer",
           "make_policy", "make_trainer", "param_memory_bytes", "policy_module",
           "supervised_warmup", "train", "transformer_lms"]

ADVANTAGES = ("grpo", "dr_grpo", "rloo", "otb")
ROUTING_REPLAYS = ("none", "r2", "r3")
ROLLOUT_DTYPES = ("float32", "bfloat16", "float8")
LR_SCHEDULES = ("constant", "length_aware")
CORRECTIONS: dict[str, CorrectionConfig] = {
    "none": CorrectionConfig.disabled(),
    "token_tis": CorrectionConfig.token_tis(),
    "seq_tis": CorrectionConfig.seq_tis(),
    "seq_mis": CorrectionConfig.seq_mis(),
    "icepop": CorrectionConfig.icepop(),
    "token_rejection": CorrectionConfig.token_rejection(),
    "geo_mask": CorrectionConfig.geo_mask(),
    "geo_mask_token_tis": CorrectionConfig.geo_mask_token_tis(),
    "trm": CorrectionConfig.trm(),
    "trm_exact": CorrectionConfig.trm_exact(),
    "bypass": CorrectionConfig.bypass_ppo_clip(),
}
"""Named corrections of ``hyperx llm --correction``: each is its :class:`CorrectionConfig`
constructor with that constructor's defaults, the one source of the presets' thresholds.
``geo_mask`` keeps a response iff ``0.9 <= exp(mean_t log rho) <= 1.1`` (verl's reading of the
thresholds ``"L_U"`` is ``1/U <= rho_geo <= 1/L``, hence ``geo_mask(1/1.1, 1/0.9)``) and
``trm`` rejects it iff ``max_t |log rho_t| > 1`` or ``mean_t k3 > 0.05`` (``trm_exact``:
``max_t KL_t > 0.05`` from full logits). verl's own presets (``0.999_1.001`` for Geo-RS, which
rejects nearly every response of a bf16 + lag rollout; 0.01 for K3-RS) are
:data:`hyperx.llm.verl.PRESETS`, through :func:`hyperx.llm.verl.from_verl_options`."""


def correction_preset(name: str) -> CorrectionConfig:
    """The :data:`CORRECTIONS` entry ``name``; ``ValueError`` naming ``correction`` otherwise."""
    check_choice("correction", name, tuple(CORRECTIONS))
    return CORRECTIONS[name]


@dataclass(frozen=True)
class RLConfig:
    """Static settings of the RL loop (hashable; closed over by the jitted functions).

    Attributes:
      prompts_per_step: ``G`` prompts per batch.
      group_size: ``N >= 2`` responses per prompt (batch ``B = G N``); every advantage is
        group-relative, so a one-response group's is identically 0 (an error).
      learning_rate: Adam step size (``ppo_epochs`` steps per batch).
      advantage: one of ``ADVANTAGES``.
      correction: a :class:`CorrectionConfig` (see :data:`CORRECTIONS` for named ones).
      objective: an :class:`ObjectiveConfig` (default decoupled PPO clip, token-mean).
      rollout_dtype: numeric path of the sampler, one of ``ROLLOUT_DTYPES``.
      lag: the sampler uses the parameters of ``lag`` updates ago (0: the current ones).
      lr_schedule: ``"constant"`` or ``"length_aware"`` (the scale of
        :func:`length_aware_scale` with ``schedule_kwargs``).
      max_grad_norm: global-norm clip before Adam (None: off).
      temperature: sampling temperature ``tau``; the trainer scores with the same ``tau``.
      extra_tokens: ``max_new_tokens = task.answer_len + extra_tokens`` (room to ramble).
      ppo_epochs: full-batch optimiser steps per batch (the PPO ratio departs from 1 after 1).
      otb_is_weights: OTB's energy uses the correction weights (``w_j rho_j^2``).
      adam_b2: Adam's second-moment decay.
      bandwidth_bins: equal-width bins of the logged advantage entropies
        (:func:`~hyperx.llm.diagnostics.information_bandwidth`); they cap both at
        ``log2(bandwidth_bins)`` bits, so use more than the batch size ``B`` to see per-token
        advantages exceed the scalar ceiling ``log2(B)``.
      routing_replay: for an MoE policy (:mod:`hyperx.llm.moe`), which expert selection the
        trainer's forwards use: ``"none"`` (each forward routes afresh), ``"r2"`` (vanilla
        routing replay: the update replays the routing of the trainer's own ``log pi_old``
        forward) or ``"r3"`` (rollout routing replay: ``log pi_old`` and the update both replay
        the sampler's routing; verl's Router Replay modes R2 / R3).
      load_balance_coef: weight of the Switch load-balancing loss
        (:func:`~hyperx.llm.moe.load_balance_loss`) added to an MoE policy's loss.
      router_entropy_coef: weight of the router-entropy bonus subtracted from it.
    """

    prompts_per_step: int = 16
    group_size: int = 8
    learning_rate: float = 1e-3
    advantage: str = "grpo"
    correction: CorrectionConfig = CorrectionConfig()
    objective: ObjectiveConfig = ObjectiveConfig()
    rollout_dtype: str = "bfloat16"
    lag: int = 0
    lr_schedule: str = "constant"
    schedule_kwargs: tuple[tuple[str, Any], ...] = ()
    max_grad_norm: float | None = 1.0
    temperature: float = 1.0
    extra_tokens: int = 2
    ppo_epochs: int = 1
    otb_is_weights: bool = True
    adam_b2: float = 0.99
    bandwidth_bins: int = 16
    routing_replay: str = "none"
    load_balance_coef: float = 0.0
    router_entropy_coef: float = 0.0

    def __post_init__(self) -> None:
        check_int("prompts_per_step", self.prompts_per_step)
        check_int("group_size", self.group_size)
        check_positive("learning_rate", self.learning_rate)
        check_choice("advantage", self.advantage, ADVANTAGES)
        check_choice("rollout_dtype", self.rollout_dtype, ROLLOUT_DTYPES)
        check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        check_int("lag", self.lag, low=0)
        check_positive("temperature", self.temperature)
        check_int("extra_tokens", self.extra_tokens, low=0)
        check_int("ppo_epochs", self.ppo_epochs)
        check_int("bandwidth_bins", self.bandwidth_bins)
        check_choice("routing_replay", self.routing_replay, ROUTING_REPLAYS)
        check_positive("load_balance_coef", self.load_balance_coef, allow_zero=True)
        check_positive("router_entropy_coef", self.router_entropy_coef, allow_zero=True)
        if self.max_grad_norm is not None:
            check_positive("max_grad_norm", self.max_grad_norm)
        if self.group_size == 1:
            raise ValueError(
                f"group_size: expected >= 2 with advantage={self.advantage!r}, got 1 (a "
                f"group-relative advantage of a one-response group is identically 0: the run "
                f"would not learn)")
        if not isinstance(self.correction, CorrectionConfig):
            raise TypeError("correction: expected a CorrectionConfig (see correction_preset)")
        if not isinstance(self.objective, ObjectiveConfig):
            raise TypeError("objective: expected an ObjectiveConfig")

    @property
    def batch_size(self) -> int:
        return self.prompts_per_step * self.group_size


class TrainState(NamedTuple):
    """Parameters, optimiser state and the number of updates so far; ``lagged`` holds the
    parameters of the last ``config.lag`` updates (oldest first) that a stale sampler still
    uses, so :func:`train` called in chunks samples exactly as one call would."""

    params: Any
    opt_state: Any
    step: jax.Array
    lagged: tuple = ()


class Batch(NamedTuple):
    """One rollout: prompts ``[B, P]``, answers ``[B, A]`` and the sampled :class:`Rollout`."""

    prompts: jax.Array
    answers: jax.Array
    rollout: Rollout


class Scores(NamedTuple):
    """Rewards ``[B]``, ``log pi_old`` and ``sum pi_old^2`` ``[B, T]`` (and logits for TRM).

    For an MoE policy: ``routing``, the selection the update replays (None: route afresh), and
    ``trainer_experts``, the float32 trainer's own routing of the batch under ``pi_old``; both
    ``{"block_i": [B, P + T, K]}``."""

    rewards: jax.Array
    old_log_prob: jax.Array
    sum_sq: jax.Array
    old_logits: jax.Array | None = None
    routing: dict[str, jax.Array] | None = None
    trainer_experts: dict[str, jax.Array] | None = None


class TrainerInitFn(Protocol):
    """``init(params) -> TrainState``: the trainer's state (parameters and optimiser) from
    the initial parameters."""

    def __call__(self, params: Any) -> TrainState: ...


class TrainerRolloutFn(Protocol):
    """``rollout(params, key) -> Batch``: sample ``N`` responses to each of ``G`` prompts
    with the inference copy of ``params``."""

    def __call__(self, params: Any, key: jax.Array) -> Batch: ...


class TrainerScoreFn(Protocol):
    """``score(params, batch) -> Scores``: rewards and the trainer's teacher-forced
    log-probabilities of the batch."""

    def __call__(self, params: Any, batch: Batch) -> Scores: ...


class TrainerUpdateFn(Protocol):
    """``update(state, batch, scores) -> (state, metrics)``: one optimiser pass over the
    batch (``ppo_epochs`` steps)."""

    def __call__(self, state: TrainState, batch: Batch,
                 scores: Scores) -> tuple[TrainState, dict[str, jax.Array]]: ...


class TrainerObjectiveFn(Protocol):
    """``objective(params, batch, scores) -> (loss, metrics)``: the loss ``update``
    minimises."""

    def __call__(self, params: Any, batch: Batch,
                 scores: Scores) -> tuple[jax.Array, dict[str, jax.Array]]: ...


class Trainer(NamedTuple):
    """The three jitted parts of an RL step and the optimiser (see the module docstring; each
    field's Protocol gives its signature); ``objective(params, batch, scores)`` is the loss
    ``update`` minimises, with its metrics."""

    init: TrainerInitFn
    rollout: TrainerRolloutFn
    score: TrainerScoreFn
    update: TrainerUpdateFn
    objective: TrainerObjectiveFn
    optimizer: optax.GradientTransformationExtraArgs
    config: RLConfig
    task: Task


def cast_params(params, rollout_dtype: str):
    """The inference engine's copy of ``params``: float32 as is, ``bfloat16`` by rounding, or
    ``float8`` (e4m3) weights widened back to bfloat16 for compute (a quantised engine)."""
    check_choice("rollout_dtype", rollout_dtype, ROLLOUT_DTYPES)
    if rollout_dtype == "float32":
        return params
    if rollout_dtype == "bfloat16":
        return jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    return jax.tree.map(lambda x: x.astype(jnp.float8_e4m3fn).astype(jnp.bfloat16), params)


def transformer_lms(module, rollout_dtype: str) -> tuple[LanguageModel, LanguageModel]:
    """``(train_lm, rollout_lm)`` of a :class:`hyperx.llm.transformer.Transformer`: float32
    training, and the same module computing in bfloat16 unless ``rollout_dtype`` is float32."""
    check_choice("rollout_dtype", rollout_dtype, ROLLOUT_DTYPES)
    train_lm = transformer_lm(module.clone(dtype=jnp.float32))
    if rollout_dtype == "float32":
        return train_lm, train_lm
    return train_lm, transformer_lm(module.clone(dtype=jnp.bfloat16))


def policy_module(task: Task, *, d_model: int = 64, num_layers: int = 2, num_heads: int = 4,
                  extra_tokens: int = 2, moe: MoEConfig | None = None,
                  moe_layers: tuple[int, ...] | None = None) -> Transformer:
    """The float32 :class:`Transformer` of :func:`make_policy`, without parameters (sizes
    checked; ``jax.eval_shape(module.init, ...)`` then gives their shapes for free)."""
    for name, value in (("d_model", d_model), ("num_layers", num_layers),
                        ("num_heads", num_heads)):
        check_int(name, value)
    check_int("extra_tokens", extra_tokens, low=0)
    if d_model % num_heads:
        raise ValueError(f"d_model: expected a multiple of num_heads = {num_heads}, "
                         f"got {d_model}")
    return Transformer(vocab_size=task.tokenizer.vocab_size, d_model=d_model,
                       num_layers=num_layers, num_heads=num_heads, mlp_hidden=2 * d_model,
                       max_len=task.prompt_len + task.answer_len + extra_tokens, moe=moe,
                       moe_layers=moe_layers)


def make_policy(task: Task, *, d_model: int = 64, num_layers: int = 2, num_heads: int = 4,
                seed: int = 0, extra_tokens: int = 2, moe: MoEConfig | None = None,
                moe_layers: tuple[int, ...] | None = None):
    """A float32 :class:`Transformer` sized for ``task`` (``max_len = P + A + extra_tokens``,
    SwiGLU width ``2 d_model``; ``moe`` / ``moe_layers``: mixture-of-experts blocks, see
    :class:`Transformer`) and its initial parameters from ``seed``. Raises ``ValueError`` with
    the estimate when the parameters with their gradient and Adam's moments
    (:func:`param_memory_bytes`) cannot fit in device memory, before initialising them."""
    module = policy_module(task, d_model=d_model, num_layers=num_layers, num_heads=num_heads,
                           extra_tokens=extra_tokens, moe=moe, moe_layers=moe_layers)
    tokens = jnp.zeros((1, task.prompt_len), jnp.int32)
    shapes = jax.eval_shape(module.init, jax.random.key(seed), tokens)
    check_memory(f"d_model = {d_model}, num_layers = {num_layers}", param_memory_bytes(shapes),
                 device_memory_bytes(), f"device memory for the policy's "
                 f"{sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes)):,} "
                 "float32 parameters with their gradient, Adam's two moments and the "
                 "sampler's bfloat16 copy")
    return module, jax.jit(module.init)(jax.random.key(seed), tokens)


def param_memory_bytes(params: Any, lag: int = 0) -> int:
    """Estimated device bytes of training ``params`` (arrays or ``jax.eval_shape`` shapes):
    the weights, one gradient and Adam's two moments (4 copies), a bfloat16 copy for the sampler
    and ``lag`` stale copies (:attr:`RLConfig.lag`)."""
    nbytes = tree_bytes(params)
    return int(nbytes * (4.5 + lag))


def batch_memory_bytes(lm: LanguageModel, task: Task, batch: int, *, extra_tokens: int = 2,
                       train: bool = True) -> int:
    """Estimated device bytes of one batch of ``batch`` sequences of ``L = P + A +
    extra_tokens`` positions (``task.prompt_len``, ``task.answer_len``), from shapes only.

    Counted: the sampler's KV cache (``jax.eval_shape`` of ``lm.init_cache(batch, L)``) and
    float32 logits ``[batch, L, V]``. Without ``train`` (sampling) also one layer's float32
    attention scores of the prompt's prefill ``[batch, heads, P, L]``. With ``train`` instead
    what the teacher-forced forward keeps for the backward pass: the logits three more times
    (their log-softmax and both gradients), 8 float32 activations per cached key/value entry
    (the blocks' inputs, norms, projections and MLP) and the float32 attention probabilities
    ``[layers, batch, heads, L, L]`` (layers x heads read from the cache's
    ``[..., L, heads, d_head]`` leaves). Parameters are not counted
    (:func:`param_memory_bytes`). An estimate: XLA may keep less or more temporaries.
    """
    check_int("batch", batch, high=2**62)
    length = task.prompt_len + task.answer_len + extra_tokens
    logits = 4 * batch * length * lm.vocab_size
    cache = jax.eval_shape(lambda: lm.init_cache(batch, length))
    kv = [leaf for leaf in jax.tree.leaves(cache) if len(leaf.shape) >= 4]
    nbytes = tree_bytes(cache) + logits
    if not kv:
        return int(nbytes)
    if not train:  # the prompt's prefill: one layer's [batch, heads, P, L] scores
        return int(nbytes + 4 * max(math.prod(leaf.shape[-4:-1]) for leaf in kv)
                   * task.prompt_len)
    values = sum(math.prod(leaf.shape) for leaf in kv)
    rows = sum(math.prod(leaf.shape[:-1]) for leaf in kv) // 2  # layers x batch x L x heads
    return int(nbytes + 3 * logits + 4 * 8 * values + 4 * rows * length)


def _check_batch_memory(name: str, lm: LanguageModel, task: Task, batch: int,
                        extra_tokens: int, train: bool, what: str, extra_bytes: int = 0) -> None:
    check_memory(name, batch_memory_bytes(lm, task, batch, extra_tokens=extra_tokens,
                                          train=train) + extra_bytes,
                 device_memory_bytes(), f"device memory for {what} "
                 f"({plural(batch, 'sequence', fmt=',')} of "
                 f"{plural(task.prompt_len + task.answer_len + extra_tokens, 'token', fmt=',')})")


def make_optimizer(config: RLConfig) -> optax.GradientTransformationExtraArgs:
    """``clip_by_global_norm -> adam(lr) [-> length_aware_scale]``; update takes ``mean_length``."""
    parts = []
    if config.max_grad_norm is not None:
        parts.append(optax.clip_by_global_norm(config.max_grad_norm))
    parts.append(optax.adam(config.learning_rate, b2=config.adam_b2))
    if config.lr_schedule == "length_aware":
        parts.append(length_aware_scale(**dict(config.schedule_kwargs)))
    return optax.chain(*parts)


def last_token_rewards(rewards: jax.Array, mask: jax.Array) -> jax.Array:
    """Outcome reward on each response's last valid token: ``[B], [B, T] -> [B, T]``."""
    n = jnp.sum(mask > 0, axis=-1)
    last = jnp.arange(mask.shape[1])[None, :] == (n - 1)[:, None]
    return jnp.where(last & (n[:, None] > 0), rewards[:, None], 0.0).astype(jnp.float32)


def group_advantages(kind: str, rewards: jax.Array, mask: jax.Array, group_size: int, *,
                     old_log_prob: jax.Array | None = None, sum_sq: jax.Array | None = None,
                     is_weights: jax.Array | None = None) -> jax.Array:
    """Per-token advantages ``[B, T]`` of contiguous groups of ``group_size`` responses.

    Every baseline runs over the KEPT responses of a group only, ``S_g = {i : sum_t m_it > 0}``
    with ``n = |S_g|`` (pass the mask after rollout rejection: a rejected response, all-zero
    row, leaves its siblings' baselines and gets advantage 0; verl PR #6375 / #6452):

    * ``grpo``: ``(r_i - mean_{S_g} r) / (std_{S_g} r + eps)``, std with ``n - 1`` (Shao et
      al. 2024, arXiv:2402.03300);
    * ``dr_grpo``: ``r_i - mean_{S_g} r`` (arXiv:2503.20783);
    * ``rloo``: ``r_i - (1/(n-1)) sum_{j in S_g, j != i} r_j`` (Ahmadian et al. 2024,
      arXiv:2402.14740);
    * ``otb``: ``G_t - B*_t``, ``B*_t = sum_{i in S_g} G^i_t W^i_t / sum_{i in S_g} W^i_t``,
      the energy ``W`` from ``old_log_prob`` and ``sum_sq`` (times ``is_weights^2`` when
      given; arXiv:2602.07078).

    A group whose rewards are all equal, or whose responses are all masked, gets advantage 0:
    such a group carries no learning signal, and without this rule OTB's zero-tail baseline
    (``B*_t = 0`` where one response is alive) would pay the longest response's tail its full
    return.
    """
    check_choice("advantage", kind, ADVANTAGES)
    b, t = mask.shape
    if b % group_size:
        raise ValueError(f"group_size: expected to divide the batch size {b}, got {group_size}")
    g = b // group_size
    m3 = mask.reshape(g, group_size, t)
    if kind == "otb":
        if old_log_prob is None or sum_sq is None:
            raise ValueError("old_log_prob: expected old_log_prob and sum_sq for OTB advantages")
        out = otb_advantages_from_sum_sq(
            token_rewards=last_token_rewards(rewards, mask).reshape(g, group_size, t),
            response_mask=m3, log_prob=old_log_prob.reshape(g, group_size, t),
            sum_sq=sum_sq.reshape(g, group_size, t),
            is_weights=None if is_weights is None else is_weights.reshape(g, group_size, t))
        adv = out.advantages
    else:
        fn = {"grpo": grpo_advantages, "dr_grpo": dr_grpo_advantages,
              "rloo": rloo_advantages}[kind]
        adv = fn(scores=rewards.reshape(g, group_size), response_mask=m3)
    valid = jnp.any(m3 > 0, axis=-1)  # [G, N]
    r = rewards.reshape(g, group_size)
    hi = jnp.max(jnp.where(valid, r, -jnp.inf), axis=1)
    lo = jnp.min(jnp.where(valid, r, jnp.inf), axis=1)
    signal = jnp.any(valid, axis=1) & (hi > lo)
    return jnp.where(signal[:, None, None], adv, 0.0).reshape(b, t)


def corrected_group_advantages(config: RLConfig, *, rewards: jax.Array,
                               response_mask: jax.Array, old_log_prob: jax.Array,
                               rollout_log_prob: jax.Array, sum_sq: jax.Array,
                               rollout_logits: jax.Array | None = None,
                               old_logits: jax.Array | None = None) -> jax.Array:
    """The trainer's advantages ``[B, T]``: :func:`group_advantages` over the responses that
    ``config.correction`` keeps.

    A response whose every token the rollout correction rejects leaves its group's baseline
    (mean, std, leave-one-out mean, OTB's ``B*_t``) and gets advantage 0: the baselines see the
    response mask ``m_it 1[exists s: keep_is]``, so the accepted siblings' advantages are those
    of a group without it (verl PR #6375 / #6452: a rejected row still in its GRPO group gave
    its accepted sibling ``-49.5`` instead of ``1.0``). The rejection is evaluated at
    ``pi_old`` (``old_log_prob``; in bypass mode ``pi_theta = pi_old`` before the first step).
    OTB's energy takes the correction weights when ``config.otb_is_weights``. Arguments as
    :func:`hyperx.llm.corrections.rollout_correction`'s; ``rewards`` ``[B]``, ``sum_sq``
    ``[B, T]``.
    """
    correction = config.correction
    rejects = bool(correction.rejections) or correction.trm_kl is not None
    otb_weights = (config.advantage == "otb" and config.otb_is_weights
                   and correction.weights != "none")
    mask, is_weights = response_mask, None
    if rejects or otb_weights:
        corr = rollout_correction(correction, old_log_prob=old_log_prob,
                                  rollout_log_prob=rollout_log_prob, response_mask=mask,
                                  rollout_logits=rollout_logits, old_logits=old_logits)
        is_weights = corr.weights if otb_weights else None
        if rejects:
            kept = jnp.any(corr.mask > 0, axis=-1, keepdims=True)
            mask = jnp.where(kept, mask, jnp.zeros_like(mask))
    return group_advantages(config.advantage, rewards, mask, config.group_size,
                            old_log_prob=old_log_prob, sum_sq=sum_sq, is_weights=is_weights)


def make_trainer(train_lm: LanguageModel, rollout_lm: LanguageModel, task: Task,
                 config: RLConfig) -> Trainer:
    """Jitted ``rollout``, ``score`` and ``update`` for ``task`` under ``config``.

    ``train_lm`` computes in float32; ``rollout_lm`` is the same architecture computing in
    ``config.rollout_dtype`` (for float32 pass ``train_lm`` twice). Both take the same params.
    Raises ``ValueError`` with the estimate when one step's batch of ``G N`` responses
    (:func:`batch_memory_bytes`) cannot fit in device memory.
    """
    if not isinstance(config, RLConfig):
        raise TypeError("config: expected an RLConfig")
    optimizer = make_optimizer(config)
    g, n = config.prompts_per_step, config.group_size
    t_max = task.answer_len + config.extra_tokens
    _check_batch_memory(f"prompts_per_step x group_size = {g} x {n}", train_lm, task, g * n,
                        config.extra_tokens, True, "one RL step")
    tau = config.temperature
    need_logits = config.correction.trm_kl is not None
    eos = task.tokenizer.eos_id
    moe = train_lm.routed_logits is not None
    if not moe and (config.routing_replay != "none" or config.load_balance_coef
                    or config.router_entropy_coef):
        raise ValueError("routing_replay: routing replay and the router losses need an MoE "
                         "policy (Transformer(moe=MoEConfig(...))), got a dense model")
    if moe and rollout_lm.routed_decode is None:
        raise ValueError("rollout_lm: expected the MoE policy's sampler (routed_decode)")

    def scaled(lm: LanguageModel) -> LanguageModel:
        if tau == 1.0:
            return lm
        def routed(params, tokens, routing=None):
            logits, stats = lm.routed_logits(params, tokens, routing)
            return logits / tau, stats

        return lm._replace(logits=lambda params, tokens: lm.logits(params, tokens) / tau,
                           routed_logits=None if lm.routed_logits is None else routed)

    train_scaled = scaled(train_lm)

    def forward(params, batch: Batch, routing=None):
        """Teacher-forced logits ``[B, T, V]`` of the responses (and the MoE routing stats)."""
        if not moe:
            return response_logits(train_scaled, params, batch.prompts,
                                   batch.rollout.tokens), None
        return routed_response_logits(train_scaled, params, batch.prompts, batch.rollout.tokens,
                                      routing)

    def init(params) -> TrainState:
        return TrainState(params, optimizer.init(params), jnp.zeros((), jnp.int32))

    @jax.jit
    def rollout(params, key) -> Batch:
        kp, ks = jax.random.split(key)
        prompts, answers = task.sample(kp, g)
        prompts, answers = jnp.repeat(prompts, n, axis=0), jnp.repeat(answers, n, axis=0)
        out = sample(rollout_lm, cast_params(params, config.rollout_dtype), ks, prompts,
                     max_new_tokens=t_max, eos_id=eos, pad_id=task.tokenizer.pad_id,
                     temperature=tau, return_logits=need_logits, record_routing=moe)
        return Batch(prompts, answers, out)

    @jax.jit
    def score(params, batch: Batch) -> Scores:
        rewards = task.reward(batch.rollout.tokens, batch.answers)
        logits, stats = forward(params, batch)
        routing = own = None
        if moe:
            own = stats["experts"]
            if config.routing_replay == "r3":
                routing = batch.rollout.routing
                logits, _ = forward(params, batch, routing)
            elif config.routing_replay == "r2":
                routing = own
        old_log_prob, sum_sq = log_prob_and_sum_sq(logits=logits, tokens=batch.rollout.tokens)
        return Scores(rewards, old_log_prob, sum_sq, logits if need_logits else None, routing,
                      own)

    def trm_inputs(batch: Batch, scores: Scores) -> dict[str, jax.Array]:
        if not need_logits:
            return {}
        return {"rollout_logits": batch.rollout.logits, "old_logits": scores.old_logits}

    def loss_fn(params, batch: Batch, scores: Scores, advantages: jax.Array):
        logits, stats = forward(params, batch, scores.routing)
        log_prob, _ = log_prob_and_sum_sq(logits=logits, tokens=batch.rollout.tokens)
        out = corrected_policy_loss(
            config.objective, config.correction, log_prob=log_prob,
            old_log_prob=scores.old_log_prob, rollout_log_prob=batch.rollout.log_probs,
            advantages=advantages, response_mask=batch.rollout.mask,
            **trm_inputs(batch, scores))
        if not moe:
            return out.loss, out.metrics
        live = _live_positions(batch)
        balance = jnp.mean(jnp.stack([
            load_balance_loss(stats["router_probs"][k], e, stats["router_probs"][k].shape[-1],
                              live) for k, e in stats["experts"].items()]))
        entropy = jnp.mean(jnp.stack([router_entropy(p_, live)
                                      for p_ in stats["router_probs"].values()]))
        loss = (out.loss + config.load_balance_coef * balance
                - config.router_entropy_coef * entropy)
        return loss, {**out.metrics, "load_balance_loss": balance, "router_entropy": entropy}

    def advantages(batch: Batch, scores: Scores) -> jax.Array:
        return corrected_group_advantages(
            config, rewards=scores.rewards, response_mask=batch.rollout.mask,
            old_log_prob=scores.old_log_prob, rollout_log_prob=batch.rollout.log_probs,
            sum_sq=scores.sum_sq, **trm_inputs(batch, scores))

    @jax.jit
    def objective(params, batch: Batch, scores: Scores):
        return loss_fn(params, batch, scores, advantages(batch, scores))

    @jax.jit
    def update(state: TrainState, batch: Batch, scores: Scores):
        mask = batch.rollout.mask
        adv = advantages(batch, scores)
        lengths = jnp.sum(mask, axis=-1)
        mean_length = jnp.mean(lengths)
        # The non-negative k3 estimate of KL(mu || pi_old) for a KL-tracking schedule.
        k3 = mismatch_metrics(train_log_prob=scores.old_log_prob,
                              rollout_log_prob=batch.rollout.log_probs,
                              response_mask=mask)["k3_kl"]

        def step(params, opt_state):
            (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                params, batch, scores, adv)
            updates, opt_state = optimizer.update(grads, opt_state, params,
                                                  mean_length=mean_length, mismatch_kl=k3)
            metrics = {**metrics, "grad_norm": optax.tree.norm(grads),
                       "update_norm": optax.tree.norm(updates)}
            return optax.apply_updates(params, updates), opt_state, metrics

        def epoch(carry, _):
            # the metrics as measured before the first step ride in the carry, so memory does
            # not grow with ppo_epochs (stacked scan outputs did: 200 GB for 2^31 epochs)
            params, opt_state, first, i = carry
            params, opt_state, metrics = step(params, opt_state)
            first = jax.tree.map(lambda a, b: jnp.where(i == 0, b, a), first, metrics)
            return (params, opt_state, first, i + 1), None

        like = jax.eval_shape(step, state.params, state.opt_state)[2]
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), like)
        (params, opt_state, metrics, _), _ = jax.lax.scan(
            epoch, (state.params, state.opt_state, zeros, jnp.int32(0)), None,
            length=config.ppo_epochs)
        # How far this batch's update moved the policy on its own tokens: the k3 estimate of
        # KL(pi_old || pi_new), and the PPO clip fraction the next epoch would have seen.
        new_logits, new_stats = forward(params, batch)
        if moe:
            metrics.update(_routing_metrics(batch, scores, new_stats))
            if scores.routing is not None:
                new_logits, _ = forward(params, batch, scores.routing)
        new_log_prob, _ = log_prob_and_sum_sq(logits=new_logits, tokens=batch.rollout.tokens)
        moved = mismatch_metrics(train_log_prob=new_log_prob,
                                 rollout_log_prob=scores.old_log_prob, response_mask=mask)
        eps_lo, eps_hi = config.objective.clip_eps, config.objective.clip_eps_high
        ratio = jnp.exp(new_log_prob - scores.old_log_prob)
        outside = (ratio < 1.0 - eps_lo) | (ratio > 1.0 + (eps_lo if eps_hi is None else eps_hi))
        scale = _schedule_scale(opt_state)
        rewards = scores.rewards
        r_group = rewards.reshape(g, n)
        metrics.update(
            reward=jnp.mean(rewards),
            reward_std=jnp.std(rewards),
            solved_groups=jnp.mean(jnp.any(r_group >= 1.0, axis=1).astype(jnp.float32)),
            zero_signal_groups=jnp.mean(jnp.all(r_group == r_group[:, :1], axis=1)
                                        .astype(jnp.float32)),
            response_length=mean_length,
            truncated_fraction=jnp.mean((batch.rollout.tokens[:, -1] != eos)
                                        & (mask[:, -1] > 0)),
            tokens=jnp.sum(mask),
            lr=config.learning_rate * scale,
            lr_scale=scale,
            advantage_abs_mean=jnp.sum(jnp.abs(adv) * mask) / jnp.maximum(jnp.sum(mask), 1.0),
            update_kl=moved["k3_kl"],
            update_clip_fraction=jnp.sum(outside * mask) / jnp.maximum(jnp.sum(mask), 1.0),
            **information_bandwidth(advantages=adv, response_mask=mask,
                                    n_bins=config.bandwidth_bins),
        )
        return TrainState(params, opt_state, state.step + 1, state.lagged), metrics

    return Trainer(init, rollout, score, update, objective, optimizer, config, task)


def _live_positions(batch: Batch) -> jax.Array:
    """``[B, P + T]``: the positions of ``concat(prompt, response)`` that feed a scored token's
    logits (the prompt and every response position before the last valid token); the MoE
    losses and the dead-expert count run over these."""
    b, p = batch.prompts.shape
    mask = batch.rollout.mask
    return jnp.concatenate([jnp.ones((b, p), jnp.float32), mask[:, 1:].astype(jnp.float32),
                            jnp.zeros((b, 1), jnp.float32)], axis=1)


def _any_flip(a: dict[str, jax.Array], b: dict[str, jax.Array], start: int,
              stop: int) -> jax.Array:
    """``[B, stop - start]`` float: positions where any MoE block's expert set differs."""
    flips = [routing_flips(experts_a=a[k][:, start:stop], experts_b=b[k][:, start:stop])
             for k in a]
    return jnp.any(jnp.stack(flips), axis=0).astype(jnp.float32)


def _routing_metrics(batch: Batch, scores: Scores,
                     new_stats: dict[str, dict[str, jax.Array]]) -> dict[str, jax.Array]:
    """Per-step stability-gap diagnostics of an MoE policy (:mod:`hyperx.llm.moe`).

    A response token ``y_t`` is scored by position ``P - 1 + t``; it counts as *flipped* when
    any MoE block sends that position to another expert set.

    * ``routing_flip_rollout``: tokens whose experts differ between the sampler (its dtype and
      parameter version) and the float32 trainer's ``pi_old`` forward;
    * ``routing_flip_update``: tokens whose experts differ between ``pi_old`` and the
      parameters after this update (consecutive versions);
    * ``mismatch_k3_flipped`` / ``mismatch_k3_held``: the per-token k3 estimate of
      ``KL(mu || pi_old)`` (``rho - 1 - log rho``, ``rho = pi_old / mu``) averaged over the
      rollout-flipped and the held tokens (0 where there are none);
    * ``dead_expert_fraction``: experts (per block, averaged) that no live position of the
      update's forward selects, so they receive no gradient from this batch;
    * ``expert_load_max``: the busiest expert's share of those assignments (``1 / E``
      balanced), averaged over blocks.
    """
    mask = batch.rollout.mask.astype(jnp.float32)
    p, t = batch.prompts.shape[1], mask.shape[1]
    own = scores.trainer_experts
    count = jnp.maximum(jnp.sum(mask), 1.0)
    rollout_flip = _any_flip(batch.rollout.routing, own, p - 1, p - 1 + t) * mask
    update_flip = _any_flip(new_stats["experts"], own, p - 1, p - 1 + t) * mask
    log_rho = jnp.clip(scores.old_log_prob - batch.rollout.log_probs, -20.0, 20.0)
    k3 = (jnp.expm1(log_rho) - log_rho) * mask
    held = mask - rollout_flip
    used = own if scores.routing is None else scores.routing
    live = _live_positions(batch)
    per_block = [routing_diagnostics(experts_a=experts, experts_b=experts,
                                     num_experts=new_stats["router_probs"][name].shape[-1],
                                     mask=live) for name, experts in used.items()]
    return {"routing_flip_rollout": jnp.sum(rollout_flip) / count,
            "routing_flip_update": jnp.sum(update_flip) / count,
            "mismatch_k3_flipped": jnp.sum(k3 * rollout_flip) / jnp.maximum(
                jnp.sum(rollout_flip), 1.0),
            "mismatch_k3_held": jnp.sum(k3 * held) / jnp.maximum(jnp.sum(held), 1.0),
            "dead_expert_fraction": jnp.mean(jnp.stack([d["dead_expert_fraction"]
                                                        for d in per_block])),
            "expert_load_max": jnp.mean(jnp.stack([d["load_max"] for d in per_block]))}


def _schedule_scale(opt_state) -> jax.Array:
    """The length-aware scale inside a chained optimiser state (1 without the schedule)."""
    for s in jax.tree.leaves(opt_state, is_leaf=lambda x: hasattr(x, "scale")
                             and hasattr(x, "surge")):
        if hasattr(s, "scale") and hasattr(s, "surge"):
            return s.scale
    return jnp.ones((), jnp.float32)


def advance_key(key: jax.Array, steps: int) -> jax.Array:
    """The key :func:`train` holds after ``steps`` steps from ``key`` (it splits the key once
    per step and samples with the second half), so ``train(t, s, key, a)`` returning ``s2``,
    then ``train(t, s2, advance_key(key, a), b)``, runs the steps of ``train(t, s, key, a + b)``."""
    check_int("steps", steps, low=0)
    for _ in range(steps):
        key, _ = jax.random.split(key)
    return key


def train(trainer: Trainer, state: TrainState, key: jax.Array, steps: int, *,
          callback: Callable[[int, dict[str, float]], None] | None = None,
          timed: bool = False) -> tuple[TrainState, list[dict[str, float]]]:
    """Run ``steps`` RL steps (a Python loop over the three jitted parts; the lag lives here).

    The sampler uses the parameters of ``config.lag`` updates ago (the initial parameters
    while fewer updates exist); the versions in between travel in ``state.lagged``, so
    ``train(..., a)`` then ``train(..., b)`` samples as ``train(..., a + b)`` would. With
    ``timed`` each step also logs ``time_sample_s``, ``time_score_s`` and ``time_update_s``
    (each part blocked until ready). A step whose rollout correction rejects every token
    (metric ``fully_masked = 1``: zero loss and gradient) warns, one line naming the step.
    Returns the final state and one dict of floats per step.
    """
    check_int("steps", steps, low=0)
    lagged = collections.deque([*state.lagged, state.params], maxlen=trainer.config.lag + 1)
    state = state._replace(lagged=())
    history: list[dict[str, float]] = []
    tokens = 0.0
    for i in range(steps):
        key, k = jax.random.split(key)
        t0 = time.perf_counter()
        batch = trainer.rollout(lagged[0], k)
        if timed:
            jax.block_until_ready(batch)
        t1 = time.perf_counter()
        scores = trainer.score(state.params, batch)
        if timed:
            jax.block_until_ready(scores)
        t2 = time.perf_counter()
        state, metrics = trainer.update(state, batch, scores)
        metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
        t3 = time.perf_counter()
        lagged.append(state.params)
        if metrics.get("fully_masked", 0.0) == 1.0:
            warnings.warn(f"correction: step {i + 1} rejected every token (fully_masked = 1): "
                          f"its loss and gradient are 0; loosen the rejection bounds",
                          stacklevel=2)
        tokens += metrics["tokens"]
        metrics.update(step=float(i + 1), tokens_total=tokens)
        if timed:
            metrics.update(time_sample_s=t1 - t0, time_score_s=t2 - t1, time_update_s=t3 - t2)
        history.append(metrics)
        if callback is not None:
            callback(i, metrics)
    return state._replace(lagged=tuple(lagged)[:-1]), history


def supervised_warmup(lm: LanguageModel, params, task: Task, key: jax.Array, *, steps: int,
                      batch_size: int = 64, learning_rate: float = 3e-3
                      ) -> tuple[Any, jax.Array]:
    """Teacher-forced cross-entropy on ``prompt + answer`` (answer tokens and EOS only), so RL
    starts from a competent policy. ``steps`` Adam steps in ONE jitted ``lax.scan``; fresh task
    samples each step. Returns the parameters and the per-step loss ``[steps]``. Raises
    ``ValueError`` with the estimate when a batch (:func:`batch_memory_bytes`) cannot fit in
    device memory."""
    check_int("steps", steps)
    check_int("batch_size", batch_size)
    # a step's batch, plus the per-step keys and losses of the one scan
    _check_batch_memory(f"steps = {steps}, batch_size = {batch_size}", lm, task, batch_size, 0,
                        True, plural(steps, "warm-up step", fmt=","), extra_bytes=12 * steps)
    tx = optax.adam(learning_rate)

    def loss(p, prompts, answers):
        lp, _ = response_log_probs(lm, p, prompts, answers)
        m = (answers != task.tokenizer.pad_id).astype(jnp.float32)
        return -jnp.sum(lp * m) / jnp.sum(m)

    def step(carry, k):
        p, s = carry
        prompts, answers = task.sample(k, batch_size)
        value, grads = jax.value_and_grad(loss)(p, prompts, answers)
        updates, s = tx.update(grads, s, p)
        return (optax.apply_updates(p, updates), s), value

    @jax.jit
    def run(p, key):
        (p, _), losses = jax.lax.scan(step, (p, tx.init(p)), jax.random.split(key, steps))
        return p, losses

    return run(params, key)


def evaluate(lm: LanguageModel, params, task: Task, key: jax.Array, n: int = 256, *,
             greedy: bool = True, extra_tokens: int = 2) -> jax.Array:
    """Mean reward of ``n`` fresh prompts answered by ``lm`` (greedy by default), float32.
    Raises ``ValueError`` with the estimate when the ``n`` sequences' KV cache and logits
    (:func:`batch_memory_bytes` with ``train=False``) cannot fit in device memory."""
    check_int("n", n)
    _check_batch_memory(f"n = {n}", lm, task, n, extra_tokens, False, "an evaluation")
    # jitted at the call, not held at module level: jax reuses the program for equal statics
    return jax.jit(_evaluate, static_argnums=(0, 2, 4, 5, 6))(lm, params, task, key, n, greedy,
                                                              extra_tokens)


def _evaluate(lm: LanguageModel, params, task: Task, key: jax.Array, n: int, greedy: bool,
              extra_tokens: int) -> jax.Array:
    """:func:`evaluate` without its checks, to be jitted: prompts from ``key``, answers sampled
    with ``fold_in(key, 1)``."""
    prompts, answers = task.sample(key, n)
    out = sample(lm, params, jax.random.fold_in(key, 1), prompts,
                 max_new_tokens=task.answer_len + extra_tokens, eos_id=task.tokenizer.eos_id,
                 pad_id=task.tokenizer.pad_id, greedy=greedy)
    return jnp.mean(task.reward(out.tokens, answers))


def compare(module, params, task: Task, configs: dict[str, RLConfig], *, steps: int,
            seeds: tuple[int, ...] = (0,),
            callback: Callable[[str, int, int, dict[str, float]], None] | None = None,
            timed: bool = False) -> dict[str, list[tuple[list[dict[str, float]], TrainState]]]:
    """Run every named ``config`` from the same warm start ``params`` for each seed.

    ``module`` is the :class:`Transformer` (its bf16 twin is built per ``rollout_dtype``).
    Seed ``s`` draws the same prompts and sampling keys in every
    run (``jax.random.key(s)``), so runs differ only by their config. Returns
    ``{name: [(history, final state) of seed 0, ...]}``; ``callback(name, seed, step,
    metrics)`` is called after every step.
    """
    out: dict[str, list[tuple[list[dict[str, float]], TrainState]]] = {}
    for name, config in configs.items():
        trainer = make_trainer(*transformer_lms(module, config.rollout_dtype), task, config)
        runs = []
        for seed in seeds:
            cb = None if callback is None else (lambda i, m, s=seed, n=name: callback(n, s, i, m))
            state, history = train(trainer, trainer.init(params), jax.random.key(seed), steps,
                                   callback=cb, timed=timed)
            runs.append((history, state))
        out[name] = runs
    return out
