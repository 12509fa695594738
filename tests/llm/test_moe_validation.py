"""The MoE routing helpers check a replayed routing at their boundary: an expert index outside
[0, E) (a NaN gate that spreads under jit), a repeated expert in one token's top-k, expert
counts that disagree between arguments; on concrete input a one-line ValueError naming the
argument, under jit a checkify check with ``MoEConfig(checked=True)``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx._validation import checked
from hyperx.llm.moe import MoEConfig, load_balance_loss, route, routing_diagnostics
from hyperx.llm.transformer import Transformer

CONFIG = MoEConfig(num_experts=4, top_k=2)
LOGITS = jax.random.normal(jax.random.key(0), (3, 4))
GOOD = jnp.array([[0, 1], [2, 3], [1, 3]])


@pytest.mark.parametrize("bad", [4, -1])
def test_a_replayed_expert_outside_the_range_is_a_one_line_error(bad):
    with pytest.raises(ValueError, match=rf"^experts: expected integers in \[0, 3\], got {bad}$"):
        route(LOGITS, CONFIG, GOOD.at[2, 1].set(bad))


def test_a_repeated_expert_in_one_tokens_top_k_is_an_error():
    with pytest.raises(ValueError, match=r"^experts: expected 2 distinct experts per token, "
                                         r"got a repeated expert at token \[1\]$"):
        route(LOGITS, CONFIG, GOOD.at[1].set(2))


def test_expert_counts_that_disagree_between_arguments_are_errors():
    with pytest.raises(ValueError, match=r"^logits: expected a last axis of num_experts = 4 "
                                         r"experts, got shape \(3, 5\)$"):
        route(jnp.zeros((3, 5)), CONFIG, GOOD)
    probs = jax.nn.softmax(LOGITS)
    with pytest.raises(ValueError, match=r"^router_probs: expected a last axis of "
                                         r"num_experts = 3"):
        load_balance_loss(probs, GOOD, 3)
    with pytest.raises(ValueError, match=r"^experts: expected integers in \[0, 2\], got 3$"):
        load_balance_loss(probs[:, :3], GOOD, 3)
    with pytest.raises(ValueError, match=r"^experts_a: expected integers in \[0, 2\], got 3$"):
        routing_diagnostics(experts_a=GOOD, experts_b=GOOD, num_experts=3)


@pytest.mark.parametrize(("experts", "message"), [
    (GOOD.at[2, 1].set(4), "experts: expected integers in [0, 3]"),
    (GOOD.at[1].set(2), "experts: expected 2 distinct experts per token"),
])
def test_under_jit_the_checked_path_reports_the_bad_replay(experts, message):
    """Unchecked, the out-of-range replay gives NaN gates under jit; ``checked=True`` with
    ``hyperx._validation.checked`` turns both bad replays into the one-line error."""
    gates = jax.jit(lambda x, e: route(x, CONFIG, e)[0])
    if message.startswith("experts: expected integers"):
        assert np.isnan(np.asarray(gates(LOGITS, experts))).any()  # the bug being guarded
    strict = MoEConfig(num_experts=4, top_k=2, checked=True)
    err, _ = checked(jax.jit(lambda x, e: route(x, strict, e)[0]))(LOGITS, experts)
    assert err.get() is not None and err.get().startswith(message)


def test_a_checked_transformer_replaying_its_own_routing_passes_and_matches():
    """The check reaches the transformer's MoE blocks under jit and costs nothing in value: a
    checked replay of the model's own routing passes and gives the unreplayed logits; a replay
    with one out-of-range expert fails the check."""
    moe = MoEConfig(num_experts=4, top_k=2, expert_hidden=8, checked=True)
    model = Transformer(vocab_size=11, d_model=16, num_layers=1, num_heads=2, mlp_hidden=16,
                        max_len=8, moe=moe)
    tokens = jnp.array([[1, 2, 3, 4]])
    params = model.init(jax.random.key(1), tokens)
    fresh, stats = model.apply(params, tokens, mutable=["intermediates"])
    routing = {"block_0": stats["intermediates"]["block_0"]["moe"]["experts"][0]}
    run = checked(jax.jit(lambda p, t, r: model.apply(p, t, routing=r)))
    err, replayed = run(params, tokens, routing)
    assert err.get() is None
    np.testing.assert_allclose(replayed, fresh, atol=1e-5)
    bad = {k: v.at[0, 0, 0].set(7) for k, v in routing.items()}
    err, _ = run(params, tokens, bad)
    assert err.get().startswith("experts: expected integers in [0, 3]")
