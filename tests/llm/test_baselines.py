import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperx.llm.baselines import (
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

# One group, N = 3 responses of lengths 4, 2, 3. Masked positions hold garbage (9, 5, nan,
# inf) that must be ignored.
MASK = np.array([[[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]]], np.float32)
PROXY = np.array([[[1, 2, 1, 1], [2, 2, 9, np.nan], [0.5, 0.5, 1, 9]]], np.float32)
REWARDS = np.array([[[0, 0, 0, 1], [0, -1, 0, np.inf], [0, 0, 4, 5]]], np.float32)
# By hand: W = [1,3,4,5], [2,4,4,4], [0.5,1,2,2]; G = [1,1,1,1], [-1,-1,0,0], [4,4,4,0].
# B_0 = (1 - 2 + 2) / 3.5 = 2/7, B_1 = (3 - 4 + 4) / 8 = 3/8, B_2 = (4 + 8) / 6 = 2,
# B_3 = 0 (zero tail: only response 0 is alive).
BASE = np.array([2 / 7, 3 / 8, 2.0, 0.0], np.float32)
ADV = np.array(
    [[[1 - 2 / 7, 1 - 3 / 8, -1, 1], [-1 - 2 / 7, -1 - 3 / 8, 0, 0], [4 - 2 / 7, 4 - 3 / 8, 2, 0]]],
    np.float32,
)


def test_otb_hand_computed_group():
    out = otb_advantages(token_rewards=REWARDS, response_mask=MASK, proxy=PROXY)
    np.testing.assert_allclose(out.energy[0, 0], [1, 3, 4, 5])
    np.testing.assert_allclose(out.energy[0, 1], [2, 4, 4, 4])
    np.testing.assert_allclose(out.returns[0, 1], [-1, -1, 0, 0])
    np.testing.assert_allclose(out.baselines[0, 0], BASE, rtol=1e-6)
    np.testing.assert_allclose(out.advantages, ADV, rtol=1e-6, atol=1e-7)


def test_otb_zero_tail_off_gives_own_return_as_baseline():
    out = otb_advantages(token_rewards=REWARDS, response_mask=MASK, proxy=PROXY, zero_tail=False)
    np.testing.assert_allclose(out.baselines[0, 0, 3], 1.0, rtol=1e-6)
    np.testing.assert_allclose(out.advantages[0, 0, 3], 0.0, atol=1e-6)
    np.testing.assert_allclose(out.advantages[0, :, :3], ADV[0, :, :3], rtol=1e-6)


def test_otb_is_weighted():
    rho = np.ones_like(MASK)
    rho[0, 0] = 2.0  # W_0 becomes 4 * [1, 3, 4, 5]
    out = otb_advantages(token_rewards=REWARDS, response_mask=MASK, proxy=PROXY, is_weights=rho)
    base = [(4 - 2 + 2) / 6.5, (12 - 4 + 4) / 17, (16 + 8) / 18, 0.0]
    np.testing.assert_allclose(out.baselines[0, 0], base, rtol=1e-6)
    np.testing.assert_allclose(out.energy[0, 0], [4, 12, 16, 20])


def test_otb_groups_are_independent_and_single_response_has_no_baseline():
    other = np.ones_like(MASK)
    out = otb_advantages(
        token_rewards=np.concatenate([REWARDS, 3 * other]),
        response_mask=np.concatenate([MASK, other]),
        proxy=np.concatenate([PROXY, other]),
    )
    np.testing.assert_allclose(out.advantages[:1], ADV, rtol=1e-6, atol=1e-7)
    single = otb_advantages(
        token_rewards=REWARDS[:, :1], response_mask=MASK[:, :1], proxy=PROXY[:, :1]
    )
    np.testing.assert_allclose(single.advantages, single.returns)
    np.testing.assert_allclose(single.returns[0, 0], [1, 1, 1, 1])


def test_otb_rejected_response_and_empty_group():
    mask = MASK.copy()
    mask[0, 1] = 0.0  # response 1 rejected
    out = otb_advantages(token_rewards=REWARDS, response_mask=mask, proxy=PROXY)
    # t = 0: (1*1 + 4*0.5) / 1.5 = 2; t = 1: (3 + 4) / 4 = 7/4; t = 2: 2; t = 3: tail.
    np.testing.assert_allclose(out.baselines[0, 0], [2, 7 / 4, 2, 0], rtol=1e-6)
    assert np.all(out.advantages[0, 1] == 0)
    empty = otb_advantages(token_rewards=REWARDS, response_mask=np.zeros_like(MASK), proxy=PROXY)
    assert np.all(np.isfinite(empty.advantages)) and np.all(empty.advantages == 0)


def test_otb_zero_energy_is_finite():
    out = otb_advantages(token_rewards=REWARDS, response_mask=MASK, proxy=np.zeros_like(PROXY))
    assert np.all(np.isfinite(out.advantages))


def test_otb_is_stop_gradient_and_jits():
    def f(r):
        return jnp.sum(otb_advantages(token_rewards=r, response_mask=MASK, proxy=PROXY).advantages)

    assert np.all(jax.grad(f)(jnp.asarray(REWARDS)) == 0)
    out = jax.jit(otb_advantages)(token_rewards=REWARDS, response_mask=MASK, proxy=PROXY)
    np.testing.assert_allclose(out.advantages, ADV, rtol=1e-6, atol=1e-7)


def test_proxy_hand_case():
    z = jnp.log(jnp.array([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]]))  # pi = [1/4, 1/2, 1/4]
    np.testing.assert_allclose(sum_squared_probs(z), [0.375, 0.375], rtol=1e-6)
    w = logit_gradient_proxy(z, jnp.array([1, 0]))
    np.testing.assert_allclose(w, [0.375, 0.875], rtol=1e-6)
    w2 = logit_gradient_proxy_from_sum_sq(
        log_prob=jnp.log(jnp.array([0.5, 0.25])), sum_sq=jnp.full(2, 0.375)
    )
    np.testing.assert_allclose(w2, w, rtol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_extreme_logits_stay_finite(dtype):
    z = jnp.array([[1000.0, -1000.0, 0.0], [1000.0, 1000.0, -1000.0]], dtype)
    s = sum_squared_probs(z)
    assert s.dtype == jnp.float32
    np.testing.assert_allclose(s, [1.0, 0.5], rtol=1e-6)
    np.testing.assert_allclose(logit_gradient_proxy(z, jnp.array([0, 2])), [0.0, 1.5], atol=1e-6)


def _sum_sq_f64(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p**2).sum(-1)


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 33), (2, 3, 4, 1000)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_sum_sq_matches_float64_reference(shape, dtype):
    # The reference takes the same (dtype-rounded) logits in float64. The float32 identity
    # loses about |logsumexp| * 2^-23 in log space: with logits of scale 8 and V <= 1000 that
    # is < 1e-5 relative, so rtol = 1e-5 fails on any real error (a bf16 path is off by >1%).
    z = (8.0 * jax.random.normal(jax.random.key(sum(shape)), shape)).astype(dtype)
    ref = _sum_sq_f64(np.asarray(z.astype(jnp.float32)))
    np.testing.assert_allclose(sum_squared_probs(z), ref, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(scale=st.floats(0.01, 300.0), seed=st.integers(0, 2**16))
def test_proxy_is_squared_distance_property(scale, seed):
    # One shape (one compile); scales up to 300 put some rows near one-hot.
    rng = np.random.default_rng(seed)
    z = (scale * rng.standard_normal((5, 17))).astype(np.float32)
    y = rng.integers(0, 17, 5)
    p = np.exp(_log_softmax_f64(z))
    ref = ((np.eye(17)[y] - p) ** 2).sum(-1)
    w = _proxy(z, y)
    assert np.all((w >= 0) & (w <= 2))
    np.testing.assert_allclose(w, ref, atol=2e-5)


_proxy = jax.jit(logit_gradient_proxy)


def _log_softmax_f64(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def test_from_logits_and_from_sum_sq_agree():
    rng = np.random.default_rng(0)
    logits = (3.0 * rng.standard_normal((2, 3, 4, 11))).astype(np.float32)
    tokens = rng.integers(0, 11, (2, 3, 4))
    mask = np.ones((2, 3, 4), np.float32)
    rewards = rng.standard_normal((2, 3, 4)).astype(np.float32)
    a = jax.jit(otb_advantages_from_logits)(
        token_rewards=rewards, response_mask=mask, logits=logits, tokens=tokens
    )
    logp = _log_softmax_f64(logits)
    logp = np.take_along_axis(logp, tokens[..., None], -1)[..., 0].astype(np.float32)
    sum_sq = np.exp(2 * _log_softmax_f64(logits)).sum(-1).astype(np.float32)
    b = jax.jit(otb_advantages_from_sum_sq)(
        token_rewards=rewards, response_mask=mask, log_prob=logp, sum_sq=sum_sq
    )
    np.testing.assert_allclose(a.advantages, b.advantages, rtol=1e-5, atol=1e-5)


def test_log_prob_and_sum_sq_values_and_gradient():
    z = jnp.asarray(np.random.default_rng(1).standard_normal((3, 4, 9)), jnp.float32)
    y = jnp.asarray(np.random.default_rng(2).integers(0, 9, (3, 4)))

    def ref(z):
        return jnp.take_along_axis(jax.nn.log_softmax(z), y[..., None], -1)[..., 0]

    lp, s = jax.jit(log_prob_and_sum_sq)(z, y)
    np.testing.assert_allclose(lp, ref(z), atol=1e-6)
    np.testing.assert_allclose(s, jnp.sum(jax.nn.softmax(z) ** 2, -1), rtol=1e-6)
    g = jax.jit(jax.grad(lambda z: jnp.sum(log_prob_and_sum_sq(z, y)[0])))(z)
    np.testing.assert_allclose(g, jax.grad(lambda z: jnp.sum(ref(z)))(z), atol=1e-6)


def test_returns_and_energy():
    r = np.array([[[1.0, 2.0, 3.0]]])
    m = np.array([[[1.0, 1.0, 0.0]]])
    np.testing.assert_allclose(returns_to_go(token_rewards=r, response_mask=m), [[[3, 2, 0]]])
    np.testing.assert_allclose(
        realized_energy(proxy=r, response_mask=m, is_weights=2 * m), [[[4, 12, 12]]]
    )


# Group of 4 with response 3 rejected (its score 5 must be ignored): valid scores [1, 0, 1],
# mean 2/3, unbiased std sqrt(1/3).
SCORES = np.array([[1.0, 0.0, 1.0, 5.0]], np.float32)
GMASK = np.array([[[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]]], np.float32)


@pytest.mark.parametrize(
    "fn, expected",
    [
        (grpo_advantages, [1 / np.sqrt(3), -2 / np.sqrt(3), 1 / np.sqrt(3), 0]),
        (dr_grpo_advantages, [1 / 3, -2 / 3, 1 / 3, 0]),
        (rloo_advantages, [0.5, -1.0, 0.5, 0]),
    ],
)
def test_group_baselines_with_rejected_response(fn, expected):
    adv = fn(SCORES, GMASK)
    np.testing.assert_allclose(adv, np.asarray(expected)[None, :, None] * GMASK, rtol=1e-5)


@pytest.mark.parametrize("fn", [grpo_advantages, dr_grpo_advantages, rloo_advantages])
def test_group_baselines_degenerate_groups(fn):
    mask = np.ones((3, 2, 2), np.float32)
    mask[1, 1] = 0.0  # one valid response: no baseline
    mask[2] = 0.0  # nothing valid
    scores = np.array([[2.0, 2.0], [3.0, np.nan], [np.nan, 1.0]], np.float32)
    adv = fn(scores, mask)
    np.testing.assert_allclose(adv[0], 0.0, atol=1e-6)  # equal scores
    np.testing.assert_allclose(adv[1], [[3, 3], [0, 0]])
    np.testing.assert_array_equal(adv[2], 0.0)


def test_gradient_noise_proxy_and_diagnostics_hand_case():
    adv = np.array([[[1, 2], [-1, 0]], [[0, 0], [0, 0]]], np.float32)
    energy = np.array([[[1, 2], [3, 3]], [[0, 0], [0, 0]]], np.float32)
    returns = np.array([[[2, 1], [1, 1]], [[0, 0], [0, 0]]], np.float32)
    mask = np.array([[[1, 1], [1, 0]], [[0, 0], [0, 0]]], np.float32)
    # group 0: (1*1 + 4*2 + 1*3) / 2 responses = 6; without baseline (4*1 + 1*2 + 1*3) / 2.
    np.testing.assert_allclose(
        gradient_noise_proxy(advantages=adv, energy=energy, response_mask=mask), [6.0, 0.0]
    )
    d = variance_diagnostics(advantages=adv, returns=returns, energy=energy, response_mask=mask)
    np.testing.assert_allclose(d["noise_proxy_mean"], 3.0)
    np.testing.assert_allclose(d["noise_proxy_max"], 6.0)
    np.testing.assert_allclose(d["noise_proxy_no_baseline_mean"], 2.25)
    np.testing.assert_allclose(d["noise_reduction"], 1 - 6 / 4.5, rtol=1e-6)
    np.testing.assert_allclose(d["energy_final_mean"], 2.5)
    empty = variance_diagnostics(
        advantages=adv, returns=returns, energy=energy, response_mask=np.zeros_like(mask)
    )
    assert all(np.isfinite(v) and v == 0 for v in empty.values())


def test_otb_noise_proxy_not_above_group_mean_baseline():
    # Without the zero tail OTB's B*_t minimises sum_i m (G_t - b)^2 W_t at every t, so with
    # the same energy its noise proxy cannot exceed that of the constant group-mean baseline.
    out = otb_advantages(token_rewards=REWARDS, response_mask=MASK, proxy=PROXY, zero_tail=False)
    mean_baseline = dr_grpo_advantages(out.returns[..., 0], MASK)
    otb_noise = gradient_noise_proxy(
        advantages=out.advantages, energy=out.energy, response_mask=MASK
    )[0]
    assert (
        otb_noise
        < gradient_noise_proxy(advantages=mean_baseline, energy=out.energy, response_mask=MASK)[0]
    )


def test_bad_shapes_raise_naming_the_argument():
    with pytest.raises(ValueError, match="proxy"):
        otb_advantages(token_rewards=REWARDS, response_mask=MASK, proxy=PROXY[..., :3])
    with pytest.raises(ValueError, match="response_mask"):
        otb_advantages(token_rewards=REWARDS[0], response_mask=MASK[0], proxy=PROXY[0])
    with pytest.raises(ValueError, match="tokens"):
        logit_gradient_proxy(jnp.zeros((2, 3, 5)), jnp.zeros((2, 4), jnp.int32))
    with pytest.raises(TypeError, match="tokens"):
        logit_gradient_proxy(jnp.zeros((2, 3, 5)), jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match="scores"):
        grpo_advantages(SCORES[:, :3], GMASK)
    with pytest.raises(ValueError, match="is_weights"):
        otb_advantages(
            token_rewards=REWARDS, response_mask=MASK, proxy=PROXY, is_weights=np.ones((1, 3))
        )
    with pytest.raises(ValueError, match="logits"):
        otb_advantages_from_logits(
            token_rewards=REWARDS,
            response_mask=MASK,
            logits=jnp.zeros((1, 3, 5, 7)),
            tokens=jnp.zeros((1, 3, 4)),
        )


# --- regressions: one valid response, verl's tool masks, float64 inputs, NaN scores ------


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("zero_tail", [True, False])
def test_lone_valid_response_keeps_its_return(zero_tail):
    # Regression: with zero_tail=False a group with one valid response got a baseline equal to its
    # own return (advantage 0); the docs and verl (singleton group) give it its return.
    rewards = np.zeros((1, 2, 3), np.float32)
    rewards[0, 0, 2] = 1.0
    mask = np.array([[[1, 1, 1], [0, 0, 0]]], np.float32)
    out = otb_advantages_from_sum_sq(token_rewards=rewards, response_mask=mask,
                                     log_prob=np.log(np.full((1, 2, 3), 0.5, np.float32)),
                                     sum_sq=np.full((1, 2, 3), 0.5, np.float32),
                                     zero_tail=zero_tail)
    np.testing.assert_allclose(out.advantages[0], [[1, 1, 1], [0, 0, 0]])


def test_zero_tail_false_keeps_the_baseline_in_the_tail():
    # past the second-longest response only response 0 is alive: zero_tail=False uses its own
    # return there (advantage 0, as verl's handle_zero_tail=False), zero_tail=True uses 0
    off = otb_advantages(token_rewards=REWARDS, response_mask=MASK, proxy=PROXY, zero_tail=False)
    on = otb_advantages(token_rewards=REWARDS, response_mask=MASK, proxy=PROXY)
    assert float(off.advantages[0, 0, 3]) == pytest.approx(0.0, abs=1e-6)
    assert float(on.advantages[0, 0, 3]) == pytest.approx(1.0)


def test_multi_turn_otb_aligns_by_valid_token_rank():
    # verl's tir_optimal_token_baseline. Response A: mask [1, 0, 1, 1] (a tool response
    # at position 1), reward 1 on its last token; B: mask [1, 1, 0, 0], reward 0; proxy w = 1.
    # Ranks of valid tokens: A -> positions 0, 2, 3; B -> positions 0, 1.
    # W: A = 1, 2, 3 at ranks 0, 1, 2; B = 1, 2. G: A = 1, B = 0.
    # Rank 0: B* = (1*1 + 0*1) / 2 = 0.5; rank 1: (1*2 + 0*2) / 4 = 0.5; rank 2: only A alive
    # -> zero tail, B* = 0.
    mask = np.array([[[1, 0, 1, 1], [1, 1, 0, 0]]], np.float32)
    rewards = np.array([[[0, 0, 0, 1], [0, 0, 0, 0]]], np.float32)
    proxy = np.ones((1, 2, 4), np.float32)
    out = otb_advantages(token_rewards=rewards, response_mask=mask, proxy=proxy, multi_turn=True)
    np.testing.assert_allclose(out.advantages[0], [[0.5, 0, 0.5, 1.0], [-0.5, -0.5, 0, 0]],
                               rtol=1e-6)
    np.testing.assert_allclose(out.baselines[0], [[0.5, 0, 0.5, 0], [0.5, 0.5, 0, 0]], rtol=1e-6)
    off = otb_advantages(token_rewards=rewards, response_mask=mask, proxy=proxy, multi_turn=True,
                         zero_tail=False)
    np.testing.assert_allclose(off.advantages[0, 0], [0.5, 0, 0.5, 0.0], rtol=1e-6, atol=1e-7)
    # position-aligned OTB pairs A's position 2 with B's padding instead: a different answer
    pos = otb_advantages(token_rewards=rewards, response_mask=mask, proxy=proxy)
    assert not np.allclose(pos.advantages, out.advantages)
    # with contiguous masks the two alignments agree
    same = otb_advantages(token_rewards=REWARDS, response_mask=MASK, proxy=PROXY, multi_turn=True)
    np.testing.assert_allclose(same.advantages, ADV, rtol=1e-6)


def _np_otb(rewards, mask, proxy):
    g = np.flip(np.cumsum(np.flip(rewards * mask, -1), -1), -1)
    w = np.cumsum(proxy * mask, -1)
    num, den = np.sum(g * w * mask, 1, keepdims=True), np.sum(w * mask, 1, keepdims=True) + 1e-8
    alive = np.sum(mask, 1, keepdims=True)
    b = np.where(alive >= 2, num / den, 0.0)
    return (g - b) * mask


def test_float64_baselines_match_numpy(x64):
    # Regression: every baseline computed and returned float32.
    rng = np.random.default_rng(3)
    mask = (np.arange(5)[None, None] < rng.integers(1, 6, (2, 3))[..., None]).astype(np.float64)
    rewards = rng.standard_normal((2, 3, 5))
    logits = rng.standard_normal((2, 3, 5, 7))
    tokens = rng.integers(0, 7, (2, 3, 5))
    p = np.exp(logits) / np.sum(np.exp(logits), -1, keepdims=True)
    sum_sq = np.sum(p**2, -1)
    proxy = 1 - 2 * np.take_along_axis(p, tokens[..., None], -1)[..., 0] + sum_sq
    got_sq = sum_squared_probs(jnp.asarray(logits))
    got_proxy = logit_gradient_proxy(jnp.asarray(logits), jnp.asarray(tokens))
    assert got_sq.dtype == got_proxy.dtype == jnp.float64
    np.testing.assert_allclose(got_sq, sum_sq, rtol=1e-9)
    np.testing.assert_allclose(got_proxy, proxy, rtol=1e-9)
    out = otb_advantages_from_logits(token_rewards=jnp.asarray(rewards),
                                     response_mask=jnp.asarray(mask), logits=jnp.asarray(logits),
                                     tokens=jnp.asarray(tokens))
    assert out.advantages.dtype == out.energy.dtype == jnp.float64
    np.testing.assert_allclose(out.advantages, _np_otb(rewards, mask, proxy), rtol=1e-9,
                               atol=1e-12)
    scores = rng.standard_normal((2, 3))
    mean = scores.mean(1, keepdims=True)
    std = scores.std(1, ddof=1, keepdims=True)
    for fn, ref in ((grpo_advantages, (scores - mean) / (std + 1e-6)),
                    (dr_grpo_advantages, scores - mean),
                    (rloo_advantages, 1.5 * (scores - mean))):
        got = fn(jnp.asarray(scores), jnp.asarray(mask))
        assert got.dtype == jnp.float64
        np.testing.assert_allclose(got, ref[..., None] * mask, rtol=1e-9, atol=1e-12)


def test_non_finite_grpo_score_is_an_error():
    # Regression: one NaN score made its whole group NaN, silently.
    scores = np.array([[1.0, np.nan, 0.0]], np.float32)
    mask = np.ones((1, 3, 2), np.float32)
    with pytest.raises(ValueError, match=r"^scores: expected finite values"):
        grpo_advantages(scores, mask)
    # the NaN belongs to a rejected response: ignored
    mask[0, 1] = 0
    assert np.all(np.isfinite(grpo_advantages(scores, mask)))
    with pytest.raises(ValueError, match=r"^token_rewards: expected finite values"):
        otb_advantages(token_rewards=np.full((1, 2, 2), np.inf, np.float32),
                       response_mask=np.ones((1, 2, 2), np.float32),
                       proxy=np.ones((1, 2, 2), np.float32))


def test_float64_remaining_baseline_functions(x64):
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((2, 3, 4, 5))
    tokens = rng.integers(0, 5, (2, 3, 4))
    lp, sq = log_prob_and_sum_sq(jnp.asarray(logits), jnp.asarray(tokens))
    log_p = logits - np.log(np.sum(np.exp(logits), -1, keepdims=True))
    assert lp.dtype == sq.dtype == jnp.float64
    np.testing.assert_allclose(lp, np.take_along_axis(log_p, tokens[..., None], -1)[..., 0],
                               rtol=1e-12)
    mask = np.ones((2, 3, 4))
    mask[0, 1, 2:] = 0
    rewards = rng.standard_normal((2, 3, 4))
    out = otb_advantages_from_sum_sq(token_rewards=jnp.asarray(rewards),
                                     response_mask=jnp.asarray(mask), log_prob=lp, sum_sq=sq,
                                     is_weights=jnp.asarray(np.full((2, 3, 4), 1.5)),
                                     multi_turn=True)
    assert out.advantages.dtype == out.baselines.dtype == jnp.float64
    w = 1 - 2 * np.exp(np.asarray(lp)) + np.asarray(sq)
    np.testing.assert_allclose(out.energy, np.cumsum(w * 2.25 * mask, -1), rtol=1e-12)
    noise = gradient_noise_proxy(advantages=out.advantages, energy=out.energy,
                                 response_mask=jnp.asarray(mask))
    ref = np.sum(mask * np.asarray(out.advantages) ** 2 * np.asarray(out.energy), (1, 2)) / 3
    assert noise.dtype == jnp.float64
    np.testing.assert_allclose(noise, ref, rtol=1e-12)
    diag = variance_diagnostics(advantages=out.advantages, returns=out.returns,
                                energy=out.energy, response_mask=jnp.asarray(mask))
    assert all(v.dtype == jnp.float64 for v in diag.values())
