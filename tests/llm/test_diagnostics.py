import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperx.llm.diagnostics import (
    correction_metrics,
    information_bandwidth,
    mask_metrics,
    mismatch_metrics,
    weight_metrics,
)


def test_weight_metrics_hand_values():
    w = jnp.array([[1.0, 2.0], [3.0, 100.0]])
    m = jnp.array([[1.0, 1.0], [1.0, 0.0]])
    out = weight_metrics(weights=w, mask=m)
    assert float(out["weight_mean"]) == pytest.approx(2.0)
    assert float(out["weight_std"]) == pytest.approx(math.sqrt(2 / 3), rel=1e-6)
    assert float(out["weight_min"]) == 1.0
    assert float(out["weight_max"]) == 3.0
    assert float(out["ess"]) == pytest.approx(36 / (3 * 14), rel=1e-6)
    assert float(
        weight_metrics(weights=jnp.ones((2, 2)), mask=jnp.ones((2, 2)))["ess"]
    ) == pytest.approx(1.0)


def test_mask_metrics_hand_values():
    valid = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    kept = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    out = mask_metrics(response_mask=valid, mask=kept)
    assert float(out["masked_token_fraction"]) == pytest.approx(4 / 5)
    assert float(out["masked_seq_fraction"]) == pytest.approx(1 / 2)
    assert float(out["fully_masked"]) == 0.0
    assert float(mask_metrics(response_mask=valid, mask=jnp.zeros((3, 3)))["fully_masked"]) == 1.0


def test_mismatch_metrics_hand_values():
    train = jnp.array([[-1.0, -0.5], [-0.2, -3.0]])
    roll = jnp.array([[-0.5, -1.0], [-0.5, -7.0]])
    mask = jnp.array([[1.0, 1.0], [1.0, 0.0]])
    log_rho = np.array([-0.5, 0.5, 0.3])
    out = mismatch_metrics(train_log_prob=train, rollout_log_prob=roll, response_mask=mask)
    assert float(out["mismatch_kl"]) == pytest.approx(np.mean(-log_rho), abs=1e-7)
    assert float(out["k3_kl"]) == pytest.approx(np.mean(np.exp(log_rho) - 1 - log_rho), rel=1e-5)
    assert float(out["rollout_ppl"]) == pytest.approx(math.exp(2.0 / 3), rel=1e-6)
    assert float(out["training_ppl"]) == pytest.approx(math.exp(1.7 / 3), rel=1e-6)
    assert float(out["ppl_ratio"]) == pytest.approx(math.exp(-0.1), rel=1e-6)
    assert float(out["chi2_token"]) == pytest.approx(np.mean(np.exp(2 * log_rho)) - 1, rel=1e-5)
    # sequence ratios: row 0 exp(0) = 1, row 1 exp(0.3)
    assert float(out["chi2_seq"]) == pytest.approx((1 + math.exp(0.6)) / 2 - 1, rel=1e-5)


def test_chi2_seq_is_stable_for_huge_sequence_ratios():
    train = jnp.full((2, 10), 15.0)
    out = mismatch_metrics(
        train_log_prob=train, rollout_log_prob=jnp.zeros((2, 10)), response_mask=jnp.ones((2, 10))
    )
    # per-token log-ratios clamp at 20 are not reached (15), the sum 150 clamps to 20
    assert float(out["chi2_seq"]) == pytest.approx(math.exp(40.0) - 1, rel=1e-5)
    assert np.isfinite(float(out["chi2_token"]))


def test_correction_metrics_bound_fractions():
    train = jnp.array([[1.0, -1.0, 0.0, 0.1]])
    out = correction_metrics(
        train_log_prob=train,
        rollout_log_prob=jnp.zeros((1, 4)),
        response_mask=jnp.ones((1, 4)),
        weights=jnp.ones((1, 4)),
        mask=jnp.ones((1, 4)),
        lower=0.5,
        upper=2.0,
    )
    assert float(out["ratio_frac_above"]) == pytest.approx(0.25)  # e^1 > 2
    assert float(out["ratio_frac_below"]) == pytest.approx(0.25)  # e^-1 < 0.5


def test_fully_masked_diagnostics_are_finite():
    x = jnp.full((2, 3), -jnp.inf)
    z = jnp.zeros((2, 3))
    out = correction_metrics(
        train_log_prob=x,
        rollout_log_prob=x,
        response_mask=z,
        weights=z,
        mask=z,
        lower=0.5,
        upper=2.0,
    )
    out.update(information_bandwidth(advantages=x, response_mask=z))
    assert all(np.isfinite(float(v)) for v in out.values())
    assert float(out["fully_masked"]) == 1.0
    assert float(out["adv_bits_per_episode"]) == 0.0


def test_information_bandwidth_hand_values():
    mask = jnp.array([[1.0, 1.0, 0.0]] * 4)
    scalar = jnp.array([[1.0, 1.0, 9.0], [1.0, 1.0, 9.0], [-1.0, -1.0, 9.0], [-1.0, -1.0, 9.0]])
    out = information_bandwidth(advantages=scalar, response_mask=mask, n_bins=4)
    assert float(out["adv_bits_per_episode"]) == pytest.approx(1.0)
    assert float(out["adv_bits_per_token"]) == pytest.approx(1.0)
    assert float(out["adv_bits_episode_bound"]) == pytest.approx(2.0)
    per_token = jnp.arange(8.0).reshape(4, 2)  # 8 distinct values, one per bin
    out = information_bandwidth(advantages=per_token, response_mask=jnp.ones((4, 2)), n_bins=8)
    assert float(out["adv_bits_per_token"]) == pytest.approx(3.0)
    assert float(out["adv_bits_per_episode"]) == pytest.approx(2.0)  # 4 distinct means
    const = information_bandwidth(advantages=jnp.ones((4, 3)), response_mask=mask, n_bins=8)
    assert float(const["adv_bits_per_token"]) == 0.0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-5, 5, width=32), min_size=6, max_size=6), st.integers(1, 8))
def test_information_bandwidth_is_bounded(values, n_bins):
    adv = jnp.asarray(values, jnp.float32).reshape(3, 2)
    out = information_bandwidth(advantages=adv, response_mask=jnp.ones((3, 2)), n_bins=n_bins)
    assert 0.0 <= float(out["adv_bits_per_episode"]) <= math.log2(min(3, n_bins)) + 1e-5
    assert 0.0 <= float(out["adv_bits_per_token"]) <= math.log2(min(6, n_bins)) + 1e-5


def test_bad_shapes_name_the_argument():
    with pytest.raises(ValueError, match="rollout_log_prob"):
        mismatch_metrics(
            train_log_prob=jnp.zeros((2, 3)),
            rollout_log_prob=jnp.zeros((2, 2)),
            response_mask=jnp.ones((2, 3)),
        )
    with pytest.raises(ValueError, match="response_mask"):
        information_bandwidth(advantages=jnp.zeros((2, 3)), response_mask=jnp.ones((3,)))
    with pytest.raises(ValueError, match="n_bins"):
        information_bandwidth(
            advantages=jnp.zeros((2, 3)), response_mask=jnp.ones((2, 3)), n_bins=0
        )
    with pytest.raises(ValueError, match="mask"):
        weight_metrics(weights=jnp.zeros((2, 3)), mask=jnp.ones((2, 2)))


# --- regressions: the +-20 clamp, float64 inputs, NaN inputs ------------------------------


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def test_mismatch_kl_and_ppl_ratio_are_not_clamped():
    # Regression: the +-20 clamp reported mismatch_kl 10.0 (true 15.0) and ppl_ratio e^10 (e^15).
    out = mismatch_metrics(
        train_log_prob=jnp.array([[-0.5, -30.5]]),
        rollout_log_prob=jnp.array([[-0.5, -0.5]]),
        response_mask=jnp.ones((1, 2)),
    )
    assert float(out["mismatch_kl"]) == pytest.approx(15.0, rel=1e-6)
    assert float(out["log_ppl_ratio"]) == pytest.approx(15.0, rel=1e-6)
    assert float(out["ppl_ratio"]) == pytest.approx(math.exp(15.0), rel=1e-5)
    ratio = float(out["training_ppl"]) / float(out["rollout_ppl"])
    assert float(out["ppl_ratio"]) == pytest.approx(ratio, rel=1e-5)


def test_ppl_ratio_saturates_instead_of_overflowing():
    out = mismatch_metrics(
        train_log_prob=jnp.array([[-500.0]]),
        rollout_log_prob=jnp.zeros((1, 1)),
        response_mask=jnp.ones((1, 1)),
    )
    assert float(out["log_ppl_ratio"]) == pytest.approx(500.0)
    assert np.isfinite(float(out["ppl_ratio"])) and np.isfinite(float(out["rollout_ppl"]))


def test_diagnostics_arrays_are_keyword_only():
    x = jnp.zeros((1, 2))
    with pytest.raises(TypeError, match="positional"):
        mismatch_metrics(x, x, x)
    with pytest.raises(TypeError, match="positional"):
        information_bandwidth(x, x)


def test_float64_diagnostics_match_numpy(x64):
    # Regression: float64 inputs came back float32.
    rng = np.random.default_rng(1)
    train = -np.abs(rng.standard_normal((4, 6)))
    roll = train + 0.2 * rng.standard_normal((4, 6))
    mask = (np.arange(6)[None] < np.array([6, 4, 2, 1])[:, None]).astype(np.float64)
    out = mismatch_metrics(train_log_prob=jnp.asarray(train), rollout_log_prob=jnp.asarray(roll),
                           response_mask=jnp.asarray(mask))
    assert all(v.dtype == jnp.float64 for v in out.values())
    v = mask > 0
    lr = np.where(v, train - roll, 0.0)
    ref = {
        "mismatch_kl": np.mean(-lr[v]),
        "k3_kl": np.mean(np.expm1(lr[v]) - lr[v]),
        "rollout_ppl": np.exp(-np.mean(roll[v])),
        "training_ppl": np.exp(-np.mean(train[v])),
        "ppl_ratio": np.exp(np.mean(roll[v]) - np.mean(train[v])),
        "chi2_token": np.mean(np.exp(2 * lr[v])) - 1,
        "chi2_seq": np.mean(np.exp(2 * np.sum(lr, 1))) - 1,
    }
    for key, value in ref.items():
        np.testing.assert_allclose(float(out[key]), value, rtol=1e-9, err_msg=key)
    w = np.exp(lr)
    wm = weight_metrics(weights=jnp.asarray(w), mask=jnp.asarray(mask))
    assert wm["ess"].dtype == jnp.float64
    np.testing.assert_allclose(float(wm["ess"]), np.sum(w[v]) ** 2 / (v.sum() * np.sum(w[v]**2)),
                               rtol=1e-9)
    np.testing.assert_allclose(float(wm["weight_std"]), np.std(w[v]), rtol=1e-9)
    bits = information_bandwidth(advantages=jnp.asarray(train), response_mask=jnp.asarray(mask))
    assert bits["adv_bits_per_token"].dtype == jnp.float64


def test_non_finite_log_prob_names_the_argument():
    with pytest.raises(ValueError, match=r"^rollout_log_prob: expected finite values"):
        mismatch_metrics(train_log_prob=jnp.zeros((1, 2)),
                         rollout_log_prob=jnp.array([[0.0, jnp.nan]]),
                         response_mask=jnp.ones((1, 2)))


def test_n_bins_refuses_bool_and_float():
    with pytest.raises(ValueError, match="n_bins"):
        information_bandwidth(advantages=jnp.zeros((1, 2)), response_mask=jnp.ones((1, 2)),
                              n_bins=True)


def test_float64_mask_metrics_and_information_bandwidth(x64):
    adv = jnp.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]], jnp.float64)
    out = information_bandwidth(advantages=adv, response_mask=jnp.ones((4, 2)), n_bins=4)
    assert out["adv_bits_per_episode"].dtype == jnp.float64
    np.testing.assert_allclose(float(out["adv_bits_per_episode"]), 2.0, rtol=1e-12)
    mm = mask_metrics(response_mask=jnp.ones((2, 2)), mask=jnp.array([[1.0, 0.0], [0.0, 0.0]]),
                      dtype=jnp.float64)
    assert mm["masked_token_fraction"].dtype == jnp.float64
    assert float(mm["masked_token_fraction"]) == 0.75
