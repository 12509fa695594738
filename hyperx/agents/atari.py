"""Train a value-based agent on Atari: the whole loop (XLA env step, act, store, update, target
sync) in one compiled ``lax.scan``, run in chunks through :func:`hyperx.loop.run_scan`.

One pool of ``seeds x envs_per_seed`` games (:mod:`hyperx.envs.atari`) serves every seed: an
env handle cannot be vmapped, so the pool's batch axis is split into seeds, and the agents
(:func:`hyperx.agents.core.make_agent` with ``num_envs=envs_per_seed``) are vmapped over
seeds. Per iteration every game takes one step; autoreset steps (the first observation of a
new game, returned one step after a game ends) store nothing, and the frame replay
(:func:`hyperx.replay_frames.make_frame_replay`, one stream per game) never builds a stack
across a game start.

Between chunks (``eval_every`` env steps per seed) the host evaluates every seed's greedy
policy on separate games (no life loss, no clipping, a fresh index per episode, the 27,000-step
cap), logs, and saves the carry with orbax. Two scores are kept: the final policy's (the
rliable protocol) and the best evaluation so far with its parameters (HyperAgent's code keeps
that checkpoint and re-evaluates it on 200 episodes: ``best_eval_episodes``); every number
is labelled with its protocol.

One program runs a chunk whatever the device count (:func:`compiled_step`): a ``shard_map``
over a 1-D mesh ``"runs"`` of the given devices, by default the first local device (a mesh of
one), where each device runs its block of seeds against its own pool of games. A pool's XLA
step is a custom call bound to its emulators, which XLA cannot partition, so the seeds are
split by ``shard_map`` rather than by a sharded ``jit``; with envpool the pools are seeded to
continue one another, so a sharded run plays the games of an unsharded one.

The host loop (``host_loop=True``, :func:`host_steps`) is the one other way, for a platform
without the XLA step: it keeps the emulators' step in Python, calling the gymnasium face
between the jitted ``act`` and ``observe`` of the same program, on one device, one iteration
per call. For the same seed it stores the same transitions (tests/agents/test_atari.py).
Evaluation is the agent's own policy (:attr:`hyperx.agents.core.Agent.eval_act`) played on
separate games.

Checkpoints hold the learner (parameters, target, optimiser, replay, RNG keys), the step
counter and the evaluation history, not the emulators: a resumed run starts new games (its
first stored observation of each stream is flagged as a game start).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from hyperx._host import write_atomic
from hyperx._validation import check_int, check_range
from hyperx.agents.config import AgentConfig
from hyperx.agents.core import Agent, AgentState, BatchTransition, make_agent
from hyperx.agents.keys import run_key, step_keys
from hyperx.envs.atari import OBS_SHAPE, AtariEnv, AtariGames, AtariStep, EnvCarry, make_atari
from hyperx.loop import (
    Chunk,
    ScanProgram,
    compiler_options,
    run_chunks,
    run_scan,
    scan_program,
    shard_leading_axis,
)
from hyperx.replay import replay_bytes
from hyperx.replay_frames import make_frame_replay

Array = jax.Array
PAD = {"envpool": "repeat", "ale": "zero"}
"""How each backend fills the stack right after a reset (see :mod:`hyperx.envs.atari`)."""
MAX_ACTIONS = 18
"""The ALE's full action set, the most actions a game has (:func:`check_replay_memory`)."""
MAX_EVAL_STEPS = 27_000
EVAL_SEED = 10_000
"""Offset of the evaluation games' seeds from the run's ``seed`` (:func:`evaluation_seeds`)."""
GAMES_FILE = "training_games.json"
"""The finished training games so far, kept beside the checkpoints (:func:`saved_games`)."""


class SeedCarry(NamedTuple):
    """One seed's loop state (leading seed axis when vmapped): the agent, its key, the
    current observations (E, 4, 84, 84), whether each is a game's first, and the running raw
    score and length of each game."""

    agent: AgentState
    key: Array
    obs: Array
    first: Array
    game_return: Array
    game_length: Array


class Evaluations(NamedTuple):
    """Evaluation history (rows in order; ``count`` used): env steps per seed at each
    evaluation, mean greedy score per seed, and the best so far with its parameters."""

    steps: Array
    scores: Array
    count: Array
    best_score: Array
    best_step: Array
    best_params: Any


class AtariCarry(NamedTuple):
    """What a checkpoint holds: iteration counter, seeds, evaluation history."""

    t: Array
    seeds: SeedCarry
    evals: Evaluations


class StepLog(NamedTuple):
    """Per iteration and game (S, E): did a game end, its raw score and length, and the
    agents' last loss (S,)."""

    ended: Array
    game_return: Array
    game_length: Array
    loss: Array


class AtariProgram(NamedTuple):
    """The pieces of a run, built once per (config, game, seeds, envs, actions): the pure
    ``act`` / ``observe`` halves of an iteration (on any block of seeds: all of them, or one
    device's), the jitted ``init``, the host loop's jitted halves (``host_act``,
    ``host_observe``) and ``eval_act(params, prior, keys, obs, xi, epsilon)``, the agent's own
    evaluation policy (:attr:`hyperx.agents.core.Agent.eval_act`) vmapped over seeds and jitted
    once per ``epsilon``. The caller holds it; nothing is cached in this module."""

    agent: Agent
    num_seeds: int
    envs_per_seed: int
    act: Callable
    observe: Callable
    init: Callable
    host_act: Callable
    host_observe: Callable
    eval_act: Callable


class AtariResult(NamedTuple):
    """Outcome of :func:`train_atari`.

    episodes: list of dicts (seed, env, env_step, score, length) of finished training games
    (raw scores, whole games; from the start of the run, also when it resumed);
    evaluations: list of dicts (seed, env_step, score) of the final-policy protocol;
    best: per seed {score, env_step} of the best evaluation, and ``best_rerun`` scores
    where ``best_eval_episodes`` asked; env_steps_per_s: env steps per second summed over
    seeds (acting + learning, after compiling); compile_time_s;
    replay_bytes: bytes of one seed's replay; carry: the final :class:`AtariCarry`;
    games: the game each seed played (with several games every row also names its game).
    """

    episodes: list
    evaluations: list
    best: list
    env_steps_per_s: float
    compile_time_s: float
    replay_bytes: int
    steps_done: int
    carry: AtariCarry
    games: tuple[str, ...]


class Schedule(NamedTuple):
    """A run's iterations (one env step of each of a seed's games): in all, between
    evaluations, per chunk; and the rows of its evaluation history."""

    iterations: int
    eval_iters: int
    chunk_iters: int
    num_evals: int


def run_schedule(steps: int, envs_per_seed: int, eval_every: int | None,
                 chunk_steps: int | None, eval_at_start: bool) -> Schedule:
    """The :class:`Schedule` of :func:`train_atari`'s arguments (checked: ``ValueError``)."""
    check_int("steps", steps)
    check_int("envs_per_seed", envs_per_seed)
    for name, value in (("eval_every", eval_every), ("chunk_steps", chunk_steps)):
        if value is not None:
            check_int(name, value)
    iterations = math.ceil(steps / envs_per_seed)
    eval_iters = math.ceil((eval_every or max(steps // 10, envs_per_seed)) / envs_per_seed)
    every = eval_iters if chunk_steps is None else math.ceil(chunk_steps / envs_per_seed)
    if eval_iters % every:
        raise ValueError(f"chunk_steps: expected a divisor of eval_every = "
                         f"{eval_iters * envs_per_seed} env steps, got {chunk_steps}")
    return Schedule(iterations, eval_iters, every,
                    math.ceil(iterations / eval_iters) + int(eval_at_start))


def checkpoint_metadata(config: AgentConfig, game: str | Sequence[str], *, steps: int, seeds: int,
                        envs_per_seed: int, backend: str, seed: int, schedule: Schedule,
                        eval_episodes: int, sticky_actions: bool, eval_at_start: bool
                        ) -> dict[str, Any]:
    """What :func:`train_atari`'s checkpoints record of their run; restoring one needs the
    same (:class:`hyperx.checkpoint.CheckpointManager` names the first difference)."""
    return {"agent": config.name, "config": repr(config),
            "game": game if isinstance(game, str) else list(game), "steps": steps,
            "seeds": seeds, "envs_per_seed": envs_per_seed, "backend": backend, "seed": seed,
            "eval_every": schedule.eval_iters, "eval_episodes": eval_episodes,
            "sticky_actions": sticky_actions,
            **({"chunk": schedule.chunk_iters}
               if schedule.chunk_iters != schedule.eval_iters else {}),
            **({"eval_at_start": True} if eval_at_start else {})}


def evaluation_seeds(seed: int, index: int, t: int) -> tuple[Array, int]:
    """The key and the games' seed of a run's evaluation number ``index`` (0, 1, ...) at
    iteration ``t``: ``fold_in(PRNGKey(seed + 1), index)`` and ``seed + 10_000 + t`` (the
    evaluation pool itself is built with seed ``seed + 10_000``)."""
    return jax.random.fold_in(jax.random.PRNGKey(seed + 1), index), seed + EVAL_SEED + t


def seed_games(game: str | Sequence[str], seeds: int) -> tuple[str, ...]:
    """The game each of ``seeds`` agents plays: ``game``, or with several games the seeds
    split into equal consecutive blocks, one per game in order (``seeds`` a multiple of
    their number)."""
    games = (game,) if isinstance(game, str) else tuple(game)
    if not games or not all(isinstance(g, str) for g in games):
        raise ValueError(f"game: expected a game name or a sequence of them, got {game!r}")
    check_int("seeds", seeds)
    if seeds % len(games):
        raise ValueError(f"seeds: expected a multiple of the {len(games)} games (each game's "
                         f"agents a block of equal size), got {seeds}")
    return tuple(g for g in games for _ in range(seeds // len(games)))


def make_pool(games: Sequence[str], per_seed: int, seed: int, *, several: bool,
              **options: Any) -> AtariEnv | AtariGames:
    """The games of a block of seeds that play ``games`` (one name per seed, as
    :func:`seed_games` gives), ``per_seed`` environments each, env ``i`` seeded ``seed + i``:
    one :class:`hyperx.envs.atari.AtariEnv` when the run has one game, else an
    :class:`hyperx.envs.atari.AtariGames` (the ALE's full action set, so that every agent
    has the same 18 actions). ``options`` go to :func:`hyperx.envs.atari.make_atari`."""
    if not several:
        return make_atari(games[0], num_envs=len(games) * per_seed, seed=seed, **options)
    return AtariGames([(g, n * per_seed) for g, n in _runs(games)], seed=seed, **options)


def make_program(config: AgentConfig, num_actions: int, num_seeds: int, envs_per_seed: int,
                 step_budget: int, pad: str) -> AtariProgram:
    """The act / observe halves of one iteration for ``num_seeds`` vmapped agents.

    The agents' frame replay (one stream per game, ``pad`` as the backend fills a stack) is
    built, sized and checked against device memory by :func:`make_agent`, for ``num_seeds``
    seeds whose state a chunk holds once (the chunk donates its carry:
    :func:`hyperx.loop.scan_program`). Per iteration a seed's key chain steps as
    :func:`hyperx.agents.keys.step_keys`.
    ``act``, ``observe`` and ``init`` take the number of seeds from their inputs, so the same
    functions run all ``num_seeds`` seeds or one device's block of them."""
    check_int("num_seeds", num_seeds)
    check_int("envs_per_seed", envs_per_seed)
    agent = make_agent(config, num_actions, jnp.zeros(OBS_SHAPE, jnp.uint8),
                       step_budget=step_budget * envs_per_seed, num_envs=envs_per_seed,
                       replay=functools.partial(make_frame_replay, pad=pad),
                       num_seeds=num_seeds)

    def act(seeds: SeedCarry) -> tuple[SeedCarry, Array, Array]:
        key, k_act, k_observe = jax.vmap(step_keys)(seeds.key)
        actions = jax.vmap(agent.act)(seeds.agent, k_act, seeds.obs)
        return seeds._replace(key=key), actions, k_observe

    def observe(seeds: SeedCarry, actions: Array, k_observe: Array, out: AtariStep
                ) -> tuple[SeedCarry, StepLog]:
        out = jax.tree.map(lambda x: x.reshape(seeds.first.shape + x.shape[1:]), out)
        valid = ~out.reset_step
        transition = BatchTransition(seeds.obs, actions, out.reward, out.terminated,
                                     out.truncated, seeds.first, valid)
        agents = jax.vmap(agent.observe)(seeds.agent, k_observe, transition)
        game_return = seeds.game_return + jnp.where(valid, out.raw_reward, 0.0)
        game_length = seeds.game_length + valid.astype(jnp.int32)
        ended = out.game_over | out.truncated
        log = StepLog(ended, game_return, game_length, agents.loss)
        return SeedCarry(agents, seeds.key, out.obs, out.reset_step,
                         jnp.where(ended, 0.0, game_return),
                         jnp.where(ended, 0, game_length)), log

    def init(keys: Array, obs: Array) -> SeedCarry:
        agents = jax.vmap(agent.init)(keys)
        games = (keys.shape[0], envs_per_seed)
        zeros = jnp.zeros(games)
        return SeedCarry(agents, jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys),
                         obs.reshape(games + OBS_SHAPE), jnp.ones(games, bool), zeros,
                         zeros.astype(jnp.int32))

    def eval_act(params: Any, prior: Any, keys: Array, obs: Array, xi: Array,
                 epsilon: float) -> Array:
        return jax.vmap(functools.partial(agent.eval_act, epsilon=epsilon))(
            params, prior, keys, obs, xi)

    return AtariProgram(agent, num_seeds, envs_per_seed, act, observe, jax.jit(init),
                        jax.jit(act), jax.jit(observe, donate_argnums=0,
                                              compiler_options=compiler_options()),
                        jax.jit(eval_act, static_argnames="epsilon"))


def check_replay_memory(config: AgentConfig, seeds: int, steps: int) -> None:
    """Raise ``ValueError`` with the estimate when ``seeds`` agents of a :func:`train_atari`
    run of ``steps`` env steps per seed exceed device memory, before anything is allocated
    (a ``--dry-run``): the check :func:`make_program` makes, on the ALE's full action set.
    A 1M frame replay is 7.1 GB per seed."""
    make_program(config, MAX_ACTIONS, seeds, 1, steps, PAD["envpool"])


def initial_carry(program: AtariProgram, first_obs: np.ndarray, seed: int,
                  num_evals: int) -> AtariCarry:
    """Iteration 0: seed ``s`` keyed by :func:`hyperx.agents.keys.run_key` ``(seed, s)``."""
    keys = jax.vmap(lambda s: run_key(seed, s))(jnp.arange(program.num_seeds))
    seeds = program.init(keys, jnp.asarray(first_obs))
    s = program.num_seeds
    evals = Evaluations(jnp.zeros((num_evals,), jnp.int32), jnp.zeros((num_evals, s)),
                        jnp.zeros((), jnp.int32), jnp.full((s,), -jnp.inf),
                        jnp.full((s,), -1, jnp.int32),
                        jax.tree.map(jnp.copy, seeds.agent.params))
    return AtariCarry(jnp.int32(0), seeds, evals)


def compiled_step(program: AtariProgram, pools: Sequence[tuple[EnvCarry, Callable]],
                  devices: Sequence[Any]) -> tuple[EnvCarry, Callable]:
    """One iteration of every seed, ``step((env, seeds), t) -> ((env, seeds), StepLog)`` for
    :func:`run_scan`, with the seeds spread over ``devices`` (one device included).

    ``pools`` holds one ``(carry, step)`` XLA face per device
    (:meth:`hyperx.envs.atari.AtariEnv.xla`). A backend's step is an XLA custom call bound to
    its own emulators at trace time, so XLA cannot partition it: each device runs its block of
    seeds against its own pool in one ``jax.shard_map`` over the 1-D mesh ``"runs"``, where a
    ``lax.switch`` on the device's position picks its pool's step (with one pool the switch
    is the step itself). Per device and iteration, ``act`` picks the block's actions, the pool
    steps, and ``observe`` stores and learns. Returns the env carries stacked on a leading
    device axis (sharded like the seeds by :func:`hyperx.loop.shard_leading_axis`) and
    ``step``, whose seed-axis outputs are concatenated over devices in order.
    """
    carries, steps = zip(*pools, strict=True)
    env_carry = shard_leading_axis(jax.tree.map(lambda *xs: jnp.stack(xs), *carries), devices)

    def body(env: EnvCarry, seeds: SeedCarry, t: Array) -> tuple[tuple, StepLog]:
        del t
        seeds, actions, k_observe = program.act(seeds)
        own, out = jax.lax.switch(jax.lax.axis_index("runs"), steps,
                                  jax.tree.map(lambda x: x[0], env), actions.reshape(-1))
        seeds, log = program.observe(seeds, actions, k_observe, out)
        return (jax.tree.map(lambda x: x[None], own), seeds), log

    runs = PartitionSpec("runs")
    mapped = jax.shard_map(body, mesh=Mesh(np.asarray(list(devices)), ("runs",)),
                           in_specs=(runs, runs, PartitionSpec()),
                           out_specs=((runs, runs), runs), check_vma=False)
    return env_carry, lambda c, t: mapped(*c, t)


def host_steps(program: AtariProgram, env: AtariEnv, seeds: SeedCarry, num_steps: int
               ) -> tuple[SeedCarry, StepLog]:
    """``num_steps`` iterations over the gymnasium face (the host-loop path)."""
    act, observe = program.host_act, program.host_observe
    logs = []
    for _ in range(num_steps):
        seeds, actions, k_observe = act(seeds)
        obs, reward, terminated, truncated, info = env.step(np.asarray(actions).reshape(-1))
        out = AtariStep(obs, reward, info["raw_reward"], terminated, truncated,
                        info["game_over"], info["reset_step"], info["lives"])
        seeds, log = observe(seeds, actions, k_observe, jax.tree.map(jnp.asarray, out))
        logs.append(jax.device_get(log))
    return seeds, jax.tree.map(lambda *xs: np.stack(xs), *logs)


def evaluate(program: AtariProgram, params: Any, prior: Any, env: AtariEnv, key: Array,
             episodes: int, seed: int, max_steps: int = MAX_EVAL_STEPS,
             epsilon: float | None = None) -> np.ndarray:
    """Evaluation scores (S, episodes): one game per environment of ``env`` (S x episodes
    games, evaluation mode), a fresh index per game, actions from the agent's own evaluation
    policy (:attr:`hyperx.agents.core.Agent.eval_act`: greedy on the index, with probability
    ``epsilon`` a uniformly random action instead; default: the config's ``eval_epsilon``),
    stopped at game over, the frame cap or ``max_steps`` agent steps (27,000 = the
    108,000-frame cap)."""
    if epsilon is not None:
        check_range("epsilon", epsilon, 0.0, 1.0)
        epsilon = float(epsilon)
    s = program.num_seeds
    obs, _ = env.reset(seed=seed)
    k_index, key = jax.random.split(key)
    index = jax.vmap(jax.vmap(program.agent.eval_index))(
        jax.random.split(k_index, s * episodes).reshape(s, episodes, -1))
    scores = np.zeros((s, episodes))
    done = np.zeros((s, episodes), bool)
    for _ in range(max_steps):
        if done.all():
            break
        key, k_act = jax.random.split(key)
        actions = np.asarray(program.eval_act(
            params, prior, jax.random.split(k_act, s),
            jnp.asarray(obs).reshape((s, episodes) + OBS_SHAPE), index, epsilon=epsilon))
        obs, _, _, truncated, info = env.step(actions.reshape(-1))
        reward = info["raw_reward"].reshape(s, episodes)
        scores += np.where(done, 0.0, reward)
        done |= (info["game_over"] | truncated).reshape(s, episodes)
    return scores


def eval_protocol(config: AgentConfig) -> str:
    """How :func:`evaluate` picks actions for ``config``, in words (stored with every score)."""
    index = "" if config.index_dim == 1 else "a fresh index per game, "
    if config.eval_epsilon == 0.0:
        return f"{index}greedy"
    return f"{index}epsilon-greedy (epsilon {config.eval_epsilon:g})"


def record_evaluation(evals: Evaluations, step: int, scores: np.ndarray,
                      params: Any) -> Evaluations:
    """Append one evaluation (mean score per seed) and keep each seed's best parameters."""
    mean = jnp.asarray(scores.mean(axis=1), jnp.float32)
    i = int(evals.count)
    better = mean > evals.best_score
    pick = lambda new, old: jnp.where(better.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)
    return Evaluations(evals.steps.at[i].set(step), evals.scores.at[i].set(mean),
                       evals.count + 1, jnp.where(better, mean, evals.best_score),
                       jnp.where(better, step, evals.best_step),
                       jax.tree.map(pick, params, evals.best_params))


def train_atari(
    config: AgentConfig, game: str | Sequence[str], *, steps: int, seeds: int = 1,
    envs_per_seed: int = 1, backend: str = "envpool", seed: int = 0, eval_every: int | None = None,
    eval_episodes: int = 10, best_eval_episodes: int = 0,
    eval_max_steps: int = MAX_EVAL_STEPS, eval_at_start: bool = False,
    chunk_steps: int | None = None, host_loop: bool = False,
    sticky_actions: bool = False, checkpoint_dir: str | None = None,
    max_chunks: int | None = None, on_chunk: Callable[[Chunk], None] | None = None,
    devices: Sequence[Any] | None = None,
) -> AtariResult:
    """Train ``config`` on ``game`` for ``steps`` env steps per seed.

    Args:
      config: an Atari configuration (``get_config(name, env="atari")``).
      game: ``"Breakout"``, ``"MsPacman"``, ... (:func:`hyperx.envs.atari.game_names`), or
        several games in one program: the seeds split into equal blocks, one per game in
        order (:func:`seed_games`), every agent on the ALE's full action set (18 actions,
        :class:`hyperx.envs.atari.AtariGames`) so that all share one network shape, the
        updates batched over every game's agents and the games' emulators stepped at once.
        A seed's results do not depend on the other games, but with the full action set
        they are not a one-game run's (which has the game's minimal set).
      steps: env steps per seed (each of its ``envs_per_seed`` games steps once per
        iteration, so a run has ``steps / envs_per_seed`` iterations).
      seeds, envs_per_seed: one pool of ``seeds x envs_per_seed`` games, agents vmapped.
      backend: ``"envpool"`` or ``"ale"``.
      seed: base seed (agents: ``fold_in(PRNGKey(seed), s)``; games: seeded from ``seed``).
      eval_every: env steps per seed between evaluations (default: 10 evaluations per run;
        the last one at the end of the run); eval_episodes: games per seed and evaluation
        (0: none), played as :func:`evaluate` does (greedy on a fresh index per game, or
        epsilon-greedy with the config's ``eval_epsilon``); best_eval_episodes: re-evaluate
        each seed's best parameters on this many games at the end (HyperAgent's protocol:
        200); eval_max_steps: agent steps per evaluation game (27,000, the 108,000-frame cap;
        a greedy policy that never presses FIRE can otherwise idle until the cap);
        eval_at_start: also evaluate the untrained network (step 0, as the HyperAgent
        reference does).
      chunk_steps: env steps per seed per compiled chunk, checkpoint and ``on_chunk`` call
        (default ``eval_every``; ``eval_every`` must be a multiple of it).
      host_loop: drive the gymnasium face from Python instead of the compiled XLA step.
      sticky_actions: repeat the previous action with probability 0.25.
      checkpoint_dir: save the carry after each chunk and resume from the latest intact one;
        the finished training games are saved with it, so a resumed run's ``episodes`` hold
        the games from the start of the run, not only those since the resume.
      max_chunks: stop after this many chunks in this call.
      on_chunk: called after each chunk (logging) with a :class:`hyperx.loop.Chunk`:
        ``done`` and ``total`` env steps per seed, the carry, and metrics: episodes (the
        chunk's finished games), scores (this chunk's evaluation, (S, eval_episodes), or
        None), loss, steps_per_s, evaluations (every evaluation so far as rows, as in the
        result).
      devices: spread the seeds over these devices (``seeds`` a multiple of their number):
        each device runs its block of seeds against its own pool of games in one
        ``shard_map`` (:func:`compiled_step`); default: the first local device, the same
        program over a mesh of one.
        With envpool, game ``i`` of a pool is seeded ``seed + i``, so the pools are seeded to
        continue one another and a sharded run plays the same games as an unsharded one.

    The chunks run through :func:`hyperx.loop.run_chunks`: a Ctrl-C raises
    :class:`hyperx.loop.TrainingInterrupted` (``done``: env steps per seed; the chunk's hook
    and checkpoint are finished first) and the environments and checkpoint manager are
    closed on every exit.
    """
    check_int("eval_episodes", eval_episodes, low=0)
    check_int("best_eval_episodes", best_eval_episodes, low=0)
    check_int("eval_max_steps", eval_max_steps)
    schedule = run_schedule(steps, envs_per_seed, eval_every, chunk_steps, eval_at_start)
    iterations, eval_iters, every = schedule.iterations, schedule.eval_iters, schedule.chunk_iters
    if host_loop and devices is not None:
        raise ValueError("devices: the host loop (host_loop=True) runs on one device; "
                         "drop devices or host_loop")
    devices = jax.local_devices()[:1] if devices is None else list(devices)
    num_devices = len(devices)
    check_int("devices", num_devices)
    if seeds % num_devices:
        raise ValueError(f"seeds: expected a multiple of the {num_devices} devices, got {seeds}")
    games = seed_games(game, seeds)
    several = len(set(games)) > 1
    block = seeds // num_devices
    blocks = [games[d * block:(d + 1) * block] for d in range(num_devices)]
    if several and len({tuple(_runs(b)) for b in blocks}) > 1:
        raise ValueError(f"devices: with several games every device's block of {block} seeds "
                         f"must split into the same game blocks (one game per device, or the "
                         f"same number of whole games each); got {len(set(games))} games of "
                         f"{seeds // len(set(games))} seeds over {num_devices} devices")
    local_games = block * envs_per_seed
    env_options = dict(backend=backend, sticky_actions=sticky_actions)

    def evaluate_now(carry: AtariCarry) -> tuple[AtariCarry, np.ndarray]:
        key, games_seed = evaluation_seeds(seed, int(carry.evals.count), int(carry.t))
        scores = evaluate(program, carry.seeds.agent.params, carry.seeds.agent.prior,
                          eval_env, key, eval_episodes, games_seed, eval_max_steps)
        return carry._replace(evals=record_evaluation(
            carry.evals, int(carry.t) * envs_per_seed, scores,
            carry.seeds.agent.params)), scores

    resources = contextlib.ExitStack()
    with resources:  # closes what the set-up opened if the set-up fails
        envs = [resources.enter_context(contextlib.closing(make_pool(
            blocks[d], envs_per_seed, seed + d * local_games, several=several, **env_options)))
            for d in range(num_devices)]
        env = envs[0]
        program = make_program(config, env.num_actions, seeds, envs_per_seed, iterations,
                               PAD[backend])
        step_fn = None
        if host_loop:
            env_carry = None
            first_obs, _ = env.reset()
        else:
            env_carry, step_fn = compiled_step(program, [e.xla() for e in envs], devices)
            first_obs = np.concatenate([e.first_obs for e in envs])
        carry = initial_carry(program, first_obs, seed, schedule.num_evals)
        carry = carry._replace(seeds=shard_leading_axis(carry.seeds, devices))
        manager = None
        episodes: list[dict] = []
        if checkpoint_dir is not None:
            from hyperx.checkpoint import CheckpointManager

            manager = resources.enter_context(contextlib.closing(CheckpointManager(
                checkpoint_dir, checkpoint_metadata(
                    config, game, steps=steps, seeds=seeds, envs_per_seed=envs_per_seed,
                    backend=backend, seed=seed, schedule=schedule, eval_episodes=eval_episodes,
                    sticky_actions=sticky_actions, eval_at_start=eval_at_start))))
            restored = manager.restore_latest(carry)
            if restored is not carry:
                carry = _resumed(restored, first_obs)
                carry = carry._replace(seeds=shard_leading_axis(carry.seeds, devices))
                episodes = saved_games(checkpoint_dir, int(carry.t) * envs_per_seed)
        eval_env = resources.enter_context(contextlib.closing(make_pool(
            games, eval_episodes, seed + EVAL_SEED, several=several, training=False,
            **env_options))) if eval_episodes else None
        if (eval_at_start and eval_episodes and int(carry.t) == 0
                and int(carry.evals.count) == 0):
            carry, _ = evaluate_now(carry)
        resources = resources.pop_all()  # from here on the driver closes them
    timing = {"compile": 0.0, "run": 0.0, "iterations": 0}
    env_cell = [env_carry]
    scans: dict[int, ScanProgram] = {}  # one compiled chunk per chunk length (two at most)

    def advance(carry: AtariCarry) -> tuple[AtariCarry, dict]:
        length = min(every, iterations - int(carry.t))
        t0 = int(carry.t)
        if host_loop:
            start = time.perf_counter()
            seeds_carry, log = host_steps(program, env, carry.seeds, length)
            chunk_time = time.perf_counter() - start
        else:
            if length not in scans:
                scans[length] = scan_program(step_fn, length, donate=True)
            result = run_scan(scans[length], (env_cell[0], carry.seeds), length)
            (env_cell[0], seeds_carry), log = result.carry, result.outputs
            timing["compile"] += result.compile_time_s
            chunk_time = result.run_time_s
        timing["run"] += chunk_time
        timing["iterations"] += length
        new_episodes = _labelled(_finished_games(log, t0, envs_per_seed), games, several)
        episodes.extend(new_episodes)
        carry = carry._replace(t=jnp.int32(t0 + length), seeds=seeds_carry)
        scores = None
        if eval_episodes and (int(carry.t) % eval_iters == 0 or int(carry.t) >= iterations):
            carry, scores = evaluate_now(carry)
        return carry, dict(episodes=new_episodes, scores=scores, loss=np.asarray(log.loss[-1]),
                           evaluations=_labelled(_evaluation_rows(carry.evals, seeds),
                                                 games, several),
                           steps_per_s=length * seeds * envs_per_seed / max(chunk_time, 1e-9))

    def save(done: int, carry: AtariCarry) -> None:
        del done
        write_atomic(Path(checkpoint_dir) / GAMES_FILE, json.dumps(episodes))
        manager.save(int(carry.t), carry)

    carry = run_chunks(
        advance, carry, position=lambda c: int(c.t) * envs_per_seed,
        total=iterations * envs_per_seed, max_chunks=max_chunks, on_chunk=on_chunk,
        save=None if manager is None else save,
        saved_step=None if manager is None or manager.restored_step is None
        else manager.restored_step * envs_per_seed,
        cleanup=(resources.close,)).carry
    best = _labelled(_best(program, carry, best_eval_episodes, seed, eval_max_steps,
                           functools.partial(make_pool, games, several=several, training=False,
                                             **env_options)), games, several)
    evaluations = _labelled(_evaluation_rows(carry.evals, seeds), games, several)
    replay = jax.tree.map(lambda x: x[0], carry.seeds.agent.replay)
    return AtariResult(episodes, evaluations, best,
                       timing["iterations"] * seeds * envs_per_seed / timing["run"]
                       if timing["run"] else 0.0, timing["compile"], replay_bytes(replay),
                       min(int(carry.t), iterations) * envs_per_seed, carry, games)


def _runs(games: Sequence[str]) -> list[tuple[str, int]]:
    """Consecutive equal names as (name, count) runs: ``AAB`` -> ``[(A, 2), (B, 1)]``."""
    return [(g, len(list(run))) for g, run in itertools.groupby(games)]


def _labelled(rows: list[dict], games: Sequence[str], several: bool) -> list[dict]:
    """With several games, each row (a seed's) also names its game."""
    return [dict(r, game=games[r["seed"]]) for r in rows] if several else rows


def _evaluation_rows(evals: Evaluations, seeds: int) -> list[dict]:
    """Every evaluation so far as rows (seed, env_step, mean score)."""
    steps, scores = np.asarray(evals.steps), np.asarray(evals.scores)
    return [dict(seed=s, env_step=int(steps[i]), score=float(scores[i, s]))
            for i in range(int(evals.count)) for s in range(seeds)]


def _resumed(carry: AtariCarry, first_obs: np.ndarray) -> AtariCarry:
    """A restored carry continues with new games (emulator state is not saved): each
    stream's next observation is the new game's first, and the running scores restart."""
    seeds = carry.seeds
    return carry._replace(seeds=seeds._replace(
        obs=jnp.asarray(first_obs).reshape(seeds.obs.shape), first=jnp.ones_like(seeds.first),
        game_return=jnp.zeros_like(seeds.game_return),
        game_length=jnp.zeros_like(seeds.game_length)))


def saved_games(checkpoint_dir: str, env_steps: int) -> list[dict]:
    """The training games a checkpointed run had finished by ``env_steps`` (per seed).

    :func:`train_atari` writes every finished game so far to ``GAMES_FILE`` in its checkpoint
    directory before each checkpoint, so the list can run ahead of the checkpoint that is
    restored (a stop between the two writes), never behind it; the games after the restored
    step are dropped, since the resumed run plays those steps again."""
    path = Path(checkpoint_dir) / GAMES_FILE
    if not path.exists():
        return []
    return [g for g in json.loads(path.read_text()) if g["env_step"] <= env_steps]


def _finished_games(log: StepLog, t0: int, envs_per_seed: int) -> list[dict]:
    ended = np.asarray(log.ended)
    return [dict(seed=int(s), env=int(e), env_step=(t0 + int(i) + 1) * envs_per_seed,
                 score=float(log.game_return[i, s, e]), length=int(log.game_length[i, s, e]))
            for i, s, e in zip(*np.nonzero(ended), strict=True)]


def _best(program: AtariProgram, carry: AtariCarry, episodes: int, seed: int,
          max_steps: int, pool: Callable[[int, int], AtariEnv | AtariGames]) -> list[dict]:
    evals = carry.evals
    best = [dict(seed=s, score=float(evals.best_score[s]), env_step=int(evals.best_step[s]),
                 protocol="best evaluation during training (optimistic)")
            for s in range(program.num_seeds)]
    if episodes and int(evals.count) > 0:
        env = pool(episodes, seed + 20_000)
        with contextlib.closing(env):
            scores = evaluate(program, evals.best_params, carry.seeds.agent.prior, env,
                              jax.random.PRNGKey(seed + 2), episodes, seed + 20_000, max_steps)
        for s, row in enumerate(best):
            row.update(rerun_score=float(scores[s].mean()), rerun_episodes=episodes,
                       rerun_protocol="best checkpoint re-evaluated (HyperAgent's protocol)")
    return best
