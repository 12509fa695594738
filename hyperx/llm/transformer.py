"""A small decoder-only transformer in Flax with RoPE, RMSNorm, SwiGLU and a KV cache.

Llama-style block (Touvron et al. 2023): ``x += Attn(RMSNorm(x)); x += SwiGLU(RMSNorm(x))``.

* RMSNorm (Zhang & Sennrich 2019): ``y = x / sqrt(mean(x^2) + eps) * g``.
* Rotary position embedding (Su et al. 2021, RoFormer): each pair of query/key features
  ``(x_{2i}, x_{2i+1})`` at position ``p`` is rotated by ``p * base^{-2i/d_head}``, so
  ``<q_p, k_s>`` depends on ``p - s`` only.
* SwiGLU MLP (Shazeer 2020): ``W_2 (silu(W_1 x) * W_3 x)``; with ``moe`` (a
  :class:`~hyperx.llm.moe.MoEConfig`) the blocks in ``moe_layers`` (default: all) use a
  mixture of SwiGLU experts with Top-K or soft routing instead (:mod:`hyperx.llm.moe`).
* Causal attention ``softmax(q k^T / sqrt(d_head) + mask) v``; softmax in float32.

One attention path serves the teacher-forced forward and cached decoding: new keys/values are
written into a ``KVCache`` at ``index`` with ``lax.dynamic_update_slice`` and queries at
positions ``index + s`` attend to cache slots ``<= index + s``. Prefilling a prompt and
decoding one token at a time therefore computes the same function as one full forward
(to float32 rounding; ``tests/llm/test_transformer.py``).

``dtype`` is the compute dtype (activations, matmuls, the output head); parameters are kept
in ``param_dtype``. A ``bfloat16`` copy of a float32-trained model is a different numeric path
with the same parameters: the training-inference mismatch of :mod:`hyperx.llm.train`.
Logits are returned as float32 (rounded to ``dtype`` first, as an inference engine would).
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from hyperx._validation import check_integer, check_positive, check_rank
from hyperx.llm.moe import MoEConfig, MoEFeedForward


class KVCache(NamedTuple):
    """Keys and values of every layer, ``[layers, B, L, heads, d_head]``, in the compute dtype."""

    k: jax.Array
    v: jax.Array


def rope(x: jax.Array, positions: jax.Array, base: float = 10_000.0) -> jax.Array:
    """Rotate feature pairs of ``x [B, S, H, D]`` by ``positions [S] * base^(-2i/D)`` (RoPE)."""
    d = x.shape[-1]
    inv_freq = base ** (-jnp.arange(0, d, 2, dtype=jnp.float32) / d)
    angle = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]  # [S, D/2]
    cos, sin = jnp.cos(angle)[None, :, None, :], jnp.sin(angle)[None, :, None, :]
    xf = x.astype(jnp.float32)
    x1, x2 = xf[..., 0::2], xf[..., 1::2]
    out = jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return out.reshape(x.shape).astype(x.dtype)


class Attention(nn.Module):
    """Causal multi-head attention with RoPE over a (possibly cached) key/value sequence."""

    num_heads: int
    rope_base: float = 10_000.0
    dtype: jnp.dtype = jnp.float32
    param_dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, positions: jax.Array, k_cache: jax.Array | None,
                 v_cache: jax.Array | None, index: jax.Array | int):
        d = x.shape[-1]
        head = d // self.num_heads
        dense = lambda name: nn.DenseGeneral((self.num_heads, head), use_bias=False,  # noqa: E731
                                             dtype=self.dtype, param_dtype=self.param_dtype,
                                             name=name)
        q = rope(dense("q")(x), positions, self.rope_base)
        k = rope(dense("k")(x), positions, self.rope_base)
        v = dense("v")(x)
        if k_cache is None:
            keys, values, key_pos = k, v, positions
        else:
            start = (0, index, 0, 0)
            keys = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), start)
            values = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), start)
            key_pos = jnp.arange(keys.shape[1])
        scores = jnp.einsum("bshd,blhd->bhsl", q, keys.astype(self.dtype))
        scores = scores.astype(jnp.float32) / jnp.sqrt(jnp.float32(head))
        causal = key_pos[None, :] <= positions[:, None]  # [S, L]
        scores = jnp.where(causal[None, None], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(self.dtype)
        out = jnp.einsum("bhsl,blhd->bshd", probs, values.astype(self.dtype))
        out = nn.DenseGeneral(d, axis=(-2, -1), use_bias=False, dtype=self.dtype,
                              param_dtype=self.param_dtype, name="o")(out)
        return out, keys, values


class Block(nn.Module):
    """Pre-RMSNorm block: RoPE attention and a SwiGLU MLP (or an MoE of SwiGLU experts, with
    ``moe``), both residual."""

    num_heads: int
    mlp_hidden: int
    rope_base: float = 10_000.0
    dtype: jnp.dtype = jnp.float32
    param_dtype: jnp.dtype = jnp.float32
    moe: MoEConfig | None = None

    @nn.compact
    def __call__(self, x, positions, k_cache, v_cache, index, experts=None):
        norm = lambda name: nn.RMSNorm(dtype=self.dtype, param_dtype=self.param_dtype,  # noqa: E731
                                       name=name)
        dense = lambda f, name: nn.Dense(f, use_bias=False, dtype=self.dtype,  # noqa: E731
                                         param_dtype=self.param_dtype, name=name)
        h, keys, values = Attention(self.num_heads, self.rope_base, self.dtype, self.param_dtype,
                                    name="attn")(norm("norm_attn")(x), positions, k_cache,
                                                 v_cache, index)
        x = x + h
        h = norm("norm_mlp")(x)
        if self.moe is not None:
            moe = MoEFeedForward(self.moe, self.dtype, self.param_dtype, name="moe")
            return x + moe(h, experts), keys, values
        h = nn.silu(dense(self.mlp_hidden, "w1")(h)) * dense(self.mlp_hidden, "w3")(h)
        return x + dense(x.shape[-1], "w2")(h), keys, values


class Transformer(nn.Module):
    """Decoder-only LM with RoPE, RMSNorm, SwiGLU and a KV cache.

    ``apply(params, tokens)`` is the teacher-forced forward ``[B, T] int -> [B, T, V] float32``
    (``logits[:, t]`` predicts ``tokens[:, t + 1]``).
    ``apply(params, tokens, cache, index, method="decode")`` runs ``tokens [B, S]`` at positions
    ``index .. index + S - 1`` against ``cache`` and returns ``(logits [B, S, V], cache)``.
    """

    vocab_size: int
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    mlp_hidden: int = 128
    max_len: int = 64
    rope_base: float = 10_000.0
    dtype: jnp.dtype = jnp.float32
    param_dtype: jnp.dtype = jnp.float32
    moe: MoEConfig | None = None
    moe_layers: tuple[int, ...] | None = None

    def setup(self) -> None:
        check_positive("vocab_size", self.vocab_size)
        layers = range(self.num_layers) if self.moe_layers is None else self.moe_layers
        if self.moe is None and self.moe_layers is not None:
            raise ValueError("moe_layers: given without an moe config")
        if any(not 0 <= i < self.num_layers for i in layers):
            raise ValueError(f"moe_layers: expected block indices in [0, {self.num_layers - 1}], "
                             f"got {tuple(layers)}")
        if self.d_model % self.num_heads or (self.d_model // self.num_heads) % 2:
            raise ValueError(f"d_model: expected a multiple of 2 * num_heads = "
                             f"{2 * self.num_heads}, got {self.d_model}")
        self.embed = nn.Embed(self.vocab_size, self.d_model, dtype=self.dtype,
                              param_dtype=self.param_dtype,
                              embedding_init=nn.initializers.normal(0.02))
        self.blocks = [Block(self.num_heads, self.mlp_hidden, self.rope_base, self.dtype,
                             self.param_dtype, self.moe if i in layers else None,
                             name=f"block_{i}") for i in range(self.num_layers)]
        self.norm_f = nn.RMSNorm(dtype=self.dtype, param_dtype=self.param_dtype)

    def _check(self, tokens: jax.Array, end: int) -> None:
        check_rank("tokens", tokens, 2)
        check_integer("tokens", tokens)
        if end > self.max_len:
            raise ValueError(f"tokens: expected positions < max_len = {self.max_len}, "
                             f"got shape {tokens.shape} ending at {end}")

    def _run(self, tokens, positions, cache, index, routing=None):
        x = self.embed(tokens)
        ks, vs = [], []
        for i, block in enumerate(self.blocks):
            kc = None if cache is None else cache.k[i]
            vc = None if cache is None else cache.v[i]
            experts = None if routing is None else routing.get(f"block_{i}")
            x, k, v = block(x, positions, kc, vc, index, experts)
            ks.append(k)
            vs.append(v)
        logits = self.embed.attend(self.norm_f(x))  # tied head, in the compute dtype
        return logits.astype(jnp.float32), KVCache(jnp.stack(ks), jnp.stack(vs))

    def __call__(self, tokens: jax.Array,
                 routing: dict[str, jax.Array] | None = None) -> jax.Array:
        """Teacher-forced logits; ``routing`` (``{"block_i": experts [B, T, K]}``) replays
        recorded expert selections in those MoE blocks (routing replay)."""
        self._check(tokens, tokens.shape[1])
        if routing is not None:
            unknown = set(routing) - {f"block_{i}" for i, b in enumerate(self.blocks)
                                      if b.moe is not None}
            if unknown:
                raise ValueError(f"routing: expected keys of MoE blocks, got {sorted(unknown)}")
        return self._run(tokens, jnp.arange(tokens.shape[1]), None, 0, routing)[0]

    def decode(self, tokens: jax.Array, cache: KVCache,
               index: jax.Array | int) -> tuple[jax.Array, KVCache]:
        """Run ``tokens [B, S]`` at positions ``index + arange(S)``, reading/writing ``cache``."""
        check_rank("tokens", tokens, 2)
        check_integer("tokens", tokens)
        if cache.k.shape[2] > self.max_len:
            raise ValueError(f"cache: expected length <= max_len = {self.max_len}, "
                             f"got {cache.k.shape[2]}")
        positions = index + jnp.arange(tokens.shape[1])
        return self._run(tokens, positions, cache, index)

    def init_cache(self, batch: int, length: int) -> KVCache:
        """An empty cache for ``batch`` sequences of up to ``length`` positions."""
        head = self.d_model // self.num_heads
        shape = (self.num_layers, batch, length, self.num_heads, head)
        return KVCache(jnp.zeros(shape, self.dtype), jnp.zeros(shape, self.dtype))
