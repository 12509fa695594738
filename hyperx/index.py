"""Index distributions P_xi for index-sampled hypermodels and Ensemble++.

An index xi in R^M selects one member of a continuous "ensemble" (Dwaracherla et al.,
*Hypermodels for Exploration*, ICLR 2020; Li et al., *HyperAgent*, arXiv:2402.10228;
Li et al., *Scalable Exploration via Ensemble++*, arXiv:2407.13195). Every distribution here
is isotropic, E[xi xi^T] = c I_M, and exposes its scale c, so callers that need
E[zeta zeta^T] = I use zeta = xi / sqrt(c).

name            xi                                      scale c   enumerable
gaussian        N(0, I_M)                               1         no
sphere          uniform on S^{M-1}                      1/M       no
scaled_sphere   sqrt(M) * uniform on S^{M-1}            1         no
coordinate      +-sqrt(M) e_i, i and sign uniform       1         yes (2M points)
one_hot         e_i, i uniform (an M-member ensemble)   1/M       yes (M points)
cube            uniform on {-1, +1}^M                   1         yes (2^M) if M <= 12
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from hyperx import threefry
from hyperx._validation import check_choice, check_int, check_key, check_memory, device_memory_bytes

INDEX_NAMES: tuple[str, ...] = ("gaussian", "sphere", "scaled_sphere", "coordinate", "one_hot",
                                "cube")
MAX_CUBE_ENUM_DIM = 12
_TINY = 1e-30


def _shape(shape: int | tuple[int, ...]) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _unit_sphere(key: jax.Array, shape: tuple[int, ...], dim: int) -> jax.Array:
    g = threefry.normal(key, (*shape, dim))
    return g / jnp.maximum(jnp.linalg.norm(g, axis=-1, keepdims=True), _TINY)


def _signed_coordinate(key: jax.Array, shape: tuple[int, ...], dim: int) -> jax.Array:
    k_axis, k_sign = jax.random.split(key)
    axis = jax.random.randint(k_axis, shape, 0, dim)
    sign = jax.random.rademacher(k_sign, shape, jnp.float32)
    return (math.sqrt(dim) * sign)[..., None] * jax.nn.one_hot(axis, dim, dtype=jnp.float32)


class IndexDistribution(NamedTuple):
    """An isotropic index distribution on R^dim with E[xi xi^T] = scale * I.

    Build it with :func:`make_index`. ``name`` is static, so close over the distribution
    rather than passing it through ``jit`` as an argument.
    """

    name: str
    dim: int
    scale: float
    enumerable: bool

    def sample(self, key: jax.Array, shape: int | tuple[int, ...] = ()) -> jax.Array:
        """Draw indices of shape ``(*shape, dim)`` (float32). Cost O(prod(shape) * dim)."""
        check_key("key", key)
        shape, m = _shape(shape), self.dim
        if self.name == "gaussian":
            return threefry.normal(key, (*shape, m))
        if self.name == "sphere":
            return _unit_sphere(key, shape, m)
        if self.name == "scaled_sphere":
            return math.sqrt(m) * _unit_sphere(key, shape, m)
        if self.name == "coordinate":
            return _signed_coordinate(key, shape, m)
        if self.name == "one_hot":
            return jax.nn.one_hot(jax.random.randint(key, shape, 0, m), m, dtype=jnp.float32)
        return jax.random.rademacher(key, (*shape, m), jnp.float32)

    def support_size(self) -> int:
        """The number of support points: 2M (coordinate), M (one_hot) or 2^M (cube); raises
        ``ValueError`` if not enumerable."""
        if not self.enumerable:
            raise ValueError(f"support: index distribution {self.name!r} with dim={self.dim} is "
                             f"not enumerable (only coordinate, one_hot and cube with dim <= "
                             f"{MAX_CUBE_ENUM_DIM} are)")
        if self.name == "coordinate":
            return 2 * self.dim
        return self.dim if self.name == "one_hot" else 2**self.dim

    def support(self) -> jax.Array:
        """All support points, shape (n, dim): uniform over them is exactly this distribution.

        coordinate: the 2M points +sqrt(M) e_1..e_M then -sqrt(M) e_1..e_M; one_hot: the M
        unit vectors; cube: the 2^M sign vectors. Raises ``ValueError`` if not enumerable, or
        with the estimate if the (n, dim) float32 points cannot fit in device memory.
        """
        m, n = self.dim, self.support_size()
        check_memory(f"dim = {m}", 4 * n * m, device_memory_bytes(),
                     f"device memory for the {n:,} support points of the {self.name} index")
        if self.name == "coordinate":
            eye = math.sqrt(m) * jnp.eye(m, dtype=jnp.float32)
            return jnp.concatenate([eye, -eye])
        if self.name == "one_hot":
            return jnp.eye(m, dtype=jnp.float32)
        return jnp.array(list(itertools.product((1.0, -1.0), repeat=m)), jnp.float32)


def make_index(name: str, dim: int) -> IndexDistribution:
    """Build the index distribution ``name`` on R^dim (see the module table).

    Raises ``ValueError`` naming ``name`` for an unknown family and ``dim`` unless it is a
    positive int.
    """
    check_choice("name", name, INDEX_NAMES)
    check_int("dim", dim)
    dim = int(dim)
    enumerable = name in ("coordinate", "one_hot") or (name == "cube"
                                                       and dim <= MAX_CUBE_ENUM_DIM)
    scale = 1.0 / dim if name in ("sphere", "one_hot") else 1.0
    return IndexDistribution(name, dim, scale, enumerable)
