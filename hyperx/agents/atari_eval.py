"""Evaluate a saved Atari agent without training, and record its games as video.

:func:`evaluate_saved` restores the newest intact checkpoint of a :func:`train_atari` run
(:func:`hyperx.checkpoint.restore_saved`: damaged steps are skipped with a warning) and plays
``episodes`` games per seed with :func:`hyperx.agents.atari.evaluate`, the function the run
evaluates with between chunks, so the protocol is the run's own: greedy on a fresh index per
game for the hyper agents, epsilon-greedy with the config's ``eval_epsilon`` for dqn; no life
loss, raw scores, the 27,000-step cap (Machado et al., JAIR 2018; the HyperAgent reference).

Video: ``record_video=N`` writes seed 0's first N evaluation games as MP4 files (H.264 through
PyAV, whose wheels carry their own FFmpeg: ``pip install "hyperx-rl[video]"``). The frames are
the game's RGB screen at full size (210 x 160), one per agent step, so at the ALE's 60 frames
per second and frame skip 4 a video plays at :data:`VIDEO_FPS` = 15 frames per second, in real
time. The agent sees 84 x 84 grayscale stacks, not screens, so the screens come from a second
pool of the same backend and spec with ``screen=True`` (:func:`hyperx.envs.atari.make_atari`),
seeded like the recorded games and stepped with their actions: the same emulator, seeds and
random draws (no-op starts, sticky actions) play the same games on both backends. Every step
checks that the two agree on reward and lives, and stops with ``RuntimeError`` if they do not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import check_int
from hyperx.agents.atari import (
    EVAL_SEED,
    MAX_EVAL_STEPS,
    PAD,
    checkpoint_metadata,
    eval_protocol,
    evaluate,
    evaluation_seeds,
    initial_carry,
    make_pool,
    make_program,
    run_schedule,
    seed_games,
)
from hyperx.agents.config import AgentConfig
from hyperx.checkpoint import restore_saved
from hyperx.envs.atari import FRAME_SKIP, OBS_SHAPE, AtariEnv, AtariGames, make_atari

ALE_FPS = 60
"""Frames per second of the Atari 2600 (NTSC), which the ALE emulates."""
VIDEO_FPS = ALE_FPS // FRAME_SKIP
"""Frames per second of a recorded game: one screen per agent step, so videos run in real
time."""


class SavedEvaluation(NamedTuple):
    """Outcome of :func:`evaluate_saved`.

    scores: (seeds, episodes) raw game scores, seed by seed; env_step: env steps per seed of
    the restored checkpoint; protocol: how the scores were made, in words; videos: the paths
    of the recorded games, in order (seed 0's games 0, 1, ...).
    """

    scores: np.ndarray
    env_step: int
    protocol: str
    videos: tuple[str, ...]


def evaluate_saved(
    checkpoint_dir: str, config: AgentConfig, game: str | Sequence[str], *, steps: int,
    seeds: int = 1, envs_per_seed: int = 1, backend: str = "envpool", seed: int = 0,
    eval_every: int | None = None, eval_episodes: int = 10, eval_at_start: bool = False,
    chunk_steps: int | None = None, sticky_actions: bool = False,
    episodes: int | None = None, eval_max_steps: int = MAX_EVAL_STEPS,
    record_video: int = 0, video_dir: str | None = None,
) -> SavedEvaluation:
    """Evaluate the newest intact checkpoint in ``checkpoint_dir`` under the run's protocol.

    Args:
      checkpoint_dir: the run's checkpoints folder (``OUT/checkpoints`` of
        ``hyperx atari --checkpoint``, or ``train_atari``'s ``checkpoint_dir``).
      config, game, steps, seeds, envs_per_seed, backend, seed, eval_every, eval_episodes,
        eval_at_start, chunk_steps, sticky_actions: the run's own :func:`train_atari`
        arguments (the checkpoint records them; another value raises ``ValueError`` naming
        the first difference).
      episodes: games per seed (default: the run's ``eval_episodes``).
      eval_max_steps: agent steps per game (27,000: the 108,000-frame cap).
      record_video: write seed 0's first ``record_video`` games (at most ``episodes``) as
        ``video_dir/seed0_game{g}.mp4`` (see the module docstring; needs PyAV).
      video_dir: default: ``videos`` beside ``checkpoint_dir`` (``OUT/videos``).

    The games are seeded as the run's own evaluation at the restored step is
    (:func:`hyperx.agents.atari.evaluation_seeds`: the evaluation's key, games seeded
    ``seed + 10_000 + t``), so with ``episodes = eval_episodes`` the scores are the ones the
    run logged at that step (the step's next evaluation where it logged none), with one
    exception: envpool draws the no-op starts (and sticky actions) of a pool from a generator
    seeded once, when the pool is built, so a fresh pool replays only the run's first
    evaluation (ale-py reseeds every game at reset and replays any).

    Raises ``ValueError`` for a folder with no intact checkpoint (naming it and asking
    whether the run was made with ``--checkpoint``) and for bad arguments.
    """
    if episodes is None and not eval_episodes:
        raise ValueError("episodes: expected the games per seed to play (the run's "
                         "eval_episodes is 0)")
    episodes = eval_episodes if episodes is None else episodes
    check_int("episodes", episodes)
    check_int("record_video", record_video, low=0, high=episodes)
    check_int("eval_max_steps", eval_max_steps)
    if record_video:
        _import_av()
    schedule = run_schedule(steps, envs_per_seed, eval_every, chunk_steps, eval_at_start)
    metadata = checkpoint_metadata(
        config, game, steps=steps, seeds=seeds, envs_per_seed=envs_per_seed, backend=backend,
        seed=seed, schedule=schedule, eval_episodes=eval_episodes,
        sticky_actions=sticky_actions, eval_at_start=eval_at_start)
    games = seed_games(game, seeds)
    several = len(set(games)) > 1
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(contextlib.closing(make_pool(
            games, episodes, seed + EVAL_SEED, several=several, backend=backend,
            training=False, sticky_actions=sticky_actions)))
        program = make_program(config, env.num_actions, seeds, envs_per_seed,
                               schedule.iterations, PAD[backend])
        like = jax.eval_shape(
            lambda obs: initial_carry(program, obs, seed, schedule.num_evals),
            jax.ShapeDtypeStruct((seeds * envs_per_seed, *OBS_SHAPE), jnp.uint8))
        carry = restore_saved(checkpoint_dir, metadata, like, "atari")
        t = int(carry.t)
        env_step = t * envs_per_seed
        logged = np.asarray(carry.evals.steps)[:int(carry.evals.count)]
        key, games_seed = evaluation_seeds(seed, int(np.sum(logged < env_step)), t)
        videos: tuple[str, ...] = ()
        if record_video:
            folder = Path(video_dir) if video_dir is not None else (
                Path(checkpoint_dir).absolute().parent / "videos")
            folder.mkdir(parents=True, exist_ok=True)
            videos = tuple(str(folder / f"seed0_game{g}.mp4") for g in range(record_video))
            screens = stack.enter_context(contextlib.closing(make_atari(
                games[0], backend=backend, num_envs=record_video, seed=seed + EVAL_SEED,
                training=False, sticky_actions=sticky_actions, screen=True,
                full_action_space=several)))
            env = stack.enter_context(contextlib.closing(_Recorder(env, screens, videos)))
        scores = evaluate(program, carry.seeds.agent.params, carry.seeds.agent.prior, env,
                          key, episodes, games_seed, eval_max_steps)
    protocol = (f"saved policy at env step {env_step} per seed, {eval_protocol(config)}, "
                f"{episodes} games per seed, no life loss, no clipping, "
                f"{eval_max_steps:,}-step cap")
    return SavedEvaluation(scores, env_step, protocol, videos)


def _import_av() -> Any:
    try:
        import av
    except ImportError:
        raise ImportError('record_video: needs PyAV, the video extra: pip install '
                          '"hyperx-rl[video]"') from None
    return av


class _Video:
    """One MP4 file written frame by frame: H.264, yuv420p, :data:`VIDEO_FPS`."""

    def __init__(self, path: str, height: int, width: int):
        av = _import_av()
        self._av = av
        self._file = av.open(path, mode="w", format="mp4")
        self._stream = self._file.add_stream("h264", rate=VIDEO_FPS)
        self._stream.height, self._stream.width, self._stream.pix_fmt = height, width, "yuv420p"

    def add(self, frame: np.ndarray) -> None:
        """Append one (height, width, 3) uint8 RGB frame."""
        image = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        self._file.mux(self._stream.encode(image))

    def close(self) -> None:
        """Flush the encoder and finish the file."""
        self._file.mux(self._stream.encode())
        self._file.close()


class _Recorder:
    """The evaluated pool (its ``reset`` and ``step``, which :func:`evaluate` calls) with a
    screen pool of its first N games stepped beside it; each game's screens go to its video
    until the game ends."""

    def __init__(self, env: AtariEnv | AtariGames, screens: AtariEnv, paths: tuple[str, ...]):
        self.env, self.screens, self.paths = env, screens, paths
        self.videos: list[_Video | None] = []

    def reset(self, *, seed: int) -> tuple[np.ndarray, dict]:
        """Start every game of both pools, and one video per recorded game."""
        out = self.env.reset(seed=seed)
        frames, _ = self.screens.reset(seed=seed)
        self.close_videos()
        self.videos = [_Video(path, *frames.shape[1:3]) for path in self.paths]
        for video, frame in zip(self.videos, frames, strict=True):
            video.add(frame)
        return out

    def step(self, actions: np.ndarray) -> tuple:
        """Step both pools; add each recorded game's screen until that game ends."""
        out = self.env.step(actions)
        info = out[4]
        n = self.screens.num_envs
        frames, _, _, _, screen_info = self.screens.step(actions[:n])
        for g, video in enumerate(self.videos):
            if video is None:
                continue
            if (info["raw_reward"][g] != screen_info["raw_reward"][g]
                    or info["lives"][g] != screen_info["lives"][g]):
                raise RuntimeError(f"record_video: the screen pool left game {g} (reward "
                                   f"{screen_info['raw_reward'][g]} vs {info['raw_reward'][g]},"
                                   f" lives {screen_info['lives'][g]} vs {info['lives'][g]})")
            video.add(frames[g])
            if info["game_over"][g] or out[3][g]:
                video.close()
                self.videos[g] = None
        return out

    def close_videos(self) -> None:
        """Finish the videos of games still running (stopped at the step cap)."""
        for video in self.videos:
            if video is not None:
                video.close()
        self.videos = []

    def close(self) -> None:
        """Finish every open video."""
        self.close_videos()

