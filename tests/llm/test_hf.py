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


# Flax Llama, Mistral and Gemma (4.57.6) build their rotary table with a slice [..., :num_pos]
# on the feature axis (create_sinusoidal_positions), which truncates it unless
# max_position_embeddings >= 2 * head_dim; real checkpoints have thousands of positions, these
# tiny ones use 32 = 2 x 16.
_DECODER = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=32, initializer_range=0.2)
ARCHITECTURES = {
    "gpt2": lambda: transformers.FlaxGPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=V, n_positions=16, n_embd=32, n_layer=2, n_head=2, initializer_range=0.2),
        seed=0),
    "llama": lambda: transformers.FlaxLlamaForCausalLM(
        transformers.LlamaConfig(num_key_value_heads=1, **_DECODER), seed=0),
    "mistral": lambda: transformers.FlaxMistralForCausalLM(
        transformers.MistralConfig(num_key_value_heads=1, sliding_window=None, **_DECODER),
        seed=0),
    "gemma": lambda: transformers.FlaxGemmaForCausalLM(transformers.GemmaConfig(
        num_key_value_heads=1, head_dim=16, hidden_activation="gelu_pytorch_tanh", **_DECODER),
        seed=0),
    "gpt_neo": lambda: transformers.FlaxGPTNeoForCausalLM(transformers.GPTNeoConfig(
        vocab_size=V, hidden_size=32, num_layers=2, num_heads=2, window_size=8,
        attention_types=[[["global", "local"], 1]], max_position_embeddings=32), seed=0),
    "opt": lambda: transformers.FlaxOPTForCausalLM(transformers.OPTConfig(
        vocab_size=V, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=32, word_embed_proj_dim=32), seed=0),
}


def _save(tmp_path_factory, name: str) -> str:
    path = tmp_path_factory.mktemp(name)
    ARCHITECTURES[name]().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def saved_gpt2(tmp_path_factory):
    return _save(tmp_path_factory, "gpt2")


@pytest.fixture(scope="module", params=[
    name if name in ("gpt2", "llama") else pytest.param(name, marks=pytest.mark.slow)
    for name in sorted(ARCHITECTURES)])
def saved_model(request, tmp_path_factory):
    return _save(tmp_path_factory, request.param)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def saved_trainable(request, tmp_path_factory):
    return _save(tmp_path_factory, request.param)


def test_load_and_sampler_matches_teacher_forcing_fp32_not_bf16(saved_model):
    lm, params = load_hf_lm(saved_model)
    assert lm.vocab_size == V and lm.max_len in (16, 32)
    prompts, _ = TASK.sample(jax.random.key(0), 4)
    run = jax.jit(lambda lm_, p, k: sample(lm_, p, k, prompts, max_new_tokens=4, eos_id=2),
                  static_argnums=0)
    score = jax.jit(lambda p, y: response_log_probs(lm, p, prompts, y)[0])
    out = run(lm, params, jax.random.key(1))
    m = np.asarray(out.mask)
    np.testing.assert_allclose(score(params, out.tokens) * m, out.log_probs * m, atol=1e-4)
    bf_lm, none = load_hf_lm(saved_model, dtype=jnp.bfloat16, with_params=False)
    assert none is None
    bf = run(bf_lm, cast_params(params, "bfloat16"), jax.random.key(1))
    diff = np.abs((score(params, bf.tokens) - bf.log_probs) * np.asarray(bf.mask)).max()
    assert diff > 2e-4, diff  # 8e-4 (GPT-Neo) to 1e-2 on these tiny random models


def test_cached_decode_matches_forward(saved_model):
    lm, params = load_hf_lm(saved_model)
    tokens = jax.random.randint(jax.random.key(0), (2, 6), 3, V)
    full = lm.logits(params, tokens)
    first, cache = lm.decode(params, tokens[:, :4], lm.init_cache(2, 6), 0)
    nxt, _ = lm.decode(params, tokens[:, 4:5], cache, 4)
    np.testing.assert_allclose(first, full[:, :4], atol=1e-4)
    np.testing.assert_allclose(nxt[:, 0], full[:, 4], atol=1e-4)


def test_one_rl_step_through_the_adapter(saved_trainable):
    lm, params = load_hf_lm(saved_trainable)
    bf_lm, _ = load_hf_lm(saved_trainable, dtype=jnp.bfloat16, with_params=False)
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
    from hyperx.commands import main

    out = tmp_path / "run"
    assert main(["llm", "--hf-path", saved_gpt2, "--difficulty", "1", "--steps", "1",
                 "--prompts", "2", "--group-size", "2", "--warmup-steps", "0", "--quiet",
                 "--out", str(out)]) == 0
    assert (out / "metrics.csv").exists() and (out / "summary.json").exists()
