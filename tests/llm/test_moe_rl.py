"""Routing replay in the RL loop: the sampler records each position's experts, the trainer's
forward replays them (R2 / R3), the router losses enter the objective, and the per-step
routing diagnostics are exact on a constructed batch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.llm.model import Rollout, routed_response_logits, sample, token_log_probs
from hyperx.llm.moe import MoEConfig
from hyperx.llm.tasks import Task
from hyperx.llm.train import (
    Batch,
    RLConfig,
    Scores,
    _routing_metrics,
    make_policy,
    make_trainer,
    transformer_lms,
)

TASK = Task("addition", 2)
MOE = MoEConfig(num_experts=4, top_k=2, expert_hidden=32)


@pytest.fixture(scope="module")
def policy():
    return make_policy(TASK, d_model=32, moe=MOE, moe_layers=(1,))


def test_the_sampler_records_routing_that_replays_its_own_log_probs(policy):
    module, params = policy
    train_lm, _ = transformer_lms(module, "float32")
    prompts, _ = TASK.sample(jax.random.key(0), 6)
    out = sample(train_lm, params, jax.random.key(1), prompts, max_new_tokens=5,
                 eos_id=TASK.tokenizer.eos_id, record_routing=True)
    p = prompts.shape[1]
    assert set(out.routing) == {"block_1"}
    assert out.routing["block_1"].shape == (6, p + 5, 2)
    logits, stats = routed_response_logits(train_lm, params, prompts, out.tokens, out.routing)
    np.testing.assert_allclose(token_log_probs(logits, out.tokens) * out.mask,
                               out.log_probs, atol=1e-4)
    # On the sampler's own parameters and dtype, the fresh routing is the recorded one.
    _, own = routed_response_logits(train_lm, params, prompts, out.tokens)
    np.testing.assert_array_equal(own["experts"]["block_1"], out.routing["block_1"])
    assert stats["router_probs"]["block_1"].shape == (6, p + 5, 4)


def test_routing_is_refused_where_the_model_has_no_experts():
    module, params = make_policy(TASK, d_model=32)
    train_lm, _ = transformer_lms(module, "float32")
    prompts, _ = TASK.sample(jax.random.key(0), 2)
    with pytest.raises(ValueError, match="record_routing"):
        sample(train_lm, params, jax.random.key(1), prompts, max_new_tokens=3,
               eos_id=TASK.tokenizer.eos_id, record_routing=True)
    with pytest.raises(ValueError, match="lm"):
        routed_response_logits(train_lm, params, prompts, prompts)
    with pytest.raises(ValueError, match="routing_replay"):
        make_trainer(train_lm, train_lm, TASK, RLConfig(routing_replay="r3"))
    with pytest.raises(ValueError, match="routing_replay"):
        RLConfig(routing_replay="r4")
    with pytest.raises(ValueError, match="load_balance_coef"):
        RLConfig(load_balance_coef=-0.1)


@pytest.mark.parametrize("replay", ["none", "r2", "r3"])
def test_each_replay_mode_scores_and_updates_on_its_routing(policy, replay):
    module, params = policy
    config = RLConfig(prompts_per_step=4, group_size=4, routing_replay=replay)
    trainer = make_trainer(*transformer_lms(module, config.rollout_dtype), TASK, config)
    batch = trainer.rollout(params, jax.random.key(2))
    scores = trainer.score(params, batch)
    expected = {"none": None, "r2": scores.trainer_experts,
                "r3": batch.rollout.routing}[replay]
    if expected is None:
        assert scores.routing is None
    else:
        np.testing.assert_array_equal(scores.routing["block_1"], expected["block_1"])
    if replay == "r3":  # pi_old is computed on the sampler's routing
        logits, _ = routed_response_logits(trainer_lm(module), params, batch.prompts,
                                           batch.rollout.tokens, batch.rollout.routing)
        np.testing.assert_allclose(scores.old_log_prob,
                                   token_log_probs(logits, batch.rollout.tokens), atol=1e-5)
    state, metrics = trainer.update(trainer.init(params), batch, scores)
    for name in ("routing_flip_rollout", "routing_flip_update", "mismatch_k3_flipped",
                 "mismatch_k3_held", "dead_expert_fraction", "expert_load_max",
                 "router_entropy", "load_balance_loss"):
        assert np.isfinite(float(metrics[name])), name
    assert 0.0 <= float(metrics["routing_flip_rollout"]) <= 1.0
    assert float(metrics["expert_load_max"]) >= 0.25 - 1e-6


def trainer_lm(module):
    return transformer_lms(module, "float32")[0]


def test_the_router_losses_enter_the_objective_with_their_coefficients(policy):
    module, params = policy
    base = RLConfig(prompts_per_step=4, group_size=4)
    losses = {}
    for name, config in {"base": base,
                         "balance": RLConfig(prompts_per_step=4, group_size=4,
                                             load_balance_coef=0.5),
                         "entropy": RLConfig(prompts_per_step=4, group_size=4,
                                             router_entropy_coef=0.25)}.items():
        trainer = make_trainer(*transformer_lms(module, config.rollout_dtype), TASK, config)
        batch = trainer.rollout(params, jax.random.key(3))
        scores = trainer.score(params, batch)
        losses[name] = trainer.objective(params, batch, scores)
    loss, metrics = losses["base"]
    assert float(metrics["load_balance_loss"]) >= 1.0 - 1e-5  # 1 when balanced, up to E
    assert 0.0 < float(metrics["router_entropy"]) <= np.log(4) + 1e-6
    np.testing.assert_allclose(losses["balance"][0] - loss,
                               0.5 * metrics["load_balance_loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(losses["entropy"][0] - loss,
                               -0.25 * metrics["router_entropy"], rtol=1e-4, atol=1e-6)


def test_the_step_routing_metrics_by_hand():
    # P = 2 prompt positions, T = 3 response tokens, top-1 of E = 3 experts, one MoE block.
    # Token t is scored at position P - 1 + t = 1, 2, 3; response 0 has 3 valid tokens,
    # response 1 has 2 (its position 3 is dead).
    rollout_routing = {"b": jnp.array([[[0], [1], [2], [0], [1]],
                                       [[0], [0], [0], [0], [0]]])}
    trainer = {"b": jnp.array([[[0], [1], [1], [0], [2]],
                               [[0], [2], [0], [1], [0]]])}
    new = {"b": jnp.array([[[0], [2], [1], [0], [1]],
                           [[0], [0], [0], [1], [0]]])}
    mask = jnp.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    rollout_lp = jnp.zeros((2, 3))
    old_lp = jnp.log(jnp.array([[1.0, 2.0, 1.0], [0.5, 1.0, 1.0]]))
    batch = Batch(prompts=jnp.zeros((2, 2), jnp.int32), answers=jnp.zeros((2, 1), jnp.int32),
                  rollout=Rollout(tokens=jnp.ones((2, 3), jnp.int32), log_probs=rollout_lp,
                                  mask=mask, routing=rollout_routing))
    scores = Scores(rewards=jnp.zeros(2), old_log_prob=old_lp, sum_sq=jnp.zeros((2, 3)),
                    trainer_experts=trainer)
    m = _routing_metrics(batch, scores, {"experts": new,
                                         "router_probs": {"b": jnp.zeros((2, 5, 3))}})
    # Scored positions 1, 2, 3. Rollout vs trainer: response 0 flips at 2 (2 vs 1);
    # response 1 flips at 1 (0 vs 2) and position 3 is masked: 2 of 5 valid tokens.
    assert float(m["routing_flip_rollout"]) == pytest.approx(2 / 5)
    # pi_old vs new: response 0 flips at position 1 (1 vs 2) only; response 1 at position 1
    # (2 vs 0); 2 of 5.
    assert float(m["routing_flip_update"]) == pytest.approx(2 / 5)
    # k3 = rho - 1 - log rho: rho = 2 -> 1 - ln 2 (response 0, t = 1, flipped);
    # rho = 0.5 -> ln 2 - 0.5 (response 1, t = 0, flipped); the three held tokens have rho = 1.
    k3_flipped = ((1 - np.log(2)) + (np.log(2) - 0.5)) / 2
    assert float(m["mismatch_k3_flipped"]) == pytest.approx(k3_flipped, rel=1e-5)
    assert float(m["mismatch_k3_held"]) == pytest.approx(0.0, abs=1e-7)
    # Live positions of the update forward (the trainer's routing, no replay): response 0 at
    # 0..3 -> experts 0, 1, 1, 0; response 1 at 0..2 -> 0, 2, 0. Counts [4, 2, 1]: none dead,
    # the busiest expert holds 4 / 7.
    assert float(m["dead_expert_fraction"]) == 0.0
    assert float(m["expert_load_max"]) == pytest.approx(4 / 7)
