"""Atari 2600 games through envpool or ale-py, with the DeepMind preprocessing, in two faces.

Preprocessing (Mnih et al., Nature 2015; Machado et al., JAIR 2018), the same on both
backends: up to ``noop_max`` = 30 no-op actions after each reset, frame skip 4 with a max-pool
over the last two frames, 84 x 84 grayscale, a stack of the last 4 frames (``obs[:, -1]`` is
the newest), FIRE after each reset in games that need it, an episode cap of 108,000 frames
(27,000 agent steps), sticky actions with probability 0.25 when ``sticky_actions`` (off by
default, as in the references). The emulator work runs in the backend (C++).

Training and evaluation differ only here (``training``): in training a lost life ends the
episode for the learner (``terminated``, no bootstrap) while the game goes on, and the reward
is clipped to its sign; in evaluation only game over ends an episode and rewards are raw.
Life loss is derived from the ``lives`` counter (``lives`` drops and the game is not over), the
same way on both backends: the backends' own episodic-life options differ (ale-py's restarts
the game at a lost life), so both run with it off. The raw reward is always returned too
(``info["raw_reward"]``), so training logs report game scores.

Autoreset (both backends, "next step"): after a step that ends the game (game over or the
frame cap), the NEXT step ignores its action and returns the first observation of a new game
with reward 0; that output is flagged ``reset_step``. A learner must not store the transition
of a reset step: its "observation" is the previous game's last one and its "next observation"
the new game's first. :mod:`hyperx.agents.atari` masks those steps out of the replay, and
:mod:`hyperx.replay_frames` never builds a frame stack across a game start.

Where the backends differ (tests/envs/test_atari_env.py measures it): the stack right after a
reset repeats the first frame four times in envpool and pads with three zero frames in ale-py;
the no-op starts draw from each backend's own generator, and envpool takes
``1 + U{0, ..., max(noop_max, 1) - 1}`` of them in games without FIRE (so at least one; in
games with FIRE one fewer, then FIRE), the count of the baselines wrappers (1 to 30); and the
84 x 84 resize differs (envpool resizes with area interpolation, as cv2's ``INTER_AREA``).
With ``noop_max=0`` and the same actions, the newest frames agree to within a few gray levels
in most pixels (the test states the bound). On Freeway from the same start, envpool's frames,
rewards and game end are those of the authors' HyperAgent wrappers (gym + ale-py, cv2) to
within 2 gray levels in 99.7% of pixels (tests/envs/test_atari_reference_front_end.py).

Faces: :class:`AtariEnv` is a gymnasium ``VectorEnv`` (``reset``/``step`` on NumPy, for host
loops and users' own code), and :meth:`AtariEnv.xla` returns ``(state, step)`` with a pure
``step(state, actions) -> (state, AtariStep)`` that runs inside ``jax.jit`` and ``lax.scan``.
Batches are ordered by environment id (both backends run synchronously: batch = all envs).
An env handle cannot be vmapped: batch seeds by giving one pool ``seeds x envs`` environments.
:class:`AtariGames` puts several games' pools side by side in one batch with the same faces.

Screens (``screen=True``): the same games with full-size RGB observations (B, 210, 160, 3)
instead of the 84 x 84 grayscale stack; like the agent's frames, each is the max over the agent
step's last two emulator frames (envpool has no other mode). Nothing else changes (emulator
settings, seeds, random draws), so a screen pool stepped with the same actions as a preprocessed
pool of the same spec plays the same games (:mod:`hyperx.agents.atari_eval` records evaluation
games this way; tests/agents/test_evaluate_saved.py checks that the two stay in step).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import check_choice, check_int

Array = jax.Array
BACKENDS = ("envpool", "ale")
OBS_SHAPE = (4, 84, 84)
SCREEN_SHAPE = (210, 160, 3)
MAX_EPISODE_FRAMES = 108_000
FRAME_SKIP = 4

ATARI_26 = ("Alien", "Amidar", "Assault", "Asterix", "BankHeist", "BattleZone", "Boxing",
            "Breakout", "ChopperCommand", "CrazyClimber", "DemonAttack", "Freeway", "Frostbite",
            "Gopher", "Hero", "Jamesbond", "Kangaroo", "Krull", "KungFuMaster", "MsPacman",
            "Pong", "PrivateEye", "Qbert", "RoadRunner", "Seaquest", "UpNDown")
"""The 26 games of the Atari-100k suite (Kaiser et al., ICLR 2020), HyperAgent's Atari-26."""


def rom_id(game: str) -> str:
    """ale-py's ROM id of a game spelled as envpool and the papers do: ``"MsPacman"`` ->
    ``"ms_pacman"``, ``"UpNDown"`` -> ``"up_n_down"``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower()


def game_names() -> tuple[str, ...]:
    """Every game both backends ship a ROM for, in the ``"MsPacman"`` spelling."""
    from ale_py import roms

    ale = set(roms.get_all_rom_ids())
    try:
        import envpool

        pool = {name[:-3] for name in envpool.list_all_envs() if name.endswith("-v5")}
    except ImportError:
        pool = {"".join(part.capitalize() for part in r.split("_")) for r in ale}
    return tuple(sorted(g for g in pool if rom_id(g) in ale))


def action_meanings(game: str) -> tuple[str, ...]:
    """The names of a game's actions in the order both backends number them (ALE's minimal
    action set): ``action_meanings("Freeway") == ("NOOP", "UP", "DOWN")``."""
    from ale_py import ALEInterface, LoggerMode, roms

    if game not in game_names():
        raise ValueError(f"game: expected an Atari game name such as 'Breakout', got {game!r}")
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.loadROM(roms.get_rom_path(rom_id(game)))
    return tuple(a.name for a in ale.getMinimalActionSet())


@dataclasses.dataclass(frozen=True)
class AtariSpec:
    """What to build: ``game`` (``"Breakout"``), ``backend`` ("envpool" or "ale"),
    ``num_envs`` environments seeded ``seed, seed + 1, ...``, ``training`` (life loss ends
    the learner's episode, rewards clipped), ``noop_max`` no-op starts, ``sticky_actions``
    (repeat probability 0.25), ``max_episode_frames`` (108,000: 27,000 agent steps),
    ``screen`` (full-size RGB observations, :data:`SCREEN_SHAPE`, instead of the stack),
    ``full_action_space`` (the ALE's 18 actions in every game instead of the game's minimal
    set: what lets agents of several games share one network, :class:`AtariGames`)."""

    game: str
    backend: str = "envpool"
    num_envs: int = 1
    seed: int = 0
    training: bool = True
    noop_max: int = 30
    sticky_actions: bool = False
    max_episode_frames: int = MAX_EPISODE_FRAMES
    screen: bool = False
    full_action_space: bool = False

    def __post_init__(self) -> None:
        check_choice("backend", self.backend, BACKENDS)
        names = game_names()
        if self.game not in names:
            raise ValueError(f"game: expected an Atari game name such as 'Breakout' or "
                             f"'MsPacman' (one of {len(names)}: {', '.join(names[:6])}, ...), "
                             f"got {self.game!r}")
        check_int("num_envs", self.num_envs)
        check_int("noop_max", self.noop_max, low=0)
        check_int("max_episode_frames", self.max_episode_frames)
        check_int("seed", self.seed, low=0, high=2**31 - 1 - self.num_envs)


class AtariStep(NamedTuple):
    """One batched step, leaves shaped (B, ...), ordered by environment id.

    obs: (B, 4, 84, 84) uint8 stacks; reward: float32, clipped to its sign in training;
    raw_reward: float32 game score; terminated: the learner's terminal flag (game over, or a
    lost life in training); truncated: the frame cap; game_over: the game ended (no life
    left); reset_step: this output is the first observation of a new game (the action was
    ignored, see the module's autoreset note); lives: int32.
    """

    obs: Array
    reward: Array
    raw_reward: Array
    terminated: Array
    truncated: Array
    game_over: Array
    reset_step: Array
    lives: Array


class EnvCarry(NamedTuple):
    """What the XLA step carries besides the backend handle: the last ``lives`` and whether
    the last output ended the game (so the next one is a reset step)."""

    handle: Array
    lives: Array
    ended: Array


def postprocess(lives_before: Array, ended_before: Array, obs: Array, reward: Array,
                terminated: Array, truncated: Array, lives: Array, training: bool
                ) -> AtariStep:
    """A backend's raw outputs (life loss off, raw rewards) as an :class:`AtariStep`.

    ``reset_step = ended_before`` (next-step autoreset); a life is lost when ``lives`` drops
    outside a reset step and the game is not over.
    """
    raw = reward.astype(jnp.float32)
    game_over = terminated.astype(bool) & ~ended_before
    truncated = truncated.astype(bool) & ~game_over & ~ended_before
    life_lost = (lives < lives_before) & ~ended_before & ~game_over
    learner_terminal = game_over | (life_lost & training)
    return AtariStep(obs=obs, reward=jnp.sign(raw) if training else raw, raw_reward=raw,
                     terminated=learner_terminal, truncated=truncated, game_over=game_over,
                     reset_step=ended_before, lives=lives.astype(jnp.int32))


class AtariEnv(gymnasium.vector.VectorEnv):
    """A batch of preprocessed Atari games (see the module docstring), gymnasium vector API.

    ``reset(seed=None) -> (obs, info)`` and ``step(actions) -> (obs, reward, terminated,
    truncated, info)`` on NumPy, where ``info`` holds ``raw_reward``, ``game_over``,
    ``reset_step`` and ``lives``; :meth:`xla` gives the compiled face.
    """

    def __init__(self, spec: AtariSpec):
        self.spec_ = spec
        self.num_envs = spec.num_envs
        self._env = _make_backend(spec)
        self.num_actions = int(self._env.action_space.nvec[0]
                               if hasattr(self._env.action_space, "nvec")
                               else self._env.single_action_space.n)
        self.single_observation_space = gymnasium.spaces.Box(
            0, 255, SCREEN_SHAPE if spec.screen else OBS_SHAPE, np.uint8)
        self.single_action_space = gymnasium.spaces.Discrete(self.num_actions)
        self.observation_space = gymnasium.vector.utils.batch_space(
            self.single_observation_space, spec.num_envs)
        self.action_space = gymnasium.vector.utils.batch_space(
            self.single_action_space, spec.num_envs)
        self._lives = np.zeros(spec.num_envs, np.int32)
        self._ended = np.zeros(spec.num_envs, bool)
        self._reset_done = False

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start every game; ``seed`` (default: the spec's) seeds env i with ``seed + i``."""
        del options
        seed = self.spec_.seed if seed is None else seed
        if self.spec_.backend == "ale":
            obs, info = self._env.reset(seed=seed)
        else:
            obs, info = self._env.reset()
        self._lives = np.asarray(info["lives"], np.int32)
        self._ended = np.zeros(self.num_envs, bool)
        self._reset_done = True
        return self._observation(np.asarray(obs)), {"lives": self._lives.copy()}

    def step(self, actions: np.ndarray) -> tuple:
        """One step of every game; see :class:`AtariStep` for the flags."""
        if not self._reset_done:
            raise RuntimeError("AtariEnv.step: call reset() first")
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,) or not np.issubdtype(actions.dtype, np.integer):
            raise ValueError(f"actions: expected {self.num_envs} integer actions, got "
                             f"{actions.dtype} of shape {actions.shape}")
        if actions.size and (actions.min() < 0 or actions.max() >= self.num_actions):
            raise ValueError(f"actions: expected values in [0, {self.num_actions}), got "
                             f"[{actions.min()}, {actions.max()}]")
        obs, reward, term, trunc, info = self._env.step(actions.astype(np.int32))
        out = jax.device_get(postprocess(
            self._lives, self._ended, self._observation(np.asarray(obs)), np.asarray(reward),
            np.asarray(term), np.asarray(trunc), np.asarray(info["lives"]), self.spec_.training))
        self._lives = out.lives
        self._ended = out.game_over | out.truncated
        info = {"raw_reward": out.raw_reward, "game_over": out.game_over,
                "reset_step": out.reset_step, "lives": out.lives}
        return out.obs, out.reward, out.terminated, out.truncated, info

    def xla(self) -> tuple[EnvCarry, Any]:
        """``(carry, step)``: resets the games and returns the compiled face, where
        ``step(carry, actions) -> (carry, AtariStep)`` is pure (inside ``jit``/``scan``)
        and the first observation is :attr:`first_obs`."""
        carry, send, recv = self.xla_halves()
        return carry, lambda c, actions: recv(send(c, actions))

    def xla_halves(self) -> tuple[EnvCarry, Any, Any]:
        """:meth:`xla`'s step in two halves, ``send(carry, actions) -> sent`` (the emulators
        start) and ``recv(sent) -> (carry, AtariStep)`` (wait for them), so that several
        pools can step at once (:class:`AtariGames`). On ale-py, whose XLA face has only
        the whole step, ``send`` keeps the actions and ``recv`` steps."""
        obs, info = self.reset()
        self.first_obs = obs
        training = self.spec_.training
        face = self._env.xla()

        def finish(carry: EnvCarry, handle: Array, raw: tuple) -> tuple[EnvCarry, AtariStep]:
            obs, reward, term, trunc, info = raw
            out = postprocess(carry.lives, carry.ended, self._observation(obs), reward, term,
                              trunc, info["lives"], training)
            return EnvCarry(handle, out.lives, out.game_over | out.truncated), out

        if self.spec_.backend == "ale":
            raw_step = face[2]

            def send(carry: EnvCarry, actions: Array) -> tuple[EnvCarry, Array]:
                return carry, actions.astype(jnp.int32)

            def recv(sent: tuple[EnvCarry, Array]) -> tuple[EnvCarry, AtariStep]:
                carry, actions = sent
                return finish(carry, *raw_step(carry.handle, actions))
        else:
            raw_recv, raw_send = face[1], face[2]

            def send(carry: EnvCarry, actions: Array) -> EnvCarry:
                return carry._replace(handle=raw_send(carry.handle, actions.astype(jnp.int32)))

            def recv(sent: EnvCarry) -> tuple[EnvCarry, AtariStep]:
                return finish(sent, *raw_recv(sent.handle))

        carry = EnvCarry(jnp.asarray(face[0]), jnp.asarray(info["lives"], jnp.int32),
                         jnp.zeros(self.num_envs, bool))
        return carry, send, recv

    def _observation(self, obs: Any) -> Any:
        """The backend's observations in this env's layout: screens are (B, 210, 160, 3) on
        both backends (envpool gives (B, 3, 210, 160), ale-py (B, 1, 210, 160, 3))."""
        if not self.spec_.screen:
            return obs
        return obs.transpose(0, 2, 3, 1) if self.spec_.backend == "envpool" else obs[:, 0]

    def close(self, **kwargs: Any) -> None:
        """Release the backend."""
        close = getattr(self._env, "close", None)
        if close is not None:
            close()


def make_atari(game: str, *, backend: str = "envpool", num_envs: int = 1, seed: int = 0,
               training: bool = True, noop_max: int = 30, sticky_actions: bool = False,
               max_episode_frames: int = MAX_EPISODE_FRAMES, screen: bool = False,
               full_action_space: bool = False) -> AtariEnv:
    """``num_envs`` preprocessed games of ``game`` on ``backend`` (see :class:`AtariSpec`)."""
    return AtariEnv(AtariSpec(game, backend, num_envs, seed, training, noop_max,
                              sticky_actions, max_episode_frames, screen, full_action_space))


class AtariGames(gymnasium.vector.VectorEnv):
    """Several Atari games in one batch: the pools of ``layout`` (``(game, num_envs)`` pairs,
    a game may repeat) side by side on the batch axis, in order, each with the ALE's full
    action set (18 actions), so that agents of different games share one network and one
    compiled program. Env ``i`` of the whole batch is seeded ``seed + i``, as in one pool.

    The faces are :class:`AtariEnv`'s. In :meth:`xla`'s step every pool's emulators start
    before any is waited for (envpool's ``send`` / ``recv``, held apart by an
    ``optimization_barrier``), so the games run at once on the pools' threads; on ale-py the
    pools step one after another. ``options`` go to every pool (:func:`make_atari`).
    """

    def __init__(self, layout: Sequence[tuple[str, int]], *, seed: int = 0, **options: Any):
        if not layout:
            raise ValueError("layout: expected at least one (game, num_envs) pair, got none")
        starts = np.cumsum([0] + [n for _, n in layout])
        self.envs: list[AtariEnv] = []
        try:
            for (game, n), start in zip(layout, starts, strict=False):
                self.envs.append(make_atari(game, num_envs=n, seed=seed + int(start),
                                            full_action_space=True, **options))
        except BaseException:
            self.close()
            raise
        self.layout = tuple((game, n) for game, n in layout)
        self._splits = starts[1:-1]
        first = self.envs[0]
        self.num_envs = int(starts[-1])
        self.num_actions = first.num_actions
        self.single_observation_space = first.single_observation_space
        self.single_action_space = first.single_action_space
        self.observation_space = gymnasium.vector.utils.batch_space(
            self.single_observation_space, self.num_envs)
        self.action_space = gymnasium.vector.utils.batch_space(
            self.single_action_space, self.num_envs)

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start every game (``seed``: env ``i`` of the batch gets ``seed + i``)."""
        del options
        parts = [env.reset(seed=None if seed is None else seed + start)
                 for env, start in zip(self.envs, (0, *self._splits), strict=True)]
        return _concat(parts)

    def step(self, actions: np.ndarray) -> tuple:
        """One step of every game, as :meth:`AtariEnv.step`."""
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"actions: expected {self.num_envs} integer actions, got "
                             f"{actions.dtype} of shape {actions.shape}")
        return _concat([env.step(a) for env, a in
                        zip(self.envs, np.split(actions, self._splits), strict=True)])

    def xla(self) -> tuple[tuple[EnvCarry, ...], Any]:
        """``(carry, step)`` as :meth:`AtariEnv.xla`, the carry one :class:`EnvCarry` per
        pool; :attr:`first_obs` is the batch's first observation."""
        halves = [env.xla_halves() for env in self.envs]
        self.first_obs = np.concatenate([env.first_obs for env in self.envs])
        sends, recvs = [h[1] for h in halves], [h[2] for h in halves]
        splits = [int(i) for i in self._splits]

        def step(carry: tuple[EnvCarry, ...], actions: Array
                 ) -> tuple[tuple[EnvCarry, ...], AtariStep]:
            sent = jax.lax.optimization_barrier(tuple(
                send(c, a) for send, c, a in
                zip(sends, carry, jnp.split(actions, splits), strict=True)))
            carry, outs = zip(*(recv(s) for recv, s in zip(recvs, sent, strict=True)),
                              strict=True)
            return tuple(carry), jax.tree.map(lambda *xs: jnp.concatenate(xs), *outs)

        return tuple(h[0] for h in halves), step

    def close(self, **kwargs: Any) -> None:
        """Release every pool."""
        for env in self.envs:
            env.close()


def _concat(parts: Sequence[tuple]) -> tuple:
    """Pools' outputs (arrays and dicts of arrays) joined on the batch axis, in order."""
    return jax.tree.map(lambda *xs: np.concatenate(xs), *parts)


def _make_backend(spec: AtariSpec) -> Any:
    sticky = 0.25 if spec.sticky_actions else 0.0
    height, width, _ = SCREEN_SHAPE if spec.screen else (*OBS_SHAPE[1:], 1)
    stack = 1 if spec.screen else OBS_SHAPE[0]
    if spec.backend == "envpool":
        import envpool

        # one emulator thread per game up to the cores this process may use (envpool's own
        # default reads the host's core count, which a container or a CPU mask can cut)
        return envpool.make(
            f"{spec.game}-v5", env_type="gymnasium", num_envs=spec.num_envs, seed=spec.seed,
            num_threads=min(spec.num_envs, len(os.sched_getaffinity(0))),
            episodic_life=False, reward_clip=False, noop_max=max(spec.noop_max, 1),
            frame_skip=FRAME_SKIP, stack_num=stack, img_height=height, img_width=width,
            gray_scale=not spec.screen, max_episode_steps=spec.max_episode_frames // FRAME_SKIP,
            repeat_action_probability=sticky, use_fire_reset=True,
            full_action_space=spec.full_action_space)
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv(
        rom_id(spec.game), spec.num_envs, frameskip=FRAME_SKIP, stack_num=stack,
        img_height=height, img_width=width, grayscale=not spec.screen, maxpool=True,
        noop_max=spec.noop_max, episodic_life=False, reward_clipping=False, use_fire_reset=True,
        max_num_frames_per_episode=spec.max_episode_frames,
        repeat_action_probability=sticky, full_action_space=spec.full_action_space)
