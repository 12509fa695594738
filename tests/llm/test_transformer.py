"""The RoPE / RMSNorm / KV-cache transformer and the sampler that drives it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.llm.model import response_log_probs, sample, transformer_lm
from hyperx.llm.moe import MoEConfig
from hyperx.llm.train import cast_params
from hyperx.llm.transformer import Transformer, rope

V, B, P, T = 29, 4, 5, 7


@pytest.fixture(scope="module")
def setup():
    module = Transformer(vocab_size=V, d_model=32, num_layers=2, num_heads=2, mlp_hidden=64,
                         max_len=16)
    prompts = jax.random.randint(jax.random.key(0), (B, P), 3, V)
    params = jax.jit(module.init)(jax.random.key(1), prompts)
    # Scale the weights up so the random model is confident (bf16 rounding then matters).
    params = jax.tree.map(lambda x: 3.0 * x, params)
    return module, params, prompts


def test_rope_scores_depend_on_offset_only():
    q = jax.random.normal(jax.random.key(0), (1, 1, 1, 8))
    k = jax.random.normal(jax.random.key(1), (1, 1, 1, 8))

    def score(pq, pk):
        return jnp.sum(rope(q, jnp.array([pq])) * rope(k, jnp.array([pk])))

    np.testing.assert_allclose(score(3, 1), score(10, 8), rtol=1e-5)
    np.testing.assert_allclose(score(0, 0), jnp.sum(q * k), rtol=1e-5)


def test_forward_is_causal_and_float32(setup):
    module, params, prompts = setup
    apply = jax.jit(module.apply)
    a = apply(params, prompts)
    b = apply(params, prompts.at[:, 3].set(4))
    assert a.shape == (B, P, V) and a.dtype == jnp.float32
    np.testing.assert_allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert np.abs(a[:, 3:] - b[:, 3:]).max() > 1e-4


def test_cached_decode_equals_full_forward(setup):
    module, params, prompts = setup
    lm = transformer_lm(module)
    full = jax.jit(module.apply)(params, prompts)
    cache = module.init_cache(B, P)
    first, cache = lm.decode(params, prompts[:, :3], cache, 0)
    fourth, cache = lm.decode(params, prompts[:, 3:4], cache, 3)
    fifth, _ = lm.decode(params, prompts[:, 4:5], cache, 4)
    np.testing.assert_allclose(first, full[:, :3], atol=1e-5)
    np.testing.assert_allclose(fourth[:, 0], full[:, 3], atol=1e-5)
    np.testing.assert_allclose(fifth[:, 0], full[:, 4], atol=1e-5)


def _sample(module, params, prompts, dtype):
    lm = transformer_lm(module.clone(dtype=dtype))
    run = jax.jit(lambda p, k: sample(lm, p, k, prompts, max_new_tokens=T, eos_id=2))
    return run(params, jax.random.key(7))


def test_sampler_log_probs_match_teacher_forcing_in_fp32_and_not_in_bf16(setup):
    module, params, prompts = setup
    train_lm = transformer_lm(module)
    score = jax.jit(lambda p, y: response_log_probs(train_lm, p, prompts, y)[0])
    out = _sample(module, params, prompts, jnp.float32)
    assert out.tokens.shape == out.log_probs.shape == out.mask.shape == (B, T)
    m = np.asarray(out.mask)
    np.testing.assert_allclose(score(params, out.tokens) * m, out.log_probs * m, atol=1e-4)
    bf = _sample(module, cast_params(params, "bfloat16"), prompts, jnp.bfloat16)
    diff = np.abs((score(params, bf.tokens) - bf.log_probs) * np.asarray(bf.mask)).max()
    assert diff > 1e-3, diff


def test_sampler_stops_at_eos_and_pads(setup):
    module, params, prompts = setup
    lm = transformer_lm(module)
    out = jax.jit(lambda p, k: sample(lm, p, k, prompts, max_new_tokens=T, eos_id=2,
                                      greedy=True))(params, jax.random.key(0))
    tokens, mask = np.asarray(out.tokens), np.asarray(out.mask)
    for row, mrow in zip(tokens, mask, strict=True):
        eos = np.flatnonzero(row == 2)
        n = eos[0] + 1 if eos.size else T
        assert mrow[:n].all() and not mrow[n:].any() and (row[n:] == 0).all()
    assert np.all(np.asarray(out.log_probs)[mask == 0] == 0)


def test_bad_inputs_raise(setup):
    module, params, prompts = setup
    lm = transformer_lm(module)
    with pytest.raises(ValueError, match="max_new_tokens"):
        sample(lm, params, jax.random.key(0), prompts, max_new_tokens=20, eos_id=2)
    with pytest.raises(ValueError, match="prompts"):
        sample(lm, params, jax.random.key(0), prompts[0], max_new_tokens=2, eos_id=2)
    with pytest.raises(ValueError, match="tokens"):
        module.apply(params, jnp.zeros((1, 17), jnp.int32))
    with pytest.raises(ValueError, match="d_model"):
        Transformer(vocab_size=V, d_model=30, num_heads=4).init(jax.random.key(0), prompts)


def test_equal_modules_share_one_model_and_evaluate_compiles_once(monkeypatch):
    """``transformer_lm`` of equal modules gives equal models (with equal hashes), so
    ``evaluate`` with a freshly built model of the same module traces once (it used to trace
    on every call)."""
    from hyperx.llm import train
    from hyperx.llm.tasks import Task

    task = Task("addition", 1)
    module, params = train.make_policy(task, d_model=16, num_layers=1, num_heads=2)
    assert transformer_lm(module) == transformer_lm(module.clone())
    assert hash(transformer_lm(module)) == hash(transformer_lm(module.clone()))
    assert train.transformer_lms(module, "bfloat16")[1] == train.transformer_lms(
        module, "bfloat16")[1]
    assert transformer_lm(module) != transformer_lm(module.clone(d_model=32))
    listed = Transformer(vocab_size=V, d_model=16, num_layers=2, num_heads=2, mlp_hidden=32,
                         max_len=16, moe=MoEConfig(num_experts=2, top_k=1), moe_layers=[1])
    assert transformer_lm(listed).routed_logits is not None  # an unhashable field: still hashes
    assert hash(transformer_lm(listed)) != hash(transformer_lm(listed.clone()))
    traces = []
    evaluate = train._evaluate
    monkeypatch.setattr(train, "_evaluate", lambda *a: traces.append(1) or evaluate(*a))
    rewards = [float(train.evaluate(train.transformer_lms(module, "float32")[0], params, task,
                                    jax.random.key(0), 8)) for _ in range(3)]
    assert len(traces) == 1 and rewards[0] == rewards[1] == rewards[2]
