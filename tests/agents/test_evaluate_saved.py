"""Evaluating a saved agent without training: Atari (hyperx.agents.atari_eval, video included)
and DeepSea (hyperx.agents.deepsea.evaluate_saved), on tiny checkpointed runs."""

import shutil

import av
import jax
import numpy as np
import pytest

from hyperx.agents import get_config
from hyperx.agents.atari import train_atari
from hyperx.agents.atari_eval import VIDEO_FPS, evaluate_saved
from hyperx.agents.deepsea import evaluate_saved as evaluate_saved_deepsea
from hyperx.agents.deepsea import make_program, state_id, train_deepsea
from hyperx.envs import deepsea

# A small MLP instead of the Nature CNN, so the run compiles in seconds; the evaluation
# protocol (dqn: epsilon-greedy with eval_epsilon 0.05) is the config's own.
TINY = dict(torso="mlp", torso_widths=(16,), batch_size=8, buffer_size=256, learning_starts=32)
# Two chunks (two checkpoints: env steps 32 and 64 per seed), one evaluation at the end.
RUN = dict(steps=64, seeds=2, envs_per_seed=4, eval_every=64, chunk_steps=32, eval_episodes=2)
MAX_STEPS = 120  # Pong: the opponent scores every 40-odd steps, so scores are not all 0


def files(folder):
    """Every file under ``folder`` with its size and modification time."""
    return {(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def atari_run(tmp_path_factory):
    """A trained, checkpointed run: its config, checkpoints folder and evaluation scores."""
    config = get_config("dqn", env="atari", **TINY)
    folder = tmp_path_factory.mktemp("atari_run") / "checkpoints"
    scores = []
    train_atari(config, "Pong", eval_max_steps=MAX_STEPS, checkpoint_dir=str(folder),
                on_chunk=lambda c: scores.append(c.metrics["scores"]), **RUN)
    assert scores[0] is None and scores[1].shape == (2, 2)
    return config, folder, scores[1]


def test_saved_atari_agent_scores_what_the_run_logged_at_that_step(atari_run):
    """Same evaluation function, key and games as the run's evaluation at env step 64."""
    config, folder, logged = atari_run
    before = files(folder)
    saved = evaluate_saved(str(folder), config, "Pong", eval_max_steps=MAX_STEPS, **RUN)
    assert files(folder) == before  # read only
    assert saved.env_step == 64
    assert np.any(saved.scores != 0)
    np.testing.assert_array_equal(saved.scores, logged)
    assert saved.protocol == ("saved policy at env step 64 per seed, epsilon-greedy (epsilon "
                              "0.05), 2 games per seed, no life loss, no clipping, 120-step cap")
    assert saved.videos == () and not (folder.parent / "videos").exists()


def test_a_damaged_newest_checkpoint_falls_back_to_the_older_one(atari_run, tmp_path, capsys):
    config, folder, _ = atari_run
    copy = tmp_path / "checkpoints"
    shutil.copytree(folder, copy)
    data = max((p for p in (copy / "16").rglob("*") if p.is_file()),
               key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:-100])
    saved = evaluate_saved(str(copy), config, "Pong", episodes=1, eval_max_steps=20, **RUN)
    assert saved.env_step == 32 and saved.scores.shape == (2, 1)
    warning = capsys.readouterr().err
    assert "step 16" in warning and "restoring step 8" in warning


def test_record_video_writes_seed_0s_first_games_as_mp4(atari_run, tmp_path):
    config, folder, logged = atari_run
    saved = evaluate_saved(str(folder), config, "Pong", eval_max_steps=MAX_STEPS,
                           record_video=2, video_dir=str(tmp_path / "videos"), **RUN)
    np.testing.assert_array_equal(saved.scores, logged)  # recording changes no game
    assert saved.videos == tuple(str(tmp_path / "videos" / f"seed0_game{g}.mp4")
                                 for g in range(2))
    for path in saved.videos:
        with av.open(path) as video:
            stream = video.streams.video[0]
            assert stream.average_rate == VIDEO_FPS == 15
            frames = [f.to_ndarray(format="rgb24") for f in video.decode(stream)]
        # The first screen and one per step: Pong games outlast the 120-step cap.
        assert len(frames) == MAX_STEPS + 1
        assert frames[0].shape == (210, 160, 3) and frames[0].dtype == np.uint8
        assert frames[-1].std() > 0


def test_evaluate_saved_without_a_checkpoint_is_a_clear_error(tmp_path):
    config = get_config("dqn", env="atari", **TINY)
    for folder, what in ((tmp_path / "missing", "does not exist"),
                         (tmp_path, "holds no checkpoint")):
        with pytest.raises(ValueError) as info:
            evaluate_saved(str(folder), config, "Pong", **RUN)
        message = str(info.value)
        assert message.startswith("checkpoint_dir: expected the checkpoints folder")
        assert f"{folder} {what}" in message and "made with --checkpoint" in message
    assert not (tmp_path / "missing").exists()  # nothing created
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(ValueError, match="pass its checkpoints folder"):
        evaluate_saved(str(tmp_path), config, "Pong", **RUN)


@pytest.mark.parametrize("kwargs, message", [
    (dict(episodes=0), "episodes: expected an integer in [1,"),
    (dict(eval_episodes=0), "episodes: expected the games per seed to play"),
    (dict(episodes=2, record_video=3), "record_video: expected an integer in [0, 2]"),
    (dict(record_video=-1), "record_video: expected an integer in [0,"),
])
def test_evaluate_saved_bad_arguments(kwargs, message, tmp_path):
    config = get_config("dqn", env="atari", **TINY)
    with pytest.raises(ValueError) as info:
        evaluate_saved(str(tmp_path), config, "Pong", **{**RUN, **kwargs})
    assert str(info.value).startswith(message)


@pytest.mark.slow
def test_on_ale_py_a_saved_agent_replays_any_logged_evaluation(tmp_path):
    """ale-py reseeds every game at reset, so a fresh pool replays the run's second
    evaluation too (envpool replays only the first: docstring of evaluate_saved); its screen
    pool records the same games."""
    config = get_config("dqn", env="atari", **TINY)
    run = dict(RUN, eval_every=32, backend="ale")
    scores = []
    train_atari(config, "Pong", eval_max_steps=MAX_STEPS, checkpoint_dir=str(tmp_path),
                on_chunk=lambda c: scores.append(c.metrics["scores"]), **run)
    saved = evaluate_saved(str(tmp_path), config, "Pong", eval_max_steps=MAX_STEPS,
                           record_video=1, video_dir=str(tmp_path / "videos"), **run)
    assert saved.env_step == 64
    np.testing.assert_array_equal(saved.scores, scores[1])
    with av.open(saved.videos[0]) as video:
        frames = [f.to_ndarray(format="rgb24") for f in video.decode(video=0)]
    assert len(frames) == MAX_STEPS + 1 and frames[0].shape == (210, 160, 3)


def test_saved_deepsea_agent_plays_greedy_episodes_on_its_mapping(tmp_path):
    config = get_config("ensemble_plus")
    run = dict(num_seeds=2, seed=3, mapping_seeds=[5, 6], chunk_steps=80)
    final = train_deepsea(config, 4, 20, checkpoint_dir=str(tmp_path), **run).carry
    saved = evaluate_saved_deepsea(str(tmp_path), config, 4, 20, episodes=3, **run)
    assert saved.env_step == 80 and saved.returns.shape == saved.treasure.shape == (2, 3)
    np.testing.assert_array_equal(saved.treasure, saved.returns > 0)
    assert saved.protocol.startswith("saved policy at env step 80 per seed, a fresh index "
                                     "per episode, greedy, 3 episodes per seed")
    # The same episodes played step by step by the saved (final) agent on each seed's mapping.
    agent = make_program(config, 4, 20, 80).agent.jit(donate=False)
    played = np.zeros((2, 3))
    for s in range(2):
        state = jax.tree.map(lambda x, s=s: x[s], final.seeds.agent)
        params = deepsea.make_params(deepsea.bsuite_mapping(4, 5 + s))
        keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(3 + 1), s), 3)
        for e, key in enumerate(keys):
            k_index, k_steps = jax.random.split(key)
            xi = agent.eval_index(k_index)
            env, _ = deepsea.reset(params)
            for k in jax.random.split(k_steps, 4):
                out = deepsea.step(params, env, agent.eval_act(
                    state.params, state.prior, k, state_id(env, 4), xi, epsilon=0.0))
                env, played[s, e] = out.state, played[s, e] + float(out.reward)
    np.testing.assert_allclose(saved.returns, played, rtol=1e-6)


def test_evaluate_saved_deepsea_without_a_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"holds no checkpoint; was the run made with "
                                         r"--checkpoint \(hyperx deepsea --checkpoint"):
        evaluate_saved_deepsea(str(tmp_path), get_config("dqn"), 4, 20)
