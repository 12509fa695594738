"""The rollout-correction failure modes verl's users reported, as tests on hyperx.llm.

* rejected responses leaking into their group's baseline (verl-project/verl PR #6375 and its
  reopen #6452: a response rejected by ``rollout_rs`` kept its reward and ``uid``, so GRPO /
  RLOO baselines of its accepted siblings still used it; PR #6362 the same for token rewards);
* a Geo-RS bound that rejects everything crashing the step (verl-project/verl PR #3984, a
  user's ``rollout_rs=geometric`` run: ``AssertionError: Expected at least one valid token in
  response_mask`` from ``compute_offpolicy_metrics``);
* a preset that is switched on but changes nothing, and a bypass mode that does not bypass.
"""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.llm.corrections import CorrectionConfig
from hyperx.llm.objectives import ObjectiveConfig, corrected_policy_loss, policy_loss
from hyperx.llm.tasks import Task
from hyperx.llm.train import (
    ADVANTAGES,
    CORRECTIONS,
    RLConfig,
    corrected_group_advantages,
    group_advantages,
    make_trainer,
    train,
    transformer_lms,
)
from hyperx.llm.transformer import Transformer

TASK = Task("addition", 1)

# One group of three responses, two tokens each. Responses 0 and 1 are on-policy (rho = 1);
# response 2 has log rho = 2 at every token, which geo_mask (0.9 <= rho_geo <= 1.1),
# token_rejection (0.5 <= rho <= 5) and trm (|log rho| <= 1) all reject. Its reward, 10, would
# dominate the baseline of the two accepted responses (rewards 1 and 0).
OLD = jnp.full((3, 2), -1.0)
ROLLOUT = OLD.at[2].set(-3.0)
MASK = jnp.ones((3, 2))
REWARDS = jnp.array([1.0, 0.0, 10.0])
SUM_SQ = jnp.array([[0.5, 0.5], [0.9, 0.9], [0.7, 0.7]])


def _otb_expected() -> np.ndarray:
    # w = 1 - 2 pi(y) + sum pi^2 with pi(y) = e^-1; W_t = (t + 1) w; G_t = r (outcome reward on
    # the last token); B*_t = sum_{kept} G W / sum_{kept} W = w0 / (w0 + w1) at both t.
    w0, w1 = 1 - 2 * math.exp(-1) + 0.5, 1 - 2 * math.exp(-1) + 0.9
    b = (1.0 * w0 + 0.0 * w1) / (w0 + w1)
    return np.array([[1 - b, 1 - b], [-b, -b], [0.0, 0.0]])


GRPO = 0.5 / (math.sqrt(0.5) + 1e-6)  # mean 0.5, unbiased std sqrt(0.5) of {1, 0}
EXPECTED = {
    "grpo": np.array([[GRPO] * 2, [-GRPO] * 2, [0.0] * 2]),
    "dr_grpo": np.array([[0.5] * 2, [-0.5] * 2, [0.0] * 2]),  # r - mean {1, 0}
    "rloo": np.array([[1.0] * 2, [-1.0] * 2, [0.0] * 2]),  # r_i - r_j, the other kept one
    "otb": _otb_expected(),
}


@pytest.mark.parametrize("correction", ["geo_mask", "token_rejection", "trm"])
@pytest.mark.parametrize("kind", ADVANTAGES)
def test_rejected_responses_leave_every_group_baseline(kind, correction):
    """verl PR #6375 / #6452: the baseline of the accepted responses is computed from the
    accepted responses only; the rejected one gets advantage 0. With the rejected response in
    the group (the pre-fix trainer) GRPO's mean would be 11/3 and RLOO's leave-one-out means
    5.5 and 5."""
    config = RLConfig(prompts_per_step=1, group_size=3, advantage=kind,
                      correction=CORRECTIONS[correction], rollout_dtype="float32")
    adv = corrected_group_advantages(config, rewards=REWARDS, response_mask=MASK,
                                     old_log_prob=OLD, rollout_log_prob=ROLLOUT, sum_sq=SUM_SQ)
    np.testing.assert_allclose(adv, EXPECTED[kind], rtol=1e-5, atol=1e-6)


def _module() -> Transformer:
    return Transformer(vocab_size=TASK.tokenizer.vocab_size, d_model=16, num_layers=1,
                       num_heads=2, mlp_hidden=32, max_len=16)


@pytest.fixture(scope="module")
def params():
    return jax.jit(_module().init)(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))


def test_the_trainer_objective_uses_the_baselines_of_the_kept_responses(params):
    """The trainer's loss, not only the helper: response 0 of every group is rejected by
    token_rejection and carries reward 10; the objective equals the loss with the advantages
    of the kept responses, and differs from the loss with the rejected one in the baseline."""
    config = RLConfig(prompts_per_step=2, group_size=4, rollout_dtype="float32",
                      correction=CORRECTIONS["token_rejection"])
    tr = make_trainer(*transformer_lms(_module(), "float32"), TASK, config)
    batch = tr.rollout(params, jax.random.key(1))
    scores = tr.score(params, batch)
    mask = batch.rollout.mask
    first = (jnp.arange(8) % 4 == 0)[:, None]
    rollout_lp = jnp.where(first & (mask > 0), scores.old_log_prob - 3.0, scores.old_log_prob)
    batch = batch._replace(rollout=batch.rollout._replace(log_probs=rollout_lp))
    scores = scores._replace(rewards=jnp.where(first[:, 0], 10.0, jnp.tile(
        jnp.array([0.0, 1.0, 0.0, 0.5]), 2)))
    # pi_theta a step away from pi_old, so the loss is not the (zero) mean advantage
    moved = jax.tree.map(lambda p: p * 1.05, params)
    loss, _ = tr.objective(moved, batch, scores)
    log_prob = tr.score(moved, batch).old_log_prob

    def loss_with(adv_mask):
        adv = group_advantages("grpo", scores.rewards, adv_mask, 4)
        return corrected_policy_loss(
            config.objective, config.correction, log_prob=log_prob,
            old_log_prob=scores.old_log_prob, rollout_log_prob=rollout_lp, advantages=adv,
            response_mask=mask).loss

    np.testing.assert_allclose(loss, loss_with(jnp.where(first, 0.0, mask)), rtol=1e-5)
    assert abs(float(loss) - float(loss_with(mask))) > 1e-3


def _mismatched(b: int = 8, t: int = 5, v: int = 7):
    """Logits of pi_old and of a rollout policy mu whose distance grows with the response index
    (from on-policy to far off), the current policy pi_theta a small step from pi_old."""
    k = jax.random.split(jax.random.key(3), 5)
    old_logits = jax.random.normal(k[0], (b, t, v))
    scale = jnp.linspace(0.0, 3.0, b)[:, None, None]
    rollout_logits = old_logits + scale * jax.random.normal(k[1], (b, t, v))
    tokens = jax.random.categorical(k[2], rollout_logits)
    theta = 0.3 * jax.random.normal(k[3], (b, t, v))
    take = lambda logits: jnp.take_along_axis(  # noqa: E731
        jax.nn.log_softmax(logits), tokens[..., None], axis=-1)[..., 0]
    return dict(old_logits=old_logits, rollout_logits=rollout_logits, take=take, theta=theta,
                advantages=jax.random.normal(k[4], (b, t)), mask=jnp.ones((b, t)))


def _loss_and_grad(correction: CorrectionConfig, objective: ObjectiveConfig, x: dict,
                   old_log_prob=None):
    old = x["take"](x["old_logits"]) if old_log_prob is None else old_log_prob

    def loss(theta):
        return corrected_policy_loss(
            objective, correction, log_prob=x["take"](x["old_logits"] + theta),
            old_log_prob=old, rollout_log_prob=x["take"](x["rollout_logits"]),
            advantages=x["advantages"], response_mask=x["mask"],
            rollout_logits=x["rollout_logits"], old_logits=x["old_logits"]).loss

    return jax.value_and_grad(loss)(x["theta"])


@pytest.mark.parametrize("name", [n for n in CORRECTIONS if n != "none"])
def test_every_preset_changes_the_loss_on_mismatched_inputs(name):
    """A preset that is switched on must act: on a batch with real training-inference mismatch
    its loss and gradient differ from the uncorrected ones (a preset silently mapped to the
    disabled config, or a correction dropped on its way to the loss, fails here)."""
    x = _mismatched()
    base, base_grad = _loss_and_grad(CORRECTIONS["none"], ObjectiveConfig(), x)
    loss, grad = _loss_and_grad(CORRECTIONS[name], ObjectiveConfig(), x)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    assert abs(float(loss) - float(base)) > 1e-4, (name, float(loss), float(base))
    assert float(jnp.max(jnp.abs(grad - base_grad))) > 1e-5


@pytest.mark.parametrize("loss", ["ppo", "reinforce"])
def test_bypass_is_the_uncorrected_loss_anchored_at_the_rollout_policy(loss):
    """Bypass (verl's ``bypass_mode``: ``pi_old := mu``, no separate old-log-prob pass) is the
    plain, uncorrected policy loss with the rollout log-probs as the PPO anchor: loss and
    gradient equal exactly, and the ``old_log_prob`` passed in is ignored."""
    x = _mismatched()
    objective = ObjectiveConfig(loss=loss)
    mu = x["take"](x["rollout_logits"])

    def plain(theta):
        return policy_loss(objective, log_prob=x["take"](x["old_logits"] + theta),
                           old_log_prob=mu, advantages=x["advantages"], mask=x["mask"]).loss

    want, want_grad = jax.value_and_grad(plain)(x["theta"])
    for old in (None, jnp.full(mu.shape, -0.1)):
        got, got_grad = _loss_and_grad(CORRECTIONS["bypass"], objective, x, old_log_prob=old)
        assert float(got) == float(want)
        np.testing.assert_array_equal(got_grad, want_grad)


def test_a_geo_bound_that_rejects_everything_gives_zero_loss_and_says_so():
    """verl PR #3984 (a user's report): a Geo-RS bound that rejects every response raised
    ``AssertionError: Expected at least one valid token in response_mask``. Here the step is a
    finite zero: loss and gradient exactly 0, ``fully_masked = 1`` and every token and
    response reported rejected, eagerly and under jit."""
    x = _mismatched()
    x["rollout_logits"] = x["rollout_logits"] + 0.5 * jax.random.normal(
        jax.random.key(9), x["rollout_logits"].shape)  # no response is exactly on-policy
    tight = CorrectionConfig.geo_mask(1.0, 1.0)
    mu, old = x["take"](x["rollout_logits"]), x["take"](x["old_logits"])

    def loss(theta):
        return corrected_policy_loss(
            ObjectiveConfig(), tight, log_prob=x["take"](x["old_logits"] + theta),
            old_log_prob=old, rollout_log_prob=mu, advantages=x["advantages"],
            response_mask=x["mask"])

    for fn in (loss, jax.jit(loss)):
        (value, metrics), grad = jax.value_and_grad(
            lambda t, f=fn: (f(t).loss, f(t).metrics), has_aux=True)(x["theta"])
        assert float(value) == 0.0
        assert np.all(np.asarray(grad) == 0.0)
        assert float(metrics["fully_masked"]) == 1.0
        assert float(metrics["masked_token_fraction"]) == 1.0
        assert float(metrics["masked_seq_fraction"]) == 1.0
        assert all(np.all(np.isfinite(v)) for v in metrics.values())


def test_a_step_with_every_token_rejected_warns_in_one_line(params):
    """The host loop names the step whose correction rejected everything (zero update)."""
    config = RLConfig(prompts_per_step=2, group_size=2, rollout_dtype="bfloat16",
                      correction=CorrectionConfig.geo_mask(1.0, 1.0))
    tr = make_trainer(*transformer_lms(_module(), "bfloat16"), TASK, config)
    with pytest.warns(UserWarning, match=r"^correction: step 1 rejected every token") as record:
        _, history = train(tr, tr.init(params), jax.random.key(4), 1)
    assert len(record) == 1 and "\n" not in str(record[0].message)
    assert history[0]["fully_masked"] == 1.0
    assert history[0]["loss"] == 0.0 and history[0]["grad_norm"] == 0.0


def test_a_step_with_kept_tokens_does_not_warn(params):
    config = RLConfig(prompts_per_step=2, group_size=2, rollout_dtype="float32")
    tr = make_trainer(*transformer_lms(_module(), "float32"), TASK, config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(tr, tr.init(params), jax.random.key(4), 1)


@pytest.mark.parametrize("kind", ADVANTAGES)
def test_group_size_one_with_a_group_relative_advantage_is_an_error(kind):
    """One response per prompt makes every group-relative advantage identically 0: the run
    would train on nothing, without a word."""
    with pytest.raises(ValueError, match=rf"^group_size: expected >= 2 with advantage="
                                         rf"'{kind}', got 1"):
        RLConfig(group_size=1, advantage=kind)
    RLConfig(group_size=2, advantage=kind)
