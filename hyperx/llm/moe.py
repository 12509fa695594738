"""A mixture-of-experts feed-forward block with Top-K or soft routing, for the Flax transformer.

``E`` SwiGLU experts ``f_e(x) = W2_e (silu(W1_e x) * W3_e x)`` and a linear router
``l(x) = W_r x in R^E``. The block returns ``y = sum_e g_e(x) f_e(x)`` with gates ``g``:

* ``routing="top_k"``, ``gates="renormalised"`` (Mixtral, Jiang et al. 2024): ``S`` = the ``K``
  largest logits, ``g_e = exp(l_e) / sum_{j in S} exp(l_j)`` for ``e in S``, else 0. A softmax
  over the selected logits and a softmax over all experts renormalised over the selected ones
  are the same numbers (the partition function cancels), so one option covers both wordings.
* ``routing="top_k"``, ``gates="unnormalised"`` (Switch Transformer, Fedus et al. 2021; GShard,
  Lepikhin et al. 2020): ``g_e = softmax(l)_e`` for ``e in S``, else 0 (the gates sum to < 1).
* ``routing="soft"``: every expert weighted, ``g = softmax(l / temperature)``: a dense mixture,
  continuous in the parameters.

The Top-K map is piecewise constant in the parameters: an expert outside ``S`` gets exactly zero
gradient from a token ("gradient blackout"), and a small change of the logits (another
precision, a later parameter version) can swap a token's experts, which changes its output by a
finite amount. That is the training-inference mismatch of MoE models that routing replay
(the sampler's expert choice reused by the trainer) removes.

At this scale every expert runs on every token and the gates zero the unselected ones (no
capacity factor, no token dropping: with a few experts and short sequences the dense compute is
cheaper than a dispatch).

The block sows per-call statistics in the ``"intermediates"`` collection (``mutable=
["intermediates"]`` to collect them): ``experts`` (the selected indices ``[..., K]``, or all
for soft routing), ``router_probs`` (``softmax(l)``, ``[..., E]``). :func:`load_balance_loss`
and :func:`router_entropy` turn them into the Switch auxiliary loss and the entropy regulariser;
:func:`routing_diagnostics` compares two routings of the same tokens (flip rate, experts with no
gradient, load, a per-token value split into flipped and held tokens).

Routing replay: ``MoEFeedForward(x, experts)`` (and ``Transformer.apply(params, tokens,
routing=...)``, one ``[B, T, K]`` selection per MoE layer) computes the block on recorded
experts: the gates come from the current router logits at those experts, so the router still
gets its gradient, while the selection is the recorded one (the sampler's, in verl's Router
Replay).
"""

from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from hyperx._validation import (
    check_choice,
    check_flag,
    check_index,
    check_int,
    check_positive,
    is_concrete,
)

ROUTINGS = ("top_k", "soft")
GATES = ("renormalised", "unnormalised")


@dataclasses.dataclass(frozen=True)
class MoEConfig:
    """Static settings of an MoE feed-forward block (hashable).

    Attributes:
      num_experts: ``E`` experts.
      top_k: ``K`` experts per token (``1 <= K <= E``) for ``routing="top_k"``.
      routing: ``"top_k"`` or ``"soft"`` (all experts, softmax gates at ``temperature``).
      gates: ``"renormalised"`` (the selected experts' gates sum to 1) or ``"unnormalised"``
        (the full softmax's values at the selected experts).
      temperature: soft routing's softmax temperature (> 0).
      expert_hidden: hidden width of each SwiGLU expert.
      checked: check replayed experts (:func:`route`) under ``jit`` too, with ``checkify``
        (run the jitted function under ``hyperx._validation.checked``); concrete replays are
        always checked.
    """

    num_experts: int = 4
    top_k: int = 2
    routing: str = "top_k"
    gates: str = "renormalised"
    temperature: float = 1.0
    expert_hidden: int = 64
    checked: bool = False

    def __post_init__(self) -> None:
        check_int("num_experts", self.num_experts)
        check_int("top_k", self.top_k, high=self.num_experts)
        check_choice("routing", self.routing, ROUTINGS)
        check_choice("gates", self.gates, GATES)
        check_positive("temperature", self.temperature)
        check_int("expert_hidden", self.expert_hidden)
        check_flag("checked", self.checked)


def check_num_experts(name: str, x: jax.Array, num_experts: int) -> None:
    """``ValueError`` naming ``name`` unless its last axis holds ``num_experts`` experts."""
    if x.shape[-1:] != (num_experts,):
        raise ValueError(f"{name}: expected a last axis of num_experts = {num_experts} experts, "
                         f"got shape {x.shape}")


def check_experts(name: str, experts: jax.Array, num_experts: int, *,
                  checked: bool = False) -> None:
    """A replayed selection ``[..., K]``: integers in ``[0, E)``, ``K`` distinct per token.

    An index outside ``[0, E)`` gathers a NaN router logit (its gate is NaN and spreads through
    the block), a repeated one counts an expert twice. Concrete ``experts``: ``ValueError``
    naming ``name``; traced: a ``checkify.check`` when ``checked``.
    """
    check_index(name, experts, num_experts, checked=checked)
    message = f"{name}: expected {experts.shape[-1]} distinct experts per token"
    if is_concrete(experts):
        values = np.sort(np.asarray(experts), axis=-1)
        repeated = np.argwhere(np.any(values[..., 1:] == values[..., :-1], axis=-1))
        if repeated.size:
            raise ValueError(f"{message}, got a repeated expert at token {repeated[0].tolist()}")
    elif checked:
        values = jnp.sort(experts, axis=-1)
        checkify.check(jnp.all(values[..., 1:] != values[..., :-1]), message)


def route(logits: jax.Array, config: MoEConfig,
          experts: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """Gates ``[..., E]`` (zero outside the selected experts) and the selected experts
    ``[..., K]`` (all ``E`` for soft routing) of router ``logits [..., E]`` (float32).

    ``experts [..., K]`` replays a recorded selection (routing replay): the gates are computed
    from the current logits at those experts, so the router keeps its gradient, but the set is
    not re-chosen (ignored for soft routing, which selects nothing). A replay must hold ``K``
    distinct integers in ``[0, E)`` per token (:func:`check_experts`; ``config.checked`` for
    traced replays), and ``logits`` ``E = config.num_experts`` experts.
    """
    e = config.num_experts
    check_num_experts("logits", logits, e)
    logits = logits.astype(jnp.float32)
    if config.routing == "soft":
        experts = jnp.broadcast_to(jnp.arange(e), logits.shape)
        return jax.nn.softmax(logits / config.temperature, axis=-1), experts
    if experts is None:
        top, experts = jax.lax.top_k(logits, config.top_k)
    else:
        if experts.shape != (*logits.shape[:-1], config.top_k):
            raise ValueError(f"experts: expected shape {(*logits.shape[:-1], config.top_k)} "
                             f"(the recorded top-{config.top_k} per token), got {experts.shape}")
        check_experts("experts", experts, e, checked=config.checked)
        experts = experts.astype(jnp.int32)
        top = jnp.take_along_axis(logits, experts, axis=-1)
    selected = jax.nn.one_hot(experts, e, dtype=jnp.float32).sum(-2)  # [..., E] in {0, 1}
    if config.gates == "renormalised":
        weights = jax.nn.softmax(top, axis=-1)
        gates = jnp.einsum("...k,...ke->...e", weights,
                           jax.nn.one_hot(experts, e, dtype=jnp.float32))
    else:
        gates = jax.nn.softmax(logits, axis=-1) * selected
    return gates, experts


def _weights(shape: tuple[int, ...], mask: jax.Array | None) -> jax.Array:
    return jnp.ones(shape, jnp.float32) if mask is None else mask.astype(jnp.float32)


def load_balance_loss(router_probs: jax.Array, experts: jax.Array, num_experts: int,
                      mask: jax.Array | None = None) -> jax.Array:
    """The Switch Transformer auxiliary loss ``E sum_e f_e P_e`` (Fedus et al. 2021, eq. 4).

    ``f_e``: the fraction of the tokens' ``K`` expert assignments that go to ``e``; ``P_e``: the
    mean router probability of ``e``; both over the tokens where ``mask`` (``[...]``) is true.
    It is 1 when routing is uniform and grows to ``E`` as it collapses onto one expert.
    """
    check_num_experts("router_probs", router_probs, num_experts)
    check_index("experts", experts, num_experts)
    w = _weights(router_probs.shape[:-1], mask)
    n = jnp.maximum(jnp.sum(w), 1.0)
    counts = jax.nn.one_hot(experts, num_experts, dtype=jnp.float32).sum(-2)  # [..., E]
    f = jnp.einsum("...e,...->e", counts, w) / (n * experts.shape[-1])
    p = jnp.einsum("...e,...->e", router_probs.astype(jnp.float32), w) / n
    return num_experts * jnp.sum(f * p)


def router_entropy(router_probs: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Mean entropy (nats) of the router's softmax over the tokens where ``mask`` is true;
    in ``[0, ln E]``. Subtracting ``coef * entropy`` from a loss regularises towards spread."""
    p = router_probs.astype(jnp.float32)
    h = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=-1)
    if mask is None:
        return jnp.mean(h)
    w = mask.astype(jnp.float32)
    return jnp.sum(h * w) / jnp.maximum(jnp.sum(w), 1.0)


def routing_flips(*, experts_a: jax.Array, experts_b: jax.Array) -> jax.Array:
    """``[...]`` bool: where the Top-K *sets* of two routings of the same tokens differ (the
    order within a set does not count), e.g. the bf16 sampler's against the float32 trainer's,
    or one parameter version's against the next."""
    if experts_a.shape != experts_b.shape:
        raise ValueError(f"experts_a, experts_b: expected the same shape [..., K], got "
                         f"{experts_a.shape} and {experts_b.shape}")
    return jnp.any(jnp.sort(experts_a, -1) != jnp.sort(experts_b, -1), axis=-1)


def routing_diagnostics(*, experts_a: jax.Array, experts_b: jax.Array, num_experts: int,
                        token_values: jax.Array | None = None,
                        mask: jax.Array | None = None) -> dict[str, jax.Array]:
    """Stability-gap diagnostics of Top-K routing over the tokens where ``mask`` is true.

    * ``flip_fraction``: tokens whose expert set differs between ``experts_a`` and
      ``experts_b`` (``[..., K]`` each);
    * ``dead_expert_fraction``: experts that no token selects in ``experts_a`` (they receive no
      gradient from this batch: the gradient blackout);
    * ``load_max``: the largest expert's share of the assignments in ``experts_a`` (``1 / E``
      when balanced);
    * with ``token_values [...]`` (e.g. the per-token mismatch KL): ``value_flipped`` and
      ``value_held``, its mean over the flipped and over the held tokens (0 where there are
      none).
    """
    check_index("experts_a", experts_a, num_experts)
    flips = routing_flips(experts_a=experts_a, experts_b=experts_b).astype(jnp.float32)
    w = _weights(flips.shape, mask)
    n = jnp.maximum(jnp.sum(w), 1.0)
    counts = jnp.einsum("...e,...->e", jax.nn.one_hot(experts_a, num_experts,
                                                      dtype=jnp.float32).sum(-2), w)
    out = {"flip_fraction": jnp.sum(flips * w) / n,
           "dead_expert_fraction": jnp.mean((counts == 0).astype(jnp.float32)),
           "load_max": jnp.max(counts) / jnp.maximum(jnp.sum(counts), 1.0)}
    if token_values is not None:
        v = token_values.astype(jnp.float32)
        out["value_flipped"] = jnp.sum(v * flips * w) / jnp.maximum(jnp.sum(flips * w), 1.0)
        out["value_held"] = (jnp.sum(v * (1 - flips) * w)
                             / jnp.maximum(jnp.sum((1 - flips) * w), 1.0))
    return out


class MoEFeedForward(nn.Module):
    """``E`` SwiGLU experts behind a linear router (see the module docstring)."""

    config: MoEConfig
    dtype: jnp.dtype = jnp.float32
    param_dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, experts: jax.Array | None = None) -> jax.Array:
        """``x [..., d]``; ``experts [..., K]`` replays a recorded routing (see :func:`route`)."""
        c = self.config
        d = x.shape[-1]
        init = nn.initializers.lecun_normal()
        router = nn.Dense(c.num_experts, use_bias=False, dtype=self.dtype,
                          param_dtype=self.param_dtype, name="router")
        w1 = self.param("w1", init, (c.num_experts, d, c.expert_hidden), self.param_dtype)
        w3 = self.param("w3", init, (c.num_experts, d, c.expert_hidden), self.param_dtype)
        w2 = self.param("w2", nn.initializers.normal(1.0 / math.sqrt(c.expert_hidden)),
                        (c.num_experts, c.expert_hidden, d), self.param_dtype)
        logits = router(x)
        gates, experts = route(logits, c, experts)
        self.sow("intermediates", "experts", experts)
        self.sow("intermediates", "router_probs", jax.nn.softmax(logits.astype(jnp.float32)))
        xc = x.astype(self.dtype)
        h = (nn.silu(jnp.einsum("...d,edh->...eh", xc, w1.astype(self.dtype)))
             * jnp.einsum("...d,edh->...eh", xc, w3.astype(self.dtype)))
        out = jnp.einsum("...eh,ehd->...ed", h, w2.astype(self.dtype))
        return jnp.einsum("...e,...ed->...d", gates.astype(self.dtype), out)
