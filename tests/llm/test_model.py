import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hyperx.llm.baselines import (
    log_prob_and_sum_sq,
    logit_gradient_proxy_from_sum_sq,
    otb_advantages,
)
from hyperx.llm.model import CausalLM, next_token_log_probs, token_log_probs
from hyperx.llm.schedules import length_aware_scale

V, B, T = 37, 2, 9


def _model(**kw):
    return CausalLM(vocab_size=V, d_model=32, num_layers=2, num_heads=4, max_len=16, **kw)


@pytest.fixture(scope="module")
def setup():
    model = _model()
    tokens = jax.random.randint(jax.random.key(0), (B, T), 0, V)
    params = jax.jit(model.init)(jax.random.key(1), tokens)
    return model, params, tokens


def test_forward_shape_and_dtype(setup):
    model, params, tokens = setup
    logits = jax.jit(model.apply)(params, tokens)
    assert logits.shape == (B, T, V) and logits.dtype == jnp.float32
    assert np.all(np.isfinite(logits))


def test_causal(setup):
    model, params, tokens = setup
    changed = tokens.at[:, 5].set((tokens[:, 5] + 1) % V)
    apply = jax.jit(model.apply)
    a, b = apply(params, tokens), apply(params, changed)
    np.testing.assert_allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert np.abs(a[:, 5:] - b[:, 5:]).max() > 1e-4


def test_tied_and_untied_heads():
    tokens = jnp.zeros((1, 4), jnp.int32)
    tied = jax.eval_shape(_model().init, jax.random.key(0), tokens)["params"]
    untied = jax.eval_shape(_model(tie_embeddings=False).init, jax.random.key(0), tokens)["params"]
    assert "head" not in tied and untied["head"]["kernel"].shape == (32, V)


def test_bfloat16_compute_returns_float32_logits(setup):
    _, params, tokens = setup
    logits = jax.jit(_model(dtype=jnp.bfloat16).apply)(params, tokens)
    assert logits.dtype == jnp.float32 and logits.shape == (B, T, V)


def test_log_prob_helpers(setup):
    model, params, tokens = setup
    logits = jax.jit(model.apply)(params, tokens)
    lp = jax.jit(next_token_log_probs)(logits, tokens)
    ref = jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), tokens[:, 1:, None], -1)[..., 0]
    assert lp.shape == (B, T - 1)
    np.testing.assert_allclose(lp, ref, atol=1e-5)
    z = jnp.log(jnp.array([[[1.0, 3.0]]]))
    np.testing.assert_allclose(token_log_probs(z, jnp.array([[1]])), [[np.log(0.75)]], rtol=1e-6)


def test_gradients_flow(setup):
    model, params, tokens = setup

    def loss(p):
        return -next_token_log_probs(model.apply(p, tokens), tokens).mean()

    grads = jax.jit(jax.grad(loss))(params)
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
    assert np.abs(grads["params"]["embed"]["embedding"]).sum() > 0


def test_bad_inputs_raise(setup):
    model, params, tokens = setup
    with pytest.raises(ValueError, match="tokens"):
        model.apply(params, tokens[0])
    with pytest.raises(ValueError, match="max_len"):
        model.apply(params, jnp.zeros((1, 17), jnp.int32))
    with pytest.raises(ValueError, match="targets"):
        token_log_probs(jnp.zeros((B, T, V)), jnp.zeros((B, T - 1), jnp.int32))
    with pytest.raises(ValueError, match="logits"):
        next_token_log_probs(jnp.zeros((B, T, V)), jnp.zeros((B, T + 1), jnp.int32))


def test_end_to_end_otb_step_raises_rewarded_log_probs():
    # One prompt group of N = 4 fixed responses, the first two rewarded. A few policy-gradient
    # steps with OTB advantages through chain(sgd, length_aware_scale) must raise the mean
    # log-prob of the rewarded responses relative to the others (deterministic: no sampling).
    model = _model()
    tokens = jax.random.randint(jax.random.key(3), (4, T), 0, V)
    params = jax.jit(model.init)(jax.random.key(4), tokens)
    mask = jnp.ones((4, T - 1)).at[3, 5:].set(0.0)
    rewards = jnp.zeros((4, T - 1)).at[:2, -1].set(1.0).at[:2, 4].set(1.0)
    tx = optax.chain(optax.sgd(0.5), length_aware_scale())

    def gap(p):
        lp = next_token_log_probs(model.apply(p, tokens), tokens)
        seq = jnp.sum(lp * mask, -1) / jnp.sum(mask, -1)
        return jnp.mean(seq[:2]) - jnp.mean(seq[2:])

    @jax.jit
    def step(p, opt_state):
        def loss(p):
            logits = model.apply(p, tokens)[:, :-1]
            lp, sum_sq = log_prob_and_sum_sq(logits, tokens[:, 1:])
            proxy = logit_gradient_proxy_from_sum_sq(log_prob=lp, sum_sq=sum_sq)
            adv = otb_advantages(token_rewards=rewards[None], response_mask=mask[None],
                                 proxy=proxy[None]).advantages[0]
            return -jnp.sum(adv * lp * mask) / jnp.sum(mask)

        grads = jax.grad(loss)(p)
        updates, opt_state = tx.update(grads, opt_state, p, mean_length=jnp.sum(mask) / 4)
        return optax.apply_updates(p, updates), opt_state

    gap = jax.jit(gap)
    before = gap(params)
    opt_state = tx.init(params)
    for _ in range(5):
        params, opt_state = step(params, opt_state)
    after = gap(params)
    assert after > before + 0.1
