"""hyperx.llm.tunix against Google's Tunix: the registered loss, the OTB estimator, the optax
transformation, the docs page and (slow) Tunix's GRPO learner end to end.

Runs in the tunix environment (``make test-tunix``: Python 3.12, google-tunix); in the main
environment, where Tunix is absent, the whole file is skipped.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("tunix")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from tunix.models.qwen3 import model as qwen3  # noqa: E402
from tunix.rl import algo_core, function_registry  # noqa: E402
from tunix.rl import common as tunix_common  # noqa: E402
from tunix.rl import rl_cluster as rl_cluster_lib  # noqa: E402
from tunix.rl.grpo import grpo_learner  # noqa: E402
from tunix.rl.rollout import base_rollout  # noqa: E402

import hyperx.llm.tunix as hxt  # noqa: E402
from hyperx.llm import (  # noqa: E402
    CorrectionConfig,
    ObjectiveConfig,
    corrected_policy_loss,
    length_aware_scale,
)
from hyperx.llm.tasks import Task  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAD, EOS, V = 0, 2, 32
B, P, T = 4, 5, 6
RTOL, ATOL = 1e-5, 1e-6  # float32, the same operations in another order

PRESETS = {
    "disabled": CorrectionConfig.disabled(),
    "token_tis": CorrectionConfig.token_tis(2.0),
    "seq_tis": CorrectionConfig.seq_tis(2.0),
    "seq_mis": CorrectionConfig.seq_mis(2.0),
    "icepop": CorrectionConfig.icepop(),
    "token_rejection": CorrectionConfig.token_rejection(0.8, 1.25),
    "geo_mask": CorrectionConfig.geo_mask(),
    "geo_mask_token_tis": CorrectionConfig.geo_mask_token_tis(0.9, 1.1, 2.0),
    "trm": CorrectionConfig.trm(),
    "bypass": CorrectionConfig.bypass_ppo_clip(),
}


def _model(seed: int = 0) -> nnx.Module:
    config = qwen3.ModelConfig(num_layers=1, vocab_size=V, embed_dim=32, hidden_dim=64,
                               num_heads=2, head_dim=16, num_kv_heads=2, rope_theta=10_000,
                               norm_eps=1e-6)
    return qwen3.Qwen3(config, rngs=nnx.Rngs(seed))


def _log_probs(model, ex, stop_gradient=True, temperature=1.0):
    graphdef, state = nnx.split(model)
    return tunix_common.compute_per_token_logps(
        graphdef, state, prompt_tokens=ex.prompt_ids, completion_tokens=ex.completion_ids,
        pad_id=PAD, eos_id=EOS, stop_gradient=stop_gradient, temperature=temperature)


def _example(model, *, seed: int = 0, noise_old: float = 0.1, noise_rollout: float = 0.3,
             token_advantages: bool = False, ref: bool = False,
             old: bool = True) -> hxt.CorrectedTrainExample:
    rng = np.random.default_rng(seed)
    prompts = rng.integers(3, V, (B, P))
    prompts[1, :2] = PAD  # left padding
    completions = rng.integers(3, V, (B, T))
    lengths = np.array([T, 4, 2, 5])
    for i, n in enumerate(lengths):
        completions[i, n - 1] = EOS
        completions[i, n:] = PAD
    mask = completions != PAD
    adv = rng.normal(size=(B, T) if token_advantages else (B,)).astype(np.float32)
    ex = hxt.CorrectedTrainExample(
        prompt_ids=jnp.asarray(prompts), prompt_mask=jnp.asarray(prompts != PAD),
        completion_ids=jnp.asarray(completions), completion_mask=jnp.asarray(mask),
        advantages=jnp.asarray(adv), ref_per_token_logps=None, old_per_token_logps=None)
    current = np.asarray(_log_probs(model, ex))
    old_lp = current + noise_old * rng.normal(size=current.shape) * mask
    rollout = old_lp + noise_rollout * rng.normal(size=current.shape) * mask
    ref_lp = current + 0.2 * rng.normal(size=current.shape) * mask
    return ex.replace(
        old_per_token_logps=jnp.asarray(old_lp, jnp.float32) if old else None,
        rollout_per_token_logps=jnp.asarray(rollout, jnp.float32),
        ref_per_token_logps=jnp.asarray(ref_lp, jnp.float32) if ref else None)


def _config(correction=PRESETS["disabled"], **kwargs) -> hxt.CorrectedGRPOConfig:
    kwargs = {"num_generations": 2, "beta": 0.0, **kwargs}
    config = hxt.CorrectedGRPOConfig(correction=correction, **kwargs)
    config.temperature = 1.0  # GRPOLearner sets it from the rollout config
    return config


def _value_and_grad(loss_fn, model, ex, config):
    def f(model):
        loss, _ = loss_fn(model, ex, config, PAD, EOS)
        return loss

    return nnx.value_and_grad(f)(model)


def _assert_close(a, b, rtol=RTOL, atol=ATOL):
    va, ga = a
    vb, gb = b
    np.testing.assert_allclose(float(va), float(vb), rtol=rtol, atol=atol)
    flat_a, flat_b = jax.tree.leaves(ga), jax.tree.leaves(gb)
    assert len(flat_a) == len(flat_b) > 0
    scale = max(float(jnp.max(jnp.abs(x))) for x in flat_b)
    assert scale > 0, "a zero gradient would make the comparison vacuous"
    for x, y in zip(flat_a, flat_b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol * scale)


def test_registered_by_import():
    assert function_registry.get_policy_loss_fn("hyperx") is hxt.hyperx_policy_loss_fn
    assert function_registry.get_advantage_estimator("otb") is hxt.otb_advantage_estimator
    assert hxt.CorrectedGRPOConfig(num_generations=2).policy_loss_fn == "hyperx"


@pytest.mark.parametrize("preset", list(PRESETS))
def test_loss_equals_corrected_policy_loss(preset):
    """Every preset: the registered loss is corrected_policy_loss on Tunix's log-probs."""
    model = _model()
    ex = _example(model, token_advantages=preset == "seq_mis")
    correction = PRESETS[preset]
    config = _config(correction, epsilon=0.2, epsilon_high=0.28, epsilon_c=3.0)
    objective = ObjectiveConfig(clip_eps=0.2, clip_eps_high=0.28, dual_clip=3.0,
                                agg="seq-mean-token-mean")
    loss_fn = function_registry.get_policy_loss_fn("hyperx")

    def ours(model, ex, config, pad_id, eos_id):
        log_prob = _log_probs(model, ex, stop_gradient=False)
        adv = ex.advantages if ex.advantages.ndim == 2 else jnp.broadcast_to(
            ex.advantages[:, None], log_prob.shape)
        out = corrected_policy_loss(
            objective, correction, log_prob=log_prob,
            old_log_prob=None if correction.bypass else ex.old_per_token_logps,
            rollout_log_prob=ex.rollout_per_token_logps, advantages=adv,
            response_mask=ex.completion_mask.astype(jnp.float32))
        return out.loss, out.metrics

    got = _value_and_grad(loss_fn, model, ex, config)
    want = _value_and_grad(ours, model, ex, config)
    _assert_close(got, want, rtol=1e-6, atol=1e-7)
    _, aux = loss_fn(model, ex, config, PAD, EOS)
    if preset in ("geo_mask", "trm", "token_rejection"):  # the noise makes them reject
        assert float(aux["masked_seq_fraction"]) + float(aux.get("masked_token_fraction", 0)) > 0
    assert all(np.isfinite(float(v)) for v in aux.values())


@pytest.mark.parametrize("agg", list(hxt.AGG_MODES))
@pytest.mark.parametrize("old", [True, False])
def test_uncorrected_loss_equals_tunix_grpo_loss(agg, old):
    """No correction: Tunix's own grpo_loss_fn, value and gradient, every aggregation, with
    the dual clip, an asymmetric clip and the KL penalty; with and without old log-probs."""
    model = _model(1)
    ex = _example(model, seed=1, noise_old=0.3, ref=True, old=old)
    config = _config(loss_agg_mode=agg, epsilon=0.2, epsilon_high=0.28, epsilon_c=3.0,
                     beta=0.05, kl_loss_mode="low_var_kl")
    got = _value_and_grad(hxt.hyperx_policy_loss_fn, model, ex, config)
    want = _value_and_grad(algo_core.grpo_loss_fn, model, ex, config)
    _assert_close(got, want)
    _, aux = hxt.hyperx_policy_loss_fn(model, ex, config, PAD, EOS)
    _, tunix_aux = algo_core.grpo_loss_fn(model, ex, config, PAD, EOS)
    for key in ("kl", "kl_loss", "pg_clipfrac"):
        np.testing.assert_allclose(float(aux[key]), float(tunix_aux[key]), rtol=RTOL, atol=ATOL)


def test_token_tis_equals_tunix_sampler_is_weights():
    """Tunix's token TIS (grpo_loss_fn reading sampler_is_weights, by the rule of its agentic
    learner's ``sampler_is="token"``) is hyperx's CorrectionConfig.token_tis(2)."""
    model = _model(2)
    ex = _example(model, seed=2, noise_rollout=0.8)
    log_ratio = jnp.clip(ex.old_per_token_logps - ex.rollout_per_token_logps, -20.0, 20.0)
    weights = jnp.minimum(jnp.exp(log_ratio), 2.0) * ex.completion_mask
    assert float(jnp.max(weights)) == 2.0, "some weight must be truncated"
    config = _config(CorrectionConfig.token_tis(2.0))
    got = _value_and_grad(hxt.hyperx_policy_loss_fn, model, ex, config)
    want = _value_and_grad(algo_core.grpo_loss_fn, model, ex.replace(sampler_is_weights=weights),
                           config)
    _assert_close(got, want)
    unweighted = _value_and_grad(algo_core.grpo_loss_fn, model, ex, config)
    assert abs(float(unweighted[0]) - float(want[0])) > 1e-4, "the weights must matter"


def test_reinforce_objective_override():
    model = _model(3)
    ex = _example(model, seed=3)
    objective = ObjectiveConfig(loss="reinforce", agg="token-mean")
    config = _config(CorrectionConfig.seq_tis(2.0), objective=objective)
    loss, _ = hxt.hyperx_policy_loss_fn(model, ex, config, PAD, EOS)
    out = corrected_policy_loss(
        objective, CorrectionConfig.seq_tis(2.0), log_prob=_log_probs(model, ex),
        old_log_prob=ex.old_per_token_logps, rollout_log_prob=ex.rollout_per_token_logps,
        advantages=jnp.broadcast_to(ex.advantages[:, None], (B, T)),
        response_mask=ex.completion_mask.astype(jnp.float32))
    np.testing.assert_allclose(float(loss), float(out.loss), rtol=1e-6)


def test_bad_inputs_name_the_argument():
    model = _model()
    ex = _example(model)
    with pytest.raises(ValueError, match="train_example.rollout_per_token_logps"):
        hxt.hyperx_policy_loss_fn(model, ex.replace(rollout_per_token_logps=None),
                                  _config(), PAD, EOS)
    plain = grpo_learner.GRPOConfig(num_generations=2)
    plain.temperature = 1.0
    with pytest.raises(TypeError, match="algo_config.correction"):
        hxt.hyperx_policy_loss_fn(model, ex, plain, PAD, EOS)
    with pytest.raises(ValueError, match="train_example.advantages"):
        hxt.hyperx_policy_loss_fn(model, ex.replace(advantages=jnp.zeros((B, 3))),
                                  _config(), PAD, EOS)
    with pytest.raises(ValueError, match="train_example.segment_ids"):
        hxt.hyperx_policy_loss_fn(model, ex.replace(segment_ids=jnp.zeros((B, P + T))),
                                  _config(), PAD, EOS)
    with pytest.raises(ValueError, match="^correction: trm_kl"):
        hxt.CorrectedGRPOConfig(num_generations=2, correction=CorrectionConfig.trm_exact())
    with pytest.raises(TypeError, match="^correction:"):
        hxt.CorrectedGRPOConfig(num_generations=2, correction="token_tis")
    with pytest.raises(ValueError, match="^loss_algo:"):
        hxt.CorrectedGRPOConfig(num_generations=2, loss_algo="gspo-token")
    with pytest.raises(ValueError, match="^loss_agg_mode:"):
        hxt.CorrectedGRPOConfig(num_generations=2, loss_agg_mode="sum")
    with pytest.raises(ValueError, match="^num_generations:"):
        hxt.otb_advantage_estimator(np.zeros(6), 4)
    with pytest.raises(ValueError, match="^rewards:"):
        hxt.otb_advantage_estimator(np.zeros((2, 3)), 2)
    with pytest.raises(ValueError, match="^proxy:"):
        hxt.otb_advantage_estimator(np.zeros(4), 2, completion_mask=np.ones((4, 3)),
                                    proxy=np.ones((4, 2)))


def test_otb_estimator_hand_computed():
    """Tunix's registry call (rewards only) and the token-level call, against hand values."""
    otb = function_registry.get_advantage_estimator("otb")
    rewards = np.array([1.0, 0.0, 0.5, 0.5], np.float32)
    np.testing.assert_allclose(np.asarray(otb(rewards=rewards, num_generations=2)),
                               [0.5, -0.5, 0.0, 0.0], atol=1e-6)
    # One group of two: lengths 3 and 2, proxies w1 = (1, 2, 1), w2 = (2, 2). Energies
    # W1 = (1, 3, 4), W2 = (2, 4); returns G1 = 1, G2 = 0 at every token. B*_0 = 1/(1 + 2),
    # B*_1 = 3/(3 + 4), B*_2 = 0 (one response alive: the zero tail).
    mask = np.array([[1, 1, 1], [1, 1, 0]], np.float32)
    proxy = np.array([[1, 2, 1], [2, 2, 0]], np.float32)
    adv = otb(np.array([1.0, 0.0]), 2, completion_mask=mask, proxy=proxy)
    want = [[1 - 1 / 3, 1 - 3 / 7, 1.0], [-1 / 3, -3 / 7, 0.0]]
    np.testing.assert_allclose(np.asarray(adv), want, atol=1e-6)
    # IS weights square into the energy: w2 doubled -> W2 = (8, 16).
    adv = otb(np.array([1.0, 0.0]), 2, completion_mask=mask, proxy=proxy,
              is_weights=np.array([[1, 1, 1], [2, 2, 1]], np.float32))
    np.testing.assert_allclose(np.asarray(adv)[0, :2], [1 - 1 / 9, 1 - 3 / 19], atol=1e-6)


def test_length_aware_scale_matches_schedules():
    """Fed through the optimizer state inside Tunix's nnx.Optimizer, the scale and updates
    equal length_aware_scale's called with mean_length directly."""
    kwargs = dict(warmup_steps=2, window=2, threshold=1.1, factor=0.5)
    lengths = [10, 10, 10, 11, 16, 22, 30, 31, 31, 31]
    model = _model()
    opt = nnx.Optimizer(model, optax.chain(optax.sgd(1.0),
                                           hxt.tunix_length_aware_scale(**kwargs)), wrt=nnx.Param)
    reference = optax.chain(optax.sgd(1.0), length_aware_scale(**kwargs))
    params = nnx.state(model, nnx.Param)
    ref_state = reference.init(params)
    grads = jax.tree.map(jnp.ones_like, params)

    @nnx.jit
    def step(model, opt, grads):
        opt.update(model, grads)

    scales = []
    for length in lengths:
        assert hxt.feed_length(opt, mean_length=float(length)) == 1
        before = jax.tree.map(jnp.copy, nnx.state(model, nnx.Param))
        step(model, opt, grads)
        after = nnx.state(model, nnx.Param)
        want, ref_state = reference.update(grads, ref_state, params, mean_length=float(length))
        got = jax.tree.map(lambda a, b: a - b, after, before)
        for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
        scales.append(hxt.length_scale(opt))
        assert scales[-1] == pytest.approx(float(ref_state[-1].scale))
    assert scales[0] == 1.0 and scales[-1] < 1.0, scales  # the surge was detected


def test_length_aware_scale_before_feed():
    """An update before any feed: an error naming feed_length outside jit, a skipped (and
    counted) step inside it."""
    model = _model()
    opt = nnx.Optimizer(model, optax.chain(optax.sgd(1.0), hxt.tunix_length_aware_scale()),
                        wrt=nnx.Param)
    grads = jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param))
    with pytest.raises(ValueError, match="^mean_length: .*feed_length"):
        opt.update(model, grads)
    nnx.jit(lambda model, opt, grads: opt.update(model, grads))(model, opt, grads)
    (state,) = hxt._feed_states(opt.opt_state)
    assert int(state.inner.skipped.get_value()) == 1 and int(state.inner.count.get_value()) == 0
    plain = nnx.Optimizer(model, optax.sgd(1.0), wrt=nnx.Param)
    assert hxt.feed_length(plain, mean_length=3.0) == 0


def test_docs_page_blocks_run_in_order():
    page = ROOT / "docs" / "llm" / "tunix.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL)
    assert blocks, f"{page} has no python block"
    namespace: dict = {"__name__": "docs"}
    for number, block in enumerate(blocks):
        exec(compile(block, f"{page}:block{number}", "exec"), namespace)


class _Tokenizer:
    """hyperx's character tokenizer with the methods Tunix's TokenizerAdapter asks for."""

    def __init__(self, task: Task) -> None:
        self.tok = task.tokenizer

    def encode(self, text, **kwargs):
        return self.tok.encode(str(text))

    def decode(self, ids, **kwargs):
        return self.tok.decode(np.asarray(ids))

    def bos_id(self):
        return self.tok.bos_id

    def eos_id(self):
        return self.tok.eos_id

    def pad_id(self):
        return self.tok.pad_id


def _run_learner(algo_config, optimizer, *, steps: int = 2, return_logprobs: bool = True):
    """CorrectedGRPOLearner on one host device (trainer and sampler share the weights):
    ``steps`` GRPO steps of 2 prompts x 2 responses on reverse-3; returns the learner and
    the train examples it built."""
    task = Task("reverse", 3, reward_type="partial")
    config = qwen3.ModelConfig(num_layers=1, vocab_size=task.tokenizer.vocab_size, embed_dim=32,
                               hidden_dim=64, num_heads=2, head_dim=16, num_kv_heads=2,
                               rope_theta=10_000, norm_eps=1e-6)
    model = qwen3.Qwen3(config, rngs=nnx.Rngs(0))
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    roles = rl_cluster_lib.Role
    cluster = rl_cluster_lib.RLCluster(
        actor=model, reference=None, tokenizer=_Tokenizer(task),
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={roles.ACTOR: mesh, roles.REFERENCE: mesh, roles.ROLLOUT: mesh},
            rollout_engine="vanilla", offload_to_cpu=False,
            training_config=rl_cluster_lib.RLTrainingConfig(
                actor_optimizer=optimizer, eval_every_n_steps=10**9, max_steps=steps),
            rollout_config=base_rollout.RolloutConfig(
                max_tokens_to_generate=task.answer_len + 1, max_prompt_length=task.prompt_len,
                kv_cache_size=32, temperature=1.0, top_p=1.0, top_k=None,
                return_logprobs=return_logprobs, eos_tokens=[task.tokenizer.eos_id],
                seed=0)))  # an int: Tunix donates a key array to its decode loop

    def reward_fn(prompts, completions, **kwargs):
        return [task.reward_text(p, c) for p, c in zip(prompts, completions, strict=True)]

    learner = hxt.CorrectedGRPOLearner(cluster, algo_config, [reward_fn])
    examples = []
    correct = learner._correct
    learner._correct = lambda *args: examples.append(correct(*args)) or examples[-1]
    key = jax.random.key(1)
    data = []
    for _ in range(steps):
        key, k = jax.random.split(key)
        prompts, _ = task.sample(k, 2)
        data.append({"prompts": np.array([task.tokenizer.decode(p) for p in np.asarray(prompts)])})
    learner.train(data)
    return learner, examples


def test_learner_otb_bypass():
    """OTB advantages are token-level, bypass mode leaves old_per_token_logps unset, and the
    sampler's log-probs line up with the completion tokens (shared weights: they match the
    trainer's at every valid token and are 0 at padding)."""
    algo = hxt.CorrectedGRPOConfig(num_generations=2, beta=0.0, advantage_estimator="otb",
                                   correction=CorrectionConfig.bypass_ppo_clip())
    learner, examples = _run_learner(algo, optax.adam(1e-3))
    assert len(examples) == 2
    for ex in examples:
        mask = np.asarray(ex.completion_mask, bool)
        assert np.asarray(ex.advantages).shape == mask.shape
        assert ex.old_per_token_logps is None
        rollout = np.asarray(ex.rollout_per_token_logps)
        assert np.all(rollout[~mask] == 0.0) and np.all(rollout[mask] < 0.0)
        adv = np.asarray(ex.advantages)
        assert np.all(adv[~mask] == 0.0) and np.isfinite(adv).all()
    assert "k3_kl" in learner.last_correction_metrics


def test_learner_feeds_the_length_aware_scale():
    """Decoupled Seq-MIS: old_per_token_logps are the trainer's, and every optimizer step of
    Tunix's trainer read a fed length (none skipped)."""
    algo = hxt.CorrectedGRPOConfig(num_generations=2, beta=0.0,
                                   correction=CorrectionConfig.seq_mis(2.0))
    optimizer = optax.chain(optax.adam(1e-3), hxt.tunix_length_aware_scale(warmup_steps=0))
    learner, examples = _run_learner(algo, optimizer)
    (state,) = hxt._feed_states(learner.rl_cluster.actor_trainer.optimizer.opt_state)
    assert int(state.inner.count.get_value()) == 2 and int(state.inner.skipped.get_value()) == 0
    last = examples[-1]
    np.testing.assert_allclose(float(state.mean_length.get_value()),
                               float(np.asarray(last.completion_mask).sum(-1).mean()))
    mask = np.asarray(last.completion_mask, bool)
    old = np.asarray(last.old_per_token_logps)
    rollout = np.asarray(last.rollout_per_token_logps)
    assert np.abs(old - rollout)[mask].max() < 1e-3, "shared weights: mu = pi_old up to rounding"


def test_learner_needs_sampler_log_probs():
    algo = hxt.CorrectedGRPOConfig(num_generations=2, beta=0.0)
    with pytest.raises(ValueError, match="^rl_cluster: .*return_logprobs=True"):
        _run_learner(algo, optax.adam(1e-3), return_logprobs=False)


@pytest.mark.slow
def test_grpo_learner_end_to_end(tmp_path):
    """benchmarks/llm_tunix.py --quick: Tunix's GRPO learner with a bf16 sampler, each
    condition, one seed, a few steps; the mismatch is real and the sampler's log-probs line up
    with the trainer's (a shifted alignment would give a k3 KL of nats)."""
    out = tmp_path / "llm_tunix"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "llm_tunix.py"), "--quick",
                    "--steps", "3", "--seeds", "1", "--warmup-steps", "30", "--prompts", "2",
                    "--group", "4", "--out", str(out)], check=True, env=env, cwd=tmp_path,
                   timeout=900)
    result = json.loads(out.with_suffix(".json").read_text())
    assert out.with_suffix(".png").stat().st_size > 0
    assert set(result["summary"]) == set(("none", "tunix_token_tis", "token_tis", "seq_mis",
                                          "geo_mask", "trm"))
    for run in result["runs"]:
        assert len(run["reward"]) == 3
        assert all(0.0 <= r <= 1.0 for r in run["reward"])
        assert all(0.0 < k < 0.05 for k in run["k3_kl"]), run["k3_kl"]
    assert result["hyperx_trainer_step"]["median_step_s"] > 0
