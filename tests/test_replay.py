import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperx.replay import make_replay_buffer, n_step_target, replay_capacity

DRAWS = 2000  # uniform draws over <= 16 windows: P(some window never drawn) < 16 (15/16)^2000


@functools.cache
def buffer(n_step, gamma, truncated="truncated"):
    """One buffer (and its jitted functions) per config, so tests share compilations."""
    buf = make_replay_buffer(n_step, gamma, truncated=truncated)
    return buf, jax.jit(lambda s, t: buf.add(s, one(t))), jax.jit(buf.sample, static_argnums=2)


def one(tree):
    """One stream's transition as :func:`add` takes it: every leaf with a leading (1,)."""
    return jax.tree.map(lambda x: jnp.asarray(x)[None], tree)


def example(obs_dim=2):
    return dict(t=jnp.int32(0), obs=jnp.zeros(obs_dim, jnp.int32), reward=jnp.float32(0),
                terminal=jnp.bool_(False), truncated=jnp.bool_(False),
                next_obs=jnp.zeros(obs_dim, jnp.int32))


def transition(t, reward, terminal=False, truncated=False):
    return dict(t=jnp.int32(t), obs=jnp.array([t, 7], jnp.int32), reward=jnp.float32(reward),
                terminal=jnp.bool_(terminal), truncated=jnp.bool_(truncated),
                next_obs=jnp.array([t + 1, 7], jnp.int32))


def fill(n_step, gamma, capacity, rewards, terminals=(), truncations=()):
    buf, add, _ = buffer(n_step, gamma)
    state = buf.init(capacity, example())
    for t, r in enumerate(rewards):
        state = add(state, transition(t, r, t in terminals, t in truncations))
    return state


def windows(n_step, gamma, state, seed=0):
    """Map each sampled start time t -> (return, discount, k, bootstrap obs[0])."""
    _, _, sample = buffer(n_step, gamma)
    out = jax.device_get(sample(state, jax.random.key(seed), DRAWS))
    assert out.valid.all()
    got = {}
    for i in range(DRAWS):
        row = (float(out.n_step_return[i]), float(out.discount[i]), int(out.n_steps[i]),
               int(out.bootstrap_obs[i, 0]))
        t = int(out.transition["t"][i])
        assert got.setdefault(t, row) == row
        assert int(out.transition["obs"][i, 0]) == t
    return got


def reference(n_step, gamma, rewards, terminals, truncations, stored):
    """Plain-Python n-step targets for the complete windows among the stored times."""
    horizon = len(rewards)
    want = {}
    for t in stored:
        ret, k = 0.0, 0
        while k < n_step and t + k < horizon:
            ret += gamma**k * rewards[t + k]
            k += 1
            if t + k - 1 in terminals or t + k - 1 in truncations:
                break
        last = t + k - 1
        ended = last in terminals or last in truncations
        if k == n_step or ended:
            disc = 0.0 if last in terminals else gamma**k
            want[t] = (ret, disc, k, last + 1)
    return want


def assert_windows(got, want):
    assert sorted(got) == sorted(want)
    for t, (ret, disc, k, boot) in want.items():
        np.testing.assert_allclose(got[t][:2], (ret, disc), rtol=1e-6, atol=1e-6)
        assert got[t][2:] == (k, boot), t


def test_gamma_powers_without_episode_end():
    state = fill(4, 0.5, 16, [1.0] * 6)
    # Windows starting at t = 3, 4, 5 are not complete yet (n = 4, no episode end).
    want = {t: (1 + 0.5 + 0.25 + 0.125, 0.0625, 4, t + 4) for t in range(3)}
    assert_windows(windows(4, 0.5, state), want)


def test_terminal_in_middle_and_at_start_of_window():
    # rewards 1, 2, 4, 8, 16, 32; t = 1 terminal; n = 3, gamma = 0.5.
    state = fill(3, 0.5, 16, [1, 2, 4, 8, 16, 32], terminals={1})
    want = {
        0: (1 + 0.5 * 2, 0.0, 2, 2),  # stops at the terminal t = 1: no bootstrap
        1: (2.0, 0.0, 1, 2),  # the window starts at the terminal
        2: (4 + 0.5 * 8 + 0.25 * 16, 0.125, 3, 5),  # new episode, full window
        3: (8 + 0.5 * 16 + 0.25 * 32, 0.125, 3, 6),
    }
    assert_windows(windows(3, 0.5, state), want)


def test_truncation_stops_the_sum_but_bootstraps():
    state = fill(3, 0.5, 16, [1, 2, 4, 8, 16], truncations={1})
    want = {
        0: (1 + 0.5 * 2, 0.25, 2, 2),  # bootstrap from next_obs of t = 1 with gamma^2
        1: (2.0, 0.5, 1, 2),
        2: (4 + 0.5 * 8 + 0.25 * 16, 0.125, 3, 5),
    }
    assert_windows(windows(3, 0.5, state), want)


def test_terminal_and_truncated_together_means_terminal():
    state = fill(2, 0.5, 8, [1, 2, 4], terminals={0}, truncations={0})
    assert windows(2, 0.5, state)[0] == (1.0, 0.0, 1, 1)


def test_episode_end_at_head_completes_recent_windows():
    # The last transition is terminal, so the windows at t = 3, 4 are complete.
    state = fill(3, 0.5, 16, [1, 1, 1, 1, 2], terminals={4})
    got = windows(3, 0.5, state)
    assert sorted(got) == [0, 1, 2, 3, 4]
    assert got[3] == (2.0, 0.0, 2, 5)
    assert got[4] == (2.0, 0.0, 1, 5)


def test_wrap_around():
    # capacity 4 holds t = 6..9 after 10 adds; n = 2 excludes t = 9 (incomplete).
    rewards = [float(t) for t in range(10)]
    state = fill(2, 0.5, 4, rewards, terminals={7})
    assert int(state.num_added) == 10  # |D| is not capped by the capacity
    assert state.write_index.tolist() == [2]
    want = {6: (6 + 0.5 * 7, 0.0, 2, 8), 7: (7.0, 0.0, 1, 8), 8: (8 + 0.5 * 9, 0.25, 2, 10)}
    assert_windows(windows(2, 0.5, state), want)


def test_sampling_never_returns_unwritten_slots():
    buf, _, sample = buffer(3, 0.9)
    state = fill(3, 0.9, 100, [1.0] * 10)
    out = sample(state, jax.random.key(3), 20_000)
    assert int(buf.num_sampleable(state)) == 8
    assert set(np.unique(out.indices).tolist()) == set(range(8))
    assert set(np.unique(out.transition["t"]).tolist()) == set(range(8))
    np.testing.assert_allclose(out.n_step_return, 1 + 0.9 + 0.81, rtol=1e-6)


def test_empty_buffer_is_flagged_not_garbage():
    buf, _, sample = buffer(3, 0.9)
    state = buf.init(8, example())
    assert not buf.can_sample(state, 1)
    out = sample(state, jax.random.key(0), 5)
    assert not out.valid.any()
    assert (out.n_step_return == 0).all() and (out.discount == 0).all()
    assert out.transition["obs"].shape == (5, 2)
    # Two adds, no episode end: still nothing complete with n = 3.
    state = fill(3, 0.9, 8, [1.0, 1.0])
    assert int(buf.num_sampleable(state)) == 0
    assert not sample(state, jax.random.key(0), 2).valid.any()


def test_can_sample_counts_complete_windows():
    buf, _, _ = buffer(3, 0.9)
    state = fill(3, 0.9, 8, [1.0] * 5)
    assert bool(buf.can_sample(state, 3)) and not bool(buf.can_sample(state, 4))


def test_compact_observations_keep_their_dtype():
    buf, add, sample = buffer(1, 0.9)
    ex = dict(obs=jnp.zeros(2, jnp.int32), action=jnp.int32(0), z=jnp.zeros(4),
              reward=0.0, terminal=False, next_obs=jnp.zeros(2, jnp.int32))
    state = buf.init(4, ex)
    state = add(state, dict(obs=jnp.array([1, 2], jnp.int32), action=jnp.int32(1),
                            z=jnp.arange(4.0), reward=0.5, terminal=True,
                            next_obs=jnp.array([2, 3], jnp.int32)))
    out = sample(state, jax.random.key(0), 3)
    assert out.transition["obs"].dtype == jnp.int32 and out.bootstrap_obs.dtype == jnp.int32
    np.testing.assert_array_equal(out.transition["z"][0], np.arange(4.0))
    np.testing.assert_array_equal(out.bootstrap_obs[0], [2, 3])


def test_jit_and_vmap_over_seeds_match_single_runs():
    buf, _, _ = buffer(2, 0.9)
    seeds = 3
    states = jax.vmap(lambda _: buf.init(6, example()))(jnp.arange(seeds))

    def run(states, rewards, terminals):
        def body(states, x):
            r, d, t = x
            trans = jax.vmap(lambda r, d: transition(t, r, d))(r, d)
            return jax.vmap(lambda s, t: buf.add(s, one(t)))(states, trans), None

        states, _ = jax.lax.scan(body, states, (rewards, terminals, jnp.arange(9)))
        keys = jax.random.split(jax.random.key(1), seeds)
        return states, jax.vmap(lambda s, k: buf.sample(s, k, 16))(states, keys)

    rewards = jax.random.normal(jax.random.key(0), (9, seeds))
    terminals = jax.random.bernoulli(jax.random.key(2), 0.3, (9, seeds))
    states, batched = jax.jit(run)(states, rewards, terminals)
    assert states.num_added.tolist() == [9] * seeds
    keys = jax.random.split(jax.random.key(1), seeds)
    for s in range(seeds):
        single = fill(2, 0.9, 6, rewards[:, s].tolist(),
                      terminals=set(np.flatnonzero(terminals[:, s]).tolist()))
        alone = buf.sample(single, keys[s], 16)
        for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(batched), strict=True):
            np.testing.assert_allclose(a, b[s], rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([1, 3]), st.sampled_from([4, 7]), st.integers(1, 20),
       st.lists(st.sampled_from(["", "term", "trunc"]), min_size=20, max_size=20),
       st.integers(0, 2**16))
def test_matches_reference_on_random_streams(n_step, capacity, adds, flags, seed):
    rewards = [float(2 * t + 1) for t in range(adds)]
    terminals = {t for t in range(adds) if flags[t] == "term"}
    truncations = {t for t in range(adds) if flags[t] == "trunc"}
    state = fill(n_step, 0.5, capacity, rewards, terminals, truncations)
    want = reference(n_step, 0.5, rewards, terminals, truncations,
                     stored=range(max(0, adds - capacity), adds))
    if not want:
        assert not bool(buffer(n_step, 0.5)[0].can_sample(state, 1))
        return
    assert_windows(windows(n_step, 0.5, state, seed), want)


def test_streams_are_separate_rings_and_invalid_steps_store_nothing():
    """Two streams of the transitions layout, n = 2, gamma = 0.5: stream 0 stores t = 0..5
    (reward 1), stream 1 only the even steps t = 100, 102, 104 (reward 10). No window mixes
    the streams (every return is 1 + 0.5 = 1.5 or 10 + 5 = 15), stream 1's newest slot waits,
    and the draws share the 5 + 2 complete windows uniformly (4,000 draws: sd 0.007 on the
    share 2/7, tolerance 0.03)."""
    buf = make_replay_buffer(2, 0.5, num_streams=2)
    state = buf.init(16, example())
    for t in range(6):
        pair = jax.tree.map(lambda a, b: jnp.stack([a, b]), transition(t, 1.0),
                            transition(100 + t, 10.0))
        state = buf.add(state, pair, jnp.array([True, t % 2 == 0]))
    assert state.stream_added.tolist() == [6, 3] and int(state.num_added) == 9
    assert int(buf.num_sampleable(state)) == 7
    out = jax.device_get(buf.sample(state, jax.random.key(4), 4000))
    stream = out.indices // 8
    t = out.transition["t"]
    np.testing.assert_allclose(out.n_step_return[stream == 0], 1.5)
    np.testing.assert_allclose(out.n_step_return[stream == 1], 15.0)
    assert set(t[stream == 0].tolist()) == set(range(5))
    assert set(t[stream == 1].tolist()) == {100, 102}
    np.testing.assert_array_equal(out.bootstrap_obs[stream == 1, 0],
                                  np.where(t[stream == 1] == 100, 103, 105))
    assert abs(float(np.mean(stream == 1)) - 2 / 7) < 0.03


def test_replay_capacity():
    assert replay_capacity(1_000_000, 50_000) == 50_000
    assert replay_capacity(10_000, 50_000) == 10_000
    with pytest.raises(ValueError, match="step_budget"):
        replay_capacity(10, 0)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="n_step"):
        make_replay_buffer(0)
    with pytest.raises(ValueError, match="gamma"):
        make_replay_buffer(1, 1.5)
    buf, _, _ = buffer(3, 0.9)
    with pytest.raises(ValueError, match="capacity"):
        buf.init(2, example())
    bad = example()
    del bad["next_obs"]
    with pytest.raises(ValueError, match="example_transition.*'next_obs'"):
        buf.init(8, bad)
    with pytest.raises(ValueError, match=r"example_transition.reward: expected shape \(\)"):
        buf.init(8, {**example(), "reward": jnp.zeros(2)})
    state = buf.init(8, example())
    with pytest.raises(ValueError, match=r"transitions\['obs'\]: expected shape \(1, 2\)"):
        buf.add(state, one({**transition(0, 1.0), "obs": jnp.zeros(3, jnp.int32)}))
    with pytest.raises(ValueError, match=r"expected shape \(1, 2\) \(one transition per stream\), "
                       r"got \(2,\)"):
        buf.add(state, transition(0, 1.0))  # unbatched: one transition per stream is (1, ...)
    with pytest.raises(ValueError, match="transitions: expected the pytree structure"):
        buf.add(state, one({**transition(0, 1.0), "extra": 1}))
    with pytest.raises(ValueError, match=r"valid: expected shape \(1,\)"):
        buf.add(state, one(transition(0, 1.0)), jnp.ones(2, bool))
    with pytest.raises(ValueError, match="num_streams"):
        make_replay_buffer(1, num_streams=0)
    with pytest.raises(ValueError, match="history"):
        make_replay_buffer(1, history=-1)
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(state, jax.random.key(0), 0)


def test_sizes_and_stream_counts_are_checked_at_the_boundary():
    """A non-integer batch size (2.5 reached randint's shape), a state built for another
    stream count (it was read with the wrong rings) and a capacity beyond memory each fail in
    one line naming the argument."""
    buf, _, _ = buffer(3, 0.9)
    state = buf.init(8, example())
    for bad in (2.5, True, -1):
        with pytest.raises(ValueError, match="batch_size: expected an integer"):
            buf.sample(state, jax.random.key(0), bad)
        with pytest.raises(ValueError, match="batch_size: expected an integer"):
            buf.can_sample(state, bad)
    two = make_replay_buffer(3, 0.9, num_streams=2)
    other = two.init(8, example())
    for call in (lambda: buf.add(other, one(transition(0, 1.0))),
                 lambda: buf.sample(other, jax.random.key(0), 2),
                 lambda: buf.can_sample(other, 2)):
        with pytest.raises(ValueError, match=r"state: expected the state of a buffer of 1 "
                                             r"stream\(s\).*got shape \(2,\)"):
            call()
    with pytest.raises(ValueError, match="capacity 1000000000000: needs an estimated"):
        buf.init(10**12, example())


def test_n_step_target_by_hand():
    """gamma = 0.5, windows of 3: (a) no end: R = 1 + 0.5*2 + 0.25*4 = 3, discount 0.125;
    (b) terminal at step 1: R = 1 + 0.5*2 = 2, k = 2, discount 0; (c) truncation (an episode
    end that bootstraps) at step 0: R = 1, k = 1, discount 0.5; (d) a cut at step 1 (the frame
    layout's truncation, not stored with what followed): R = 1, k = 1, discount 0.5;
    (e) an invalid row: nothing included, k = 0, zeros."""
    r = jnp.array([[1.0, 2.0, 4.0]] * 5)
    no = [False, False, False]
    terminal = jnp.array([no, [False, True, False], no, no, no])
    ends = terminal | jnp.array([no, no, [True, False, False], no, no])
    cuts = jnp.array([no, no, no, [False, True, False], no])
    out = n_step_target(r, terminal, gamma=0.5, ends=ends, cuts=cuts,
                        valid=jnp.array([True, True, True, True, False]))
    np.testing.assert_allclose(out.n_step_return, [3.0, 3.0 - 1.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(out.discount, [0.125, 0.0, 0.5, 0.5, 0.0])
    np.testing.assert_array_equal(out.n_steps, [3, 2, 1, 1, 0])


@given(st.integers(1, 6), st.floats(0.0, 1.0), st.integers(0, 2**31 - 1))
@settings(max_examples=30, deadline=None)
def test_n_step_target_is_the_loop_over_included_steps(n, gamma, seed):
    """Property: for random flags, the vectorised rule equals a plain loop that stops after an
    episode end and before a cut."""
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(4, n)).astype(np.float32)
    terminal, ends, cuts = (rng.random((3, 4, n)) < 0.3)
    ends = ends | terminal
    out = n_step_target(jnp.asarray(rewards), jnp.asarray(terminal), gamma=gamma,
                        ends=jnp.asarray(ends), cuts=jnp.asarray(cuts))
    for b in range(4):
        total, k = 0.0, 0
        for i in range(n):
            if cuts[b, i]:
                break
            total += np.float32(gamma) ** i * rewards[b, i]
            k += 1
            if ends[b, i]:
                break
        discount = 0.0 if k == 0 or terminal[b, k - 1] else np.float32(gamma) ** k
        assert int(out.n_steps[b]) == k
        np.testing.assert_allclose(float(out.n_step_return[b]), total, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(out.discount[b]), discount, rtol=1e-5, atol=1e-7)
