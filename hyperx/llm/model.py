"""A small causal language model in Flax (linen) and per-token log-probability helpers.

GPT-2-style decoder (Radford et al. 2019): token + learned position embeddings, ``num_layers``
pre-LayerNorm blocks ``x += Attn(LN(x)); x += MLP(LN(x))`` with causal multi-head
self-attention, a final LayerNorm and an output head tied to the token embedding (or a
separate dense head). Logits ``[B, T, V]`` come back in float32 whatever ``dtype`` computes
the blocks, so the log-probs and the OTB proxy (:mod:`hyperx.llm.baselines`) are float32.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from hyperx._validation import check_floating, check_integer, check_rank, check_shape


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
