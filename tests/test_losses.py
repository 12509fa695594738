import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hyperx.heads import HypermodelHead, MLPTorso, generated_sq_norm, make_network
from hyperx.losses import (
    double_q_targets,
    index_quantile,
    perturbed_regression_loss,
    perturbed_value_loss,
)

F32 = jnp.float32


def _a(x, dtype=F32):
    return jnp.asarray(x, dtype)


# ---------------------------------------------------------------- targets

RETURNS, DISCOUNTS = _a([1.0, 0.5]), _a([0.9, 0.0])  # the second transition ended (done)
Q_TARGET = _a([[[1.0, 5.0, 3.0]], [[2.0, 2.0, 9.0]]])
Q_ONLINE = _a([[[0.0, 0.0, 7.0]], [[9.0, 0.0, 0.0]]])


def test_double_q_target_uses_online_argmax_and_target_value():
    # a* = (2, 0) from the online net; target values 3 and 2; the done row keeps only R.
    y = double_q_targets(RETURNS, DISCOUNTS, Q_TARGET, Q_ONLINE)
    np.testing.assert_allclose(y, [[1.0 + 0.9 * 3.0], [0.5]], rtol=1e-6)


def test_no_double_q_target_is_max_of_target():
    y = double_q_targets(RETURNS, DISCOUNTS, Q_TARGET)
    np.testing.assert_allclose(y, [[1.0 + 0.9 * 5.0], [0.5]], rtol=1e-6)


def test_each_bootstrap_index_picks_and_evaluates_its_own_action():
    q_t = _a([[[1.0, 4.0], [6.0, 2.0]]])
    q_o = _a([[[0.0, 1.0], [1.0, 0.0]]])  # index 0 picks action 1, index 1 picks action 0
    y = double_q_targets(_a([0.0]), _a([0.5]), q_t, q_o)
    np.testing.assert_allclose(y, [[2.0, 3.0]], rtol=1e-6)


def test_optimistic_index_sampling_target_uses_the_quantile():
    # 0.8-quantile of (1, 2, 3, 4, 5) is 4.2; of (10, 0, 0, 0, 0) it is 0 + 0.2 * 10 = 2.
    q_t = _a([[[1.0, 10.0], [2.0, 0.0], [3.0, 0.0], [4.0, 0.0], [5.0, 0.0]]])
    y = double_q_targets(_a([1.0]), _a([0.5]), q_t, quantile=0.8)
    np.testing.assert_allclose(y, [[1.0 + 0.5 * 4.2]], rtol=1e-6)
    q_o = jnp.zeros_like(q_t).at[..., 1].set(1.0)  # the online quantile prefers action 1
    y = double_q_targets(_a([1.0]), _a([0.5]), q_t, q_o, quantile=0.8)
    np.testing.assert_allclose(y, [[1.0 + 0.5 * 2.0]], rtol=1e-6)
    np.testing.assert_allclose(index_quantile(q_t, 0.8), [[4.2, 2.0]], rtol=1e-6)


def test_targets_are_stop_gradient():
    g = jax.grad(lambda q: jnp.sum(double_q_targets(RETURNS, DISCOUNTS, q, Q_ONLINE)))(Q_TARGET)
    assert not jnp.any(g)


# ---------------------------------------------------------------- value loss

Q = _a([[[1.0, 2.0], [3.0, 4.0]], [[0.0, 5.0], [1.0, 1.0]]])  # (B=2, K=2, A=2)
ACTIONS = jnp.array([1, 0])  # taken Q: (2, 4) and (0, 1)
TARGETS = _a([[3.0, 3.0], [1.0, 2.0]])
XI = _a([[1.0, 0.0], [0.0, 1.0]])
Z = _a([[0.5, 0.0], [0.0, -1.0]])


def test_value_loss_hand_computed():
    # errors (1, -1) and (1, 1): mean over K then over B -> 1.
    assert perturbed_value_loss(Q, ACTIONS, TARGETS) == pytest.approx(1.0)
    # sigma <xi_k, z_b> = (1, 0) and (0, -2): errors (2, -1), (1, -1) -> (2.5 + 1) / 2.
    loss = perturbed_value_loss(Q, ACTIONS, TARGETS, xi=XI, z=Z, sigma=2.0)
    assert loss == pytest.approx(1.75)
    per_sample_xi = jnp.broadcast_to(XI, (2, 2, 2))
    assert perturbed_value_loss(Q, ACTIONS, TARGETS, xi=per_sample_xi, z=Z, sigma=2.0) == \
        pytest.approx(1.75)
    # one shared target per transition (3, 1): errors (1, -1), (1, 0) -> (1 + 0.5) / 2.
    assert perturbed_value_loss(Q, ACTIONS, TARGETS[:, :1]) == pytest.approx(0.75)


def test_value_loss_regularisers():
    reg = _a([2.0, 4.0])  # mean 3
    loss = perturbed_value_loss(Q, ACTIONS, TARGETS, reg_sq_norm=reg, beta=0.5, num_data=10)
    assert loss == pytest.approx(1.0 + 0.5 / 10 * 3.0)
    traced = jax.jit(lambda n: perturbed_value_loss(Q, ACTIONS, TARGETS, reg_sq_norm=reg,
                                                    beta=0.5, num_data=n))(jnp.int32(10))
    assert traced == pytest.approx(1.0 + 0.5 / 10 * 3.0)
    loss = perturbed_value_loss(Q, ACTIONS, TARGETS, reg_sq_norm=reg, l2=0.01)
    assert loss == pytest.approx(1.0 + 0.01 * 3.0)
    per_sample = _a([[2.0, 4.0], [0.0, 2.0]])  # mean 2
    loss = perturbed_value_loss(Q, ACTIONS, TARGETS, reg_sq_norm=per_sample, beta=1.0, num_data=4)
    assert loss == pytest.approx(1.0 + 2.0 / 4)


def test_value_loss_masks_and_empty_batches():
    assert perturbed_value_loss(Q, ACTIONS, TARGETS, mask=_a([1.0, 0.0])) == pytest.approx(1.0)
    q = Q.at[1].set(100.0)
    assert perturbed_value_loss(q, ACTIONS, TARGETS, mask=_a([1.0, 0.0])) == pytest.approx(1.0)
    assert perturbed_value_loss(Q, ACTIONS, TARGETS, mask=jnp.zeros(2)) == 0.0
    empty = perturbed_value_loss(jnp.zeros((0, 2, 2)), jnp.zeros(0, jnp.int32), jnp.zeros((0, 2)),
                                 reg_sq_norm=jnp.zeros((0, 2)), beta=1.0, num_data=0)
    assert empty == 0.0


def test_value_loss_end_to_end_with_done_masking():
    # One transition, K=1: R = 1, done -> y = 1 whatever the next-state values are.
    y = double_q_targets(_a([1.0]), _a([0.0]), _a([[[50.0, -50.0]]]), _a([[[1.0, 2.0]]]))
    loss = perturbed_value_loss(_a([[[0.0, 3.0]]]), jnp.array([1]), y)
    assert loss == pytest.approx((1.0 - 3.0) ** 2)


@settings(max_examples=25, deadline=None)
@given(
    q=arrays(np.float32, (3, 4, 2), elements=st.floats(-10, 10, width=32)),
    y=arrays(np.float32, (3, 4), elements=st.floats(-10, 10, width=32)),
    z=arrays(np.float32, (3, 5), elements=st.floats(-1, 1, width=32)),
    xi=arrays(np.float32, (4, 5), elements=st.floats(-3, 3, width=32)),
    actions=arrays(np.int32, (3,), elements=st.integers(0, 1)),
    sigma=st.floats(0, 2),
)
def test_value_loss_matches_numpy(q, y, z, xi, actions, sigma):
    taken = np.take_along_axis(q, actions[:, None, None], axis=-1)[..., 0].astype(np.float64)
    expected = np.mean((y + sigma * z @ xi.T - taken) ** 2)
    loss = perturbed_value_loss(jnp.asarray(q), jnp.asarray(actions), jnp.asarray(y),
                                xi=jnp.asarray(xi), z=jnp.asarray(z), sigma=sigma)
    assert float(loss) == pytest.approx(expected, rel=1e-4, abs=1e-3)


def test_value_loss_gradients_reach_trainable_params_only():
    net = make_network(HypermodelHead(2, 3, MLPTorso((8,)), bias_coef=0.01))
    s, s_next = jnp.ones((4, 5)), -jnp.ones((4, 5))
    xi = jax.random.normal(jax.random.key(0), (4, 6, 3))
    online = net.init(jax.random.key(1), s, xi)
    target = net.init(jax.random.key(2), s, xi)

    def loss(online, target):
        y = double_q_targets(jnp.ones(4), jnp.full(4, 0.9), net.apply(target, s_next, xi),
                             net.apply(online, s_next, xi))
        return perturbed_value_loss(net.apply(online, s, xi), jnp.zeros(4, jnp.int32), y,
                                    xi=xi, z=jnp.ones((4, 3)) / jnp.sqrt(3.0), sigma=0.1,
                                    reg_sq_norm=generated_sq_norm(online["params"], xi),
                                    beta=0.1, num_data=100)

    g_online, g_target = jax.jit(jax.grad(loss, argnums=(0, 1)))(online, target)
    assert all(not jnp.any(leaf) for leaf in jax.tree.leaves(g_online["prior"]))
    assert all(not jnp.any(leaf) for leaf in jax.tree.leaves(g_target))
    assert all(jnp.any(leaf) for leaf in jax.tree.leaves(g_online["params"]["hyper"]))
    assert any(jnp.any(leaf) for leaf in jax.tree.leaves(g_online["params"]["torso"]))


# ---------------------------------------------------------------- regression loss


def test_regression_loss_hand_computed():
    preds, y = _a([[1.0, 2.0], [3.0, 4.0]]), _a([2.0, 2.0])
    # errors (1, 0), (-1, -2): (0.5 + 2.5) / 2.
    assert perturbed_regression_loss(preds, y) == pytest.approx(1.5)
    params = {"w": _a([1.0, 2.0]), "v": _a([[2.0]])}  # ||theta||^2 = 9
    loss = perturbed_regression_loss(preds, y, params=params, weight_decay=0.1, num_data=4)
    assert loss == pytest.approx(1.5 + 0.1 / 4 * 9.0)
    # sigma <xi_k, z_i> = (0.5, 0.5) and (0, 1): errors (1.5, 0.5), (-1, -1).
    z = _a([[1.0, 1.0], [0.0, 2.0]])
    loss = perturbed_regression_loss(preds, y, xi=XI, z=z, sigma=0.5)
    assert loss == pytest.approx((1.25 + 1.0) / 2)
    assert perturbed_regression_loss(preds, y, mask=jnp.zeros(2)) == 0.0


def test_regression_weight_decay_gradient_is_2_lambda_over_data_theta():
    params = {"w": _a([1.0, -2.0])}
    g = jax.grad(lambda p: perturbed_regression_loss(jnp.zeros((1, 1)), jnp.zeros(1), params=p,
                                                     weight_decay=0.5, num_data=5))(params)
    np.testing.assert_allclose(g["w"], 2 * 0.5 / 5 * np.array([1.0, -2.0]), rtol=1e-6)


# ---------------------------------------------------------------- bad input


def test_bad_inputs_raise_naming_the_argument():
    with pytest.raises(ValueError, match="q"):
        perturbed_value_loss(Q[:, 0], ACTIONS, TARGETS)
    with pytest.raises(TypeError, match="actions"):
        perturbed_value_loss(Q, ACTIONS.astype(F32), TARGETS)
    with pytest.raises(ValueError, match="actions"):
        perturbed_value_loss(Q, ACTIONS[:1], TARGETS)
    with pytest.raises(ValueError, match="targets"):
        perturbed_value_loss(Q, ACTIONS, jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match="xi, z"):
        perturbed_value_loss(Q, ACTIONS, TARGETS, xi=XI, sigma=1.0)
    with pytest.raises(ValueError, match="xi"):
        perturbed_value_loss(Q, ACTIONS, TARGETS, xi=jnp.ones((3, 2)), z=Z, sigma=1.0)
    with pytest.raises(ValueError, match="z"):
        perturbed_value_loss(Q, ACTIONS, TARGETS, xi=XI, z=jnp.ones((3, 2)), sigma=1.0)
    with pytest.raises(ValueError, match="num_data"):
        perturbed_value_loss(Q, ACTIONS, TARGETS, reg_sq_norm=jnp.ones(2), beta=1.0)
    with pytest.raises(ValueError, match="reg_sq_norm"):
        perturbed_value_loss(Q, ACTIONS, TARGETS, beta=1.0, num_data=3)
    with pytest.raises(ValueError, match="reg_sq_norm"):
        perturbed_value_loss(Q, ACTIONS, TARGETS, reg_sq_norm=jnp.ones(3), l2=1.0)
    with pytest.raises(ValueError, match="num_data"):
        perturbed_value_loss(Q, ACTIONS, TARGETS, reg_sq_norm=jnp.ones(2), beta=1.0, num_data=-1)
    with pytest.raises(ValueError, match="mask"):
        perturbed_value_loss(Q, ACTIONS, TARGETS, mask=jnp.ones(3))
    with pytest.raises(ValueError, match="q"):
        perturbed_value_loss(jnp.zeros((2, 0, 2)), ACTIONS, jnp.zeros((2, 1)))
    with pytest.raises(ValueError, match="discounts"):
        double_q_targets(RETURNS, DISCOUNTS[:1], Q_TARGET)
    with pytest.raises(ValueError, match="q_next_online"):
        double_q_targets(RETURNS, DISCOUNTS, Q_TARGET, Q_ONLINE[:, :, :2])
    with pytest.raises(TypeError, match="q_next_target"):
        double_q_targets(RETURNS, DISCOUNTS, Q_TARGET.astype(jnp.int32))
    with pytest.raises(ValueError, match="quantile"):
        double_q_targets(RETURNS, DISCOUNTS, Q_TARGET, quantile=1.5)
    with pytest.raises(ValueError, match="targets"):
        perturbed_regression_loss(jnp.zeros((2, 3)), jnp.zeros(3))
    with pytest.raises(ValueError, match="predictions"):
        perturbed_regression_loss(jnp.zeros((2, 0)), jnp.zeros(2))
    with pytest.raises(ValueError, match="weight_decay"):
        perturbed_regression_loss(jnp.zeros((2, 1)), jnp.zeros(2), weight_decay=-1.0)
