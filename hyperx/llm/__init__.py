"""Policy-gradient corrections for RL on language models (see docs/llm/index.md).

Rollout correction (:mod:`hyperx.llm.corrections`), the decoupled / bypass PPO and REINFORCE
objectives (:mod:`hyperx.llm.objectives`), advantage baselines with the Optimal Token Baseline
(:mod:`hyperx.llm.baselines`), the length-aware learning-rate scale
(:mod:`hyperx.llm.schedules`), mismatch diagnostics (:mod:`hyperx.llm.diagnostics`) and the verl
option parser and metric names (:mod:`hyperx.llm.verl`).

The RL stack is imported explicitly (it builds Flax models): :mod:`hyperx.llm.model` (the
causal-LM interface every model plugs into, the KV-cache sampler that records ``log mu``, the
teacher-forced log-probs, and a GPT-2-style model), :mod:`hyperx.llm.transformer` (a RoPE /
RMSNorm model), :mod:`hyperx.llm.moe` (Top-K mixture-of-experts layers and routing replay),
:mod:`hyperx.llm.hf` (transformers Flax models), :mod:`hyperx.llm.tasks` (verifiable tasks),
:mod:`hyperx.llm.train` (the RL trainer) and :mod:`hyperx.commands.llm` (``hyperx llm``).
"""

from hyperx.llm.baselines import (
    OTBOutput,
    dr_grpo_advantages,
    gradient_noise_proxy,
    grpo_advantages,
    log_prob_and_sum_sq,
    logit_gradient_proxy,
    logit_gradient_proxy_from_sum_sq,
    otb_advantages,
    otb_advantages_from_logits,
    otb_advantages_from_sum_sq,
    realized_energy,
    returns_to_go,
    rloo_advantages,
    sum_squared_probs,
    variance_diagnostics,
)
from hyperx.llm.corrections import (
    CorrectionConfig,
    CorrectionOutput,
    Rejection,
    rollout_correction,
    token_kl,
    topk_bucket_kl,
)
from hyperx.llm.diagnostics import (
    correction_metrics,
    information_bandwidth,
    mask_metrics,
    mismatch_metrics,
    weight_metrics,
)
from hyperx.llm.objectives import (
    LossOutput,
    ObjectiveConfig,
    aggregate_loss,
    corrected_policy_loss,
    loss_denominator,
    policy_loss,
)
from hyperx.llm.schedules import LengthAwareScaleState, length_aware_scale
from hyperx.llm.verl import VERL_METRIC_NAMES, VerlPort, from_verl_options, to_verl_metrics

__all__ = [
    "CorrectionConfig",
    "CorrectionOutput",
    "LengthAwareScaleState",
    "LossOutput",
    "OTBOutput",
    "ObjectiveConfig",
    "VERL_METRIC_NAMES",
    "VerlPort",
    "Rejection",
    "aggregate_loss",
    "corrected_policy_loss",
    "correction_metrics",
    "dr_grpo_advantages",
    "from_verl_options",
    "gradient_noise_proxy",
    "grpo_advantages",
    "information_bandwidth",
    "length_aware_scale",
    "log_prob_and_sum_sq",
    "logit_gradient_proxy",
    "logit_gradient_proxy_from_sum_sq",
    "loss_denominator",
    "mask_metrics",
    "mismatch_metrics",
    "otb_advantages",
    "otb_advantages_from_logits",
    "otb_advantages_from_sum_sq",
    "policy_loss",
    "realized_energy",
    "returns_to_go",
    "rloo_advantages",
    "rollout_correction",
    "sum_squared_probs",
    "token_kl",
    "to_verl_metrics",
    "topk_bucket_kl",
    "variance_diagnostics",
    "weight_metrics",
]
