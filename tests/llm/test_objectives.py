import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.llm.corrections import CorrectionConfig
from hyperx.llm.objectives import (
    AGGREGATIONS,
    ObjectiveConfig,
    aggregate_loss,
    corrected_policy_loss,
    loss_denominator,
    policy_loss,
)

MASK = jnp.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_reinforce_gradient_is_minus_w_a_over_n():
    lp = jnp.array([[-1.0, -0.5, -2.0], [-0.3, -0.7, -9.0]])
    adv = jnp.array([[1.0, -2.0, 0.5], [3.0, 1.0, 4.0]])
    w = jnp.array([[0.5, 2.0, 1.0], [1.5, 1.0, 7.0]])
    cfg = ObjectiveConfig(loss="reinforce")
    loss, grad = jax.value_and_grad(
        lambda x: (
            policy_loss(
                cfg, log_prob=x, old_log_prob=None, advantages=adv, mask=MASK, weights=w
            ).loss
        )
    )(lp)
    np.testing.assert_allclose(grad, -w * adv * MASK / 5.0, rtol=1e-6)
    assert float(loss) == pytest.approx(float(-jnp.sum(w * adv * lp * MASK) / 5.0), rel=1e-6)


def test_ppo_clip_gradient_by_case():
    # log-ratios: 0.1 inside; 0.4 above 1+eps with A>0 (clipped, grad 0); -0.4 below 1-eps with
    # A<0 (clipped, grad 0); 0.4 above 1+eps with A<0 (unclipped side is worse, grad -A r)
    old = -jnp.ones((1, 4))  # log-probs <= 0; the log-ratios below are lp - old
    lp = jnp.array([[0.1, 0.4, -0.4, 0.4]]) - 1.0
    adv = jnp.array([[1.0, 1.0, -1.0, -1.0]])
    mask = jnp.ones((1, 4))
    w = jnp.array([[2.0, 1.0, 1.0, 0.5]])
    cfg = ObjectiveConfig(loss="ppo", clip_eps=0.2)
    out, grad = jax.value_and_grad(
        lambda x: (
            policy_loss(
                cfg, log_prob=x, old_log_prob=old, advantages=adv, mask=mask, weights=w
            ).loss
        )
    )(lp)
    r = np.exp([0.1, 0.4, -0.4, 0.4])
    expected = np.array([-2.0 * r[0], 0.0, 0.0, 0.5 * r[3]]) / 4.0
    np.testing.assert_allclose(grad[0], expected, rtol=1e-6)
    hand = (-2.0 * r[0] - 1.2 + 0.8 * 1.0 * -1 * -1 + 0.5 * r[3]) / 4.0
    assert float(out) == pytest.approx(hand, rel=1e-6)
    metrics = policy_loss(
        cfg, log_prob=lp, old_log_prob=old, advantages=adv, mask=mask, weights=w
    ).metrics
    assert float(metrics["clipped_fraction"]) == pytest.approx(0.5)


def test_dual_clip_caps_negative_advantage_loss():
    old = jnp.zeros((1, 2))
    lp = jnp.array([[math.log(4.0), math.log(2.0)]])
    adv = jnp.array([[-1.0, -1.0]])
    cfg = ObjectiveConfig(loss="ppo", dual_clip=3.0)
    loss, grad = jax.value_and_grad(
        lambda x: (
            policy_loss(
                cfg, log_prob=x, old_log_prob=old, advantages=adv, mask=jnp.ones((1, 2))
            ).loss
        )
    )(lp)
    assert float(loss) == pytest.approx((3.0 + 2.0) / 2)  # min(4, 3) and 2
    np.testing.assert_allclose(grad, [[0.0, 1.0]], rtol=1e-6)  # d(r)/dlp = r = 2, / 2 tokens


def test_asymmetric_clip():
    old = -jnp.ones((1, 1))
    lp = jnp.array([[0.25]]) - 1.0
    adv = jnp.ones((1, 1))
    loss = policy_loss(
        ObjectiveConfig(clip_eps=0.2, clip_eps_high=0.28),
        log_prob=lp,
        old_log_prob=old,
        advantages=adv,
        mask=jnp.ones((1, 1)),
    ).loss
    assert float(loss) == pytest.approx(-1.28, rel=1e-6)  # r = e^0.25 = 1.284 > 1 + 0.28
    loss = policy_loss(
        ObjectiveConfig(clip_eps=0.2, clip_eps_high=0.3),
        log_prob=lp,
        old_log_prob=old,
        advantages=adv,
        mask=jnp.ones((1, 1)),
    ).loss
    assert float(loss) == pytest.approx(-math.exp(0.25), rel=1e-6)


def test_sequence_ratio_gradient():
    # GSPO: r_i = exp(mean_t (lp - old)); unclipped token-mean loss -(1/N) sum_it A_i r_i
    old = jnp.zeros((2, 3))
    lp = jnp.array([[0.02, -0.01, 0.05], [0.03, -0.03, 0.0]])
    adv = jnp.array([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    cfg = ObjectiveConfig(sequence_ratio=True, clip_eps=0.2)
    grad = jax.grad(
        lambda x: policy_loss(cfg, log_prob=x, old_log_prob=old, advantages=adv, mask=MASK).loss
    )(lp)
    r = np.exp([0.06 / 3, 0.0])
    n = np.array([3.0, 2.0])
    # d/dlp_t of -(1/5) * n_i A_i r_i = -(1/5) A_i r_i  (the 1/n_i of the mean cancels n_i)
    per_seq = -np.array([1.0, -2.0]) * r * n / n / 5.0
    np.testing.assert_allclose(grad, per_seq[:, None] * np.asarray(MASK), rtol=1e-5)


def test_aggregation_modes_hand_values_and_denominator_rule():
    loss_mat = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0], [7.0, 8.0, 9.0]])
    # row 0: token 2 rejected; row 1: padding at t=2; row 2: whole response rejected
    mask = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    expected = {
        "token-mean": (1 + 2 + 4 + 5) / 4,  # rejected tokens leave the token count
        "token-sum": 12.0,
        "seq-mean-token-sum": (3 + 9) / 2,  # the fully rejected response leaves the count
        "seq-mean-token-mean": (1.5 + 4.5) / 2,
        "seq-mean-token-sum-norm": (3 + 9) / 3 / 2,
    }
    for agg, value in expected.items():
        assert float(aggregate_loss(loss_mat, mask=mask, agg=agg)) == pytest.approx(value), agg
    assert (
        float(aggregate_loss(loss_mat, mask=mask, agg="seq-mean-token-sum-norm", max_length=6))
        == 1.0
    )


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_micro_batch_invariance(agg):
    # 4 micro-batches of 2 responses; the global denominator comes from the full batch
    k1, k2, k3, k4 = jax.random.split(jax.random.key(3), 4)
    b, t = 8, 6
    lp = -jnp.abs(jax.random.normal(k1, (b, t))) - 1.0
    old = lp + 0.1 * jax.random.normal(k2, (b, t))
    adv = jax.random.normal(k3, (b, t))
    lengths = jax.random.randint(k4, (b,), 0, t + 1)
    mask = (jnp.arange(t)[None] < lengths[:, None]).astype(jnp.float32)
    cfg = ObjectiveConfig(agg=agg, dual_clip=3.0)
    den = loss_denominator(agg, mask)

    def full(x):
        return policy_loss(cfg, log_prob=x, old_log_prob=old, advantages=adv, mask=mask).loss

    def micro(x):
        return sum(
            policy_loss(
                cfg,
                log_prob=x[i : i + 2],
                old_log_prob=old[i : i + 2],
                advantages=adv[i : i + 2],
                mask=mask[i : i + 2],
                denominator=den,
            ).loss
            for i in range(0, b, 2)
        )

    lf, gf = jax.value_and_grad(full)(lp)
    lm, gm = jax.value_and_grad(micro)(lp)
    assert abs(float(lf) - float(lm)) <= 1e-6
    np.testing.assert_allclose(gm, gf, atol=1e-6)


def test_token_mean_without_global_denominator_is_not_invariant():
    loss_mat = jnp.array([[1.0, 1.0], [3.0, 0.0]])
    mask = jnp.array([[1.0, 1.0], [1.0, 0.0]])
    full = aggregate_loss(loss_mat, mask=mask, agg="token-mean")
    halves = 0.5 * sum(
        aggregate_loss(loss_mat[i : i + 1], mask=mask[i : i + 1], agg="token-mean")
        for i in range(2)
    )
    assert float(full) == pytest.approx(5 / 3)
    assert float(halves) == pytest.approx(2.0)


def test_bypass_ppo_does_not_apply_weights_twice():
    lp = jnp.array([[-1.0, -0.6, -2.0], [-0.3, -0.7, -9.0]])
    mu = lp - jnp.array([[0.5, -0.3, 0.1], [0.2, 0.05, 0.0]])
    adv = jnp.array([[1.0, -1.0, 0.5], [2.0, 1.0, 0.0]])
    obj = ObjectiveConfig(loss="ppo")
    corr = CorrectionConfig(weights="token_tis", bypass=True)
    got = corrected_policy_loss(
        obj,
        corr,
        log_prob=lp,
        old_log_prob=None,
        rollout_log_prob=mu,
        advantages=adv,
        response_mask=MASK,
    ).loss
    expected = policy_loss(
        obj, log_prob=lp, old_log_prob=mu, advantages=adv, mask=MASK
    ).loss  # ratio pi_theta / mu, no weights
    assert float(got) == pytest.approx(float(expected), rel=1e-6)


def test_bypass_reinforce_stop_gradient():
    # w = pi_theta / mu is built from the log-probs being differentiated; the correct gradient
    # of -sg(w) A log pi is -w A / N; without stop_gradient it would be -w A (1 + log pi) / N.
    lp = jnp.array([[-1.0, -0.6, -2.0], [-0.3, -0.7, -9.0]])
    mu = lp - jnp.array([[0.5, -0.3, 0.1], [0.2, 0.05, 0.0]])
    adv = jnp.array([[1.0, -1.0, 0.5], [2.0, 1.0, 0.0]])
    obj = ObjectiveConfig(loss="reinforce")
    corr = CorrectionConfig(weights="token_is", bypass=True)
    grad = jax.grad(
        lambda x: (
            corrected_policy_loss(
                obj,
                corr,
                log_prob=x,
                old_log_prob=None,
                rollout_log_prob=mu,
                advantages=adv,
                response_mask=MASK,
            ).loss
        )
    )(lp)
    w = jnp.exp(lp - mu)
    correct = -w * adv * MASK / 5.0
    without_sg = jax.grad(lambda x: -jnp.sum(jnp.exp(x - mu) * adv * x * MASK) / 5.0)(lp)
    np.testing.assert_allclose(grad, correct, rtol=1e-6)
    assert not np.allclose(without_sg, correct, rtol=1e-3)
    # policy_loss itself stops the gradient even when handed differentiable weights
    grad2 = jax.grad(
        lambda x: (
            policy_loss(
                obj,
                log_prob=x,
                old_log_prob=None,
                advantages=adv,
                mask=MASK,
                weights=jnp.exp(x - mu),
            ).loss
        )
    )(lp)
    np.testing.assert_allclose(grad2, correct, rtol=1e-6)


def test_decoupled_uses_weights_and_pi_old_anchor():
    lp = jnp.array([[-1.0, -0.6]])
    old = jnp.array([[-1.05, -0.5]])
    mu = jnp.array([[-1.5, -0.5]])
    adv = jnp.array([[1.0, 1.0]])
    mask = jnp.ones((1, 2))
    obj = ObjectiveConfig()
    out = corrected_policy_loss(
        obj,
        CorrectionConfig.token_tis(1.5),
        log_prob=lp,
        old_log_prob=old,
        rollout_log_prob=mu,
        advantages=adv,
        response_mask=mask,
    )
    w = jnp.array([[1.5, 1.0]])
    expected = policy_loss(
        obj, log_prob=lp, old_log_prob=old, advantages=adv, mask=mask, weights=w
    ).loss
    assert float(out.loss) == pytest.approx(float(expected), rel=1e-6)
    assert "ess" in out.metrics and "clipped_fraction" in out.metrics


@pytest.mark.parametrize("loss", ["ppo", "reinforce"])
def test_fully_masked_batch_gives_zero_loss_and_gradient(loss):
    lp = jnp.full((2, 3), -jnp.inf)
    mask = jnp.zeros((2, 3))
    obj = ObjectiveConfig(loss=loss, agg="seq-mean-token-mean")
    fn = lambda x: corrected_policy_loss(
        obj,
        CorrectionConfig.seq_tis(),
        log_prob=x,
        old_log_prob=x,
        rollout_log_prob=x,
        advantages=jnp.ones((2, 3)),
        response_mask=mask,
    )
    (value, out), grad = jax.value_and_grad(lambda x: (fn(x).loss, fn(x)), has_aux=True)(lp)
    assert float(value) == 0.0
    np.testing.assert_array_equal(grad, 0.0)
    assert float(out.metrics["fully_masked"]) == 1.0
    assert all(np.isfinite(float(v)) for v in out.metrics.values())


def test_long_sequence_with_drift_gives_finite_loss():
    # T = 32,768, log-ratio noise std 0.05 and drift +0.01 per token (sum ~ 328 before clamping)
    t = 32_768
    k1, k2 = jax.random.split(jax.random.key(1))
    lp = -jnp.abs(jax.random.normal(k1, (2, t))) - 1.0
    mu = lp - (0.01 + 0.05 * jax.random.normal(k2, (2, t)))
    old = lp
    mask = jnp.ones((2, t))
    for corr in (CorrectionConfig(weights="seq_is"), CorrectionConfig.seq_tis()):
        for obj in (ObjectiveConfig(), ObjectiveConfig(loss="reinforce", agg="seq-mean-token-sum")):
            fn = lambda x, c=corr, o=obj: (
                corrected_policy_loss(
                    o,
                    c,
                    log_prob=x,
                    old_log_prob=old,
                    rollout_log_prob=mu,
                    advantages=mask,
                    response_mask=mask,
                ).loss
            )
            loss, grad = jax.value_and_grad(fn)(lp)
            assert np.isfinite(float(loss))
            assert np.all(np.isfinite(grad))


def test_bad_inputs_name_the_argument():
    x = jnp.zeros((2, 3))
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(
            ObjectiveConfig(), log_prob=x, old_log_prob=x, advantages=jnp.zeros((2, 4)), mask=x
        )
    with pytest.raises(ValueError, match="old_log_prob"):
        policy_loss(ObjectiveConfig(), log_prob=x, old_log_prob=None, advantages=x, mask=x)
    with pytest.raises(ValueError, match="weights"):
        policy_loss(
            ObjectiveConfig(),
            log_prob=x,
            old_log_prob=x,
            advantages=x,
            mask=x,
            weights=jnp.zeros((3,)),
        )
    with pytest.raises(ValueError, match="agg"):
        ObjectiveConfig(agg="mean")
    with pytest.raises(ValueError, match="dual_clip"):
        ObjectiveConfig(dual_clip=0.5)
    with pytest.raises(ValueError, match="old_log_prob"):
        corrected_policy_loss(
            ObjectiveConfig(),
            CorrectionConfig(),
            log_prob=x,
            old_log_prob=None,
            rollout_log_prob=x,
            advantages=x,
            response_mask=x,
        )


# --- regressions: verl's argument order, weighted masks, dp_size, float64 inputs ---------


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def test_log_probs_are_keyword_only():
    # Regression: verl's order is (old_log_prob, log_prob); passed positionally here the loss was
    # silently wrong. Now a positional call is a TypeError and keywords make order irrelevant.
    lp, old = jnp.array([[-0.2, -1.0]]), jnp.array([[-0.5, -0.6]])
    adv, mask = jnp.array([[1.0, -1.0]]), jnp.ones((1, 2))
    with pytest.raises(TypeError, match="positional"):
        policy_loss(ObjectiveConfig(), old, lp, adv, mask)
    with pytest.raises(TypeError, match="positional"):
        corrected_policy_loss(ObjectiveConfig(), CorrectionConfig(), lp, old, old, adv, mask)
    a = policy_loss(ObjectiveConfig(), old_log_prob=old, log_prob=lp, advantages=adv, mask=mask)
    b = policy_loss(ObjectiveConfig(), log_prob=lp, old_log_prob=old, advantages=adv, mask=mask)
    assert float(a.loss) == float(b.loss)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        (dict(clip_eps=True), TypeError, "clip_eps"),
        (dict(clip_eps=float("nan")), ValueError, "clip_eps"),
        (dict(clip_eps_high="0.28"), TypeError, "clip_eps_high"),
        (dict(dual_clip=float("inf")), ValueError, "dual_clip"),
        (dict(dual_clip=True), TypeError, "dual_clip"),
        (dict(max_length=2.5), ValueError, "max_length"),
        (dict(max_length=True), ValueError, "max_length"),
        (dict(sequence_ratio=1), TypeError, "sequence_ratio"),
        (dict(dp_size=0), ValueError, "dp_size"),
    ],
)
def test_objective_config_refuses_bools_strings_non_finite(kwargs, error, name):
    with pytest.raises(error, match=f"^{name}:"):
        ObjectiveConfig(**kwargs)


def test_non_binary_mask_is_token_weights_in_numerator_and_denominator():
    # Regression: the numerator treated the mask as 0/1 and the denominator summed it, so a
    # mask of 2 gave token-mean 0.5 and a mask of 0.5 gave 2.0 for a loss of 1 per token.
    ones = jnp.ones((2, 3))
    for value in (2.0, 0.5):
        for agg in AGGREGATIONS:
            if agg in ("token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
                continue
            got = aggregate_loss(ones, mask=value * ones, agg=agg)
            assert float(got) == pytest.approx(1.0), (value, agg)
    loss_mat = jnp.array([[1.0, 3.0, 5.0]])
    mask = jnp.array([[2.0, 1.0, 0.0]])
    assert float(aggregate_loss(loss_mat, mask=mask, agg="token-mean")) == pytest.approx(5 / 3)
    assert float(aggregate_loss(loss_mat, mask=mask, agg="token-sum")) == pytest.approx(5.0)
    # the same weights in policy_loss: REINFORCE loss = -sum m A lp / sum m
    lp, adv = jnp.array([[-1.0, -2.0, -3.0]]), jnp.array([[1.0, 1.0, 1.0]])
    out = policy_loss(ObjectiveConfig(loss="reinforce"), log_prob=lp, advantages=adv, mask=mask)
    assert float(out.loss) == pytest.approx((2 * 1.0 + 2.0) / 3)
    with pytest.raises(ValueError, match=r"^mask: expected values >= 0"):
        policy_loss(ObjectiveConfig(loss="reinforce"), log_prob=lp, advantages=adv,
                    mask=jnp.array([[1.0, -1.0, 0.0]]))


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_data_parallel_ranks_with_global_denominator(agg):
    # Regression: verl's dp_size. Two ranks each compute dp_size * (local numerator / global D);
    # averaging them (what DDP does to gradients) gives the global loss exactly.
    loss_mat = jnp.array([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0], [3.0, 5.0, 7.0], [6.0, 0.0, 0.0]])
    mask = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    full = float(aggregate_loss(loss_mat, mask=mask, agg=agg, max_length=4))
    den = loss_denominator(agg, mask)
    ranks = [aggregate_loss(loss_mat[r:r + 2], mask=mask[r:r + 2], agg=agg, max_length=4,
                            denominator=den, dp_size=2) for r in (0, 2)]
    assert float(sum(ranks) / 2) == pytest.approx(full)
    hand = {"token-mean": 22 / 6, "token-sum": 22.0, "seq-mean-token-sum": 22 / 3,
            "seq-mean-token-mean": (1.5 + 4.0 + 5.0) / 3, "seq-mean-token-sum-norm": 22 / 12}
    assert full == pytest.approx(hand[agg])
    if agg == "token-sum":
        # token-sum needs no denominator: the rank loss is dp_size * its local sum (verl)
        assert float(ranks[0]) == pytest.approx(2 * 7.0)
    else:
        with pytest.raises(ValueError, match="^denominator: expected the global denominator"):
            aggregate_loss(loss_mat, mask=mask, agg=agg, dp_size=2)


def test_policy_loss_dp_size_from_config():
    lp, adv, mask = jnp.array([[-1.0, -2.0]]), jnp.ones((1, 2)), jnp.ones((1, 2))
    one = policy_loss(ObjectiveConfig(loss="reinforce"), log_prob=lp, advantages=adv, mask=mask)
    two = policy_loss(ObjectiveConfig(loss="reinforce", dp_size=2), log_prob=lp, advantages=adv,
                      mask=mask, denominator=jnp.asarray(4.0))
    assert float(two.loss) == pytest.approx(float(one.loss))  # 2 * 3 / 4 == 3 / 2


def _np_ppo(lp, old, adv, mask, w, eps=0.2, c=3.0):
    r = np.exp(np.clip(lp - old, -20, 20))
    l1, l2 = -adv * r, -adv * np.clip(r, 1 - eps, 1 + eps)
    l = np.maximum(l1, l2)
    l = np.where((adv < 0) & (l > -c * adv), -c * adv, l)
    return np.sum(l * w * mask) / np.sum(mask)


def test_float64_loss_and_gradient_match_numpy(x64):
    # Regression: policy_loss computed float64 inputs in float32.
    rng = np.random.default_rng(2)
    lp = -np.abs(rng.standard_normal((3, 4)))
    old = lp + 0.3 * rng.standard_normal((3, 4))
    adv = rng.standard_normal((3, 4))
    w = np.exp(0.1 * rng.standard_normal((3, 4)))
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], np.float64)
    cfg = ObjectiveConfig(dual_clip=3.0)
    f = lambda x: policy_loss(cfg, log_prob=x, old_log_prob=jnp.asarray(old),  # noqa: E731
                              advantages=jnp.asarray(adv), mask=jnp.asarray(mask),
                              weights=jnp.asarray(w)).loss
    loss, grad = jax.value_and_grad(f)(jnp.asarray(lp))
    assert loss.dtype == grad.dtype == jnp.float64
    np.testing.assert_allclose(float(loss), _np_ppo(lp, old, adv, mask, w), rtol=1e-9)
    h = 1e-6
    for i, j in ((0, 0), (1, 1), (0, 3)):
        e = np.zeros_like(lp)
        e[i, j] = h
        fd = (_np_ppo(lp + e, old, adv, mask, w) - _np_ppo(lp - e, old, adv, mask, w)) / (2 * h)
        np.testing.assert_allclose(float(grad[i, j]), fd, rtol=1e-6, atol=1e-10)
    for agg in AGGREGATIONS:
        got = aggregate_loss(jnp.asarray(adv), mask=jnp.asarray(mask), agg=agg)
        assert got.dtype == jnp.float64
    got = aggregate_loss(jnp.asarray(adv), mask=jnp.asarray(mask), agg="seq-mean-token-mean")
    ref = np.mean(np.sum(adv * mask, 1) / np.sum(mask, 1))
    np.testing.assert_allclose(float(got), ref, rtol=1e-12)
    assert loss_denominator("token-mean", jnp.ones((2, 2), jnp.int32)).dtype == jnp.float32


def test_non_finite_advantage_names_the_argument():
    x = jnp.zeros((1, 2))
    with pytest.raises(ValueError, match=r"^advantages: expected finite values"):
        policy_loss(ObjectiveConfig(), log_prob=x, old_log_prob=x,
                    advantages=jnp.array([[0.0, jnp.nan]]), mask=jnp.ones((1, 2)))
    # a NaN advantage at a masked token is not an error
    out = policy_loss(ObjectiveConfig(), log_prob=x, old_log_prob=x,
                      advantages=jnp.array([[1.0, jnp.nan]]), mask=jnp.array([[1.0, 0.0]]))
    assert np.isfinite(float(out.loss))


def test_float64_reinforce_and_corrected_loss(x64):
    lp = jnp.array([[-1.0, -0.5, -2.0], [-0.3, -0.7, -9.0]], jnp.float64)
    mu = lp - jnp.array([[0.5, -0.3, 0.1], [0.2, 0.05, 0.0]], jnp.float64)
    adv = jnp.array([[1.0, -1.0, 0.5], [2.0, 1.0, 0.0]], jnp.float64)
    obj = ObjectiveConfig(loss="reinforce")
    corr = CorrectionConfig(weights="token_is", bypass=True)
    out = corrected_policy_loss(obj, corr, log_prob=lp, rollout_log_prob=mu, advantages=adv,
                                response_mask=MASK)
    w = np.exp(np.asarray(lp - mu))
    ref = -np.sum(w * np.asarray(adv) * np.asarray(lp) * np.asarray(MASK)) / 5.0
    assert out.loss.dtype == jnp.float64
    np.testing.assert_allclose(float(out.loss), ref, rtol=1e-12)
