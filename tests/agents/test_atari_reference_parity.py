"""The pieces that make the Atari ``hyperagent`` config match the HyperAgent reference script
(szrlee/HyperAgent run_atari.py; docs/atari.md, "Parity with the reference code")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats

from hyperx.agents import get_config, make_agent
from hyperx.agents.atari import eval_protocol
from hyperx.agents.config import DQN_100K
from hyperx.agents.core import Transition
from hyperx.envs.atari import OBS_SHAPE
from hyperx.heads import HypermodelHead, MLPTorso, NatureCNN, minmax_rows, unit_index
from hyperx.losses import grad_sq_norm, grad_sq_norm_with_output
from hyperx.replay_frames import make_frame_replay

FRAMES = jax.random.randint(jax.random.PRNGKey(7), (3, *OBS_SHAPE), 0, 256).astype(jnp.uint8)


def _atari_agent(config, num_actions: int = 6):
    return make_agent(config, num_actions, jnp.zeros(OBS_SHAPE, jnp.uint8), num_envs=1,
                      replay=make_frame_replay)


def test_the_atari_hyperagent_config_is_the_reference_scripts():
    c = get_config("hyperagent", env="atari")
    assert (c.random_start, c.learning_starts, c.update_every, c.target_update_period) == (
        2000, 2000, 1, 5)
    assert (c.input_scale, c.feature_norm, c.init_scheme, c.bias_init) == (
        1.0, "minmax", "reference", "xavier")
    assert (c.index, c.normalise_index, c.index_dim, c.num_indices) == ("gaussian", True, 4, 20)
    assert (c.prior_torso, c.prior_std, c.prior_scale, c.posterior_scale) == (
        "independent", 0.1, 0.1, 0.1)
    assert (c.sigma, c.beta, c.grad_penalty, c.n_step, c.redraw_prob) == (
        0.01, 0.01, 0.01, 5, 0.01)
    assert (c.learning_rate, c.adam_eps, c.max_grad_norm, c.batch_size, c.buffer_size) == (
        1e-4, 1.5e-4, 10.0, 32, 100_000)
    assert (c.epsilon_start, c.epsilon_end, c.eval_epsilon, c.double_q) == (0.0, 0.0, 0.0, True)


def test_dqn_evaluates_epsilon_greedy_and_the_100k_settings_are_dopamines():
    assert get_config("dqn", env="atari").eval_epsilon == 0.05
    assert get_config("dqn", env="atari").update_every == 4
    c = get_config("dqn", env="atari", **DQN_100K)
    assert (c.n_step, c.update_every, c.target_update_period, c.learning_starts) == (
        10, 1, 1, 1600)
    assert (c.epsilon_start, c.epsilon_end, c.epsilon_decay_steps, c.eval_epsilon) == (
        1.0, 0.01, 5000, 0.001)
    assert eval_protocol(c) == "epsilon-greedy (epsilon 0.001)"
    assert eval_protocol(get_config("hyperagent", env="atari")) == (
        "a fresh index per game, greedy")


@pytest.mark.parametrize("field, value, message", [
    ("feature_norm", "layer", "feature_norm"), ("bias_init", "zeros", "bias_init"),
    ("random_start", -1, "random_start"), ("grad_penalty", -0.1, "grad_penalty"),
    ("eval_epsilon", 1.5, "eval_epsilon"), ("input_scale", 0.0, "input_scale")])
def test_new_config_fields_are_validated(field, value, message):
    with pytest.raises(ValueError, match=message):
        get_config("hyperagent", env="atari", **{field: value})
    with pytest.raises(TypeError, match="normalise_index"):
        get_config("hyperagent", env="atari", normalise_index=1)
    with pytest.raises(ValueError, match="normalise_index, bias_init"):
        get_config("epinet_dqn", env="atari", normalise_index=True)


def test_minmax_rows_hand_computed_and_constant_rows():
    out = minmax_rows(jnp.array([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0], [-2.0, 0.0, 6.0]]))
    np.testing.assert_allclose(out, [[0.0, 0.5, 1.0], [0.0, 0.0, 0.0], [0.0, 0.25, 1.0]],
                               atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(arrays(np.float32, (4, 9), elements=st.floats(-1e3, 1e3, width=32)))
def test_minmax_features_lie_in_the_unit_interval_per_row(h):
    out = np.asarray(minmax_rows(jnp.asarray(h)))
    assert out.min() >= 0.0 and out.max() <= 1.0
    spread = h.max(axis=1) - h.min(axis=1)
    for row, s in zip(out, spread, strict=True):
        assert row.min() == 0.0
        if s > 1e-3:
            assert row.max() == pytest.approx(1.0, abs=1e-5)


def test_minmax_makes_the_untrained_torso_blind_to_the_input_scale():
    """With zero conv biases the ReLU convs are positively homogeneous, so MinMax features of
    raw frames equal those of frames / 255: the reference's raw uint8 input is not a defect."""
    raw = NatureCNN(1.0, 32, channels_first=True, feature_norm="minmax", init_scheme="reference")
    scaled = raw.clone(input_scale=1.0 / 255.0)
    params = raw.init(jax.random.PRNGKey(0), FRAMES)
    np.testing.assert_allclose(raw.apply(params, FRAMES), scaled.apply(params, FRAMES),
                               rtol=1e-4, atol=1e-5)
    plain = NatureCNN(1.0, 32, channels_first=True)
    p = plain.init(jax.random.PRNGKey(0), FRAMES)
    assert float(jnp.max(plain.apply(p, FRAMES))) > 50 * float(
        jnp.max(plain.clone(input_scale=1 / 255).apply(p, FRAMES)))


def test_reference_torso_init_is_xavier_normal():
    params = NatureCNN(1.0, 256, channels_first=True, init_scheme="reference").init(
        jax.random.PRNGKey(0), FRAMES)["params"]
    kernel = params["Conv_0"]["kernel"]  # (8, 8, 4, 32): fan_in 256, fan_out 2048
    assert float(kernel.std()) == pytest.approx(np.sqrt(2 / (256 + 2048)), rel=0.05)
    dense = params["Dense_0"]["kernel"]  # (3136, 256)
    assert float(dense.std()) == pytest.approx(np.sqrt(2 / (3136 + 256)), rel=0.02)


def test_xavier_biases_are_trainable_b_and_frozen_b0():
    head = HypermodelHead(18, 4, MLPTorso((256,)), prior_torso="independent", prior_std=0.1,
                          prior_scale=0.1, posterior_scale=0.1, init_scheme="reference",
                          bias_init="xavier")
    v = head.init(jax.random.PRNGKey(0), jnp.ones((2, 5)), jnp.ones((4,)))
    b, b0 = v["params"]["hyper"]["b"], v["prior"]["hyper"]["b0"]
    assert b.shape == b0.shape == (18, 256)
    expected = np.sqrt(2 / (18 + 256))  # not scaled by prior_std
    assert float(b.std()) == pytest.approx(expected, rel=0.05)
    assert float(b0.std()) == pytest.approx(expected, rel=0.05)
    assert not np.allclose(b, b0)
    a0 = v["prior"]["hyper"]["A0"]
    np.testing.assert_allclose(np.linalg.norm(a0, axis=-1), 0.1, rtol=1e-5)


def test_a_normalised_index_head_reads_only_the_direction():
    head = HypermodelHead(3, 4, MLPTorso((8,)), normalise_index=True)
    x = jnp.ones((2, 5))
    xi = jax.random.normal(jax.random.PRNGKey(1), (6, 4))
    v = head.init(jax.random.PRNGKey(0), x, xi)
    np.testing.assert_allclose(head.apply(v, x, xi), head.apply(v, x, 3.7 * xi), rtol=1e-5)
    np.testing.assert_allclose(head.apply(v, x, xi),
                               head.clone(normalise_index=False).apply(v, x, unit_index(xi)),
                               rtol=1e-5)
    np.testing.assert_allclose(unit_index(jnp.zeros((2, 4))), 0.0)


def test_grad_sq_norm_hand_computed_and_differentiable():
    a = jnp.array([1.0, -2.0, 3.0])
    params = {"w": jnp.array([0.5, 0.5, 0.5]), "v": jnp.array(2.0)}

    def fn(p):  # f = (a . w) v^2 / 2
        return jnp.dot(a, p["w"]) * p["v"] ** 2 / 2

    # df/dw = a v^2 / 2 = 2a, df/dv = (a . w) v = 2, so ||g||^2 = 4 * 14 + 4 = 60
    assert float(grad_sq_norm(fn, params)) == pytest.approx(60.0)
    # ||g||^2 = v^4 ||a||^2 / 4 + (a . w)^2 v^2, whose d/dv = v^3 ||a||^2 + 2 (a . w)^2 v
    outer = jax.grad(lambda p: grad_sq_norm(fn, p))(params)
    assert float(outer["v"]) == pytest.approx(8 * 14 + 2 * 1 * 2)


_PENALTY_HEAD = HypermodelHead(4, 2, torso=NatureCNN(hidden=16, input_scale=1.0,
                                                     channels_first=True, feature_norm="minmax"),
                               prior_torso="independent", normalise_index=True)


@jax.jit
def _penalty_both_ways(variables, frames, xi, actions):
    """(value, gradient) of ``sum Q^2 + ||d/dtheta mean taken Q||^2`` with the penalty from the
    loss's own forward pass, and from a separate one."""

    def q_values(params):
        return _PENALTY_HEAD.apply({**variables, "params": params}, frames, xi)

    def mean_taken(q):
        return jnp.mean(jnp.take_along_axis(q, actions[:, None, None], axis=-1))

    def one_pass(params):
        q, penalty = grad_sq_norm_with_output(q_values, mean_taken, params)
        return jnp.sum(q ** 2) + penalty

    def two_pass(params):
        return jnp.sum(q_values(params) ** 2) + grad_sq_norm(
            lambda p: mean_taken(q_values(p)), params)

    return (jax.value_and_grad(one_pass)(variables["params"]),
            jax.value_and_grad(two_pass)(variables["params"]))


@settings(max_examples=3, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_the_one_pass_penalty_equals_the_two_pass_form_in_value_and_gradient(seed):
    """The agent's loss reads Q and penalises the gradient of their mean from one forward pass
    (:func:`grad_sq_norm_with_output`); on the reference's Nature CNN hypermodel it equals
    ``grad_sq_norm`` of the mean taken as its own function, value and gradient, to float32
    rounding (rtol 1e-4; 3 random networks, inputs and indices)."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    frames = jax.random.randint(keys[0], (3, *OBS_SHAPE), 0, 256).astype(jnp.uint8)
    xi = jax.random.normal(keys[1], (3, 5, 2))
    actions = jax.random.randint(keys[2], (3,), 0, 4)
    variables = _PENALTY_HEAD.init(keys[3], frames, xi)
    (value, grads), (value_ref, grads_ref) = _penalty_both_ways(variables, frames, xi, actions)
    np.testing.assert_allclose(value, value_ref, rtol=1e-4)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(grads_ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * float(jnp.max(jnp.abs(b))))


def test_the_gradient_penalty_adds_a_positive_term_linear_in_its_coefficient():
    """Same state and key, so the same batch and indices: the loss with coefficient c is the
    plain loss plus c times one positive number (the Atari torso runs the same learner code;
    a small MLP agent keeps the test fast)."""
    losses = {}
    for c in (0.0, 0.01, 0.02):
        agent = make_agent(get_config("hyperagent", grad_penalty=c, learning_starts=8), 2,
                           jnp.int32(0), num_states=16, step_budget=64).jit()
        state = agent.init(jax.random.PRNGKey(0))
        for i in range(12):
            t = Transition(jnp.int32(i % 16), jnp.int32(i % 2), jnp.float32(1.0),
                           jnp.int32((i + 1) % 16), jnp.bool_(False), jnp.bool_(False))
            state = agent.observe(state, jax.random.PRNGKey(i), t)
        losses[c] = float(agent.update(state, jax.random.PRNGKey(99)).loss)
    assert losses[0.01] > losses[0.0]
    assert losses[0.02] - losses[0.0] == pytest.approx(2 * (losses[0.01] - losses[0.0]),
                                                       rel=1e-3)


def test_random_start_acts_uniformly_then_on_the_index():
    """Chi-square test over 6 actions (3000 draws, p > 0.001) while ``env_steps <
    random_start``; afterwards the action is the greedy one of the index (no epsilon)."""
    config = get_config("hyperagent", env="atari", random_start=100, learning_starts=100)
    agent = _atari_agent(config)
    state = agent.init(jax.random.PRNGKey(0))
    obs = FRAMES[:1]
    act = jax.jit(jax.vmap(agent.act, in_axes=(None, 0, None)))
    actions = np.asarray(act(state, jax.random.split(jax.random.PRNGKey(1), 3000), obs))[:, 0]
    counts = np.bincount(actions, minlength=6)
    assert stats.chisquare(counts).pvalue > 1e-3
    later = state._replace(env_steps=jnp.int32(100))
    greedy = np.asarray(act(later, jax.random.split(jax.random.PRNGKey(2), 200), obs))[:, 0]
    q = agent.q_values(state.params, state.prior, obs, state.index[0])
    assert set(greedy.tolist()) == {int(jnp.argmax(q[0]))}


def test_evaluation_epsilon_is_greedy_at_zero_and_uniform_at_one():
    agent = _atari_agent(get_config("hyperagent", env="atari"))
    state = agent.init(jax.random.PRNGKey(0))
    obs = jnp.broadcast_to(FRAMES[0], (1, 64, *OBS_SHAPE))
    index = jax.vmap(jax.vmap(agent.eval_index))(
        jnp.broadcast_to(jax.random.PRNGKey(3), (1, 64, 2)))  # one index for every game
    act = agent.jit().eval_act  # one compiled policy per epsilon
    greedy = np.asarray(act(state.params, state.prior, jax.random.PRNGKey(4), obs[0],
                            index[0], epsilon=0.0))
    q = agent.q_values(state.params, state.prior, obs[0, :1], index[0, 0])
    assert set(greedy.ravel().tolist()) == {int(jnp.argmax(q[0]))}
    draws = np.concatenate([np.asarray(act(
        state.params, state.prior, jax.random.PRNGKey(k), obs[0], index[0], epsilon=1.0))
        for k in range(20)])
    assert stats.chisquare(np.bincount(draws, minlength=6)).pvalue > 1e-3
