"""The compiled loop (``hyperx.loop``) and the deprecated ``hyperx.experiment`` alias."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.loop import log_grid, run_scan


def test_log_grid_by_hand():
    np.testing.assert_array_equal(log_grid(1000, 4), [1, 10, 100, 1000])
    np.testing.assert_array_equal(log_grid(1), [1])
    grid = log_grid(777, 30)
    assert grid[0] == 1 and grid[-1] == 777 and np.all(np.diff(grid) > 0)


def test_run_scan_chunks_and_padding_match_one_scan():
    def step(c, t):
        return c + t, 2 * t

    calls = []
    whole = run_scan(step, jnp.int32(0), 10)
    chunked = run_scan(step, jnp.int32(0), 10, chunk_size=4,
                       progress=lambda done, total: calls.append((done, total)))
    assert int(whole.carry) == int(chunked.carry) == 45
    np.testing.assert_array_equal(whole.outputs, np.arange(10) * 2)
    np.testing.assert_array_equal(chunked.outputs, np.arange(10) * 2)
    assert calls == [(4, 10), (8, 10), (10, 10)]


def test_the_old_module_forwards_each_moved_name_with_a_warning():
    import hyperx.bandits.runner as runner
    import hyperx.experiment as experiment
    import hyperx.loop as loop

    for name, home in (("run_bandit", runner), ("BanditResult", runner), ("run_scan", loop),
                       ("log_grid", loop), ("to_host", loop)):
        with pytest.warns(DeprecationWarning, match=f"moved to {home.__name__}.{name}"):
            assert getattr(experiment, name) is getattr(home, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'nothing'"):
            experiment.nothing  # noqa: B018
