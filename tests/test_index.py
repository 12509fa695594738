import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperx.index import INDEX_NAMES, MAX_CUBE_ENUM_DIM, make_index

EXPECTED_SCALE = {"gaussian": 1.0, "sphere": 1 / 8, "scaled_sphere": 1.0, "coordinate": 1.0,
                  "one_hot": 1 / 8, "cube": 1.0}


@pytest.mark.parametrize("name", INDEX_NAMES)
def test_second_moment_matches_scale(name):
    m, n = 8, 200_000
    dist = make_index(name, m)
    assert dist.scale == pytest.approx(EXPECTED_SCALE[name])
    xi = np.asarray(dist.sample(jax.random.key(0), (n,)), np.float64)
    assert xi.shape == (n, m)
    second = xi.T @ xi / n / dist.scale
    # Each entry of xi xi^T / c has variance <= max(3, M) for every family (3: Gaussian fourth
    # moment; M: coordinate / one_hot, where (xi_i^2 / c) = M with probability 1/M). Its mean
    # over n draws has std <= sqrt(max(3, M) / n) = 0.0063; 6 std over the 64 entries fails
    # with probability < 1e-7 for a correct sampler (seed fixed, so deterministic here).
    tol = 6 * np.sqrt(max(3, m) / n)
    np.testing.assert_allclose(second, np.eye(m), atol=tol)


def test_sample_forms():
    key, m = jax.random.key(1), 6
    sphere = make_index("sphere", m).sample(key, (100,))
    np.testing.assert_allclose(jnp.linalg.norm(sphere, axis=-1), 1.0, rtol=1e-5)
    scaled = make_index("scaled_sphere", m).sample(key, (100,))
    np.testing.assert_allclose(jnp.linalg.norm(scaled, axis=-1), np.sqrt(m), rtol=1e-5)
    cube = make_index("cube", m).sample(key, (100,))
    assert set(np.unique(cube)) == {-1.0, 1.0}
    coord = np.asarray(make_index("coordinate", m).sample(key, (100,)))
    assert ((coord != 0).sum(-1) == 1).all()
    np.testing.assert_allclose(np.abs(coord).sum(-1), np.sqrt(m), rtol=1e-6)
    assert (coord > 0).any() and (coord < 0).any()
    hot = np.asarray(make_index("one_hot", m).sample(key, (100,)))
    assert ((hot == 1).sum(-1) == 1).all() and ((hot == 0).sum(-1) == m - 1).all()
    assert len(np.unique(hot.argmax(-1))) == m


@pytest.mark.parametrize(("name", "m", "count"),
                         [("coordinate", 5, 10), ("one_hot", 5, 5), ("cube", 5, 32),
                          ("coordinate", 1, 2), ("cube", 1, 2)])
def test_support_enumeration(name, m, count):
    dist = make_index(name, m)
    assert dist.enumerable
    pts = np.asarray(dist.support())
    assert pts.shape == (count, m) and pts.dtype == np.float32
    assert len({tuple(p) for p in pts}) == count
    if name == "coordinate":
        assert ((pts != 0).sum(-1) == 1).all()
        np.testing.assert_allclose(np.abs(pts).sum(-1), np.sqrt(m), rtol=1e-7)
    elif name == "one_hot":
        np.testing.assert_array_equal(pts, np.eye(m))
    else:
        assert set(np.unique(pts)) == {-1.0, 1.0}
    mean_outer = np.einsum("ni,nj->ij", pts.astype(np.float64), pts) / count
    # exact up to the float32 rounding of sqrt(M) (relative 1e-7) for `coordinate`
    np.testing.assert_allclose(mean_outer, dist.scale * np.eye(m), rtol=1e-6, atol=1e-12)
    draws = {tuple(p) for p in np.asarray(dist.sample(jax.random.key(2), (50,)))}
    assert draws <= {tuple(p) for p in pts}


def test_not_enumerable():
    for name in ("gaussian", "sphere", "scaled_sphere"):
        with pytest.raises(ValueError, match="support"):
            make_index(name, 3).support()
    big = make_index("cube", MAX_CUBE_ENUM_DIM + 1)
    assert not big.enumerable
    with pytest.raises(ValueError, match="not enumerable"):
        big.support()
    assert make_index("cube", MAX_CUBE_ENUM_DIM).support().shape == (2**MAX_CUBE_ENUM_DIM, 12)


@pytest.mark.parametrize("name", INDEX_NAMES)
def test_jit_and_vmap(name):
    dist = make_index(name, 4)
    keys = jax.random.split(jax.random.key(3), 7)
    batched = jax.jit(jax.vmap(lambda k: dist.sample(k, (2,))))(keys)
    assert batched.shape == (7, 2, 4) and batched.dtype == jnp.float32
    np.testing.assert_allclose(batched[3], dist.sample(keys[3], (2,)), rtol=1e-6)
    assert len({np.asarray(b).tobytes() for b in batched}) > 1
    assert jax.jit(dist.sample)(keys[0]).shape == (4,)


@settings(max_examples=15, deadline=None)
@given(name=st.sampled_from(INDEX_NAMES), dim=st.integers(1, 9),
       shape=st.lists(st.integers(0, 3), max_size=2))
def test_sample_shape_property(name, dim, shape):
    dist = make_index(name, dim)
    xi = dist.sample(jax.random.key(dim), tuple(shape))
    assert xi.shape == (*shape, dim) and xi.dtype == jnp.float32
    assert np.isfinite(np.asarray(xi)).all()


def test_bad_input():
    with pytest.raises(ValueError, match="name"):
        make_index("gauss", 3)
    for dim in (0, -2, 2.5, True, "3"):
        with pytest.raises(ValueError, match="dim"):
            make_index("gaussian", dim)
    assert make_index("cube", np.int64(3)).dim == 3
