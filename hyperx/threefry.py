"""``jax.random.bits`` and ``jax.random.normal``, bit for bit, with Threefry written as ``jnp`` ops.

JAX's default generator hashes a counter with Threefry-2x32 (Salmon et al., *Parallel random
numbers: as easy as 1, 2, 3*, SC 2011; 20 rounds, rotations 13 15 26 6 / 17 29 16 24, a key
injection every 4 rounds). On XLA:CPU JAX lowers the hash as a 5-iteration ``while`` loop
whose body copies its two state arrays, so drawing the loss indices of a hyper agent (128 x 20
x 4 normals per update and seed) spent most of its time in loop copies. The same 20 rounds
written out here fuse into one elementwise loop, and ``erfinv`` is left as the main cost
(``loss_index_generators_s`` in benchmarks/results/deepsea_throughput.json times this against
``jax.random.normal`` with each of jax.random's generators, for 64 vmapped seeds). The
``rbg`` / ``unsafe_rbg`` generators are no way out: under ``vmap`` JAX's batching rule of
XLA's RngBitGenerator draws every seed's bits from the first seed's key, so a seed's numbers
would depend on its batch.

With ``jax_threefry_partitionable`` on (the default since JAX 0.5), ``jax.random.bits(key,
shape)`` is ``y0 ^ y1`` of the hash of the 64-bit counter ``i`` (high word 0, low word ``i``
for an array of fewer than 2^32 elements) at each flat position ``i``; :func:`random_bits`
computes exactly that, and :func:`normal` applies ``jax.random.normal``'s own map (a uniform on
``[nextafter(-1, 0), 1)`` from the top 23 bits, then ``sqrt(2) erfinv(u)``), so the numbers are
identical and every seed's stream is unchanged (tests/test_threefry.py checks bit equality,
also under ``vmap``). Anything else (a typed key of another implementation, a raw key of
another shape, the partitionable flag off, 2^32 elements or more) falls back to
``jax.random``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Array = jax.Array

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotate_left(x: Array, r: int) -> Array:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(k0: Array, k1: Array, x0: Array, x1: Array) -> tuple[Array, Array]:
    """The Threefry-2x32 hash (20 rounds) of the counter words ``(x0, x1)`` under the key
    ``(k0, k1)``, elementwise over broadcast uint32 arrays: ``jax.extend.random.threefry_2x32``'s
    rounds, unrolled."""
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = x0 ^ _rotate_left(x1, r)
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _threefry_key_data(key: Array) -> Array | None:
    """The (2,) uint32 words of a Threefry key, or ``None`` when ``jax.random`` must draw."""
    if not jax.config.jax_threefry_partitionable:
        return None
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(key)) != "threefry2x32":
            return None
        return jax.random.key_data(key)
    if key.shape != (2,) or key.dtype != jnp.uint32:
        return None
    if jax.config.jax_default_prng_impl != "threefry2x32":
        return None
    return key


def random_bits(key: Array, shape: tuple[int, ...]) -> Array:
    """uint32 bits of ``shape``, equal to ``jax.random.bits(key, shape)``."""
    shape = tuple(shape)
    data = _threefry_key_data(key)
    size = math.prod(shape)
    if data is None or size >= 2**32:
        return jax.random.bits(key, shape, jnp.uint32)
    low = lax.iota(jnp.uint32, size).reshape(shape)
    y0, y1 = threefry2x32(data[0], data[1], jnp.zeros_like(low), low)
    return y0 ^ y1


def normal(key: Array, shape: tuple[int, ...]) -> Array:
    """float32 N(0, 1) draws of ``shape``, equal to ``jax.random.normal(key, shape)``.

    ``u = max(lo, (1 - lo) f + lo)`` with ``f = bitcast(bits >> 9 | bits(1.0)) - 1`` uniform on
    [0, 1) and ``lo = nextafter(-1, 0)``; the draw is ``sqrt(2) erfinv(u)``, the inverse CDF of
    N(0, 1) at ``(u + 1) / 2`` (jax.random.normal's construction).
    """
    shape = tuple(shape)
    if _threefry_key_data(key) is None or math.prod(shape) >= 2**32:
        return jax.random.normal(key, shape, jnp.float32)
    bits = random_bits(key, shape)
    one = np.array(1.0, np.float32).view(np.uint32)
    unit = lax.bitcast_convert_type(lax.shift_right_logical(bits, np.uint32(9)) | one,
                                    jnp.float32) - np.float32(1.0)
    lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
    u = lax.max(lo, unit * (np.float32(1.0) - lo) + lo)
    return lax.mul(np.float32(np.sqrt(2)), lax.erf_inv(u))
