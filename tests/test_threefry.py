import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32
from scipy import stats

from hyperx import threefry
from hyperx.index import make_index

SHAPES = [(), (1,), (7,), (3, 5), (128, 20, 4), (2, 1, 3, 2)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("make_key", [jax.random.PRNGKey, jax.random.key], ids=["raw", "typed"])
def test_bits_and_normals_equal_jax_random_bit_for_bit(shape, make_key):
    key = make_key(11)
    np.testing.assert_array_equal(threefry.random_bits(key, shape), jax.random.bits(key, shape))
    np.testing.assert_array_equal(threefry.normal(key, shape), jax.random.normal(key, shape))
    np.testing.assert_array_equal(jax.jit(threefry.normal, static_argnums=1)(key, shape),
                                  jax.random.normal(key, shape))


def test_equal_under_vmap_so_each_seed_keeps_its_stream():
    keys = jax.random.split(jax.random.PRNGKey(3), 64)
    ours = jax.jit(jax.vmap(lambda k: threefry.normal(k, (128, 20, 4))))(keys)
    plain = jax.vmap(lambda k: jax.random.normal(k, (128, 20, 4)))(keys)
    np.testing.assert_array_equal(ours, plain)
    np.testing.assert_array_equal(ours[5], threefry.normal(keys[5], (128, 20, 4)))


def test_the_hash_equals_jax_extend_threefry_2x32():
    key = jax.random.PRNGKey(7)
    count = jnp.arange(1000, dtype=jnp.uint32)
    y0, y1 = threefry.threefry2x32(key[0], key[1], count[:500], count[500:])
    np.testing.assert_array_equal(jnp.concatenate([y0, y1]),
                                  threefry_2x32(key, count))


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_other_generators_fall_back_to_jax_random(impl):
    key = jax.random.key(2, impl=impl)
    np.testing.assert_array_equal(threefry.normal(key, (6, 4)), jax.random.normal(key, (6, 4)))
    np.testing.assert_array_equal(threefry.random_bits(key, (6,)), jax.random.bits(key, (6,)))


def test_the_non_partitionable_stream_falls_back_to_jax_random():
    key = jax.random.PRNGKey(4)
    jax.config.update("jax_threefry_partitionable", False)
    try:
        np.testing.assert_array_equal(threefry.normal(key, (9, 4)),
                                      jax.random.normal(key, (9, 4)))
    finally:
        jax.config.update("jax_threefry_partitionable", True)


def test_normal_is_standard_normal():
    """n = 200,000 draws. The mean and variance have standard errors 0.0022 and 0.0032, so
    5 standard errors (0.011, 0.016) fail with probability below 1e-6 for a true N(0, 1); the
    Kolmogorov-Smirnov p-value is uniform under N(0, 1), 1e-4 rejects it 1 time in 10,000."""
    x = np.asarray(threefry.normal(jax.random.PRNGKey(0), (200_000,)), np.float64)
    assert abs(x.mean()) < 0.011 and abs(x.var() - 1.0) < 0.016
    assert stats.kstest(x, "norm").pvalue > 1e-4


def test_sphere_index_keeps_its_stream():
    """The sphere and Gaussian indices draw their normals here; the numbers are those of
    ``jax.random.normal``, normalised as before."""
    key = jax.random.PRNGKey(5)
    g = jax.random.normal(key, (128, 20, 4))
    np.testing.assert_array_equal(make_index("gaussian", 4).sample(key, (128, 20)), g)
    np.testing.assert_array_equal(make_index("sphere", 4).sample(key, (128, 20)),
                                  g / jnp.maximum(jnp.linalg.norm(g, axis=-1, keepdims=True),
                                                  1e-30))
