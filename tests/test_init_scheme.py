"""The HyperAgent reference code's initialisation (``init_scheme="reference"``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.agents import get_config
from hyperx.heads import HypermodelHead, MLPTorso, OneHotMLPTorso


def _init(scheme: str, prior_std: float = 1.0):
    head = HypermodelHead(2, 4, OneHotMLPTorso(900, (64, 64), init_scheme=scheme),
                          "independent", prior_std=prior_std, prior_scale=10.0,
                          init_scheme=scheme)
    xi = jnp.ones((1, 4)) / 2.0
    return head, head.init(jax.random.PRNGKey(0), jnp.zeros((1,), jnp.int32), xi)


def test_reference_scheme_matches_the_torch_initialisers():
    _, v = _init("reference", prior_std=1.0)
    a = v["params"]["hyper"]["A"]                          # (O, P, M) = (2, 64, 4)
    assert float(a.std()) == pytest.approx(np.sqrt(2 / (4 + 128)), rel=0.1)   # xavier_normal
    for b in (v["params"]["hyper"]["b"], v["prior"]["hyper"]["b0"]):          # sphere
        assert b.shape == (2, 64) and float(jnp.linalg.norm(b)) == pytest.approx(1.0, rel=1e-5)
    assert not np.allclose(v["params"]["hyper"]["b"], v["prior"]["hyper"]["b0"])
    a0 = v["prior"]["hyper"]["A0"]                         # sDB: unit rows times prior_std
    np.testing.assert_allclose(jnp.linalg.norm(a0, axis=-1), 1.0, rtol=1e-5)
    torso = v["params"]["torso"]
    assert float(torso["embedding"].std()) == pytest.approx(np.sqrt(2 / (900 + 64)), rel=0.05)
    assert float(torso["Dense_0"]["kernel"].std()) == pytest.approx(np.sqrt(2 / 128), rel=0.1)
    assert not np.any(torso["bias"]) and not np.any(torso["Dense_0"]["bias"])
    # The prior torso is its own draw (the reference's FeatureNet.priormodel).
    assert not np.allclose(v["prior"]["prior_torso"]["embedding"], torso["embedding"])


def test_reference_scheme_sphere_radius_is_prior_std():
    _, v = _init("reference", prior_std=0.3)
    assert float(jnp.linalg.norm(v["prior"]["hyper"]["b0"])) == pytest.approx(0.3, rel=1e-5)


def test_reference_forward_adds_the_frozen_prior_bias():
    head, v = _init("reference")
    x = jnp.array([5, 77], jnp.int32)
    xi = jax.random.normal(jax.random.PRNGKey(1), (3, 4))
    torso = OneHotMLPTorso(900, (64, 64), init_scheme="reference")
    f = torso.apply({"params": v["params"]["torso"]}, x)
    f0 = torso.apply({"params": v["prior"]["prior_torso"]}, x)
    h, p = v["params"]["hyper"], v["prior"]["hyper"]
    post = jnp.einsum("bp,opm,km->bko", f, h["A"], xi) + (f @ h["b"].T)[:, None]
    prior = jnp.einsum("bp,opm,km->bko", f0, p["A0"], xi) + (f0 @ p["b0"].T)[:, None]
    np.testing.assert_allclose(head.apply(v, x, xi), post + 10.0 * prior, rtol=1e-5, atol=1e-5)


def test_default_scheme_is_unchanged():
    _, v = _init("default")
    assert "b0" not in v["prior"]["hyper"] and not np.any(v["params"]["hyper"]["b"])
    assert float(v["params"]["hyper"]["A"].std()) == pytest.approx(0.5, rel=0.15)
    m = MLPTorso((8,))
    k = m.init(jax.random.PRNGKey(0), jnp.ones((1, 3)))["params"]["Dense_0"]["kernel"]
    k2 = MLPTorso((8,), init_scheme="default").init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
    np.testing.assert_array_equal(k, k2["params"]["Dense_0"]["kernel"])


def test_the_deepsea_hyperagent_config_is_the_reference_one():
    c = get_config("hyperagent")
    assert (c.init_scheme, c.prior_torso, c.adam_eps, c.max_grad_norm) == (
        "reference", "independent", 1.5e-4, 10.0)
    assert get_config("hyperfqi").init_scheme == "default"
    assert get_config("hyperfqi", env="atari").init_scheme == "default"
    with pytest.raises(ValueError, match="init_scheme"):
        get_config("hyperagent", init_scheme="xavier")
