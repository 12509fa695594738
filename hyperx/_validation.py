"""Boundary checks shared by every public function.

Errors name the argument and what was expected, e.g.
``ValueError: x: expected shape (d,) = (10,), got (3, 10)``. Checks read static
shapes and dtypes only, so they run once at trace time and cost nothing under jit.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

Dim = int | None


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


def check_positive(name: str, value, *, allow_zero: bool = False) -> None:
    """Raise ``ValueError`` unless the Python scalar ``value`` is > 0 (or >= 0)."""
    bad = value < 0 if allow_zero else value <= 0
    if bad:
        raise ValueError(f"{name}: expected {'>= 0' if allow_zero else '> 0'}, got {value}")


def check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {sorted(choices)}, got {value!r}")
