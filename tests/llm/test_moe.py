"""The MoE feed-forward block: gates by hand, E = K equals the dense mixture, gradient blackout,
the auxiliary losses' hand values, and a transformer mixing dense and MoE blocks."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.llm.moe import (
    MoEConfig,
    MoEFeedForward,
    load_balance_loss,
    route,
    router_entropy,
)
from hyperx.llm.transformer import Transformer

X = jax.random.normal(jax.random.key(0), (2, 5, 16))


def test_gates_by_hand():
    logits = jnp.array([[2.0, 0.0, 1.0, -1.0]])
    gates, experts = route(logits, MoEConfig(num_experts=4, top_k=2))
    assert sorted(np.asarray(experts[0]).tolist()) == [0, 2]
    want = np.exp([2.0, 1.0]) / np.exp([2.0, 1.0]).sum()
    np.testing.assert_allclose(gates[0], [want[0], 0, want[1], 0], rtol=1e-6)
    full = np.exp([2.0, 0.0, 1.0, -1.0]) / np.exp([2.0, 0.0, 1.0, -1.0]).sum()
    gates, _ = route(logits, MoEConfig(num_experts=4, top_k=2, gates="unnormalised"))
    np.testing.assert_allclose(gates[0], [full[0], 0, full[2], 0], rtol=1e-6)
    gates, _ = route(logits, MoEConfig(num_experts=4, routing="soft", temperature=2.0))
    soft = np.exp(np.array([2.0, 0.0, 1.0, -1.0]) / 2)
    np.testing.assert_allclose(gates[0], soft / soft.sum(), rtol=1e-6)


def _expert_outputs(module, params, x):
    """Every expert's output [..., E, d], computed from the parameters by hand."""
    p = params["params"]
    h = jax.nn.silu(jnp.einsum("...d,edh->...eh", x, p["w1"])) * jnp.einsum(
        "...d,edh->...eh", x, p["w3"])
    return jnp.einsum("...eh,ehd->...ed", h, p["w2"]), x @ p["router"]["kernel"]


def test_with_e_equal_k_the_block_is_the_dense_softmax_mixture():
    top = MoEFeedForward(MoEConfig(num_experts=3, top_k=3, expert_hidden=8))
    params = top.init(jax.random.key(1), X)
    outs, logits = _expert_outputs(top, params, X)
    dense = jnp.einsum("...e,...ed->...d", jax.nn.softmax(logits), outs)
    np.testing.assert_allclose(top.apply(params, X), dense, atol=1e-5)
    soft = MoEFeedForward(MoEConfig(num_experts=3, routing="soft", expert_hidden=8))
    np.testing.assert_allclose(soft.apply(params, X), dense, atol=1e-5)


def test_unselected_experts_get_no_gradient_and_the_router_does():
    # One token, 4 experts, top-1: only the chosen expert's weights and the router move.
    block = MoEFeedForward(MoEConfig(num_experts=4, top_k=1, expert_hidden=8))
    x = X[:1, :1]
    params = block.init(jax.random.key(2), x)
    grads = jax.grad(lambda p: jnp.sum(block.apply(p, x) ** 2))(params)["params"]
    _, logits = _expert_outputs(block, params, x)
    chosen = int(jnp.argmax(logits[0, 0]))
    norms = np.asarray(jnp.sqrt(jnp.sum(grads["w1"] ** 2, axis=(1, 2))))
    assert norms[chosen] > 0 and np.all(np.delete(norms, chosen) == 0), norms
    # Top-1 with renormalised gates has gate 1: no router gradient; unnormalised gates do.
    assert float(jnp.abs(grads["router"]["kernel"]).max()) == 0.0
    block = MoEFeedForward(MoEConfig(num_experts=4, top_k=1, gates="unnormalised",
                                     expert_hidden=8))
    grads = jax.grad(lambda p: jnp.sum(block.apply(p, x) ** 2))(params)["params"]
    assert float(jnp.abs(grads["router"]["kernel"]).max()) > 0.0


def test_auxiliary_losses_by_hand():
    e = 4
    uniform = jnp.full((6, e), 1.0 / e)
    spread = jnp.array([[0], [1], [2], [3], [0], [1], [2], [3]])
    assert float(load_balance_loss(jnp.full((8, e), 1.0 / e), spread, e)) == pytest.approx(1.0)
    collapsed = jnp.zeros((8, e)).at[:, 0].set(1.0)
    assert float(load_balance_loss(collapsed, jnp.zeros((8, 1), jnp.int32), e)) == \
        pytest.approx(e)
    assert float(router_entropy(uniform)) == pytest.approx(math.log(e))
    assert float(router_entropy(collapsed)) == pytest.approx(0.0)
    mask = jnp.array([1, 1, 1, 1, 0, 0, 0, 0])
    mixed = jnp.concatenate([jnp.full((4, e), 1.0 / e), collapsed[:4]])
    assert float(router_entropy(mixed, mask)) == pytest.approx(math.log(e))


def test_the_block_sows_its_routing():
    block = MoEFeedForward(MoEConfig(num_experts=4, top_k=2, expert_hidden=8))
    params = block.init(jax.random.key(3), X)
    _, state = block.apply(params, X, mutable=["intermediates"])
    experts = state["intermediates"]["experts"][0]
    probs = state["intermediates"]["router_probs"][0]
    assert experts.shape == (2, 5, 2) and probs.shape == (2, 5, 4)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)


def test_a_transformer_mixing_dense_and_moe_blocks_decodes_as_it_forwards():
    model = Transformer(vocab_size=20, d_model=16, num_layers=2, num_heads=2, mlp_hidden=32,
                        max_len=12, moe=MoEConfig(num_experts=4, top_k=2, expert_hidden=16),
                        moe_layers=(1,))
    tokens = jax.random.randint(jax.random.key(4), (2, 8), 0, 20)
    params = model.init(jax.random.key(5), tokens)
    assert "moe" in params["params"]["block_1"] and "w1" in params["params"]["block_0"]
    full = model.apply(params, tokens)
    first, cache = model.apply(params, tokens[:, :6], model.init_cache(2, 8), 0,
                               method="decode")
    nxt, _ = model.apply(params, tokens[:, 6:7], cache, 6, method="decode")
    np.testing.assert_allclose(first, full[:, :6], atol=1e-4)
    np.testing.assert_allclose(nxt[:, 0], full[:, 6], atol=1e-4)


def test_bad_moe_settings_are_named():
    with pytest.raises(ValueError, match="top_k"):
        MoEConfig(num_experts=2, top_k=3)
    with pytest.raises(ValueError, match="routing"):
        MoEConfig(routing="hash")
    with pytest.raises(ValueError, match="gates"):
        MoEConfig(gates="sigmoid")
    with pytest.raises(ValueError, match="temperature"):
        MoEConfig(temperature=0.0)
    with pytest.raises(ValueError, match="moe_layers"):
        Transformer(vocab_size=8, num_layers=2, moe=MoEConfig(), moe_layers=(2,)).init(
            jax.random.key(0), jnp.zeros((1, 2), jnp.int32))
    with pytest.raises(ValueError, match="moe_layers"):
        Transformer(vocab_size=8, moe_layers=(0,)).init(jax.random.key(0),
                                                        jnp.zeros((1, 2), jnp.int32))


def test_routing_replay_reproduces_the_recorded_forward_and_keeps_the_router_gradient():
    moe = MoEConfig(num_experts=4, top_k=2, expert_hidden=16)
    model = Transformer(vocab_size=20, d_model=16, num_layers=2, num_heads=2, max_len=12,
                        moe=moe)
    tokens = jax.random.randint(jax.random.key(6), (2, 8), 0, 20)
    params = model.init(jax.random.key(7), tokens)
    logits, stats = model.apply(params, tokens, mutable=["intermediates"])
    routing = {name: stats["intermediates"][name]["moe"]["experts"][0]
               for name in ("block_0", "block_1")}
    np.testing.assert_allclose(model.apply(params, tokens, routing=routing), logits, atol=1e-6)
    # A later parameter version: replay keeps the recorded experts, so where the fresh routing
    # flipped, the replayed forward differs from the fresh one.
    later = jax.tree.map(lambda p: p + 0.3 * jax.random.normal(jax.random.key(8), p.shape),
                         params)
    fresh, new = model.apply(later, tokens, mutable=["intermediates"])
    flipped = np.any(np.sort(new["intermediates"]["block_0"]["moe"]["experts"][0], -1)
                     != np.sort(routing["block_0"], -1))
    replayed = model.apply(later, tokens, routing=routing)
    assert flipped and not np.allclose(replayed, fresh, atol=1e-4)
    grads = jax.grad(lambda p: jnp.sum(model.apply(p, tokens, routing=routing) ** 2))(params)
    assert float(jnp.abs(grads["params"]["block_1"]["moe"]["router"]["kernel"]).max()) > 0
    with pytest.raises(ValueError, match="routing"):
        model.apply(params, tokens, routing={"block_9": routing["block_0"]})
    with pytest.raises(ValueError, match="experts"):
        model.apply(params, tokens, routing={"block_0": routing["block_0"][..., :1]})


def test_routing_diagnostics_by_hand():
    from hyperx.llm.moe import routing_diagnostics, routing_flips

    a = jnp.array([[[0, 1], [2, 3], [1, 0], [0, 1]]])   # 4 tokens, top-2 of 5 experts
    b = jnp.array([[[1, 0], [2, 0], [1, 0], [0, 1]]])   # token 1 flipped; token 0 only reordered
    np.testing.assert_array_equal(routing_flips(experts_a=a, experts_b=b),
                                  [[False, True, False, False]])
    kl = jnp.array([[0.1, 0.9, 0.3, 0.2]])
    out = routing_diagnostics(experts_a=a, experts_b=b, num_experts=5, token_values=kl)
    assert float(out["flip_fraction"]) == pytest.approx(0.25)
    assert float(out["dead_expert_fraction"]) == pytest.approx(0.2)   # expert 4 never chosen
    assert float(out["load_max"]) == pytest.approx(3 / 8)            # experts 0 and 1: 3 of 8
    assert float(out["value_flipped"]) == pytest.approx(0.9)
    assert float(out["value_held"]) == pytest.approx(0.2)
    masked = routing_diagnostics(experts_a=a, experts_b=b, num_experts=5, token_values=kl,
                                 mask=jnp.array([[1, 0, 1, 1]]))
    assert float(masked["flip_fraction"]) == 0.0 and float(masked["value_flipped"]) == 0.0
    with pytest.raises(ValueError, match="experts_a, experts_b"):
        routing_flips(experts_a=a, experts_b=b[..., :1])
