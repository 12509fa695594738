"""A small causal language model in Flax (linen) and per-token log-probability helpers.

GPT-2-style decoder (Radford et al. 2019): token + learned position embeddings, ``num_layers``
pre-LayerNorm blocks ``x += Attn(LN(x)); x += MLP(LN(x))`` with causal multi-head
self-attention, a final LayerNorm and an output head tied to the token embedding (or a
separate dense head). Logits ``[B, T, V]`` come back in float32 whatever ``dtype`` computes
the blocks, so the log-probs and the OTB proxy (:mod:`hyperx.llm.baselines`) are float32.

The second half of the module is model-agnostic: :class:`LanguageModel` is a causal LM as plain
functions (teacher-forced logits, an empty KV cache, a cached decode step), :func:`sample` is
the KV-cache sampler of the RL loop (it records the behaviour log-probs ``log mu``) and
:func:`response_log_probs` is the trainer's teacher-forced recomputation (``log pi``). The RoPE /
RMSNorm model of :mod:`hyperx.llm.transformer` plugs in through :func:`transformer_lm`, a
transformers Flax model through :func:`hyperx.llm.hf.hf_lm`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp

from hyperx._validation import check_floating, check_integer, check_rank, check_shape
from hyperx.llm.baselines import log_prob_and_sum_sq


class Block(nn.Module):
    """Pre-LN transformer block with causal self-attention and a GELU MLP."""

    num_heads: int
    mlp_ratio: int = 4
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        d = x.shape[-1]
        h = nn.LayerNorm(dtype=self.dtype)(x)
        h = nn.MultiHeadDotProductAttention(
            num_heads=self.num_heads, dtype=self.dtype, deterministic=True
        )(h, h, mask=mask)
        x = x + h
        h = nn.LayerNorm(dtype=self.dtype)(x)
        h = nn.Dense(self.mlp_ratio * d, dtype=self.dtype)(h)
        h = nn.Dense(d, dtype=self.dtype)(nn.gelu(h))
        return x + h


class CausalLM(nn.Module):
    """Decoder-only LM: ``tokens [B, T] int -> logits [B, T, V] float32``.

    ``logits[:, t]`` depend on ``tokens[:, :t + 1]`` only (causal mask), so they predict
    ``tokens[:, t + 1]``; see :func:`next_token_log_probs`.
    """

    vocab_size: int
    d_model: int = 128
    num_layers: int = 2
    num_heads: int = 4
    mlp_ratio: int = 4
    max_len: int = 512
    tie_embeddings: bool = True
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        check_rank("tokens", tokens, 2)
        check_integer("tokens", tokens)
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"tokens: expected length T <= max_len = {self.max_len}, "
                             f"got shape {tokens.shape}")
        embed = nn.Embed(self.vocab_size, self.d_model, name="embed")
        pos = self.param("pos_embed", nn.initializers.normal(0.02), (self.max_len, self.d_model))
        x = (embed(tokens) + pos[: tokens.shape[1]]).astype(self.dtype)
        mask = nn.make_causal_mask(tokens)
        for i in range(self.num_layers):
            x = Block(self.num_heads, self.mlp_ratio, self.dtype, name=f"block_{i}")(x, mask)
        x = nn.LayerNorm(dtype=self.dtype, name="ln_f")(x)
        if self.tie_embeddings:
            return embed.attend(x.astype(jnp.float32))
        return nn.Dense(self.vocab_size, dtype=jnp.float32, name="head")(x)


def token_log_probs(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """``log softmax(z)[y] = z_y - logsumexp(z)`` in float32: ``[B, T, V], [B, T] -> [B, T]``."""
    check_rank("logits", logits, 3)
    check_floating("logits", logits)
    check_integer("targets", targets)
    check_shape("targets", targets, logits.shape[:-1], "logits.shape[:-1] (B, T)")
    z = logits.astype(jnp.float32)
    z_y = jnp.take_along_axis(z, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return z_y - jax.nn.logsumexp(z, axis=-1)


def next_token_log_probs(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """Log-prob of each next token: ``log pi(tokens[:, t+1] | tokens[:, :t+1])`` -> ``[B, T-1]``.

    ``logits`` are the model's output on ``tokens`` (``[B, T, V]``); position ``t`` of the
    result scores ``tokens[:, t + 1]``.
    """
    check_rank("tokens", tokens, 2)
    check_shape("logits", logits, (*tokens.shape, None), "(B, T, V)")
    return token_log_probs(logits[:, :-1], tokens[:, 1:])


# --------------------------------------------------------------------------------------------
# A functional handle on any causal LM, and the KV-cache sampler that drives it.


class LanguageModelLogitsFn(Protocol):
    """``logits(params, tokens) -> logits``: teacher-forced float32 logits [B, T, V] of the
    token ids [B, T]; position t scores token t + 1."""

    def __call__(self, params: Any, tokens: jax.Array) -> jax.Array: ...


class LanguageModelInitCacheFn(Protocol):
    """``init_cache(batch, length) -> cache``: an empty KV cache (any pytree) for ``batch``
    sequences of up to ``length`` tokens."""

    def __call__(self, batch: int, length: int) -> Any: ...


class LanguageModelDecodeFn(Protocol):
    """``decode(params, tokens, cache, index) -> (logits, cache)``: the float32 logits
    [B, S, V] of ``tokens`` [B, S] sitting at positions ``index .. index + S - 1``, attending
    to the cache, and the cache with them added."""

    def __call__(self, params: Any, tokens: jax.Array, cache: Any,
                 index: jax.Array | int) -> tuple[jax.Array, Any]: ...


class LanguageModelRoutedLogitsFn(Protocol):
    """``routed_logits(params, tokens, routing=None) -> (logits, stats)``: :class:`LanguageModel`
    ``logits`` of a mixture-of-experts model, sending each token to the experts ``routing``
    gives (``{"block_i": experts [B, T, K]}``, replayed) or to its router's choice (None);
    ``stats``: ``{"experts": {"block_i": [B, T, K]}, "router_probs": {"block_i": [B, T, E]}}``."""

    def __call__(self, params: Any, tokens: jax.Array,
                 routing: dict[str, jax.Array] | None = None) -> tuple[jax.Array, dict]: ...


class LanguageModelRoutedDecodeFn(Protocol):
    """``routed_decode(params, tokens, cache, index) -> (logits, cache, experts)``:
    :class:`LanguageModel` ``decode`` of a mixture-of-experts model, with the experts
    ``{"block_i": [B, S, K]}`` each new token was sent to."""

    def __call__(self, params: Any, tokens: jax.Array, cache: Any,
                 index: jax.Array | int) -> tuple[jax.Array, Any, dict]: ...


class LanguageModel(NamedTuple):
    """A causal LM as plain functions of ``(params, arrays)``, so any JAX model can plug in
    (each function field's Protocol gives its signature).

    * ``logits(params, tokens [B, T]) -> [B, T, V]`` float32, teacher-forced;
    * ``init_cache(batch, length) -> cache`` (any pytree);
    * ``decode(params, tokens [B, S], cache, index) -> (logits [B, S, V] float32, cache)``:
      ``tokens`` sit at positions ``index .. index + S - 1``;
    * ``vocab_size``, ``max_len``: static sizes;
    * for a mixture-of-experts model (:mod:`hyperx.llm.moe`), ``routed_logits(params, tokens,
      routing) -> (logits, stats)`` (``routing``: ``{"block_i": experts [B, T, K]}`` to replay,
      or None; ``stats``: ``{"experts": {...}, "router_probs": {"block_i": [B, T, E]}}``) and
      ``routed_decode(params, tokens, cache, index) -> (logits, cache, experts)``; None for a
      dense model.

    :func:`transformer_lm` wraps :class:`hyperx.llm.transformer.Transformer`;
    :func:`hyperx.llm.hf.hf_lm` wraps a transformers Flax causal LM.
    """

    logits: LanguageModelLogitsFn
    init_cache: LanguageModelInitCacheFn
    decode: LanguageModelDecodeFn
    vocab_size: int
    max_len: int
    routed_logits: LanguageModelRoutedLogitsFn | None = None
    routed_decode: LanguageModelRoutedDecodeFn | None = None


class Rollout(NamedTuple):
    """Sampled responses ``[B, T]``: token ids (``pad_id`` after EOS), the sampler's log-prob of
    each sampled token (float32), the response mask (1 up to and including EOS) and, when
    requested, the sampler's logits ``[B, T, V]`` (for exact trust-region masking) and its
    routing ``{"block_i": experts [B, P + T, K]}`` (the experts every position of
    ``concat(prompt, response)`` was sent to in each MoE block, for routing replay)."""

    tokens: jax.Array
    log_probs: jax.Array
    mask: jax.Array
    logits: jax.Array | None = None
    routing: dict[str, jax.Array] | None = None


def _routing_stats(state) -> dict[str, dict[str, jax.Array]]:
    """``{"experts": {block: [..., K]}, "router_probs": {block: [..., E]}}`` sown by the MoE
    blocks of a :class:`hyperx.llm.transformer.Transformer` in ``state["intermediates"]``."""
    blocks = {name: v["moe"] for name, v in state["intermediates"].items() if "moe" in v}
    return {key: {name: v[key][0] for name, v in blocks.items()}
            for key in ("experts", "router_probs")}


@dataclasses.dataclass(frozen=True)
class _Bound:
    """A :class:`LanguageModel` function of one Flax module, equal to another for an equal
    module (Flax modules compare by their fields) and then hashed alike, so a jitted function
    that takes the model as a static argument (:func:`hyperx.llm.train.evaluate`) compiles once
    for equal modules. A module with an unhashable field (a list for ``moe_layers``) hashes by
    identity: still usable as a static argument, not shared."""

    module: Any

    def __hash__(self) -> int:
        try:
            return hash((type(self), self.module))
        except TypeError:
            return hash((type(self), id(self.module)))


class _Logits(_Bound):
    def __call__(self, params: Any, tokens: jax.Array) -> jax.Array:
        return self.module.apply(params, tokens)


class _InitCache(_Bound):
    def __call__(self, batch: int, length: int) -> Any:
        return self.module.init_cache(batch, length)


class _Decode(_Bound):
    def __call__(self, params: Any, tokens: jax.Array, cache: Any,
                 index: jax.Array | int) -> tuple[jax.Array, Any]:
        return self.module.apply(params, tokens, cache, index, method="decode")


class _RoutedLogits(_Bound):
    def __call__(self, params: Any, tokens: jax.Array,
                 routing: dict[str, jax.Array] | None = None) -> tuple[jax.Array, dict]:
        logits, state = self.module.apply(params, tokens, routing, mutable=["intermediates"])
        return logits, _routing_stats(state)


class _RoutedDecode(_Bound):
    def __call__(self, params: Any, tokens: jax.Array, cache: Any,
                 index: jax.Array | int) -> tuple[jax.Array, Any, dict]:
        (logits, cache), state = self.module.apply(params, tokens, cache, index,
                                                   method="decode", mutable=["intermediates"])
        return logits, cache, _routing_stats(state)["experts"]


def transformer_lm(module) -> LanguageModel:
    """:class:`LanguageModel` of a :class:`hyperx.llm.transformer.Transformer` module (with
    ``routed_logits`` / ``routed_decode`` when it has MoE blocks).

    Models of equal modules compare (and, for hashable fields, hash) equal, so a jitted function
    that takes the model as a static argument (:func:`hyperx.llm.train.evaluate`) compiles once
    for them, not once per call of this function."""
    moe = getattr(module, "moe", None) is not None
    return LanguageModel(logits=_Logits(module), init_cache=_InitCache(module),
                         decode=_Decode(module), vocab_size=module.vocab_size,
                         max_len=module.max_len,
                         routed_logits=_RoutedLogits(module) if moe else None,
                         routed_decode=_RoutedDecode(module) if moe else None)


def sample(lm: LanguageModel, params, key: jax.Array, prompts: jax.Array, *,
           max_new_tokens: int, eos_id: int, pad_id: int = 0, temperature: float = 1.0,
           greedy: bool = False, return_logits: bool = False,
           record_routing: bool = False) -> Rollout:
    """Sample ``max_new_tokens`` tokens after ``prompts [B, P]`` with a KV cache (one ``scan``).

    The prompt is prefilled in one ``decode`` call, then each step draws
    ``y_t ~ softmax(z_t / tau)`` (``argmax`` if ``greedy``) and feeds it back. The returned
    log-prob is ``log softmax(z_t / tau)[y_t]`` of the logits this sampler computed, i.e. the
    behaviour policy ``mu`` of the rollout. After a response's first ``eos_id`` its tokens are
    ``pad_id`` with mask 0 and log-prob 0. All prompts share the length ``P``.

    ``record_routing`` (an MoE model: ``lm.routed_decode``) also returns the experts of every
    position of ``concat(prompts, tokens)`` in each MoE block, as this sampler chose them
    (:attr:`Rollout.routing`, the input of routing replay).
    """
    check_rank("prompts", prompts, 2)
    check_integer("prompts", prompts)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected >= 1, got {max_new_tokens}")
    if temperature <= 0:
        raise ValueError(f"temperature: expected > 0, got {temperature}")
    b, p = prompts.shape
    if p + max_new_tokens > lm.max_len:
        raise ValueError(f"max_new_tokens: prompt length {p} + {max_new_tokens} exceeds the "
                         f"model's max_len {lm.max_len}")
    if record_routing and lm.routed_decode is None:
        raise ValueError("record_routing: the model has no MoE blocks whose routing to record")

    def decode(tokens, cache, index):
        if record_routing:
            return lm.routed_decode(params, tokens, cache, index)
        return (*lm.decode(params, tokens, cache, index), None)

    logits, cache, prompt_routing = decode(prompts, lm.init_cache(b, p + max_new_tokens), 0)

    def step(carry, inputs):
        last, cache, done = carry
        t, k = inputs
        z = last.astype(jnp.float32) / temperature
        y = jnp.argmax(z, -1) if greedy else jax.random.categorical(k, z, axis=-1)
        lp = token_log_probs(z[:, None], y[:, None])[:, 0]
        alive = ~done
        y = jnp.where(alive, y, pad_id).astype(jnp.int32)
        done = done | (y == eos_id)
        nxt, cache, routing = decode(y[:, None], cache, p + t)
        out = {"tokens": y, "log_probs": jnp.where(alive, lp, 0.0),
               "mask": alive.astype(jnp.float32), "logits": z if return_logits else None,
               "routing": None if routing is None else {n: r[:, 0] for n, r in routing.items()}}
        return (nxt[:, -1], cache, done), out

    keys = jax.random.split(key, max_new_tokens)
    init = (logits[:, -1], cache, jnp.zeros((b,), bool))
    _, outs = jax.lax.scan(step, init, (jnp.arange(max_new_tokens), keys))
    outs = jax.tree.map(lambda o: jnp.moveaxis(o, 0, 1), outs)
    if record_routing:
        outs["routing"] = {n: jnp.concatenate([r, outs["routing"][n]], axis=1)
                           for n, r in prompt_routing.items()}
    return Rollout(**outs)


def response_log_probs(lm: LanguageModel, params, prompts: jax.Array,
                       responses: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Teacher-forced ``(log pi(y_t | x, y_<t), sum_v pi(v | x, y_<t)^2)``, each ``[B, T]``.

    One forward of ``concat(prompts, responses)``; position ``P - 1 + t`` of the logits scores
    response token ``t``. The second output is the Optimal Token Baseline's ``sum pi^2``
    (:func:`hyperx.llm.baselines.log_prob_and_sum_sq`, stop-gradient), free with the forward.
    """
    return log_prob_and_sum_sq(logits=response_logits(lm, params, prompts, responses),
                               tokens=responses)


def response_logits(lm: LanguageModel, params, prompts: jax.Array,
                    responses: jax.Array) -> jax.Array:
    """Teacher-forced logits ``[B, T, V]`` that score each response token (one forward)."""
    _check_pair(prompts, responses)
    p = prompts.shape[1]
    logits = lm.logits(params, jnp.concatenate([prompts, responses], axis=1))
    return logits[:, p - 1:-1]


def routed_response_logits(lm: LanguageModel, params, prompts: jax.Array,
                           responses: jax.Array, routing: dict[str, jax.Array] | None = None
                           ) -> tuple[jax.Array, dict[str, dict[str, jax.Array]]]:
    """:func:`response_logits` of an MoE model with its routing statistics over every position
    of ``concat(prompts, responses)`` (see :class:`LanguageModel`); ``routing`` replays a
    recorded selection (e.g. :attr:`Rollout.routing`)."""
    if lm.routed_logits is None:
        raise ValueError("lm: expected a model with MoE blocks (routed_logits), got a dense one")
    _check_pair(prompts, responses)
    p = prompts.shape[1]
    logits, stats = lm.routed_logits(params, jnp.concatenate([prompts, responses], axis=1),
                                     routing)
    return logits[:, p - 1:-1], stats


def _check_pair(prompts: jax.Array, responses: jax.Array) -> None:
    check_rank("responses", responses, 2)
    check_integer("responses", responses)
    check_shape("prompts", prompts, (responses.shape[0], None), "(B, P)")
