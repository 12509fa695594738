"""Atari's frame replay on the replay core: stacks rebuilt from frames stored once, never across
a game start; one stream per environment."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.replay import replay_bytes
from hyperx.replay_frames import frame_stack
from hyperx.replay_frames import make_frame_replay as make

H = W = 2


def make_frame_replay(num_streams, n_step=1, gamma=0.99, pad="repeat"):
    return make(n_step, gamma, num_streams=num_streams, pad=pad)


def frame(value: int) -> np.ndarray:
    return np.full((H, W), value, np.uint8)


def env_stacks(values: list[int], firsts: list[bool], pad: str) -> list[np.ndarray]:
    """The stacks an environment returns for a stream of newest frames (hand rule)."""
    stacks, window = [], []
    for v, first in zip(values, firsts, strict=True):
        if first:
            window = [v] * 4 if pad == "repeat" else [None, None, None, v]
        else:
            window = window[1:] + [v]
        stacks.append(np.stack([frame(0) if x is None else frame(x) for x in window]))
    return stacks


EXAMPLE = dict(obs=np.zeros((4, H, W), np.uint8), action=0, reward=0.0, terminal=False,
               truncated=False, first=False, z=np.zeros(3, np.float32))


def fill(replay, state, values, firsts, pad="repeat", terminals=None, truncs=None):
    """Add one stream's steps; the reward of a step is its frame value."""
    terminals = terminals or [False] * len(values)
    truncs = truncs or [False] * len(values)
    for obs, first, term, trunc, v in zip(env_stacks(values, firsts, pad), firsts, terminals,
                                          truncs, values, strict=True):
        state = replay.add(state, dict(obs=obs[None], action=jnp.int32([1]),
                                       reward=jnp.float32([v]), terminal=jnp.bool_([term]),
                                       truncated=jnp.bool_([trunc]), first=jnp.bool_([first]),
                                       z=jnp.zeros((1, 3))), jnp.bool_([True]))
    return state


@pytest.mark.parametrize("pad", ["repeat", "zero"])
def test_rebuilt_stacks_equal_the_environments_and_never_cross_a_game_start(pad):
    replay = make_frame_replay(1, pad=pad)
    state = replay.init(32, EXAMPLE)
    values = list(range(1, 15))
    firsts = [True, False, False, False, False, True, False, True, False, False, True, False,
              False, False]
    state = fill(replay, state, values, firsts, pad)
    want = env_stacks(values, firsts, pad)
    got = frame_stack(state, jnp.zeros(len(values), jnp.int32),
                      jnp.arange(len(values), dtype=jnp.int32), pad)
    np.testing.assert_array_equal(np.asarray(got), np.stack(want))
    # The stack after the start at slot 7 holds nothing of the game before it.
    assert set(np.unique(np.asarray(got[8]))) <= {0, 8, 9}


def test_n_step_returns_by_hand_stop_at_terminal_and_before_truncation():
    replay = make_frame_replay(1, 3, 0.5)
    state = replay.init(64, EXAMPLE)
    # Game A: slots 0..4, a life lost (terminal) at slot 2, truncated at slot 4; game B from 5.
    values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    firsts = [True, False, False, False, False, True, False, False, False, False]
    terminals = [False, False, True, False, False, False, False, False, False, False]
    truncs = [False, False, False, False, True, False, False, False, False, False]
    state = fill(replay, state, values, firsts, "repeat", terminals, truncs)
    batch = replay.sample(state, jax.random.PRNGKey(0), 512)
    got = {}
    for t, ret, disc, k, valid, boot in zip(
            np.asarray(batch.indices), np.asarray(batch.n_step_return),
            np.asarray(batch.discount), np.asarray(batch.n_steps), np.asarray(batch.valid),
            np.asarray(batch.bootstrap_obs[:, -1, 0, 0]), strict=True):
        got[int(t)] = (bool(valid), float(ret), float(disc), int(k), int(boot))
    # Slot 0: 1 + 0.5*2 + 0.25*3, stops at the terminal of slot 2 (discount 0).
    assert got[0][:4] == (True, 1 + 0.5 * 2 + 0.25 * 3, 0.0, 3)
    assert got[1][:4] == (True, 2 + 0.5 * 3, 0.0, 2)
    assert got[2][:4] == (True, 3.0, 0.0, 1)
    # Slot 3 reaches the truncated slot 4: stops before it, bootstraps from its observation.
    assert got[3] == (True, 4.0, 0.5, 1, 5)
    assert got[4][0] is False  # the truncated step itself is never a start
    # Slot 5 (game B): a full window bootstraps from slot 8.
    assert got[5] == (True, 6 + 0.5 * 7 + 0.25 * 8, 0.125, 3, 9)
    # The newest n = 3 slots (7, 8, 9) wait for later steps.
    assert max(got) == 6
    assert set(got) == {0, 1, 2, 3, 4, 5, 6}


def test_invalid_steps_store_nothing_and_streams_are_separate():
    replay = make_frame_replay(2)
    state = replay.init(20, EXAMPLE)
    obs = np.stack([np.stack([frame(1)] * 4), np.stack([frame(2)] * 4)])
    step = dict(obs=obs, action=jnp.int32([0, 1]), reward=jnp.float32([1.0, 2.0]),
                terminal=jnp.bool_([False, False]), truncated=jnp.bool_([False, False]),
                first=jnp.bool_([True, True]), z=jnp.zeros((2, 3)))
    state = replay.add(state, step, jnp.bool_([True, False]))
    np.testing.assert_array_equal(np.asarray(state.stream_added), [1, 0])
    assert int(state.num_added) == 1
    frames = np.asarray(state.data["obs"])
    assert int(frames[0, 0, 0, 0]) == 1 and int(frames[1, 0, 0, 0]) == 0


def test_sampling_is_uniform_over_streams_by_their_sizes():
    replay = make_frame_replay(2)
    state = replay.init(400, EXAMPLE)
    for i in range(150):
        obs = np.stack([np.stack([frame(i % 200)] * 4)] * 2)
        valid = jnp.bool_([True, i % 3 == 0])  # stream 1 stores a third as much
        state = replay.add(state, dict(
            obs=obs, action=jnp.int32([0, 0]), reward=jnp.float32([0.0, 0.0]),
            terminal=jnp.bool_([False, False]), truncated=jnp.bool_([False, False]),
            first=jnp.bool_([i == 0, i == 0]), z=jnp.zeros((2, 3))), valid)
    batch = replay.sample(state, jax.random.PRNGKey(1), 20_000)
    share = float(np.mean(np.asarray(batch.indices) >= 200))
    want = (50 - 1) / (149 + 49)
    assert abs(share - want) < 0.02  # 20,000 draws: sd 0.003


def test_wrapped_ring_skips_the_oldest_three_slots():
    replay = make_frame_replay(1)
    state = replay.init(10, EXAMPLE)
    values = list(range(1, 16))
    firsts = [True] + [False] * 14
    state = fill(replay, state, values, firsts)
    # 15 adds into 10 slots: slots hold values 6..15; starts exclude the 3 oldest (6, 7, 8)
    # and the newest one (n = 1).
    assert int(replay.num_sampleable(state)) == 10 - 3 - 1
    batch = replay.sample(state, jax.random.PRNGKey(2), 256)
    oldest_frames = np.asarray(batch.transition["obs"][:, 0, 0, 0])
    assert oldest_frames.min() >= 6


def test_empty_buffer_samples_invalid_rows_and_bytes_of_100k():
    replay = make_frame_replay(1)
    state = replay.init(16, EXAMPLE)
    batch = replay.sample(state, jax.random.PRNGKey(0), 4)
    assert not np.asarray(batch.valid).any()
    assert float(np.abs(np.asarray(batch.n_step_return)).sum()) == 0.0
    assert not bool(replay.can_sample(state, 1))
    full = make_frame_replay(1, 5, 0.99)
    abstract = jax.eval_shape(lambda example: full.init(100_000, example), dict(
        obs=np.zeros((4, 84, 84), np.uint8), action=0, reward=0.0, terminal=False,
        truncated=False, first=False, z=np.zeros(4, np.float32)))
    nbytes = replay_bytes(abstract)
    assert nbytes < 2**30
    assert abs(nbytes - 100_000 * (84 * 84 + 4 + 4 + 3 + 16)) < 100


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="pad"):
        make_frame_replay(1, pad="edge")
    with pytest.raises(ValueError, match="n_step"):
        make_frame_replay(1, 0)
    replay = make_frame_replay(1, 5)
    with pytest.raises(ValueError, match="capacity"):
        replay.init(4, EXAMPLE)
    with pytest.raises(ValueError, match="missing"):
        replay.init(64, {"obs": EXAMPLE["obs"]})
