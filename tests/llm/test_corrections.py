import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperx.llm.corrections import (
    CorrectionConfig,
    Rejection,
    rejection_keep,
    rollout_correction,
    token_kl,
    token_statistic,
    topk_bucket_kl,
)


def _run(config, log_rho, mask=None, **kw):
    log_rho = jnp.asarray(log_rho, jnp.float32)
    mask = jnp.ones_like(log_rho) if mask is None else jnp.asarray(mask, jnp.float32)
    # Both log-probs shifted below 0 by an integer (exact in float32), log rho unchanged.
    shift = float(np.ceil(np.nanmax(np.where(np.isfinite(log_rho), log_rho, 0.0)))) + 1.0
    return rollout_correction(
        config,
        old_log_prob=log_rho - shift,
        rollout_log_prob=jnp.full_like(log_rho, -shift),
        response_mask=mask,
        **kw,
    )


def test_token_tis_hand_values():
    out = _run(CorrectionConfig.token_tis(2.0), [[-1.0, 0.5, 1.0]])
    np.testing.assert_allclose(out.weights, [[0.367879, 1.648721, 2.0]], rtol=1e-5)
    np.testing.assert_array_equal(out.mask, [[1, 1, 1]])


def test_token_is_is_untruncated():
    out = _run(CorrectionConfig(weights="token_is"), [[-1.0, 0.5, 1.0]])
    np.testing.assert_allclose(out.weights, [[0.367879, 1.648721, 2.718282]], rtol=1e-5)


def test_icepop_zeroes_weights_outside_bounds_but_keeps_mask():
    out = _run(CorrectionConfig.icepop(0.5, 5.0), [[-1.0, 0.5, 2.0]])
    np.testing.assert_allclose(out.weights, [[0.0, 1.648721, 0.0]], rtol=1e-5)
    np.testing.assert_array_equal(out.mask, [[1, 1, 1]])


def test_token_rejection_edits_mask():
    out = _run(CorrectionConfig.token_rejection(0.5, 5.0), [[-1.0, 0.5, 2.0]])
    np.testing.assert_array_equal(out.mask, [[0, 1, 0]])
    np.testing.assert_array_equal(out.weights, [[0, 1, 0]])
    assert float(out.metrics["masked_token_fraction"]) == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("mode", "c", "expected"),
    [
        ("seq_is", 2.0, math.exp(0.3)),
        ("seq_tis", 1.2, 1.2),
        ("seq_tis", 2.0, math.exp(0.3)),
        ("seq_mis", 1.2, 0.0),
        ("seq_mis", 2.0, math.exp(0.3)),
    ],
)
def test_sequence_weights_hand_values(mode, c, expected):
    out = _run(CorrectionConfig(weights=mode, weight_upper=c), [[0.5, -0.2, 7.0]], mask=[[1, 1, 0]])
    np.testing.assert_allclose(out.weights, [[expected, expected, 0.0]], rtol=1e-5)


def test_seq_mis_lower_bound():
    cfg = CorrectionConfig(weights="seq_mis", weight_lower=0.9, weight_upper=2.0)
    out = _run(cfg, [[-0.5, 0.1], [0.05, 0.0]])
    np.testing.assert_allclose(out.weights[:, 0], [0.0, math.exp(0.05)], rtol=1e-5)


def test_geo_mask_both_sides_and_length_invariance():
    # geometric ratios: exp(0.3) = 1.35 (too high), exp(0.0) = 1 (kept), exp(-0.3) = 0.74 (too low)
    log_rho = [[0.2, 0.4, 0.3, 0.3], [0.05, -0.05, 0.0, 0.0], [-0.3, -0.3, -0.3, -0.3]]
    out = _run(CorrectionConfig.geo_mask(0.8, 1.2), log_rho)
    np.testing.assert_array_equal(out.mask[:, 0], [0, 1, 0])
    # same per-token ratio, 4x the length: geometric ratio (and decision) unchanged
    short = _run(CorrectionConfig.geo_mask(0.8, 1.2), [[0.1, 0.1, 0.0, 0.0]], [[1, 1, 0, 0]])
    long = _run(CorrectionConfig.geo_mask(0.8, 1.2), [[0.1, 0.1, 0.1, 0.1]])
    assert float(short.mask[0, 0]) == float(long.mask[0, 0]) == 1.0


def test_geo_mask_with_token_tis():
    cfg = CorrectionConfig.geo_mask_token_tis(0.5, 2.0, c=1.5)
    out = _run(cfg, [[0.6, -0.4], [3.0, 3.0]])
    np.testing.assert_allclose(out.weights, [[1.5, math.exp(-0.4)], [0.0, 0.0]], rtol=1e-5)
    np.testing.assert_array_equal(out.mask, [[1, 1], [0, 0]])


def test_k_statistic_formulas():
    log_rho = jnp.array([0.5, -1.0])
    np.testing.assert_allclose(token_statistic("k1", log_rho), [-0.5, 1.0])
    np.testing.assert_allclose(token_statistic("k2", log_rho), [0.125, 0.5])
    np.testing.assert_allclose(
        token_statistic("k3", log_rho), [math.exp(0.5) - 1.5, math.exp(-1.0) - 1 + 1.0], rtol=1e-6
    )


def test_k1_bound_is_on_minus_log_rho():
    # k1 = -log rho: rho = e^{-1} has k1 = +1, rho = e has k1 = -1
    log_rho = jnp.array([[-1.0, 1.0]])
    mask = jnp.ones_like(log_rho)
    np.testing.assert_array_equal(
        rejection_keep(Rejection("k1", "token", -5.0, 0.5), log_rho, mask), [[0, 1]]
    )
    np.testing.assert_array_equal(
        rejection_keep(Rejection("k1", "token", -0.5, 5.0), log_rho, mask), [[1, 0]]
    )


_LOG_RHO = np.array([[0.4, -0.3, 0.1, 9.0], [-0.4, 0.3, -0.1, -9.0]], np.float32)
_MASK = np.array([[1, 1, 1, 0], [1, 1, 1, 0]], np.float32)


def _expected_stat(statistic, level, row):
    lr = _LOG_RHO[row, :3].astype(np.float64)
    per_token = {"ratio": lr, "k1": -lr, "k2": 0.5 * lr**2, "k3": np.exp(lr) - 1 - lr}[statistic]
    agg = {
        "token": lambda x: x[0],
        "seq_sum": np.sum,
        "seq_mean": np.mean,
        "seq_max": np.max,
        "seq_min": np.min,
    }[level](per_token)
    return math.exp(agg) if statistic == "ratio" else agg


@pytest.mark.parametrize("statistic", ["ratio", "k1", "k2", "k3"])
@pytest.mark.parametrize("level", ["token", "seq_sum", "seq_mean", "seq_max", "seq_min"])
def test_bounds_on_both_sides(statistic, level):
    # A statistic above its on-policy value (ratio 1, k = 0) is tested against upper bounds, one
    # below it against lower bounds; bounds that would reject rho = 1 are refused.
    ideal = 1.0 if statistic == "ratio" else 0.0
    log_rho, mask = jnp.asarray(_LOG_RHO), jnp.asarray(_MASK)
    sides = set()
    for row in (0, 1):
        s = _expected_stat(statistic, level, row)
        eps = 1e-3 * max(abs(s), 1.0)

        def kept(lower=None, upper=None, row=row):
            if statistic == "k1":  # k1 takes both bounds: the other side is wide
                lower, upper = (-1e3 if lower is None else lower), (1e3 if upper is None else upper)
            keep = rejection_keep(Rejection(statistic, level, lower, upper), log_rho, mask)
            return float(keep[row, 0])

        if s > ideal:
            sides.add("upper")
            assert kept(upper=s + eps) == 1.0
            assert kept(upper=s - eps) == 0.0
            with pytest.raises(ValueError, match="rejects on-policy"):
                Rejection(statistic, level, lower=s + eps)
        else:
            sides.add("lower")
            assert kept(lower=s - eps) == 1.0
            assert kept(lower=s + eps) == 0.0
            with pytest.raises(ValueError, match="rejects on-policy"):
                Rejection(statistic, level, upper=s - eps)
        lo = min(s - eps, ideal) if statistic != "ratio" else max(min(s - eps, ideal), 0.0)
        assert kept(lower=lo, upper=max(s + eps, ideal)) == 1.0
        # the masked token (log rho = +-9) never takes part in a sequence statistic
        if level != "token":
            assert (
                float(
                    rejection_keep(
                        Rejection(statistic, level, lo, max(s + eps, ideal)), log_rho, mask
                    )[row, 3]
                )
                == 1.0
            )
    assert sides == ({"upper"} if statistic in ("k2", "k3") else sides)


def test_verl_k1_bounds_are_refused_not_misread():
    # Regression: verl's k1 threshold "0.5_2.0" copied as Rejection("k1", ..., 0.5, 2.0) kept
    # rho in [e^-2, e^-0.5] = [0.14, 0.61] and reject rho = 1; now it is an error saying why.
    with pytest.raises(ValueError, match=r"rejects on-policy tokens \(k1 = 0 at rho = 1\).*nats"):
        Rejection("k1", "token", 0.5, 2.0)
    with pytest.raises(ValueError, match="rejects on-policy"):
        Rejection("ratio", "seq_mean", 1.1, 2.0)
    # the ratio bounds, as meant: keep 0.5 <= rho <= 2
    keep = rejection_keep(
        Rejection("ratio", "token", 0.5, 2.0),
        jnp.log(jnp.array([[0.4, 1.0, 1.9, 2.1]])),
        jnp.ones((1, 4)),
    )
    np.testing.assert_array_equal(keep, [[0, 1, 1, 0]])


def test_rejections_chain_with_and():
    cfg = CorrectionConfig(
        rejections=(Rejection("ratio", "token", upper=2.0), Rejection("k1", "token", -5.0, 0.5))
    )
    out = _run(cfg, [[1.0, -1.0, 0.1]])
    np.testing.assert_array_equal(out.mask, [[0, 0, 1]])
    assert float(out.metrics["reject0_token_ratio_token_fraction"]) == pytest.approx(1 / 3)
    assert float(out.metrics["reject1_token_k1_token_fraction"]) == pytest.approx(1 / 3)


def test_trm_sample_proxies():
    cfg = CorrectionConfig.trm(delta=0.5, kl=0.01)
    # row 0: one token with |log rho| = 0.6 > 0.5 -> whole sequence masked
    # row 1: |log rho| <= 0.3, mean k3 = (e^.3-1.3 + e^-.3-.7)/2 = 0.0453 > 0.01 -> masked
    # row 2: small mismatch -> kept
    out = _run(
        cfg,
        [[0.0, 0.6, 0.0], [0.3, -0.3, 0.0], [0.05, -0.05, 0.0]],
        mask=[[1, 1, 1], [1, 1, 0], [1, 1, 1]],
    )
    np.testing.assert_array_equal(out.mask, [[0, 0, 0], [0, 0, 0], [1, 1, 1]])
    assert float(out.metrics["masked_seq_fraction"]) == pytest.approx(2 / 3)


def test_exact_token_kl_hand_value():
    mu = jnp.array([[[0.0, 0.0]]])
    pi = jnp.array([[[math.log(3.0), 0.0]]])
    expected = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    np.testing.assert_allclose(
        token_kl(rollout_logits=mu, train_logits=pi), [[expected]], rtol=1e-5
    )


def test_exact_trm_masks_whole_sequence_and_ignores_padding():
    mu = jnp.zeros((2, 3, 2))
    pi = jnp.zeros((2, 3, 2)).at[0, 1, 0].set(math.log(3.0)).at[1, 2, 0].set(10.0)
    mask = jnp.array([[1, 1, 1], [1, 1, 0]], jnp.float32)
    lp = jnp.zeros((2, 3))
    for kl, row0 in ((0.1, 0.0), (0.2, 1.0)):
        out = rollout_correction(
            CorrectionConfig.trm_exact(kl),
            old_log_prob=lp,
            rollout_log_prob=lp,
            response_mask=mask,
            rollout_logits=mu,
            old_logits=pi,
        )
        np.testing.assert_array_equal(out.mask, [[row0] * 3, [1, 1, 0]])


def test_topk_bucket_kl_hand_value():
    p_mu = np.array([0.4, 0.3, 0.2, 0.1])
    train_logits = jnp.zeros((1, 1, 4))
    topk_lp = jnp.log(jnp.array([[[0.4, 0.3]]]))
    ids = jnp.array([[[0, 1]]])
    expected = 0.4 * math.log(1.6) + 0.3 * math.log(1.2) + 0.3 * math.log(0.6)
    got = topk_bucket_kl(
        rollout_topk_log_probs=topk_lp, rollout_topk_ids=ids, train_logits=train_logits
    )
    np.testing.assert_allclose(got, [[expected]], rtol=1e-5)
    full = float(np.sum(p_mu * np.log(p_mu / 0.25)))
    assert float(got[0, 0]) <= full


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 5))
def test_topk_bucket_kl_lower_bounds_full_kl(seed, k):
    # data processing inequality: merging tokens into k+1 buckets cannot increase KL
    k_mu, k_pi = jax.random.split(jax.random.key(seed))
    mu_logits = 2.0 * jax.random.normal(k_mu, (2, 3, 6))
    pi_logits = 2.0 * jax.random.normal(k_pi, (2, 3, 6))
    log_mu = jax.nn.log_softmax(mu_logits)
    topk_lp, ids = jax.lax.top_k(log_mu, k)
    bucket = np.asarray(
        topk_bucket_kl(rollout_topk_log_probs=topk_lp, rollout_topk_ids=ids, train_logits=pi_logits)
    )
    full = np.asarray(token_kl(rollout_logits=mu_logits, train_logits=pi_logits))
    # At k = V - 1 the rest bucket holds one token and the two are equal up to float32 rounding
    # of sums of ~6 terms of size ~1: allow 1e-5 relative plus 1e-5 absolute (seen: 2e-5 at 1.43).
    assert np.all(bucket <= full * (1 + 1e-5) + 1e-5)


def test_trm_from_topk_logits():
    mask = jnp.ones((1, 1))
    lp = jnp.zeros((1, 1))
    topk_lp = jnp.log(jnp.array([[[0.4, 0.3]]]))
    ids = jnp.array([[[0, 1]]])
    out = rollout_correction(
        CorrectionConfig.trm_exact(0.05),
        old_log_prob=lp,
        rollout_log_prob=lp,
        response_mask=mask,
        old_logits=jnp.zeros((1, 1, 4)),
        rollout_topk_log_probs=topk_lp,
        rollout_topk_ids=ids,
    )
    assert float(out.mask[0, 0]) == 0.0  # bucket KL = 0.0703 > 0.05


def test_batch_normalize_token_and_sequence():
    out = _run(
        CorrectionConfig(weights="token_tis", batch_normalize=True),
        [[0.5, -0.5, 3.0], [0.0, 0.2, 9.0]],
        mask=[[1, 1, 1], [1, 1, 0]],
    )
    assert float(jnp.sum(out.weights) / jnp.sum(out.mask)) == pytest.approx(1.0, rel=1e-6)
    out = _run(
        CorrectionConfig(weights="seq_tis", batch_normalize=True),
        [[0.5, -0.2, 0.0], [0.1, 0.0, 0.0]],
        mask=[[1, 1, 1], [1, 0, 0]],
    )
    # per-sequence weights e^0.3 and e^0.1, normalised by their mean (not token-weighted)
    np.testing.assert_allclose(
        out.weights[:, 0], np.exp([0.3, 0.1]) / np.mean(np.exp([0.3, 0.1])), rtol=1e-5
    )


def test_long_sequence_with_drift_stays_finite():
    # T = 32,768 tokens, per-token log-ratio noise std 0.05 and drift +0.01: the sum is ~328,
    # far past exp's float32 range, so the sequence sum must be clamped to 20.
    t = 32_768
    log_rho = 0.01 + 0.05 * jax.random.normal(jax.random.key(0), (2, t))
    for cfg in (
        CorrectionConfig(weights="seq_is"),
        CorrectionConfig.seq_tis(),
        CorrectionConfig.geo_mask_token_tis(),
        CorrectionConfig.trm(),
    ):
        out = _run(cfg, log_rho)
        assert np.all(np.isfinite(out.weights))
        assert all(np.isfinite(float(v)) for v in out.metrics.values())
    out = _run(CorrectionConfig(weights="seq_is"), log_rho)
    np.testing.assert_allclose(out.weights[:, 0], math.exp(20.0), rtol=1e-5)


def test_fully_masked_batch():
    lp = jnp.full((2, 3), -jnp.inf)
    out = rollout_correction(
        CorrectionConfig(
            weights="seq_tis",
            batch_normalize=True,
            rejections=(Rejection("k3", "seq_mean", upper=1.0),),
        ),
        old_log_prob=lp,
        rollout_log_prob=lp,
        response_mask=jnp.zeros((2, 3)),
    )
    np.testing.assert_array_equal(out.weights, 0.0)
    np.testing.assert_array_equal(out.mask, 0.0)
    assert all(np.isfinite(float(v)) for v in out.metrics.values())
    assert float(out.metrics["fully_masked"]) == 1.0


def test_all_tokens_rejected_reports_fully_masked():
    out = _run(CorrectionConfig.token_rejection(0.9, 1.1), [[1.0, -1.0]])
    assert float(out.metrics["fully_masked"]) == 1.0
    assert float(out.metrics["masked_seq_fraction"]) == 1.0


def test_jit_and_stop_gradient():
    cfg = CorrectionConfig.geo_mask_token_tis()
    log_rho = jnp.array([[0.3, -0.2], [0.1, 0.0]]) - 1.0  # log-probs <= 0; rho as before
    mask = jnp.ones((2, 2))
    kw = dict(rollout_log_prob=jnp.full((2, 2), -1.0), response_mask=mask)
    jitted = jax.jit(rollout_correction, static_argnums=0)(cfg, old_log_prob=log_rho, **kw)
    eager = rollout_correction(cfg, old_log_prob=log_rho, **kw)
    np.testing.assert_allclose(jitted.weights, eager.weights)
    grad = jax.grad(lambda x: jnp.sum(rollout_correction(cfg, old_log_prob=x, **kw).weights))(
        log_rho
    )
    np.testing.assert_array_equal(grad, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"rollout_log_prob": jnp.zeros((2, 4))}, "rollout_log_prob"),
        ({"response_mask": jnp.ones((3, 3))}, "response_mask"),
        ({"old_log_prob": jnp.zeros((6,))}, "old_log_prob"),
    ],
)
def test_bad_shapes_name_the_argument(kwargs, name):
    args = {
        "old_log_prob": jnp.zeros((2, 3)),
        "rollout_log_prob": jnp.zeros((2, 3)),
        "response_mask": jnp.ones((2, 3)),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        rollout_correction(CorrectionConfig(), **args)


def test_trm_inputs_are_checked():
    lp, mask = jnp.zeros((2, 3)), jnp.ones((2, 3))
    lp = dict(old_log_prob=lp, rollout_log_prob=lp, response_mask=mask)
    with pytest.raises(ValueError, match="old_logits"):
        rollout_correction(CorrectionConfig.trm_exact(), **lp)
    with pytest.raises(ValueError, match="rollout_logits"):
        rollout_correction(CorrectionConfig.trm_exact(), **lp, old_logits=jnp.zeros((2, 3, 5)))
    with pytest.raises(ValueError, match="rollout_logits"):
        rollout_correction(
            CorrectionConfig.trm_exact(),
            **lp,
            old_logits=jnp.zeros((2, 3, 5)),
            rollout_logits=jnp.zeros((2, 3, 4)),
        )
    with pytest.raises(TypeError, match="rollout_topk_ids"):
        rollout_correction(
            CorrectionConfig.trm_exact(),
            **lp,
            old_logits=jnp.zeros((2, 3, 5)),
            rollout_topk_log_probs=jnp.zeros((2, 3, 2)),
            rollout_topk_ids=jnp.zeros((2, 3, 2)),
        )


def test_config_validation():
    with pytest.raises(ValueError, match="weights"):
        CorrectionConfig(weights="nope")
    with pytest.raises(ValueError, match="lower"):
        Rejection("k2", "seq_max", lower=2.0, upper=1.0)
    with pytest.raises(ValueError, match="level"):
        Rejection("k2", "seq_median", upper=1.0)
    with pytest.raises(ValueError, match="bound"):
        Rejection("k2", "token")
    with pytest.raises(ValueError, match="weight_lower"):
        CorrectionConfig(weights="token_mis", weight_lower=3.0, weight_upper=2.0)
    assert hash(CorrectionConfig.trm()) == hash(CorrectionConfig.trm())


# --- regressions: boolean bounds, swapped log-probs, float64 inputs, NaN, empty batches ---


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        (dict(weights="token_tis", weight_upper=True), TypeError, "weight_upper"),
        (dict(weights="token_tis", weight_upper="2.0"), TypeError, "weight_upper"),
        (dict(weights="token_tis", weight_upper=float("nan")), ValueError, "weight_upper"),
        (dict(weights="token_mis", weight_lower=False), TypeError, "weight_lower"),
        (dict(weights="token_mis", weight_lower=float("-inf")), ValueError, "weight_lower"),
        (dict(trm_kl=float("inf")), ValueError, "trm_kl"),
        (dict(trm_kl=True), TypeError, "trm_kl"),
        (dict(batch_normalize=1), TypeError, "batch_normalize"),
        (dict(bypass="yes"), TypeError, "bypass"),
        (dict(rejections=[Rejection("k3", "token", upper=1.0)]), TypeError, "rejections"),
    ],
)
def test_config_numbers_refuse_bools_strings_and_non_finite(kwargs, error, name):
    # Regression: weight_upper=True used to clip silently at 1.0.
    with pytest.raises(error, match=f"^{name}:") as info:
        CorrectionConfig(**kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", [True, "1.0", float("nan"), float("inf")])
def test_rejection_bounds_refuse_bools_strings_and_non_finite(bad):
    with pytest.raises((TypeError, ValueError), match="^(lower|upper):"):
        Rejection("ratio", "token", upper=bad)
    with pytest.raises((TypeError, ValueError), match="^(lower|upper):"):
        Rejection("k1", "token", lower=bad)


def test_log_prob_arguments_are_keyword_only():
    # Regression: rollout_correction(config, a, b, mask) with the two log-probs swapped was silent.
    lp = jnp.zeros((1, 2))
    with pytest.raises(TypeError, match="positional"):
        rollout_correction(CorrectionConfig(), lp, lp, jnp.ones((1, 2)))
    with pytest.raises(TypeError, match="positional"):
        token_kl(jnp.zeros((1, 1, 2)), jnp.zeros((1, 1, 2)))


def _np_log_rho(old, roll, mask):
    return np.clip(np.where(mask > 0, old - roll, 0.0), -20.0, 20.0)


@pytest.mark.parametrize(
    "config",
    [
        CorrectionConfig.token_tis(1.3),
        CorrectionConfig(weights="token_is"),
        CorrectionConfig.icepop(0.8, 1.2),
        CorrectionConfig.seq_tis(1.1),
        CorrectionConfig(weights="seq_mis", weight_lower=0.7, weight_upper=1.5),
        CorrectionConfig.geo_mask_token_tis(0.9, 1.1, c=1.2),
        CorrectionConfig(weights="token_tis", batch_normalize=True),
        CorrectionConfig.trm(delta=0.5, kl=0.02),
    ],
)
def test_float64_in_float64_out_matches_numpy(x64, config):
    # Regression: float64 inputs were computed in and returned as float32.
    rng = np.random.default_rng(0)
    old = -np.abs(rng.standard_normal((3, 5))) - 2.0
    roll = old + 0.3 * rng.standard_normal((3, 5))
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], np.int32)
    out = rollout_correction(config, old_log_prob=jnp.asarray(old),
                             rollout_log_prob=jnp.asarray(roll), response_mask=jnp.asarray(mask))
    assert out.weights.dtype == out.mask.dtype == jnp.float64
    assert all(v.dtype == jnp.float64 for v in out.metrics.values())
    lr = _np_log_rho(old, roll, mask)
    valid = mask > 0
    keep = np.ones_like(lr)
    for rule in config.rejections:
        stat = {"ratio": lr, "k1": -lr, "k2": 0.5 * lr**2, "k3": np.expm1(lr) - lr}[
            rule.statistic]
        if rule.level != "token":
            stat = np.where(valid, stat, np.nan)
            agg = {"seq_mean": np.nanmean, "seq_max": np.nanmax, "seq_sum": np.nansum}[
                rule.level](stat, axis=1)
            stat = np.broadcast_to(agg[:, None], lr.shape)
        lo = -np.inf if rule.lower is None else rule.lower
        hi = np.inf if rule.upper is None else rule.upper
        if rule.statistic == "ratio":
            lo, hi = np.log(lo) if lo > 0 else -np.inf, np.log(hi)
        keep = keep * ((stat >= lo) & (stat <= hi))
    kept = valid & (keep > 0)
    if config.weights.startswith("seq"):
        log_w = np.broadcast_to(np.clip(np.sum(lr * valid, 1), -20, 20)[:, None], lr.shape)
    else:
        log_w = lr
    w = np.exp(log_w) if config.weights != "none" else np.ones_like(lr)
    if config.weights.endswith("tis"):
        w = np.minimum(w, config.weight_upper)
    elif config.weights.endswith("mis"):
        lo = config.weight_lower
        w = np.where((w <= config.weight_upper) & (w >= (lo or 0.0)), w, 0.0)
    if config.batch_normalize:
        w = w / (np.sum(w * kept) / np.sum(kept))
    np.testing.assert_allclose(out.weights, np.where(kept, w, 0.0), rtol=1e-9, atol=0)
    np.testing.assert_array_equal(out.mask, kept.astype(np.float64))
    np.testing.assert_allclose(float(out.metrics["mismatch_kl"]), np.mean(-lr[valid]),
                               rtol=1e-9)
    np.testing.assert_allclose(float(out.metrics["k3_kl"]),
                               np.mean((np.expm1(lr) - lr)[valid]), rtol=1e-9)


def test_integer_mask_gives_float32_and_bf16_is_computed_in_float32():
    lp = jnp.zeros((1, 2), jnp.bfloat16)
    out = rollout_correction(CorrectionConfig.token_tis(), old_log_prob=lp, rollout_log_prob=lp,
                             response_mask=jnp.ones((1, 2), jnp.int32))
    assert out.weights.dtype == out.mask.dtype == jnp.float32


def test_token_kl_float64(x64):
    mu = jnp.array([[[0.0, 0.0]]], jnp.float64)
    pi = jnp.array([[[math.log(3.0), 0.0]]], jnp.float64)
    expected = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    got = token_kl(rollout_logits=mu, train_logits=pi)
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(got, [[expected]], rtol=1e-12)


def test_non_finite_log_prob_at_a_valid_token_is_an_error():
    # Regression: a NaN log-prob gave NaN weights and metrics with no error.
    old = jnp.array([[0.0, jnp.nan, -jnp.inf]])
    mask = jnp.array([[1.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match=r"^old_log_prob: expected finite values"):
        rollout_correction(CorrectionConfig.token_tis(), old_log_prob=old,
                           rollout_log_prob=jnp.zeros((1, 3)), response_mask=mask)
    # padding may hold anything (here NaN and -inf): not an error
    ok = rollout_correction(CorrectionConfig.token_tis(), old_log_prob=old.at[0, 1].set(0.0),
                            rollout_log_prob=jnp.zeros((1, 3)), response_mask=mask)
    assert np.isfinite(float(ok.metrics["mismatch_kl"]))


def test_checked_mode_under_jit_names_the_argument():
    from hyperx._validation import checked

    cfg = CorrectionConfig.token_tis()
    f = jax.jit(lambda old, roll, m: rollout_correction(
        cfg, old_log_prob=old, rollout_log_prob=roll, response_mask=m, check_finite=True).weights)
    roll = jnp.array([[0.0, jnp.inf]])
    err, _ = checked(f)(jnp.zeros((1, 2)), roll, jnp.ones((1, 2)))
    with pytest.raises(Exception, match="rollout_log_prob: expected finite values"):
        err.throw()
    err, _ = checked(f)(jnp.zeros((1, 2)), roll, jnp.array([[1.0, 0.0]]))
    err.throw()  # the inf sits at padding: no error
    # unchecked under jit: the NaN propagates to the metrics, as documented
    g = jax.jit(lambda old: rollout_correction(cfg, old_log_prob=old, rollout_log_prob=roll,
                                               response_mask=jnp.ones((1, 2))).metrics)
    assert not np.isfinite(float(g(jnp.zeros((1, 2)))["mismatch_kl"]))


def test_empty_batch_is_a_one_line_error():
    # Regression: B = 0 gave a numpy/MLIR error.
    with pytest.raises(ValueError, match=r"^old_log_prob: expected at least one response"):
        rollout_correction(CorrectionConfig(), old_log_prob=jnp.zeros((0, 3)),
                           rollout_log_prob=jnp.zeros((0, 3)), response_mask=jnp.ones((0, 3)))


def test_non_binary_response_mask_is_carried_as_token_weights():
    out = _run(CorrectionConfig.token_rejection(0.5, 2.0), [[0.0, 0.1, 3.0]],
               mask=[[2.0, 0.5, 1.0]])
    np.testing.assert_allclose(out.mask, [[2.0, 0.5, 0.0]])
    np.testing.assert_allclose(out.weights, [[1.0, 1.0, 0.0]])  # weights are not scaled by it
    assert float(out.metrics["masked_token_fraction"]) == pytest.approx(1 / 3)


def test_float64_topk_bucket_kl_matches_numpy(x64):
    p_mu = np.array([0.4, 0.3, 0.2, 0.1])
    topk_lp = jnp.log(jnp.array([[[0.4, 0.3]]], jnp.float64))
    got = topk_bucket_kl(rollout_topk_log_probs=topk_lp, rollout_topk_ids=jnp.array([[[0, 1]]]),
                         train_logits=jnp.zeros((1, 1, 4), jnp.float64))
    expected = 0.4 * np.log(1.6) + 0.3 * np.log(1.2) + 0.3 * np.log(0.6)
    assert got.dtype == jnp.float64 and float(got[0, 0]) <= np.sum(p_mu * np.log(p_mu / 0.25))
    np.testing.assert_allclose(got, [[expected]], rtol=1e-12)
