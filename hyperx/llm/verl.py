"""Port a verl rollout-correction / PPO setup to hyperx: option parser and metric names.

``from_verl_options(...)`` reads verl's option values (the ``algorithm.rollout_correction`` block:
``rollout_is``, ``rollout_is_threshold``, ``rollout_is_batch_normalize``, ``rollout_rs``,
``rollout_rs_threshold``, ``bypass_mode``, ``loss_type``, or one of its named presets; and the
actor's ``clip_ratio*``, ``clip_ratio_c``, ``loss_agg_mode``, ``loss_scale_factor``, ``dp_size``)
and returns the equivalent ``VerlPort(correction, objective)``. The semantics are verl's, as
read in ``verl/trainer/ppo/rollout_corr_helper.py`` (``_parse_rollout_is_threshold``,
``_parse_rollout_rs_thresholds``, ``compute_rollout_rejection_mask``),
``verl/trainer/config/algorithm.py`` (``RolloutCorrectionConfig`` and its presets) and
``verl/trainer/ppo/core_algos.py`` (``agg_loss``, ``compute_policy_loss_vanilla``); the table
in docs/llm/verl.md lists every row, and each row is executed by the docs test.

Two verl conventions the parser reproduces on purpose:

* ``rollout_is_threshold``: a number ``C`` is TIS (``min(w, C)``); a ``"L_U"`` string is IcePop
  (``w 1[L <= w <= U]``, weights only).
* ``*_k1`` rejection thresholds are RATIO bounds ``"L_U"`` (a single ``U`` means ``1/U_U``), and
  verl keeps ``log L <= -log rho <= log U`` (sum / mean of ``-log rho`` for the sequence levels),
  i.e. ``1/U <= rho <= 1/L``. The port is ``Rejection("k1", level, log L, log U)``: the same
  test, so asymmetric bounds behave as in verl (for the symmetric presets it is ``L <= rho <= U``).

``VERL_METRIC_NAMES`` maps hyperx metric names to verl's; :func:`to_verl_metrics` renames a
metrics dict. Only metrics with the same definition are aliased; the others are listed, with
the difference, in docs/llm/verl.md.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from jax import Array

from hyperx._validation import check_choice, check_flag, check_int
from hyperx.llm.corrections import CorrectionConfig, Rejection
from hyperx.llm.objectives import AGGREGATIONS, ObjectiveConfig

RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
              "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")
IS_LEVELS = ("token", "sequence")
LOSS_TYPES = ("ppo_clip", "reinforce")

# verl RolloutCorrectionConfig presets (verl/trainer/config/algorithm.py), with their defaults,
# built from the parts verl's preset names combine.
_TOKEN_IS = dict(rollout_is="token", rollout_is_threshold=2.0)
_SEQ_IS = dict(rollout_is="sequence", rollout_is_threshold=2.0)
_ICEPOP = dict(rollout_is="token", rollout_is_threshold="0.5_5.0")
_GEO_RS = dict(rollout_rs="seq_mean_k1", rollout_rs_threshold="0.999_1.001")
_K3_RS = dict(rollout_rs="seq_mean_k3", rollout_rs_threshold=0.01)
_BYPASS_PPO = dict(bypass_mode=True, loss_type="ppo_clip")
_BYPASS_PG = dict(bypass_mode=True, loss_type="reinforce")
PRESETS: dict[str, dict] = {
    "disabled": dict(rollout_is=None, rollout_rs=None),
    "decoupled_token_is": _TOKEN_IS,
    "decoupled_seq_is": _SEQ_IS,
    "decoupled_token_icepop": _ICEPOP,
    "decoupled_seq_is_rs": {**_SEQ_IS, "rollout_rs": "seq_sum_k1",
                            "rollout_rs_threshold": "0.5_2.0"},
    "decoupled_geo_rs": _GEO_RS,
    "decoupled_geo_rs_seq_tis": {**_SEQ_IS, **_GEO_RS},
    "decoupled_geo_rs_token_tis": {**_TOKEN_IS, **_GEO_RS},
    "decoupled_k3_rs": _K3_RS,
    "decoupled_k3_rs_seq_tis": {**_SEQ_IS, **_K3_RS},
    "decoupled_k3_rs_token_tis": {**_TOKEN_IS, **_K3_RS},
    "bypass_ppo_clip": _BYPASS_PPO,
    "bypass_ppo_clip_geo_rs": {**_GEO_RS, **_BYPASS_PPO},
    "bypass_ppo_clip_k3_rs": {**_K3_RS, **_BYPASS_PPO},
    "bypass_pg_is": {**_SEQ_IS, **_BYPASS_PG},
    "bypass_pg_token_icepop": {**_ICEPOP, **_BYPASS_PG},
    "bypass_pg_geo_rs": {**_GEO_RS, **_BYPASS_PG},
    "bypass_pg_geo_rs_seq_tis": {**_SEQ_IS, **_GEO_RS, **_BYPASS_PG},
    "bypass_pg_geo_rs_token_tis": {**_TOKEN_IS, **_GEO_RS, **_BYPASS_PG},
}

# hyperx metric -> verl metric, only where the two definitions agree (see docs/llm/verl.md).
VERL_METRIC_NAMES: dict[str, str] = {
    "mismatch_kl": "rollout_corr/kl",
    "k3_kl": "rollout_corr/k3_kl",
    "chi2_token": "rollout_corr/chi2_token",
    "chi2_seq": "rollout_corr/chi2_seq",
    "masked_token_fraction": "rollout_corr/rollout_rs_masked_fraction",
    "ess": "rollout_corr/rollout_is_eff_sample_size",
    "clipped_fraction": "actor/pg_clipfrac",
    "dual_clipped_fraction": "actor/pg_clipfrac_lower",
    "approx_kl": "actor/ppo_kl",
    "loss": "actor/pg_loss",
}


class VerlPort(NamedTuple):
    """The hyperx equivalent of a verl setup: pass ``correction`` and ``objective`` to
    :func:`hyperx.llm.objectives.corrected_policy_loss` (or use them separately)."""

    correction: CorrectionConfig
    objective: ObjectiveConfig


def _number(name: str, text) -> float:
    if isinstance(text, bool):
        raise TypeError(f"{name}: expected a number or a 'lower_upper' string, got {text!r}")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number or a 'lower_upper' string, "
                         f"got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected positive finite bounds, got {text!r}")
    return value


def parse_is_threshold(spec) -> tuple[float | None, float]:
    """verl's ``rollout_is_threshold``: ``C`` (number or numeric string) -> ``(None, C)``;
    ``"L_U"`` -> ``(L, U)``; bools, empty strings and non-positive bounds are errors."""
    if isinstance(spec, str) and "_" in spec:
        low, high = spec.strip().split("_", 1)
        lower = _number("rollout_is_threshold", low)
        upper = _number("rollout_is_threshold", high)
        if lower > upper:
            raise ValueError(f"rollout_is_threshold: expected lower <= upper, got {spec!r}")
        return lower, upper
    return None, _number("rollout_is_threshold", spec.strip() if isinstance(spec, str) else spec)


def parse_rs_options(rollout_rs: str, rollout_rs_threshold) -> tuple[Rejection, ...]:
    """verl's ``rollout_rs`` (comma list, duplicates dropped) and ``rollout_rs_threshold`` (one
    entry shared by all options, or one per option) as hyperx rejections, chained with AND."""
    if not isinstance(rollout_rs, str) or not rollout_rs.strip():
        raise ValueError(f"rollout_rs: expected a comma-separated string of {list(RS_OPTIONS)}, "
                         f"got {rollout_rs!r}")
    options = list(dict.fromkeys(o.strip() for o in rollout_rs.split(",") if o.strip()))
    for option in options:
        check_choice("rollout_rs", option, RS_OPTIONS)
    if rollout_rs_threshold is None:
        raise ValueError("rollout_rs_threshold: expected a threshold when rollout_rs is set")
    if isinstance(rollout_rs_threshold, bool):
        raise TypeError(f"rollout_rs_threshold: expected a number or a string, "
                        f"got {rollout_rs_threshold!r}")
    specs = ([p.strip() for p in rollout_rs_threshold.split(",") if p.strip()]
             if isinstance(rollout_rs_threshold, str) else [rollout_rs_threshold])
    if len(specs) not in (1, len(options)):
        raise ValueError(f"rollout_rs_threshold: expected 1 or {len(options)} comma-separated "
                         f"thresholds for {options}, got {rollout_rs_threshold!r}")
    specs = specs * len(options) if len(specs) == 1 else specs
    rules = []
    for option, spec in zip(options, specs, strict=True):
        level, statistic = option.rsplit("_", 1)
        name = f"rollout_rs_threshold ({option})"
        if statistic == "k1":
            if isinstance(spec, str) and "_" in spec:
                low, high = spec.split("_", 1)
                lower, upper = _number(name, low), _number(name, high)
            else:
                upper = _number(name, spec)
                lower = 1.0 / upper
            if lower > upper:
                raise ValueError(f"{name}: expected lower <= upper, got {spec!r}")
            rules.append(Rejection("k1", level, math.log(lower), math.log(upper)))
        else:
            if isinstance(spec, str) and "_" in spec:
                raise ValueError(f"{name}: expected a single upper bound (no '_'), got {spec!r}")
            rules.append(Rejection(statistic, level, upper=_number(name, spec)))
    return tuple(rules)


_UNSET = object()


def from_verl_options(
    *,
    preset: str | None = None,
    rollout_is=_UNSET,
    rollout_is_threshold=_UNSET,
    rollout_is_batch_normalize=_UNSET,
    rollout_rs=_UNSET,
    rollout_rs_threshold=_UNSET,
    bypass_mode=_UNSET,
    loss_type=_UNSET,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: int | None = None,
    dp_size: int = 1,
) -> VerlPort:
    """The hyperx configs equivalent to a verl rollout-correction + PPO setup.

    Args:
      preset: a verl ``RolloutCorrectionConfig`` factory name (``PRESETS``); options given
        explicitly override the preset's (e.g. its ``rollout_rs_threshold``).
      rollout_is: ``None``, ``"token"`` or ``"sequence"`` (IS weights; not given: ``None``).
      rollout_is_threshold: ``C`` for TIS or ``"L_U"`` for IcePop (default 2.0).
      rollout_is_batch_normalize: divide the weights by their batch mean.
      rollout_rs, rollout_rs_threshold: rejection options, e.g. ``"token_k1,seq_mean_k3"`` with
        ``"0.5_2.0,0.01"`` (see the module docstring for the k1 ratio bounds).
      bypass_mode, loss_type: verl's bypass mode (``pi_old := mu``) with ``"ppo_clip"`` or
        ``"reinforce"``; in decoupled mode the loss is PPO whatever ``loss_type`` says.
      clip_ratio, clip_ratio_low, clip_ratio_high: PPO clip ``eps`` (low / high default to it).
      clip_ratio_c: verl's dual clip (always on in its vanilla PPO, default 3.0).
      loss_agg_mode: verl's aggregation; ``loss_scale_factor`` its fixed length of
        ``seq-mean-token-sum-norm``; ``dp_size`` its data-parallel factor (pass the global
        ``batch_num_tokens`` / ``global_batch_size`` as ``policy_loss(..., denominator=...)``).

    Returns:
      ``VerlPort(correction, objective)``.
    """
    options: dict = {"rollout_is": None, "rollout_is_threshold": 2.0,
                     "rollout_is_batch_normalize": False, "rollout_rs": None,
                     "rollout_rs_threshold": None, "bypass_mode": False, "loss_type": "ppo_clip"}
    if preset is not None:
        check_choice("preset", preset, tuple(PRESETS))
        options.update(PRESETS[preset])
    given = dict(rollout_is=rollout_is, rollout_is_threshold=rollout_is_threshold,
                 rollout_is_batch_normalize=rollout_is_batch_normalize, rollout_rs=rollout_rs,
                 rollout_rs_threshold=rollout_rs_threshold, bypass_mode=bypass_mode,
                 loss_type=loss_type)
    options.update({k: v for k, v in given.items() if v is not _UNSET})
    check_flag("rollout_is_batch_normalize", options["rollout_is_batch_normalize"])
    check_flag("bypass_mode", options["bypass_mode"])
    check_choice("loss_type", options["loss_type"], LOSS_TYPES)
    check_choice("loss_agg_mode", loss_agg_mode, AGGREGATIONS)
    check_int("dp_size", dp_size)

    weights, lower, upper = "none", None, 2.0
    if options["rollout_is"] is not None:
        check_choice("rollout_is", options["rollout_is"], IS_LEVELS)
        lower, upper = parse_is_threshold(options["rollout_is_threshold"])
        prefix = "token" if options["rollout_is"] == "token" else "seq"
        weights = f"{prefix}_{'tis' if lower is None else 'mis'}"
    rejections = (() if options["rollout_rs"] is None else
                  parse_rs_options(options["rollout_rs"], options["rollout_rs_threshold"]))
    correction = CorrectionConfig(weights=weights, weight_lower=lower, weight_upper=upper,
                                  rejections=rejections,
                                  batch_normalize=options["rollout_is_batch_normalize"],
                                  bypass=options["bypass_mode"])
    reinforce = options["bypass_mode"] and options["loss_type"] == "reinforce"
    low = clip_ratio if clip_ratio_low is None else clip_ratio_low
    objective = ObjectiveConfig(
        loss="reinforce" if reinforce else "ppo", clip_eps=low, clip_eps_high=clip_ratio_high,
        dual_clip=clip_ratio_c, agg=loss_agg_mode, max_length=loss_scale_factor,
        dp_size=dp_size)
    return VerlPort(correction, objective)


def to_verl_metrics(metrics: dict[str, Array]) -> dict[str, Array]:
    """``metrics`` renamed to verl's names (``VERL_METRIC_NAMES``; e.g. ``mismatch_kl`` ->
    ``rollout_corr/kl``, ``dual_clipped_fraction`` -> ``actor/pg_clipfrac_lower``); entries
    without a same-definition verl counterpart are dropped."""
    return {VERL_METRIC_NAMES[k]: v for k, v in metrics.items() if k in VERL_METRIC_NAMES}
