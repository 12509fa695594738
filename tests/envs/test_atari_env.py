"""Atari through envpool and ale-py on the real ROMs: preprocessing, flags, both faces."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.envs.atari import ATARI_26, AtariGames, AtariSpec, game_names, make_atari, rom_id

BACKENDS = ["envpool", "ale"]


def run(env, actions):
    env.reset()
    outs = []
    for a in actions:
        obs, reward, term, trunc, info = env.step(np.asarray(a))
        outs.append(dict(obs=obs, reward=reward, term=term, trunc=trunc, **info))
    return outs


@pytest.mark.parametrize("backend", BACKENDS)
def test_observations_are_uint8_stacks_with_the_newest_frame_last(backend):
    env = make_atari("Breakout", backend=backend, num_envs=2)
    obs, info = env.reset()
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    rng = np.random.default_rng(0)
    prev = obs
    for _ in range(60):
        obs, _, _, _, info = env.step(rng.integers(0, env.num_actions, 2))
        for e in range(2):
            if not info["reset_step"][e]:
                np.testing.assert_array_equal(obs[e, :3], prev[e, 1:])
        prev = obs
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_life_loss_and_clipping_only_in_training(backend):
    rng = np.random.default_rng(1)
    actions = rng.integers(0, 9, (700, 1))
    train = run(make_atari("MsPacman", backend=backend, training=True, seed=3), actions)
    test = run(make_atari("MsPacman", backend=backend, training=False, seed=3), actions)
    raw = np.array([o["raw_reward"][0] for o in train])
    assert raw.max() >= 10  # MsPacman's pellets score 10
    np.testing.assert_array_equal([o["reward"][0] for o in train], np.sign(raw))
    np.testing.assert_array_equal([o["reward"][0] for o in test],
                                  [o["raw_reward"][0] for o in test])
    lives = np.array([o["lives"][0] for o in train])
    lost = np.nonzero((lives[1:] < lives[:-1]) & ~np.array(
        [o["game_over"][0] | o["reset_step"][0] for o in train[1:]]))[0] + 1
    assert len(lost) >= 1
    for t in lost:
        assert train[t]["term"][0] and not train[t]["game_over"][0]
        assert not test[t]["term"][0]  # evaluation: a lost life does not end the episode
    over = [t for t, o in enumerate(train) if o["game_over"][0]]
    assert all(train[t]["term"][0] and test[t]["term"][0] for t in over)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_op_starts_vary_the_start_and_zero_no_ops_do_not(backend):
    """8 games, the same actions after reset: with up to 30 no-ops their screens diverge (the
    emulators start at different frames); with none they stay identical."""

    def screens(noop_max):
        env = make_atari("Breakout", backend=backend, num_envs=8, noop_max=noop_max)
        env.reset()
        for a in [1] + [3] * 12:
            obs, *_ = env.step(np.full(8, a))
        return {o.tobytes() for o in obs}

    assert len(screens(30)) > 1
    assert len(screens(0)) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_autoreset_step_follows_game_over(backend):
    env = make_atari("Breakout", backend=backend, seed=0)
    rng = np.random.default_rng(2)
    env.reset()
    for _ in range(3000):
        obs, reward, term, trunc, info = env.step(rng.integers(0, 4, 1))
        if info["game_over"][0]:
            break
    assert info["game_over"][0] and term[0]
    obs, reward, term, trunc, info = env.step(np.array([1]))
    assert info["reset_step"][0] and reward[0] == 0 and not term[0]
    assert info["lives"][0] == 5
    if backend == "envpool":  # envpool repeats the first frame; ale-py pads with zeros
        assert all(np.array_equal(obs[0, 0], obs[0, i]) for i in range(4))
    else:
        assert not obs[0, :3].any() and obs[0, 3].any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_xla_face_equals_the_host_face(backend):
    actions = np.random.default_rng(3).integers(0, 4, (150, 2)).astype(np.int32)
    host = run(make_atari("Breakout", backend=backend, num_envs=2, seed=5), actions)
    env = make_atari("Breakout", backend=backend, num_envs=2, seed=5)
    carry, step = env.xla()

    def body(c, a):
        c, out = step(c, a)
        return c, out

    _, outs = jax.jit(lambda c, a: jax.lax.scan(body, c, a))(carry, jnp.asarray(actions))
    np.testing.assert_array_equal(np.asarray(outs.obs), np.stack([o["obs"] for o in host]))
    for name, key in (("reward", "reward"), ("terminated", "term"), ("reset_step",
                                                                     "reset_step")):
        np.testing.assert_array_equal(np.asarray(getattr(outs, name)),
                                      np.stack([o[key] for o in host]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_several_games_in_one_batch_play_as_their_own_pools(backend):
    """AtariGames = its pools side by side (full action set, env i seeded seed + i), on the
    host face and in the compiled step, where every pool is sent before any is received."""
    layout = [("Breakout", 2), ("Freeway", 1), ("Breakout", 1)]
    actions = np.random.default_rng(6).integers(0, 18, (120, 4)).astype(np.int32)
    alone = [run(make_atari(g, backend=backend, num_envs=n, seed=7 + s, full_action_space=True),
                 actions[:, s:s + n]) for (g, n), s in zip(layout, (0, 2, 3), strict=True)]
    games = AtariGames(layout, backend=backend, seed=7)
    assert games.num_envs == 4 and games.num_actions == 18
    host = run(games, actions)
    for key in ("obs", "reward", "term", "raw_reward", "reset_step", "lives"):
        np.testing.assert_array_equal(
            np.stack([o[key] for o in host]),
            np.concatenate([np.stack([o[key] for o in part]) for part in alone], axis=1))
    games = AtariGames(layout, backend=backend, seed=7)
    carry, step = games.xla()
    assert games.first_obs.shape == (4, 4, 84, 84)
    _, outs = jax.jit(lambda c, a: jax.lax.scan(step, c, a))(carry, jnp.asarray(actions))
    np.testing.assert_array_equal(np.asarray(outs.obs), np.stack([o["obs"] for o in host]))
    np.testing.assert_array_equal(np.asarray(outs.raw_reward),
                                  np.stack([o["raw_reward"] for o in host]))
    with pytest.raises(ValueError, match="actions: expected 4"):
        games.step(np.zeros(3, np.int32))
    games.close()
    with pytest.raises(ValueError, match="layout: expected at least one"):
        AtariGames([])
    with pytest.raises(ValueError, match="game: expected an Atari game name"):
        AtariGames([("Breakout", 1), ("Breakout-v5", 1)])


def test_backends_agree_up_to_resize_and_reset_padding():
    """Same game, no no-ops, same actions: the newest frames of the two backends differ only
    by their resize (envpool: area interpolation); the stacks right after reset differ by
    design (envpool repeats the first frame, ale-py pads with zeros)."""
    actions = np.random.default_rng(4).integers(0, 4, (40, 1))
    a = run(make_atari("Breakout", backend="envpool", noop_max=0), actions)
    b = run(make_atari("Breakout", backend="ale", noop_max=0), actions)
    diffs = [np.abs(x["obs"][0, -1].astype(int) - y["obs"][0, -1].astype(int))
             for x, y in zip(a, b, strict=True)]
    mean_abs = float(np.mean(diffs))
    assert mean_abs < 3.0, mean_abs  # gray levels out of 255
    assert np.mean([np.mean(d <= 2) for d in diffs]) > 0.95
    np.testing.assert_array_equal([x["raw_reward"] for x in a], [y["raw_reward"] for y in b])


def test_game_names_and_bad_arguments():
    names = game_names()
    assert set(ATARI_26) <= set(names)
    assert rom_id("MsPacman") == "ms_pacman" and rom_id("UpNDown") == "up_n_down"
    with pytest.raises(ValueError, match="game: expected an Atari game name"):
        AtariSpec("Breakout-v5")
    with pytest.raises(ValueError, match="backend"):
        AtariSpec("Breakout", backend="gym")
    with pytest.raises(ValueError, match="num_envs"):
        AtariSpec("Breakout", num_envs=0)
    env = make_atari("Breakout")
    env.reset()
    with pytest.raises(ValueError, match="actions"):
        env.step(np.array([7]))
    with pytest.raises(ValueError, match="actions"):
        env.step(np.array([0, 1]))


def test_envpool_threads_follow_the_cores_this_process_may_use(monkeypatch):
    """One emulator thread per game, at most one per core of the process's CPU mask (envpool's
    own default reads the host's count, which a container or ``taskset`` can cut)."""
    pytest.importorskip("envpool")
    from hyperx.envs import atari

    monkeypatch.setattr(atari.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert atari._make_backend(AtariSpec("Pong", num_envs=8)).config["num_threads"] == 3
    assert atari._make_backend(AtariSpec("Pong", num_envs=2)).config["num_threads"] == 2
