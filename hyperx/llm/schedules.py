"""Length-aware learning-rate scaling: decay the step size when mean response length surges.

Idea (arXiv:2602.01826, "Beyond Precision: Why Training-Inference Mismatch is an Optimization
Problem and How Simple LR Scheduling Fixes It"): training-inference mismatch and gradient noise
grow together, a surge in mean response length is an early warning of it, and decaying the
learning rate when it surges keeps training from collapsing. The paper gives the idea
qualitatively; the exact rule below is OURS:

1. Two EMAs of the batch's mean response length ``L_k`` (``k = 0, 1, ...``):
   ``f_k = c_k f_{k-1} + (1 - c_k) L_k`` with ``c_k = min(b_f, k / (k + 1))`` (fast) and the
   same with ``b_s`` (slow), ``b_f < b_s``. Until its horizon ``1 / (1 - b)`` is reached an
   EMA is the running mean, so an early transient is forgotten as fast as the data allow.
   Optionally the same two EMAs of the mismatch KL.
2. Surge signal at step ``k`` (after ``warmup_steps`` updates): ``f_k / s_k > threshold``
   (or, when tracked, ``kl_f / kl_s > kl_threshold``). A surge is declared when the signal has
   held for ``window`` consecutive steps; the counter then restarts, so a sustained surge
   triggers again every ``window`` steps.
3. Decay. ``"multiplicative"``: each trigger multiplies the scale by ``factor`` (not below
   ``min_scale``). ``"cosine"``: the first trigger starts a cosine from 1 to ``min_scale``
   over ``decay_steps`` updates; later triggers do not restart it. The scale never grows back.

The transformation multiplies the incoming updates by the scale, so put it after the optimiser:
``optax.chain(optax.adam(lr), length_aware_scale())`` and call
``update(grads, state, params, mean_length=L)`` (``optax.chain`` forwards the extra argument;
``optax.contrib.reduce_on_plateau`` takes the loss the same way). The decision is in the state
(``scale``, ``surge``, ``ratio``) for logging.

Non-finite input. A NaN/inf (or negative) ``mean_length`` or ``mismatch_kl`` would poison both
EMAs for good (every later ratio NaN, so no surge could ever be detected). A concrete value (a
call outside ``jit``) raises a one-line error naming the argument. Inside a compiled loop the
step is skipped instead: the EMAs, counters and scale are left unchanged, the updates are still
scaled by the current scale, and ``state.skipped`` counts such steps (log it). With
``check_finite=True`` the compiled step also fails a ``checkify`` check naming the argument
(run it under ``hyperx._validation.checked``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from hyperx._validation import check_choice, check_flag, check_int, check_range, is_concrete
from hyperx._validation import check_finite as _check_finite_values


class LengthAwareScaleState(NamedTuple):
    """State of :func:`length_aware_scale`; ``scale``, ``surge``, ``ratio`` and ``skipped`` (steps
    whose ``mean_length`` / ``mismatch_kl`` was not finite, see the module docstring) are for
    logging."""

    count: jax.Array
    fast_length: jax.Array
    slow_length: jax.Array
    fast_kl: jax.Array
    slow_kl: jax.Array
    surge_count: jax.Array
    decay_start: jax.Array
    ratio: jax.Array
    surge: jax.Array
    scale: jax.Array
    skipped: jax.Array


def _ema(old: jax.Array, new: jax.Array, decay: float, count: jax.Array) -> jax.Array:
    c = jnp.minimum(decay, count / (count + 1.0))
    return c * old + (1.0 - c) * new


def _safe_ratio(num: jax.Array, den: jax.Array) -> jax.Array:
    return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 1.0)


def length_aware_scale(
    *,
    fast_decay: float = 0.7,
    slow_decay: float = 0.97,
    threshold: float = 1.15,
    window: int = 3,
    warmup_steps: int = 10,
    mode: str = "multiplicative",
    factor: float = 0.5,
    min_scale: float = 0.1,
    decay_steps: int = 200,
    kl_threshold: float | None = None,
    dtype=jnp.float32,
    check_finite: bool = False,
) -> optax.GradientTransformationExtraArgs:
    """Scale updates down when the mean response length surges (rule: ours; idea: 2602.01826).

    Args:
      fast_decay: EMA decay ``b_f`` of the fast length average (horizon ~ 1/(1-b_f) = 3 steps).
      slow_decay: EMA decay ``b_s`` of the slow length average (horizon ~ 33 steps).
      threshold: surge when ``fast / slow`` exceeds it (1.15: fast average 15% above slow).
      window: consecutive surging steps needed to trigger a decay.
      warmup_steps: updates before detection starts (the slow EMA needs history).
      mode: ``"multiplicative"`` or ``"cosine"`` (cosine-to-floor).
      factor: multiplicative decay per trigger (``mode="multiplicative"``).
      min_scale: floor of the scale (both modes).
      decay_steps: length of the cosine from 1 to ``min_scale`` (``mode="cosine"``).
      kl_threshold: when set, the mismatch KL is tracked with the same EMAs and
        ``kl_fast / kl_slow > kl_threshold`` also counts as a surge; ``update`` then needs
        ``mismatch_kl``.
      dtype: floating dtype of the state's averages and scale (float64 for a float64 run).
      check_finite: under ``jit``, also fail a ``checkify`` check on a non-finite input
        (concrete inputs are always checked; see the module docstring).

    Returns:
      An ``optax.GradientTransformationExtraArgs`` whose ``update(updates, state, params=None,
      *, mean_length, mismatch_kl=None)`` multiplies ``updates`` by the new scale.
    """
    check_range("fast_decay", fast_decay, 0.0, 1.0, open_high=True)
    check_range("slow_decay", slow_decay, 0.0, 1.0, open_high=True)
    if not fast_decay < slow_decay:
        raise ValueError(
            f"fast_decay, slow_decay: expected 0 <= fast_decay < slow_decay < 1, "
            f"got {fast_decay}, {slow_decay}"
        )
    check_range("threshold", threshold, 0.0, open_low=True)
    check_int("window", window)
    check_int("warmup_steps", warmup_steps, 0)
    check_choice("mode", mode, ("multiplicative", "cosine"))
    check_range("factor", factor, 0.0, 1.0, open_low=True)
    check_range("min_scale", min_scale, 0.0, 1.0)
    check_int("decay_steps", decay_steps)
    if kl_threshold is not None:
        check_range("kl_threshold", kl_threshold, 0.0, open_low=True)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"dtype: expected a floating dtype, got {dtype}")
    check_flag("check_finite", check_finite)

    def _check_input(name: str, x: jax.Array) -> None:
        _check_finite_values(name, x, checked=check_finite)
        if is_concrete(x) and float(x) < 0 and name == "mean_length":
            raise ValueError(f"mean_length: expected a finite number >= 0, got {float(x)}")

    def init_fn(params) -> LengthAwareScaleState:
        del params
        zero = jnp.zeros((), dtype)
        return LengthAwareScaleState(
            count=jnp.zeros((), jnp.int32),
            fast_length=zero,
            slow_length=zero,
            fast_kl=zero,
            slow_kl=zero,
            surge_count=jnp.zeros((), jnp.int32),
            decay_start=jnp.full((), -1, jnp.int32),
            ratio=jnp.ones((), dtype),
            surge=jnp.zeros((), bool),
            scale=jnp.ones((), dtype),
            skipped=jnp.zeros((), jnp.int32),
        )

    def update_fn(updates, state: LengthAwareScaleState, params=None, *, mean_length,
                  mismatch_kl=None, **extra_args):
        del params, extra_args
        if jnp.ndim(mean_length) != 0:
            raise ValueError(f"mean_length: expected a scalar, got shape {jnp.shape(mean_length)}")
        k = state.count.astype(dtype)
        length = jnp.asarray(mean_length, dtype)
        _check_input("mean_length", length)
        ok = jnp.isfinite(length) & (length >= 0)
        fast = _ema(state.fast_length, length, fast_decay, k)
        slow = _ema(state.slow_length, length, slow_decay, k)
        ratio = _safe_ratio(fast, slow)
        signal = ratio > threshold
        fast_kl, slow_kl = state.fast_kl, state.slow_kl
        if kl_threshold is not None:
            if mismatch_kl is None or jnp.ndim(mismatch_kl) != 0:
                raise ValueError("mismatch_kl: expected a scalar (kl_threshold is set)")
            kl = jnp.asarray(mismatch_kl, dtype)
            _check_input("mismatch_kl", kl)
            ok = ok & jnp.isfinite(kl)
            fast_kl = _ema(fast_kl, kl, fast_decay, k)
            slow_kl = _ema(slow_kl, kl, slow_decay, k)
            signal = signal | (_safe_ratio(fast_kl, slow_kl) > kl_threshold)
        signal = signal & (state.count >= warmup_steps)
        surge_count = jnp.where(signal, state.surge_count + 1, 0)
        surge = surge_count >= window
        surge_count = jnp.where(surge, 0, surge_count)
        if mode == "multiplicative":
            decay_start = state.decay_start
            scale = jnp.where(surge, jnp.maximum(state.scale * factor, min_scale), state.scale)
        else:
            decay_start = jnp.where(surge & (state.decay_start < 0), state.count, state.decay_start)
            progress = jnp.clip((state.count - decay_start + 1) / decay_steps, 0.0, 1.0)
            cosine = min_scale + (1.0 - min_scale) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
            scale = jnp.where(decay_start >= 0, cosine, 1.0).astype(dtype)
        new_state = LengthAwareScaleState(
            count=state.count + 1,
            fast_length=fast,
            slow_length=slow,
            fast_kl=fast_kl,
            slow_kl=slow_kl,
            surge_count=surge_count.astype(jnp.int32),
            decay_start=decay_start.astype(jnp.int32),
            ratio=ratio,
            surge=surge,
            scale=scale,
            skipped=state.skipped,
        )
        new_state = jax.tree.map(lambda new, old: jnp.where(ok, new, old), new_state, state)
        new_state = new_state._replace(surge=new_state.surge & ok,
                                       skipped=state.skipped + (~ok).astype(jnp.int32))
        scale = new_state.scale
        updates = jax.tree.map(lambda g: (scale * g).astype(g.dtype), updates)
        return updates, new_state

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
