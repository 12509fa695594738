"""Drive a transformers Flax causal LM (GPT-2, Llama, ...) through :class:`LanguageModel`.

transformers 4.x (``>=4.50,<5``, the ``llm`` extra) still ships Flax model classes
(``FlaxGPT2LMHeadModel``, ``FlaxLlamaForCausalLM``, ...; deprecated, removed in 5.0). They
keep their KV cache in a ``"cache"`` collection created by ``model.init_cache(B, L)``; a call
with ``past_key_values=cache`` writes the new keys at the cache's own index and returns the
updated cache. :func:`hf_lm` wraps such a model so that :func:`hyperx.llm.model.sample`, the
trainer's teacher-forced recomputation and :mod:`hyperx.llm.train` use it exactly like the
built-in transformer: plain ``(params, arrays) -> arrays`` functions, jit-able.

Weights come from a local directory (``save_pretrained`` output, ``config.json`` +
``flax_model.msgpack``; ``from_pt=True`` converts PyTorch weights when torch is installed).
Nothing is downloaded: pass a path. The tasks of :mod:`hyperx.llm.tasks` feed their own
character ids, so a model's vocabulary must be at least the task tokenizer's size; a pretrained
checkpoint's tokenizer is not used (its ids mean other strings), so RL starts after the
supervised warm-up teaches the model the task's ids.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from hyperx.llm.model import LanguageModel


def _max_len(config) -> int:
    for name in ("n_positions", "max_position_embeddings"):
        if getattr(config, name, None):
            return int(getattr(config, name))
    raise ValueError("model: its config names no maximum length (n_positions or "
                     "max_position_embeddings)")


def _cache_length(cache) -> int:
    for leaf in jax.tree.leaves(cache):
        if jnp.ndim(leaf) == 4:  # cached_key / cached_value: [B, L, heads, d_head]
            return int(leaf.shape[1])
    raise ValueError("cache: expected a transformers cache with [B, L, H, D] keys")


def hf_lm(model) -> LanguageModel:
    """:class:`LanguageModel` of a transformers ``FlaxPreTrainedModel`` causal LM.

    ``model.dtype`` is its compute dtype (load it once with ``dtype=jnp.bfloat16`` for a bf16
    inference path); logits are returned as float32 either way.
    """
    if not hasattr(model, "init_cache") or not hasattr(model, "module"):
        raise TypeError("model: expected a transformers Flax causal LM (FlaxPreTrainedModel "
                        "with init_cache), got " + type(model).__name__)

    def logits(params, tokens):
        return model(tokens, params=params).logits.astype(jnp.float32)

    def init_cache(batch: int, length: int):
        shapes = jax.eval_shape(functools.partial(model.init_cache, batch, length))
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def decode(params, tokens, cache, index):
        b, s = tokens.shape
        positions = jnp.broadcast_to(index + jnp.arange(s)[None, :], (b, s))
        mask = jnp.ones((b, _cache_length(cache)), jnp.int32)
        out = model(tokens, attention_mask=mask, position_ids=positions, params=params,
                    past_key_values=cache)
        return out.logits.astype(jnp.float32), out.past_key_values

    return LanguageModel(logits=logits, init_cache=init_cache, decode=decode,
                         vocab_size=int(model.config.vocab_size),
                         max_len=_max_len(model.config))


def load_hf_lm(path: str, *, dtype: Any = jnp.float32, with_params: bool = True,
               from_pt: bool = False) -> tuple[LanguageModel, Any]:
    """Load a causal LM saved under ``path`` with ``FlaxAutoModelForCausalLM``.

    Returns ``(hf_lm(model), params)`` (``params`` is ``None`` with ``with_params=False``, for a
    second, lower-precision inference handle on the same weights). ``dtype`` is the compute
    dtype; the parameters are loaded as stored (cast them with
    :func:`hyperx.llm.train.cast_params` for the sampler).
    """
    import os

    from transformers import FlaxAutoModelForCausalLM

    if not os.path.isdir(path):
        raise ValueError(f"path: expected a directory with a saved model, got {path!r}")
    model, params = FlaxAutoModelForCausalLM.from_pretrained(path, dtype=dtype, _do_init=False,
                                                             from_pt=from_pt)
    return hf_lm(model), (params if with_params else None)
