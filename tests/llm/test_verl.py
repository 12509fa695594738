"""hyperx.llm.verl: the verl option parser against NumPy re-statements of
verl's rules as read in verl/trainer/ppo/rollout_corr_helper.py and core_algos.py."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.llm import (
    VERL_METRIC_NAMES,
    CorrectionConfig,
    ObjectiveConfig,
    Rejection,
    corrected_policy_loss,
    from_verl_options,
    rollout_correction,
    to_verl_metrics,
)
from hyperx.llm.verl import PRESETS, parse_is_threshold, parse_rs_options

RNG = np.random.default_rng(0)
OLD = (-np.abs(RNG.standard_normal((6, 8))) - 2.0).astype(np.float32)  # log-probs <= 0
ROLL = (OLD + 0.4 * RNG.standard_normal((6, 8))).astype(np.float32)
MASK = (np.arange(8)[None] < np.array([8, 7, 5, 3, 2, 1])[:, None]).astype(np.float32)


def _verl_rs_keep(option: str, lower: float | None, upper: float) -> np.ndarray:
    """verl's compute_rollout_rejection_mask for one option (k1: ratio bounds on -log r)."""
    lr = np.clip(OLD - ROLL, -20, 20)
    stat = {"k1": -lr, "k2": 0.5 * lr**2, "k3": np.exp(lr) - 1 - lr}[option[-2:]]
    valid = MASK > 0
    if option.startswith("seq_sum"):
        stat = np.sum(stat * MASK, 1, keepdims=True)
    elif option.startswith("seq_mean"):
        stat = np.sum(stat * MASK, 1, keepdims=True) / np.sum(MASK, 1, keepdims=True)
    elif option.startswith("seq_max"):
        stat = np.max(np.where(valid, stat, -np.inf), 1, keepdims=True)
    if option.endswith("k1"):
        keep = (stat >= math.log(lower)) & (stat <= math.log(upper))
    else:
        keep = stat <= upper
    return np.broadcast_to(keep, MASK.shape) & valid


@pytest.mark.parametrize(
    ("option", "spec", "lower", "upper"),
    [
        ("token_k1", "0.5_1.5", 0.5, 1.5),  # asymmetric: keeps 1/1.5 <= rho <= 2
        ("token_k1", 1.3, 1 / 1.3, 1.3),
        ("seq_sum_k1", "0.6_1.4", 0.6, 1.4),
        ("seq_mean_k1", "0.8_1.1", 0.8, 1.1),
        ("token_k2", 0.05, None, 0.05),
        ("token_k3", "0.02", None, 0.02),
        ("seq_sum_k2", 0.5, None, 0.5),
        ("seq_sum_k3", 0.3, None, 0.3),
        ("seq_mean_k2", 0.05, None, 0.05),
        ("seq_mean_k3", 0.04, None, 0.04),
        ("seq_max_k2", 0.2, None, 0.2),
        ("seq_max_k3", 0.2, None, 0.2),
    ],
)
def test_every_rejection_option_matches_verls_rule(option, spec, lower, upper):
    port = from_verl_options(rollout_rs=option, rollout_rs_threshold=spec)
    out = rollout_correction(port.correction, old_log_prob=jnp.asarray(OLD),
                             rollout_log_prob=jnp.asarray(ROLL), response_mask=jnp.asarray(MASK))
    expected = _verl_rs_keep(option, lower, upper)
    np.testing.assert_array_equal(np.asarray(out.mask) > 0, expected)
    assert 0 < expected.sum() < MASK.sum() or option.endswith("k2")  # the case is informative


@pytest.mark.parametrize(
    ("level", "spec"), [("token", 2.0), ("token", "0.8_1.2"), ("sequence", 1.5),
                        ("sequence", "0.5_2.0")])
def test_is_weights_match_verls_rule(level, spec):
    lr = np.clip(OLD - ROLL, -20, 20)
    if level == "token":
        raw = np.exp(lr)
    else:
        raw = np.broadcast_to(np.exp(np.clip(np.sum(lr * MASK, 1, keepdims=True), -20, 20)),
                              MASK.shape)
    lower, upper = parse_is_threshold(spec)
    ref = np.minimum(raw, upper) if lower is None else np.where(
        (raw >= lower) & (raw <= upper), raw, 0.0)
    port = from_verl_options(rollout_is=level, rollout_is_threshold=spec)
    out = rollout_correction(port.correction, old_log_prob=jnp.asarray(OLD),
                             rollout_log_prob=jnp.asarray(ROLL), response_mask=jnp.asarray(MASK))
    np.testing.assert_allclose(out.weights, ref * MASK, rtol=1e-5)
    np.testing.assert_array_equal(out.mask, MASK)  # IS never edits the mask


def test_vanilla_ppo_with_dual_clip_matches_verl():
    lp = OLD + 0.3 * RNG.standard_normal(OLD.shape).astype(np.float32)
    adv = RNG.standard_normal(OLD.shape).astype(np.float32)
    port = from_verl_options(clip_ratio=0.2, clip_ratio_c=3.0)
    out = corrected_policy_loss(port.objective, port.correction, log_prob=jnp.asarray(lp),
                                old_log_prob=jnp.asarray(OLD), rollout_log_prob=jnp.asarray(ROLL),
                                advantages=jnp.asarray(adv), response_mask=jnp.asarray(MASK))
    neg = np.clip(lp - OLD, -20, 20)
    ratio = np.exp(neg)
    l1, l2 = -adv * ratio, -adv * np.clip(ratio, 0.8, 1.2)
    c1 = np.maximum(l1, l2)
    l3 = -adv * 3.0
    losses = np.where(adv < 0, np.minimum(l3, c1), c1)
    mean = lambda x: np.sum(x * MASK) / np.sum(MASK)  # noqa: E731
    verl = {"actor/pg_loss": mean(losses), "actor/pg_clipfrac": mean(l2 > l1),
            "actor/ppo_kl": mean(-neg), "actor/pg_clipfrac_lower": mean((c1 > l3) & (adv < 0))}
    ours = to_verl_metrics(out.metrics)
    for key, value in verl.items():
        assert float(ours[key]) == pytest.approx(value, rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_verl_preset_parses(preset):
    port = from_verl_options(preset=preset)
    spec = PRESETS[preset]
    assert port.correction.bypass == spec.get("bypass_mode", False)
    assert (port.correction.weights != "none") == (spec.get("rollout_is") is not None)
    assert bool(port.correction.rejections) == (spec.get("rollout_rs") is not None)


def test_parser_handles_comma_lists_and_duplicates():
    rules = parse_rs_options(" token_k1 , seq_mean_k3,token_k1", "0.5_2.0, 0.01")
    assert rules == (Rejection("k1", "token", math.log(0.5), math.log(2.0)),
                     Rejection("k3", "seq_mean", upper=0.01))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(rollout_is="token", rollout_is_threshold=True), TypeError, "^rollout_is_threshold:"),
        (dict(rollout_is="token", rollout_is_threshold="abc"), ValueError,
         "^rollout_is_threshold:"),
        (dict(rollout_is="token", rollout_is_threshold="2.0_0.5"), ValueError, "lower <= upper"),
        (dict(rollout_is="token", rollout_is_threshold=-1.0), ValueError, "positive"),
        (dict(rollout_is="tokens"), ValueError, "^rollout_is:"),
        (dict(rollout_rs="token_k4", rollout_rs_threshold=1.0), ValueError, "^rollout_rs:"),
        (dict(rollout_rs="seq_max_k1", rollout_rs_threshold="0.5_2"), ValueError, "^rollout_rs:"),
        (dict(rollout_rs="token_k1"), ValueError, "^rollout_rs_threshold:"),
        (dict(rollout_rs="token_k2", rollout_rs_threshold="0.1_0.2"), ValueError, "single upper"),
        (dict(rollout_rs="token_k2,token_k3", rollout_rs_threshold="1,2,3"), ValueError,
         "expected 1 or 2"),
        (dict(rollout_rs="token_k1", rollout_rs_threshold=False), TypeError,
         "^rollout_rs_threshold:"),
        (dict(rollout_rs="token_k1", rollout_rs_threshold="1.1_1.2"), ValueError,
         "rejects on-policy"),
        (dict(preset="decoupled_magic"), ValueError, "^preset:"),
        (dict(loss_type="ppo"), ValueError, "^loss_type:"),
        (dict(bypass_mode="true"), TypeError, "^bypass_mode:"),
        (dict(loss_agg_mode="mean"), ValueError, "^loss_agg_mode:"),
        (dict(dp_size=0), ValueError, "^dp_size:"),
        (dict(clip_ratio_c=1.0), ValueError, "^dual_clip:"),
    ],
)
def test_bad_options_are_one_line_errors(kwargs, error, message):
    with pytest.raises(error, match=message) as info:
        from_verl_options(**kwargs)
    assert "\n" not in str(info.value)


def test_metric_aliases():
    assert VERL_METRIC_NAMES["mismatch_kl"] == "rollout_corr/kl"
    assert VERL_METRIC_NAMES["dual_clipped_fraction"] == "actor/pg_clipfrac_lower"
    renamed = to_verl_metrics({"ess": 1.0, "approx_kl": 0.1, "training_ppl": 3.0})
    assert renamed == {"rollout_corr/rollout_is_eff_sample_size": 1.0, "actor/ppo_kl": 0.1}


def test_port_defaults():
    port = from_verl_options()
    assert port.correction == CorrectionConfig()
    assert port.objective == ObjectiveConfig(dual_clip=3.0)


# Regression: the verl porting traps that were silent, run against verl's own rules.


def test_an_upper_only_k1_bound_in_verls_ratio_units_is_refused():
    # Rejection("k1", "token", upper=2.0), verl's token_k1 threshold 2.0 copied by hand, was
    # accepted and kept -log rho <= 2 with no lower side: every rho > 2 and 0.14 < rho < 0.5,
    # which verl rejects. The error names the side, the unit and verl's 2.0 in our units.
    with pytest.raises(ValueError, match=r"^upper: .*in nats.*verl's 2\.0 keeps 0\.5 <= rho <= 2"
                       r".*Rejection\('k1', 'token', -0\.693147, 0\.693147\)") as info:
        Rejection("k1", "token", upper=2.0)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="^lower: a k1 rejection needs both"):
        Rejection("k1", "seq_mean", lower=-0.5)
    # the translation in the message is verl's rule, token by token
    rule = Rejection("k1", "token", -0.693147, 0.693147)
    assert from_verl_options(rollout_rs="token_k1", rollout_rs_threshold=2.0).correction == (
        CorrectionConfig(rejections=(Rejection("k1", "token", -math.log(2), math.log(2)),)))
    out = rollout_correction(CorrectionConfig(rejections=(rule,)), old_log_prob=jnp.asarray(OLD),
                             rollout_log_prob=jnp.asarray(ROLL), response_mask=jnp.asarray(MASK))
    expected = _verl_rs_keep("token_k1", 0.5, 2.0)
    np.testing.assert_array_equal(np.asarray(out.mask) > 0, expected)
    assert 0 < expected.sum() < MASK.sum()


def _verl_geo_rs_keep(log_ratio: np.ndarray, mask: np.ndarray, lower: float,
                      upper: float) -> np.ndarray:
    """verl's compute_rollout_rejection_mask for rollout_rs="seq_mean_k1" and "L_U" (its
    masked_mean divides by mask.sum() + 1e-8, verl/utils/torch_functional.py)."""
    k1 = -np.clip(log_ratio, -20, 20)
    mean = np.sum(np.where(mask > 0, k1, 0.0) * mask, 1) / (np.sum(mask, 1) + 1e-8)
    return (mean >= math.log(lower)) & (mean <= math.log(upper))


def test_geo_mask_is_verls_geo_rs():
    # geo_mask(0.999, 1.001) kept 0.999 <= rho_geo <= 1.001; verl's Geo-RS with "0.999_1.001"
    # bounds the mean k1 = -mean log rho, i.e. keeps 1/1.001 <= rho_geo <= 1/0.999. The probe
    # puts mean log rho on both sides of both rules' edges (+-0.0009995, +-0.0010005).
    means = np.array([-2e-3, -1.001e-3, -1e-3, -0.9998e-3, -0.999e-3, 0.0, 0.999e-3,
                      0.9998e-3, 1e-3, 1.001e-3, 2e-3])
    lengths = np.array([8, 1, 5, 3, 8, 2, 7, 4, 6, 8, 3])
    rng = np.random.default_rng(1)
    mask = (np.arange(8)[None] < lengths[:, None]).astype(np.float32)
    noise = 0.01 * rng.standard_normal(mask.shape) * mask
    noise -= mask * (np.sum(noise, 1) / lengths)[:, None]  # zero mean over the valid tokens
    log_ratio = np.where(mask > 0, means[:, None] + noise, 5.0)  # padding holds a far ratio
    old = np.full(mask.shape, -0.05, np.float32)
    roll = (old - log_ratio).astype(np.float32)
    verl_keep = _verl_geo_rs_keep(old.astype(np.float64) - roll, mask, 0.999, 1.001)
    np.testing.assert_array_equal(verl_keep, [0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0])
    out = rollout_correction(CorrectionConfig.geo_mask(0.999, 1.001),
                             old_log_prob=jnp.asarray(old),
                             rollout_log_prob=jnp.asarray(roll), response_mask=jnp.asarray(mask))
    np.testing.assert_array_equal(np.asarray(out.mask), mask * verl_keep[:, None])
    # the old rule, 0.999 <= rho_geo <= 1.001, disagreed with verl on 4 rows (18 tokens)
    old_rule = (means >= math.log(0.999)) & (means <= math.log(1.001))
    assert np.sum(old_rule != verl_keep) == 4 and np.sum(mask[old_rule != verl_keep]) == 18
    assert (from_verl_options(preset="decoupled_geo_rs").correction
            == CorrectionConfig.geo_mask(0.999, 1.001))
    assert (from_verl_options(preset="decoupled_geo_rs_token_tis").correction
            == CorrectionConfig.geo_mask_token_tis(0.999, 1.001, c=2.0))


def test_named_presets_are_the_constructors_defaults_and_verls_are_its_own():
    # One source of truth: `hyperx llm --correction NAME` is CorrectionConfig.NAME() (0.9 <=
    # rho_geo <= 1.1; kl 0.05); verl's presets (0.999_1.001; K3-RS 0.01) come from
    # from_verl_options(preset=...), never from a default.
    from hyperx.llm.train import CORRECTIONS

    k3_rs = from_verl_options(preset="decoupled_k3_rs").correction.rejections
    assert CorrectionConfig.trm(kl=0.01).rejections[1:] == k3_rs
    for name in ("geo_mask", "geo_mask_token_tis", "trm", "trm_exact", "token_tis", "seq_tis"):
        assert CORRECTIONS[name] == getattr(CorrectionConfig, name)(), name
    assert CORRECTIONS["trm"] == CorrectionConfig.trm(delta=1.0, kl=0.05)
    assert CORRECTIONS["trm_exact"] == CorrectionConfig.trm_exact(kl=0.05)
    edges = np.log([0.9, 1.1])
    log_rho = np.array([[edges[0] + 1e-4], [edges[0] - 1e-4], [edges[1] - 1e-4],
                        [edges[1] + 1e-4]], np.float32)
    out = rollout_correction(CORRECTIONS["geo_mask"], old_log_prob=jnp.full((4, 1), -1.0),
                             rollout_log_prob=jnp.asarray(-1.0 - log_rho),
                             response_mask=jnp.ones((4, 1)))
    np.testing.assert_array_equal(out.mask[:, 0], [1, 0, 1, 0])


def test_verls_loss_agg_mode_keyword_names_corrected_policy_loss():
    # corrected_policy_loss(..., loss_agg_mode=...) used to fail inside rollout_correction
    # ("rollout_correction() got an unexpected keyword argument"); verl's loss_agg_mode is
    # ObjectiveConfig.agg here.
    lp = jnp.asarray(OLD)
    with pytest.raises(TypeError, match=r"^corrected_policy_loss\(\) got an unexpected keyword "
                       r"argument 'loss_agg_mode'"):
        corrected_policy_loss(ObjectiveConfig(), CorrectionConfig(), log_prob=lp,
                              old_log_prob=lp, rollout_log_prob=lp, advantages=lp,
                              response_mask=jnp.asarray(MASK), loss_agg_mode="token-mean")
    port = from_verl_options(loss_agg_mode="seq-mean-token-mean")
    assert port.objective.agg == "seq-mean-token-mean"
