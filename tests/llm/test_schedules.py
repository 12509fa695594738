import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hyperx.llm.schedules import length_aware_scale

SURGE_AT = 40


def _trace(n: int = 80) -> np.ndarray:
    """Mean response length ~100 (+-3 noise) that jumps to ~200 at step SURGE_AT."""
    noise = 3.0 * np.random.default_rng(0).standard_normal(n)
    return np.where(np.arange(n) < SURGE_AT, 100.0, 200.0) + noise


def _run(tx, lengths, kls=None):
    params = {"w": jnp.ones(3)}
    state = tx.init(params)
    step = jax.jit(lambda s, length, kl: tx.update(params, s, params, mean_length=length,
                                                   **({} if kl is None else {"mismatch_kl": kl})),
                   static_argnums=())
    scales, surges = [], []
    for k, length in enumerate(lengths):
        kl = None if kls is None else kls[k]
        updates, state = step(state, length, kl)
        np.testing.assert_allclose(updates["w"], state.scale * np.ones(3), rtol=1e-6)
        scales.append(float(state.scale))
        surges.append(bool(state.surge))
    return np.array(scales), np.array(surges)


@pytest.mark.parametrize("mode", ["multiplicative", "cosine"])
def test_decays_after_surge_and_not_before(mode):
    scales, surges = _run(length_aware_scale(mode=mode, decay_steps=20), _trace())
    assert np.all(scales[:SURGE_AT] == 1.0) and not surges[:SURGE_AT].any()
    first = int(np.argmax(surges))
    assert SURGE_AT <= first <= SURGE_AT + 5  # window = 3 consecutive steps above 1.15
    assert scales[first] < 1.0
    assert np.all(np.diff(scales) <= 0)  # never grows back
    assert scales[-1] >= 0.1 - 1e-6
    if mode == "cosine":
        np.testing.assert_allclose(scales[first + 25:], 0.1, rtol=1e-5)


def test_multiplicative_hand_trace():
    # fast EMA decay 0 follows the input; slow decay 0.5. Length 1, 1, then 4, 4:
    # slow = 1, 1, 2.5, 3.25 -> ratio 1, 1, 1.6, 1.23; window 2 at threshold 1.2 triggers at
    # step 3 (0-based), scale 0.5; the counter restarts so step 4 (ratio 4/3.625) does not.
    tx = length_aware_scale(fast_decay=0.0, slow_decay=0.5, threshold=1.2, window=2,
                            warmup_steps=0, factor=0.5)
    scales, surges = _run(tx, [1.0, 1.0, 4.0, 4.0, 4.0])
    np.testing.assert_allclose(scales, [1, 1, 1, 0.5, 0.5])
    np.testing.assert_array_equal(surges, [False, False, False, True, False])


def test_no_decay_during_warmup_or_on_noise():
    lengths = np.concatenate([[10.0, 100.0, 100.0, 100.0], _trace()[:SURGE_AT]])
    scales, _ = _run(length_aware_scale(warmup_steps=10), lengths)
    assert np.all(scales == 1.0)


def test_kl_surge_triggers_with_constant_length():
    kls = np.where(np.arange(60) < 30, 1e-3, 5e-3)
    scales, _ = _run(length_aware_scale(kl_threshold=1.5), np.full(60, 100.0), kls)
    assert np.all(scales[:30] == 1.0) and scales[-1] < 1.0
    length_only, _ = _run(length_aware_scale(), np.full(60, 100.0))
    assert np.all(length_only == 1.0)


def test_composes_with_optax_chain():
    # fast EMA = input (300), slow = running mean (166.7): ratio 1.8 triggers one halving.
    tx = optax.chain(optax.adam(0.1), length_aware_scale(fast_decay=0.0, warmup_steps=0, window=1))
    adam = optax.adam(0.1)
    params = {"w": jnp.array([1.0, -2.0])}
    grads = {"w": jnp.array([0.5, 0.25])}
    state, adam_state = tx.init(params), adam.init(params)
    for length in [100.0, 100.0, 300.0]:
        updates, state = tx.update(grads, state, params, mean_length=length)
        ref, adam_state = adam.update(grads, adam_state, params)
    scale = state[1].scale
    assert scale == 0.5
    np.testing.assert_allclose(updates["w"], scale * ref["w"], rtol=1e-6)


def test_zero_lengths_are_safe():
    scales, _ = _run(length_aware_scale(warmup_steps=0), np.zeros(5))
    assert np.all(scales == 1.0)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="mode"):
        length_aware_scale(mode="linear")
    with pytest.raises(ValueError, match="fast_decay"):
        length_aware_scale(fast_decay=0.99, slow_decay=0.9)
    with pytest.raises(ValueError, match="window"):
        length_aware_scale(window=0)
    with pytest.raises(ValueError, match="factor"):
        length_aware_scale(factor=1.5)
    tx = length_aware_scale()
    state = tx.init({})
    with pytest.raises(ValueError, match="mean_length"):
        tx.update({}, state, mean_length=jnp.ones(2))
    with pytest.raises(ValueError, match="mismatch_kl"):
        length_aware_scale(kl_threshold=2.0).update({}, state, mean_length=1.0)


# --- regressions: a non-finite statistic, every numeric option checked, the state's dtype ---


def test_one_nan_length_inside_jit_is_skipped_not_latched():
    # Regression: one NaN mean_length turned both EMAs NaN for good, so the later surge
    # was never detected. Now the step is skipped (state.skipped counts it) and detection works.
    lengths = _trace()
    lengths[10] = np.nan
    lengths[20] = np.inf
    scales, surges = _run(length_aware_scale(), lengths)
    assert SURGE_AT <= int(np.argmax(surges)) <= SURGE_AT + 5
    assert scales[-1] < 1.0
    tx = length_aware_scale()
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    step = jax.jit(lambda s, x: tx.update(params, s, params, mean_length=x))
    _, state = step(state, 100.0)
    _, after = step(state, jnp.nan)
    assert int(after.skipped) == 1 and int(after.count) == int(state.count)
    assert float(after.fast_length) == float(state.fast_length) == 100.0


def test_non_finite_length_on_the_host_is_an_error():
    tx = length_aware_scale(kl_threshold=1.5)
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    with pytest.raises(ValueError, match=r"^mean_length: expected finite values"):
        tx.update(params, state, params, mean_length=jnp.nan, mismatch_kl=0.1)
    with pytest.raises(ValueError, match=r"^mean_length: expected a finite number >= 0"):
        tx.update(params, state, params, mean_length=-1.0, mismatch_kl=0.1)
    with pytest.raises(ValueError, match=r"^mismatch_kl: expected finite values"):
        tx.update(params, state, params, mean_length=10.0, mismatch_kl=jnp.inf)


def test_checked_mode_names_the_argument_under_jit():
    from hyperx._validation import checked

    tx = length_aware_scale(check_finite=True)
    params = {"w": jnp.ones(2)}
    step = jax.jit(lambda s, x: tx.update(params, s, params, mean_length=x)[1].scale)
    err, _ = checked(step)(tx.init(params), jnp.nan)
    with pytest.raises(Exception, match="mean_length: expected finite values"):
        err.throw()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(threshold=True), "threshold"),
        (dict(threshold=float("nan")), "threshold"),
        (dict(factor="0.5"), "factor"),
        (dict(min_scale=float("inf")), "min_scale"),
        (dict(window=2.0), "window"),
        (dict(warmup_steps=True), "warmup_steps"),
        (dict(kl_threshold=float("nan")), "kl_threshold"),
        (dict(fast_decay=True), "fast_decay"),
        (dict(dtype=jnp.int32), "dtype"),
    ],
)
def test_options_refuse_bools_strings_non_finite(kwargs, name):
    # The same check for every numeric option of the schedule.
    with pytest.raises((TypeError, ValueError), match=f"^{name}:"):
        length_aware_scale(**kwargs)


def test_float64_state():
    # Regression: the state was float32 whatever the run's dtype.
    with jax.enable_x64(True):
        tx = length_aware_scale(dtype=jnp.float64)
        params = {"w": jnp.ones(2, jnp.float64)}
        state = tx.init(params)
        updates, state = tx.update(params, state, params, mean_length=jnp.float64(100.0))
        _, state = tx.update(updates, state, params, mean_length=jnp.float64(101.0))
        assert state.fast_length.dtype == state.scale.dtype == jnp.float64
        # k = 1: c = min(0.7, 1/2) = 0.5 -> fast = 0.5 * 100 + 0.5 * 101 = 100.5 exactly
        assert float(state.fast_length) == 100.5
        assert updates["w"].dtype == jnp.float64
