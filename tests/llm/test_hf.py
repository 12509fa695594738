"""The transformers Flax adapter on tiny random configs saved to and loaded from a tmp path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")

from hyperx.llm.hf import hf_lm, load_hf_lm  # noqa: E402
from hyperx.llm.model import response_log_probs, sample  # noqa: E402
from hyperx.llm.tasks import Task  # noqa: E402
from hyperx.llm.train import RLConfig, cast_params, make_trainer, train  # noqa: E402

TASK = Task("addition", 1)
V = TASK.tokenizer.vocab_size


@pytest.fixture(scope="module")
def saved_gpt2(tmp_path_factory):
    config = transformers.GPT2Config(vocab_size=V, n_positions=16, n_embd=32, n_layer=2,
                                     n_head=2, initializer_range=0.2)
    model = transformers.FlaxGPT2LMHeadModel(config, seed=0)
    path = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(path)
    return str(path)


def test_load_and_sampler_matches_teacher_forcing_fp32_not_bf16(saved_gpt2):
    lm, params = load_hf_lm(saved_gpt2)
    assert lm.vocab_size == V and lm.max_len == 16
    prompts, _ = TASK.sample(jax.random.key(0), 4)
    run = jax.jit(lambda lm_, p, k: sample(lm_, p, k, prompts, max_new_tokens=4, eos_id=2),
                  static_argnums=0)
    score = jax.jit(lambda p, y: response_log_probs(lm, p, prompts, y)[0])
    out = run(lm, params, jax.random.key(1))
    m = np.asarray(out.mask)
    np.testing.assert_allclose(score(params, out.tokens) * m, out.log_probs * m, atol=1e-4)
    bf_lm, none = load_hf_lm(saved_gpt2, dtype=jnp.bfloat16, with_params=False)
    assert none is None
    bf = run(bf_lm, cast_params(params, "bfloat16"), jax.random.key(1))
    diff = np.abs((score(params, bf.tokens) - bf.log_probs) * np.asarray(bf.mask)).max()
    assert diff > 1e-3, diff


def test_cached_decode_matches_forward(saved_gpt2):
    lm, params = load_hf_lm(saved_gpt2)
    tokens = jax.random.randint(jax.random.key(0), (2, 6), 3, V)
    full = lm.logits(params, tokens)
    first, cache = lm.decode(params, tokens[:, :4], lm.init_cache(2, 6), 0)
    nxt, _ = lm.decode(params, tokens[:, 4:5], cache, 4)
    np.testing.assert_allclose(first, full[:, :4], atol=1e-4)
    np.testing.assert_allclose(nxt[:, 0], full[:, 4], atol=1e-4)


def test_one_rl_step_through_the_adapter(saved_gpt2):
    lm, params = load_hf_lm(saved_gpt2)
    bf_lm, _ = load_hf_lm(saved_gpt2, dtype=jnp.bfloat16, with_params=False)
    tr = make_trainer(lm, bf_lm, TASK, RLConfig(prompts_per_step=2, group_size=4))
    state, history = train(tr, tr.init(params), jax.random.key(2), 1)
    assert all(np.isfinite(v) for v in history[0].values())
    assert history[0]["k3_kl"] > 0.0


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="path"):
        load_hf_lm(str(tmp_path / "missing"))
    with pytest.raises(TypeError, match="model"):
        hf_lm(object())


def test_cli_trains_a_saved_transformers_model(saved_gpt2, tmp_path):
    from hyperx.cli import main

    out = tmp_path / "run"
    assert main(["llm", "--hf-path", saved_gpt2, "--difficulty", "1", "--steps", "1",
                 "--prompts", "2", "--group-size", "2", "--warmup-steps", "0", "--quiet",
                 "--out", str(out)]) == 0
    assert (out / "metrics.csv").exists() and (out / "summary.json").exists()
