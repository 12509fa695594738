"""Boundary checks shared by every public function.

Errors name the argument and what was expected, e.g.
``ValueError: x: expected shape (d,) = (10,), got (3, 10)``. Shape and dtype checks read static
shapes and dtypes only, so they run once at trace time and cost nothing under jit.

Value checks (:func:`check_finite`, :func:`check_index`) look at the values only when they are
concrete (a host call outside ``jit``); on traced values they do nothing unless ``checked`` is
set, in which case they add a :func:`jax.experimental.checkify.check`, and the jitted function
must then be wrapped by :func:`checked` (``err, out = checked(f)(...); err.throw()``).
Scalar options (:func:`check_positive`, :func:`check_range`) must be finite numbers.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

Dim = int | None
INT32_MAX = 2**31 - 1


def check_shape(name: str, x, shape: Sequence[Dim], what: str | None = None) -> None:
    """Raise ``ValueError`` unless ``x`` has ``shape`` (``None`` matches any size).

    ``what`` is an optional symbolic description (e.g. ``"(B, d)"``) shown in the message.
    """
    got = tuple(np.shape(x))
    ok = len(got) == len(shape) and all(
        s is None or s == g for s, g in zip(shape, got, strict=True))
    if not ok:
        want = tuple("*" if s is None else s for s in shape)
        sym = f"{what} = " if what else ""
        raise ValueError(f"{name}: expected shape {sym}{want}, got {got}")


def check_rank(name: str, x, rank: int | Sequence[int]) -> None:
    """Raise ``ValueError`` unless ``x`` has one of the given ranks."""
    ranks = (rank,) if isinstance(rank, int) else tuple(rank)
    if np.ndim(x) not in ranks:
        raise ValueError(f"{name}: expected rank {' or '.join(map(str, ranks))}, "
                         f"got rank {np.ndim(x)} with shape {tuple(np.shape(x))}")


def check_floating(name: str, x) -> None:
    """Raise ``TypeError`` unless ``x`` has a floating dtype."""
    dtype = jnp.result_type(x)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{name}: expected a floating dtype, got {dtype}")


def check_integer(name: str, x) -> None:
    """Raise ``TypeError`` unless ``x`` has an integer dtype."""
    dtype = jnp.result_type(x)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"{name}: expected an integer dtype, got {dtype}")


def _number(name: str, value) -> float:
    """``value`` as a float; ``TypeError`` naming ``name`` for strings, bools (``True`` is
    not the number 1.0 here) and non-numbers."""
    if isinstance(value, str | bytes | bool | np.bool_) or np.ndim(value) != 0:
        raise TypeError(f"{name}: expected a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a number, got {value!r}") from None


def check_positive(name: str, value, *, allow_zero: bool = False) -> None:
    """Raise ``ValueError`` unless the scalar ``value`` is finite and > 0 (or >= 0)."""
    number = _number(name, value)
    if not math.isfinite(number) or (number < 0 if allow_zero else number <= 0):
        raise ValueError(f"{name}: expected a finite number {'>= 0' if allow_zero else '> 0'}, "
                         f"got {value}")


def check_range(name: str, value, low: float | None = None, high: float | None = None, *,
                open_low: bool = False, open_high: bool = False) -> None:
    """Raise ``ValueError`` unless the scalar ``value`` is finite and in the interval from
    ``low`` to ``high`` (closed unless ``open_low`` / ``open_high``; ``None``: unbounded)."""
    number = _number(name, value)
    below = low is not None and (number <= low if open_low else number < low)
    above = high is not None and (number >= high if open_high else number > high)
    if not math.isfinite(number) or below or above:
        interval = (f"{'(' if open_low or low is None else '['}"
                    f"{'-inf' if low is None else low}, {'inf' if high is None else high}"
                    f"{')' if open_high or high is None else ']'}")
        raise ValueError(f"{name}: expected a finite number in {interval}, got {value}")


def check_int(name: str, value, low: int = 1, high: int = INT32_MAX) -> None:
    """Raise ``ValueError`` unless ``value`` is an int in [low, high] (default: a positive
    int32, the range of the compiled step counters)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name}: expected an integer in [{low}, {high}], got {value!r}")
    if not low <= value <= high:
        why = " (int32 range)" if high == INT32_MAX and value > high else ""
        raise ValueError(f"{name}: expected an integer in [{low}, {high}]{why}, got {value}")


def is_concrete(x) -> bool:
    """True unless ``x`` is traced (inside ``jit``, ``vmap`` or ``scan``): its values are known."""
    return not isinstance(x, jax.core.Tracer)


def check_finite(name: str, x, *, checked: bool = False) -> None:
    """Raise ``ValueError`` naming ``name`` if the concrete array ``x`` holds NaN or inf.

    On a traced ``x`` (inside ``jit``/``scan``) nothing is checked unless ``checked``: then a
    ``checkify.check`` is added and the caller's function must be run under :func:`checked`.
    """
    message = f"{name}: expected finite values, got NaN or inf"
    if is_concrete(x):
        values = np.asarray(x)
        if (np.issubdtype(values.dtype, np.floating)
                and not np.all(np.isfinite(values))):
            raise ValueError(f"{message} at index {np.argwhere(~np.isfinite(values))[0].tolist()}"
                             if values.ndim else message)
    elif checked:
        checkify.check(jnp.all(jnp.isfinite(x)), message)


def check_index(name: str, x, num: int | None, *, checked: bool = False) -> None:
    """Raise ``ValueError`` unless every entry of the concrete integer ``x`` is in [0, num)
    (``num=None``: >= 0); on a traced ``x``, a ``checkify.check`` when ``checked`` (see
    :func:`check_finite`)."""
    high = INT32_MAX if num is None else num
    message = (f"{name}: expected integers >= 0" if num is None
               else f"{name}: expected integers in [0, {num - 1}]")
    if is_concrete(x):
        values = np.asarray(x)
        if values.size and (values.min() < 0 or values.max() >= high):
            bad = values[(values < 0) | (values >= high)].flat[0]
            raise ValueError(f"{message}, got {bad}")
    elif checked:
        checkify.check(jnp.all((x >= 0) & (x < high)), f"{message}")


def check_values_in(name: str, x, low: float | None = None, high: float | None = None, *,
                    checked: bool = False) -> None:
    """Raise ``ValueError`` unless every entry of the concrete ``x`` is in ``[low, high]``
    (``None``: unbounded on that side), naming the first one outside; on a traced ``x``, a
    ``checkify.check`` when ``checked`` (see :func:`check_finite`)."""
    bounds = (f"in [{low:g}, {high:g}]" if low is not None and high is not None
              else f">= {low:g}" if low is not None else f"<= {high:g}")
    message = f"{name}: expected values {bounds}"
    if is_concrete(x):
        values = np.asarray(x)
        outside = np.zeros(values.shape, bool)
        if low is not None:
            outside |= values < low
        if high is not None:
            outside |= values > high
        if outside.any():
            raise ValueError(f"{message}, got {values[outside].flat[0]:g}")
    elif checked:
        inside = jnp.ones(jnp.shape(x), bool)
        if low is not None:
            inside &= x >= low
        if high is not None:
            inside &= x <= high
        checkify.check(jnp.all(inside), message)


def checked(fn: Callable) -> Callable:
    """``fn`` with its value checks made functional: ``err, out = checked(fn)(*args)``;
    ``err.throw()`` raises the first failed check (one line naming the argument)."""
    return checkify.checkify(fn, errors=checkify.user_checks)


def host_memory_bytes() -> int:
    """Physical memory of this machine in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_memory_bytes() -> int:
    """Memory of this process's first device (its allocator limit), or host memory on CPU.

    A local device: after ``jax.distributed.initialize()``, ``jax.devices()[0]`` belongs to
    process 0 and other processes cannot read its memory statistics.
    """
    stats = jax.local_devices()[0].memory_stats() or {}
    return int(stats.get("bytes_limit", host_memory_bytes()))


def plural(n: int, word: str, *, many: str | None = None, fmt: str = "") -> str:
    """``n`` and the noun it counts: ``plural(1, "seed")`` is ``1 seed``, ``plural(2, "seed")``
    ``2 seeds``; ``many`` gives an irregular plural, ``fmt`` formats ``n`` (``","``: 1,000)."""
    return f"{n:{fmt}} {word if n == 1 else many or word + 's'}"


def format_bytes(n: float) -> str:
    """``11.8 GB``-style size (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB", "EB"):
        if n < 1000 or unit == "EB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    raise AssertionError


class MemoryEstimate(NamedTuple):
    """One :func:`check_memory` estimate: what needs ``nbytes`` of ``available`` bytes."""

    name: str
    nbytes: float
    available: float
    what: str


_ESTIMATES: contextvars.ContextVar[list[MemoryEstimate] | None] = contextvars.ContextVar(
    "hyperx_memory_estimates", default=None)


@contextlib.contextmanager
def memory_estimates() -> Iterator[list[MemoryEstimate]]:
    """Collect every :func:`check_memory` estimate made inside the block (what a command's
    ``--dry-run`` reports: the same estimates that would refuse a run that cannot fit)."""
    estimates: list[MemoryEstimate] = []
    token = _ESTIMATES.set(estimates)
    try:
        yield estimates
    finally:
        _ESTIMATES.reset(token)


def check_memory(name: str, nbytes: float, available: float, what: str = "memory") -> None:
    """Raise ``ValueError`` (one line, with the estimate) if ``nbytes`` exceed ``available``;
    inside :func:`memory_estimates` the estimate is also recorded."""
    recorded = _ESTIMATES.get()
    if recorded is not None:
        recorded.append(MemoryEstimate(name, float(nbytes), float(available), what))
    if nbytes > available:
        raise ValueError(f"{name}: needs an estimated {format_bytes(nbytes)} of {what}, more "
                         f"than the {format_bytes(available)} available")


def tree_bytes(tree) -> int:
    """Bytes of every array leaf of ``tree`` (arrays or ``jax.ShapeDtypeStruct`` from
    ``jax.eval_shape``, so a size is known before anything is allocated)."""
    return sum(math.prod(leaf.shape) * leaf.dtype.itemsize for leaf in jax.tree.leaves(tree))


def check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {sorted(choices)}, got {value!r}")


def check_flag(name: str, value) -> None:
    """Raise ``TypeError`` unless ``value`` is a Python ``bool`` (not 0/1, not a string)."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name}: expected True or False, got {value!r}")


def float_dtype(*xs) -> np.dtype:
    """The floating dtype to compute in: the promoted dtype of the floating arrays among ``xs``
    (``None`` and non-floating arrays are skipped), at least float32. So float64 inputs are
    computed in float64, bf16/fp16 inputs in float32, and integer/bool inputs give float32."""
    dtypes = [jnp.result_type(x) for x in xs
              if x is not None and jnp.issubdtype(jnp.result_type(x), jnp.floating)]
    if not dtypes:
        return np.dtype(np.float32)
    dtype = np.dtype(jnp.result_type(*dtypes))
    return np.dtype(np.float32) if jnp.finfo(dtype).bits < 32 else dtype


def check_finite_where(name: str, x, where, *, checked: bool = False) -> None:
    """:func:`check_finite` on the entries of ``x`` where ``where`` is true (e.g. the valid
    tokens of a response: padding may hold ``-inf`` log-probs). ``where=None`` checks all."""
    if where is None:
        check_finite(name, x, checked=checked)
    elif checked or (is_concrete(x) and is_concrete(where)):
        check_finite(name, jnp.where(where, x, 0), checked=checked)


LOG_PROB_TOLERANCE = 1e-4
"""How far above 0 a log-probability may round (a float32 log-softmax can give +1e-7)."""


def check_log_prob_where(name: str, x, where=None, *, checked: bool = False) -> None:
    """Raise ``ValueError`` if a concrete log-probability of ``x`` where ``where`` is true is
    above 0 (a probability above 1: logits, or a sign error, passed as log-probs); traced: a
    ``checkify.check`` when ``checked`` (see :func:`check_finite`)."""
    message = f"{name}: expected log-probabilities <= 0 (probabilities <= 1)"
    if is_concrete(x) and (where is None or is_concrete(where)):
        values = np.asarray(x)
        if where is not None:
            values = np.where(np.asarray(where), values, 0.0)
        if values.size and np.nanmax(values) > LOG_PROB_TOLERANCE:
            bad = np.argwhere(values > LOG_PROB_TOLERANCE)[0]
            raise ValueError(f"{message}, got {values[tuple(bad)]:.6g} at index {bad.tolist()}")
    elif checked:
        inside = x if where is None else jnp.where(where, x, 0.0)
        checkify.check(jnp.all(~(inside > LOG_PROB_TOLERANCE)), message)


def check_mask_values(name: str, mask, *, checked: bool = False) -> None:
    """Raise ``ValueError`` unless the concrete ``mask`` is finite and >= 0 (a 0/1 mask or
    non-negative token weights); traced: a ``checkify.check`` when ``checked``."""
    check_finite(name, mask, checked=checked)
    message = f"{name}: expected values >= 0 (0/1 or non-negative token weights)"
    if is_concrete(mask):
        values = np.asarray(mask)
        if values.size and values.min() < 0:
            raise ValueError(f"{message}, got {values.min()}")
    elif checked:
        checkify.check(jnp.all(mask >= 0), message)


def check_key(name: str, key) -> None:
    """Raise ``TypeError`` unless ``key`` is one PRNG key: a typed key of shape ``()`` from
    ``jax.random.key`` or a legacy ``(2,)`` uint32 key from ``jax.random.PRNGKey`` (static
    dtype and shape only, so it costs nothing under ``jit``)."""
    dtype = getattr(key, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        if np.shape(key) == ():
            return
    elif dtype == jnp.uint32 and np.shape(key) == (2,):
        return
    got = (f"{type(key).__name__} {key!r}" if dtype is None
           else f"an array of dtype {dtype} and shape {tuple(np.shape(key))}")
    raise TypeError(f"{name}: expected one PRNG key (jax.random.key(seed) or "
                    f"jax.random.PRNGKey(seed)), got {got}")
